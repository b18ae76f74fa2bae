"""Start-up and shut-down of a run: what `rlsetup train|serve` call after the config is parsed.

`run_training` resolves the model, starts the embedded vLLM CPU server when the config names no
server URL (and stops it at the end), builds the container, forms the weight-transfer groups,
runs the loop, and prints the held-out reward line and the metrics path. Under torchrun
(`WORLD_SIZE > 1`) env GRPO runs on every rank: `infrastructure.env_grpo_ranks` (FSDP2 DP).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from adapters.vllm.server_process import VllmServerProcess
from domain.config import RunConfig
from infrastructure.container import EnvGRPOContainer
from infrastructure.config_loader import ConfigError
from infrastructure.logs import quiet_logging
from infrastructure.model_assets import resolve_model_path
from infrastructure.reasoning_tokens import reasoning_markers

log = logging.getLogger("rlsetup")
REPO_ROOT = Path(__file__).resolve().parent.parent
SERVER_PYTHON = REPO_ROOT / ".venv-vllm" / "bin" / "python"


def embedded_server(config: RunConfig, model_path: Path, log_dir: Path) -> VllmServerProcess:
    s = config.server
    return VllmServerProcess(
        python=SERVER_PYTHON,
        model_path=model_path,
        host=s.host,
        port=s.port,
        cpu_threads=s.cpu_threads,
        kv_cache_gib=s.kv_cache_gib,
        max_model_len=s.max_model_len,
        startup_timeout_s=s.startup_timeout,
        log_path=log_dir / "vllm_server.log",
        weight_transfer_backend=s.weight_transfer_backend,
        dtype=config.model.dtype,
        reasoning_parser=s.reasoning_parser,
        extra_env=thinking_budget_env(config),
    )


def thinking_budget_env(config: RunConfig) -> dict[str, str]:
    """With a thinking budget, vLLM's V1 model runner: the one whose forced-close rule we match (seed)."""
    return {"VLLM_USE_V2_MODEL_RUNNER": "0"} if config.training.rollout_max_thinking_tokens is not None else {}


@contextlib.contextmanager
def servers_for(config: RunConfig, model_path: Path, log_dir: Path) -> Iterator[tuple[str, ...]]:
    """The configured server URLs, or the embedded server's, started here and stopped on exit."""
    urls = config.training.server_urls
    if urls:
        yield urls
        return
    server = embedded_server(config, model_path, log_dir)
    print(f"starting the embedded vLLM CPU server on {server.url} (log: {server.log_path})", file=sys.stderr)
    with server:
        print(f"server ready in {server.startup_seconds:.0f} s", file=sys.stderr)
        yield (server.url,)


def run_training(config: RunConfig, config_path: Path) -> int:
    """Run the job the config names (`env_grpo` here, `online_grpo` through TRL)."""
    if config.job == "online_grpo":
        from infrastructure.online_job import run_online_grpo

        return run_online_grpo(config, config_path)
    return run_env_grpo(config, config_path)


def launched_ranks() -> int:
    """How many training ranks torchrun started (`WORLD_SIZE`; 1 without torchrun)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def save_final(model, tokenizer_dir: Path, output_dir: Path) -> Path:
    """The trained policy as a Hugging Face folder a server can load."""
    target = output_dir / "final"
    model.save_pretrained(target)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "generation_config.json"):
        if (tokenizer_dir / name).is_file():
            shutil.copy2(tokenizer_dir / name, target / name)
    return target


def run_env_grpo(config: RunConfig, config_path: Path) -> int:
    if launched_ranks() > 1:  # FSDP2 data parallelism, rank 0 leading (infrastructure.env_grpo_ranks)
        from infrastructure.env_grpo_ranks import run_env_grpo_ranks

        return run_env_grpo_ranks(config, config_path)
    quiet_logging()
    output_dir = Path(config.grpo.output_dir) / time.strftime("%Y%m%d-%H%M%S")
    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model_path(config.model.name_or_path)
    try:  # a marker that is not one token fails before any server starts
        reasoning_markers(config.training, model_path)
    except ConfigError as exc:
        raise ConfigError(exc.problems, source=str(config_path)) from None
    with servers_for(config, model_path, output_dir) as urls:
        container = EnvGRPOContainer(config=config, model_path=model_path, server_urls=tuple(urls), output_dir=output_dir)
        container.weight_sync().connect()
        try:
            summary = container.loop().run()
        finally:
            container.shutdown_resources()
            container.weight_sync().close()
    final = save_final(container.learner().model, model_path, output_dir)
    print(held_out_line(summary))
    print(f"trained model: {final}")
    print(f"metrics: {output_dir / 'metrics.jsonl'}")
    return 0


def check_sync(config: RunConfig) -> int:
    """`rlsetup check CONFIG --sync`: one verified weight sync to every server (`infrastructure.sync_check`)."""
    from infrastructure.sync_check import check_sync as run_check

    return run_check(config)


def held_out_line(summary) -> str:
    if summary.reward_after is None:
        return "held-out evaluation disabled (eval.num_problems: 0)"
    before = "n/a" if summary.reward_before is None else f"{summary.reward_before:.3f}"
    return f"held-out reward: before {before} -> after {summary.reward_after:.3f} (n={summary.eval_count})"


def serve(config: RunConfig) -> int:
    """Start the embedded server and keep it up until interrupted."""
    model_path = resolve_model_path(config.model.name_or_path)
    log_dir = Path(config.grpo.output_dir)
    log_dir.mkdir(parents=True, exist_ok=True)
    server = embedded_server(config, model_path, log_dir)
    with server:
        print(f"vLLM CPU server ready at {server.url} in {server.startup_seconds:.0f} s (weight transfer: {config.server.weight_transfer_backend}); Ctrl-C stops it")
        try:
            while server.is_running():
                time.sleep(1.0)
        except KeyboardInterrupt:
            pass
    return 0
