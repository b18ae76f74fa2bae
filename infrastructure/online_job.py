"""Composition of online GRPO (RLVR): `run_online_grpo(config, config_path) -> int`.

Wires TRL's `GRPOTrainer` (`adapters.trl`) to our pieces: the server (`VllmHttpServer`, started
here as the embedded vLLM CPU server unless an external one is configured), the weight sync
(`SyncWeights` over the server, a `GlooTransport` and `ModelWeightSource(model)` on the very model
TRL trains), the reward sources (`adapters.verifiers`) priced by the `rewards:` terms, the dataset
(`dataset:`), the held-out evaluation (`eval:`), and the metrics file and progress bar.

Which server: `grpo.vllm_server_base_url` when set, else `http://vllm_server_host:vllm_server_port`
when either differs from TRL's defaults (0.0.0.0:8000); otherwise the embedded server of the
`server:` section is started and stopped here. The weight-sync bound is
`training.weight_sync_timeout`; HTTP calls are bounded by `grpo.vllm_server_timeout`.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlparse

from adapters.transport.gloo_transport import GlooTransport
from adapters.trl.dataset import held_out_rows, train_dataset
from adapters.trl.generation import ServerGeneration
from adapters.trl.metrics_callback import MetricsCallback
from adapters.trl.rewards import trl_reward_funcs
from adapters.trl.trainer import TrlTrainer, build_grpo_trainer
from adapters.verifiers.registry import RewardSource, reward_source
from adapters.vllm.http_server import VllmHttpServer
from adapters.weights.gather import ModelWeightSource
from application.ports.generation import SamplingParams
from application.run_env_grpo import RunSummary
from application.run_online_grpo import OnlineGRPORun, OnlineHeldOut, SyncPublisher
from application.sync_weights import SyncWeights
from domain.config import RunConfig
from infrastructure import wiring
from infrastructure.logs import quiet_logging
from infrastructure.metrics import JsonlMetricsSink, TqdmProgress
from infrastructure.model_assets import resolve_model_path

log = logging.getLogger("rlsetup")
TRL_DEFAULT_SERVER = ("0.0.0.0", 8000)
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")


def external_server_url(config: RunConfig) -> str | None:
    g = config.grpo
    if g.vllm_server_base_url:
        return g.vllm_server_base_url.rstrip("/")
    if (g.vllm_server_host, g.vllm_server_port) != TRL_DEFAULT_SERVER:
        return f"http://{g.vllm_server_host}:{g.vllm_server_port}"
    return None


def rendezvous_address(server_url: str) -> str:
    """The trainer's address as the server sees it (it dials our TCPStore there)."""
    host = urlparse(server_url).hostname or "127.0.0.1"
    if host in LOCAL_HOSTS:
        return "127.0.0.1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((host, 9))  # no packet is sent: this only picks the outgoing interface
        return probe.getsockname()[0]


@contextlib.contextmanager
def online_server(config: RunConfig, model_path: Path, log_dir: Path) -> Iterator[str]:
    url = external_server_url(config)
    if url is not None:
        yield url
        return
    from infrastructure.bootstrap import embedded_server

    server = embedded_server(config, model_path, log_dir)
    print(f"starting the embedded vLLM CPU server on {server.url} (log: {server.log_path})", file=sys.stderr)
    with server:
        print(f"server ready in {server.startup_seconds:.0f} s", file=sys.stderr)
        yield server.url


def reward_sources(config: RunConfig) -> dict[str, RewardSource]:
    return {t.source: reward_source(t.source, format_regex=config.dataset.format_regex) for t in config.rewards}


def load_policy(config: RunConfig, model_path: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=getattr(torch, config.model.dtype))
    return model, AutoTokenizer.from_pretrained(model_path)


def run_online_grpo(config: RunConfig, config_path: Path) -> int:
    """The `rlsetup train` entry for `job: online_grpo`; returns the process exit code."""
    quiet_logging()
    output_dir = Path(config.grpo.output_dir) / time.strftime("%Y%m%d-%H%M%S")
    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model_path(config.model.name_or_path)
    log.info("online GRPO from %s; outputs in %s", config_path, output_dir)
    with online_server(config, model_path, output_dir) as url:
        summary = train_online(config, model_path, url, output_dir)
    print(
        f"held-out reward: before {summary.reward_before:.3f} -> after {summary.reward_after:.3f} (n={summary.eval_count})"
        if summary.reward_before is not None and summary.reward_after is not None
        else "held-out evaluation (before and after) not run: see eval.num_problems / eval.before_training"
    )
    print(f"metrics: {output_dir / 'metrics.jsonl'}")
    return 0


def train_online(config: RunConfig, model_path: Path, url: str, output_dir: Path) -> RunSummary:
    """Train against the server at `url`; the final model is saved to `output_dir/final`."""
    g = config.grpo
    model, tokenizer = load_policy(config, model_path)
    server = VllmHttpServer(url, timeout=g.vllm_server_timeout, transfer_timeout=config.training.weight_sync_timeout)
    targets = wiring.sync_targets([url], config, lambda _url: server, GlooTransport, rendezvous_address(url))
    sync = SyncWeights(
        targets, ModelWeightSource(model, dtype=config.model.dtype),
        timeout=config.training.weight_sync_timeout, chunk_bytes=wiring.CHUNK_BYTES,
    )
    sampling = SamplingParams(max_tokens=g.max_completion_length, temperature=g.temperature, top_p=g.top_p)
    generation = ServerGeneration(server=server, sampling=sampling, publisher=SyncPublisher(sync))
    sources = reward_sources(config)
    funcs, weights = trl_reward_funcs(config.rewards, sources)
    sink = JsonlMetricsSink(output_dir / "metrics.jsonl")
    progress = TqdmProgress(max(1, g.max_steps // g.logging_steps))
    callback = MetricsCallback(sink, progress, g.per_device_train_batch_size, lambda: generation.last_report)
    try:
        trainer = build_grpo_trainer(
            model=model, tokenizer=tokenizer, grpo=g, reward_funcs=funcs, reward_weights=weights,
            train_dataset=train_dataset(config.dataset), generation=generation, callbacks=[callback],
        )
        sync.connect()
        summary = OnlineGRPORun(
            trainer=TrlTrainer(trainer), publisher=generation,
            evaluator=_evaluator(config, server, tokenizer, sources), evaluate_before=config.eval.before_training,
            metrics=sink, progress=progress,
        ).run()
        trainer.save_model(str(output_dir / "final"))
        return summary
    finally:
        with contextlib.suppress(Exception):
            sync.close()
        server.close()
        progress.close()
        sink.close()


def _evaluator(config: RunConfig, server: VllmHttpServer, tokenizer, sources) -> OnlineHeldOut | None:
    if config.eval.num_problems == 0:
        return None
    g = config.grpo
    return OnlineHeldOut(
        server=server,
        rows=held_out_rows(config.dataset, tokenizer, config.eval.num_problems, config.eval.seed),
        sampling=SamplingParams(max_tokens=g.max_completion_length, temperature=g.temperature, top_p=g.top_p,
                                seed=config.eval.seed),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True),
        terms=config.rewards,
        sources=sources,
        concurrency=config.training.eval_rollout_batch_size,
    )
