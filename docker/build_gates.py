"""Build gates: assert, inside the server's environment, what the trainer's weight sync relies on.

Run at image build (and by the test suite against the CPU server's virtualenv). Each gate reads
the installed vLLM's own code, so a green run proves this server can be synced:
1. `/pause` takes `mode=keep` (the mode the trainer pauses with: queued requests survive a sync);
2. the RL routes exist (`/start_weight_update`, `/update_weights`, `/finish_weight_update`, ...);
3. layerwise reload exists and its skip lists cover the MoE bookkeeping tensors that no weight
   loader ever loads (otherwise a partially loaded layer keeps uninitialised memory);
4. the weight-transfer factory knows the `nccl` engine, and our `gloo` engine once its plugin
   is loaded.
Exit 0 when all pass; otherwise one line per failed gate and exit 1.
"""

from __future__ import annotations

import inspect
import sys
import typing

REQUIRED_RL_ROUTES = (
    "/pause", "/resume", "/init_weight_transfer_engine", "/start_weight_update",
    "/update_weights", "/finish_weight_update", "/get_world_size", "/weight_info",
)
REQUIRED_SKIP_LOAD = {"expert_mask", "e_score_correction_bias"}


def gate_pause_keep() -> str | None:
    from vllm.v1.engine import PauseMode

    modes = set(typing.get_args(PauseMode))
    return None if "keep" in modes else f"/pause has no mode=keep (modes: {sorted(modes)})"


def gate_rl_routes() -> str | None:
    from vllm.entrypoints.rl.online import api_router

    source = inspect.getsource(api_router)
    missing = [r for r in REQUIRED_RL_ROUTES if f'"{r}"' not in source]
    return f"RL routes missing: {missing}" if missing else None


def gate_layerwise_reload() -> str | None:
    from vllm.model_executor.model_loader.reload import meta
    from vllm.model_executor.model_loader.reload import initialize_layerwise_reload, finalize_layerwise_reload  # noqa: F401

    missing = REQUIRED_SKIP_LOAD - set(meta.SKIP_LOAD_TENSORS)
    return f"layerwise-reload skip list lacks {sorted(missing)}" if missing else None


def gate_engines() -> str | None:
    from vllm.plugins import load_general_plugins
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    load_general_plugins()
    known = set(getattr(WeightTransferEngineFactory, "_registry", {}))
    missing = {"nccl", "gloo"} - known
    return f"weight-transfer engines missing: {sorted(missing)} (known: {sorted(known)})" if missing else None


GATES = (gate_pause_keep, gate_rl_routes, gate_layerwise_reload, gate_engines)


def main() -> int:
    failures = []
    for gate in GATES:
        try:
            problem = gate()
        except Exception as exc:  # a gate that cannot even import is a failed gate
            problem = f"{type(exc).__name__}: {exc}"
        print(f"{'FAIL' if problem else 'ok  '} {gate.__name__}" + (f": {problem}" if problem else ""))
        if problem:
            failures.append(problem)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
