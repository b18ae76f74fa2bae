"""torchrun worker for tests/integration/test_online_sync_torchrun.py: the online job's sync on every rank.

    torchrun --standalone --nproc_per_node N online_sync_worker.py OUT_DIR SERVER_URL GROUP_PORT

Every rank builds the same seeded tiny Llama, shards it with FSDP2 over a CPU mesh, and builds
its weight sync with the online job's own `TrainingRanks.from_env`, `online_sync` and
`online_publisher` (rank 0 gets the server URL, the others None), over the SGLang adapter
(`SglangHttpServer` + `C10dBucketTransport`, gloo) so the test's `FakeSglangServer` (HTTP, real
gloo receive) can stand in for the server. It then publishes versions 0..PUBLISHES-1, nudging
every weight by +STEP before each, and writes OUT_DIR/rank<r>.json with each publish's outcome.
The test arms the server to fail the first pause; `verify_sync_every_n_syncs: 3` makes the third
successful publish verify against the fake's stand-in log-probs, which cannot match.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch
from torch import nn

PUBLISHES = 4
STEP = 0.01
VERIFY_EVERY = 3


def build_model() -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=49152, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


def nudge(model: nn.Module) -> None:
    """A stand-in for an optimizer step: elementwise, so shards and full tensors move alike."""
    with torch.no_grad():
        for param in model.parameters():
            param.add_(STEP)


def config_for(group_port: int):
    from infrastructure.config_loader import parse_run_config

    return parse_run_config({
        "job": "online_grpo", "rewards": [{"source": "math_verify"}],
        "grpo": {"use_vllm": True, "vllm_group_port": group_port},
        "training": {"weight_sync_timeout": 30.0, "verify_sync_every_n_syncs": VERIFY_EVERY},
    })


def main(out_dir: Path, url: str, group_port: int) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from adapters.sglang.http_server import SglangHttpServer
    from adapters.transport.sglang_transport import C10dBucketTransport
    from adapters.trl.ranks import TrainingRanks
    from infrastructure.model_assets import resolve_model_path
    from infrastructure.online_job import online_publisher, online_sync

    ranks = TrainingRanks.from_env(timeout=60.0)
    model = build_model()
    mesh = init_device_mesh("cpu", (ranks.world,))
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    config = config_for(group_port)
    sync, targets = online_sync(
        config, model, url if ranks.is_main else None, ranks,
        server_factory=lambda u: SglangHttpServer(u, timeout=20.0, backend="gloo"),
        transport_factory=lambda: C10dBucketTransport("gloo"),
    )
    publisher = online_publisher(config, resolve_model_path("smollm2-135m-instruct"), sync, model, targets, ranks)
    status = {"rank": ranks.rank, "connect": "ok", "publishes": []}
    try:
        sync.connect()
        for version in range(PUBLISHES):
            nudge(model)
            try:
                publisher.publish(version)
                status["publishes"].append("ok")
            except Exception as exc:  # noqa: BLE001 - recorded for the test to check
                status["publishes"].append(f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001
        status["connect"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            sync.close()
        except Exception as exc:  # noqa: BLE001
            status["close"] = f"{type(exc).__name__}: {exc}"
    (out_dir / f"rank{ranks.rank}.json").write_text(json.dumps(status))
    dist.barrier()
    # as gather_worker.py: every result is written; skip the flaky C++ teardown of the gloo groups
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]))
