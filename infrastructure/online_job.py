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

Sync verification: `training.verify_sync_every_n_syncs = N > 0` wraps the publisher in env GRPO's
`VerifyingPublisher` with the same `build_verifier` (probe, tolerance by `model.dtype`); the
trainer's side is TRL's own model (`adapters.trl.sync_verification.ModelLogprobs`). After every
Nth publish (version 0, each TRL sync, the final one) the server's `/weight_info` and its probe
log-probs are checked; a mismatch raises `SyncVerificationError` naming the server, which stops
training (on every rank).

Ranks (torchrun, `WORLD_SIZE > 1`; `adapters.trl.ranks`). Supported: data parallelism as TRL /
accelerate set it up on top of the process group made here (nccl on GPUs, gloo on CPUs): plain
DP (DDP) and FSDP2 (accelerate's FSDP plugin with `fsdp_version: 2`, e.g. `accelerate launch
--use_fsdp --fsdp_version 2` or its `ACCELERATE_USE_FSDP=true FSDP_VERSION=2` environment), one
node or several. Rank 0 alone owns the server (starts the embedded one), the weight-transfer
transport, the held-out evaluation, the metrics file, the progress bar and the printed lines;
every rank runs TRL's generation seam (prompts gathered, rank 0 generates, results broadcast),
joins every weight gather, the sync's rank agreement (`TorchRankAgreement` over a gloo side
group: every rank finishes a sync or every rank raises) and the verification's trainer forward.
Not supported: tensor, expert or context parallelism (no config key asks TRL for them), more
than one server, and a training rank on the server's GPU. Tested here: the sync and the
verification under torchrun with gloo on CPU (FSDP2, `tests/integration/test_online_sync_torchrun.py`);
and a 2-rank `torchrun ... rlsetup train` of the CPU example (plain DP, gloo, 2 steps, real
embedded server) ran end to end; FSDP2 through accelerate was not run end to end.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from urllib.parse import urlparse

from adapters.transport.gloo_transport import GlooTransport
from adapters.trl.dataset import held_out_rows, train_dataset
from adapters.trl.generation import ServerGeneration
from adapters.trl.metrics_callback import MetricsCallback
from adapters.trl.ranks import TrainingRanks
from adapters.trl.rewards import trl_reward_funcs
from adapters.trl.sync_verification import ModelLogprobs, RankZeroVerifier
from adapters.trl.trainer import TrlTrainer, build_grpo_trainer
from adapters.verifiers.registry import RewardSource, reward_source
from adapters.vllm.http_server import VllmHttpServer
from adapters.weights.gather import ModelWeightSource
from application.ports.generation import SamplingParams
from application.run_env_grpo import RunSummary
from application.ports.weight_publisher import WeightPublisher
from application.ports.weight_sync import WeightSyncServer, WeightTransport
from application.run_online_grpo import OnlineGRPORun, OnlineHeldOut, SyncPublisher
from application.sync_report import SyncTarget
from application.sync_weights import SyncWeights
from application.verified_publisher import VerifyingPublisher
from domain.config import RunConfig
from infrastructure import wiring
from infrastructure.logs import quiet_logging
from infrastructure.metrics import JsonlMetricsSink, TqdmProgress
from infrastructure.model_assets import resolve_model_path
from infrastructure.sync_verification import build_verifier, probe_token_ids

log = logging.getLogger("rlsetup")
LOCAL_HOSTS = ("127.0.0.1", "localhost", "0.0.0.0", "::1")


def external_server_url(config: RunConfig) -> str | None:
    return config.grpo.external_server_url


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
    """The `rlsetup train` entry for `job: online_grpo`, on every rank; returns the process exit code."""
    quiet_logging()
    ranks = TrainingRanks.from_env()
    stamp = time.strftime("%Y%m%d-%H%M%S") if ranks.is_main else None
    output_dir = Path(config.grpo.output_dir) / ranks.share(stamp)  # one folder for every rank
    output_dir.mkdir(parents=True, exist_ok=True)
    model_path = resolve_model_path(config.model.name_or_path)
    log.info("online GRPO from %s; outputs in %s (rank %d of %d)", config_path, output_dir, ranks.rank, ranks.world)
    with ranked_server(ranks, config, model_path, output_dir) as url:
        summary = train_online(config, model_path, url, output_dir, ranks)
    if ranks.is_main:
        print(
            f"held-out reward: before {summary.reward_before:.3f} -> after {summary.reward_after:.3f} (n={summary.eval_count})"
            if summary.reward_before is not None and summary.reward_after is not None
            else "held-out evaluation (before and after) not run: see eval.num_problems / eval.before_training"
        )
        print(f"metrics: {output_dir / 'metrics.jsonl'}")
    return 0


@contextlib.contextmanager
def ranked_server(ranks: TrainingRanks, config: RunConfig, model_path: Path, log_dir: Path) -> Iterator[str | None]:
    """The server's URL on rank 0 (started there if embedded), None elsewhere; every rank learns
    whether rank 0 got one, so a server that fails to start stops every rank at once."""
    if not ranks.is_main:
        if ranks.share(None) is None:
            raise RuntimeError("rank 0 has no generation server (it failed to start or reach one: see its error)")
        yield None
        return
    shared = False
    try:
        with online_server(config, model_path, log_dir) as url:
            ranks.share(url)
            shared = True
            yield url
    finally:
        if not shared:
            ranks.share(None)


def online_sync(
    config: RunConfig,
    model,
    url: str | None,
    ranks: TrainingRanks,
    server_factory: Callable[[str], WeightSyncServer],
    transport_factory: Callable[[], WeightTransport] = GlooTransport,
) -> tuple[SyncWeights, list[SyncTarget]]:
    """The weight sync of one rank: rank 0 (`url` given) owns the server's target and transport;
    the other ranks have none and join the gather and the rank agreement."""
    targets = (
        wiring.sync_targets([url], config, server_factory, transport_factory, rendezvous_address(url))
        if url is not None else []
    )
    sync = SyncWeights(
        targets, ModelWeightSource(model, dtype=config.model.dtype), timeout=config.training.weight_sync_timeout,
        chunk_bytes=wiring.CHUNK_BYTES, agreement=ranks.agreement(),
    )
    return sync, targets


def online_publisher(
    config: RunConfig, model_path: Path, sync: SyncWeights, model, targets: Sequence[SyncTarget], ranks: TrainingRanks,
) -> WeightPublisher:
    """`SyncPublisher(sync)`, verified after every `training.verify_sync_every_n_syncs`-th publish
    (the env-GRPO `VerifyingPublisher` and `build_verifier`; rank 0 asks, every rank gets the verdict)."""
    every = config.training.verify_sync_every_n_syncs
    publisher = SyncPublisher(sync)
    if every == 0:
        return publisher
    trainer = ModelLogprobs(model)
    verifier = build_verifier(config, model_path, trainer, targets) if ranks.is_main else None
    probe = verifier.probe_token_ids if verifier is not None else probe_token_ids(model_path)
    return VerifyingPublisher(publisher, RankZeroVerifier(verifier, trainer, probe, ranks.share), every)


def train_online(
    config: RunConfig, model_path: Path, url: str | None, output_dir: Path, ranks: TrainingRanks
) -> RunSummary:
    """Train against the server at `url` (rank 0; None elsewhere); the final model goes to `output_dir/final`."""
    g = config.grpo
    model, tokenizer = load_policy(config, model_path)
    server = None if url is None else VllmHttpServer(
        url, timeout=g.vllm_server_timeout, transfer_timeout=config.training.weight_sync_timeout
    )
    sync, targets = online_sync(config, model, url, ranks, lambda _url: server)
    sampling = SamplingParams(max_tokens=g.max_completion_length, temperature=g.temperature, top_p=g.top_p)
    publisher = online_publisher(config, model_path, sync, model, targets, ranks)
    generation = ServerGeneration(server=server, sampling=sampling, publisher=publisher)  # server: rank 0 only
    sources = reward_sources(config)
    funcs, weights = trl_reward_funcs(config.rewards, sources)
    sink = JsonlMetricsSink(output_dir / "metrics.jsonl") if ranks.is_main else Silent()
    progress = TqdmProgress(max(1, g.max_steps // g.logging_steps)) if ranks.is_main else Silent()
    callback = MetricsCallback(sink, progress, g.per_device_train_batch_size, lambda: generation.last_report)
    try:
        trainer = build_grpo_trainer(
            model=model, tokenizer=tokenizer, grpo=g, reward_funcs=funcs, reward_weights=weights,
            train_dataset=train_dataset(config.dataset), generation=generation, callbacks=[callback],
        )
        sync.connect()
        summary = OnlineGRPORun(
            trainer=TrlTrainer(trainer), publisher=generation,
            evaluator=_evaluator(config, server, tokenizer, sources) if server is not None else None,
            evaluate_before=config.eval.before_training, metrics=sink, progress=progress,
        ).run()
        trainer.save_model(str(output_dir / "final"))  # every rank: a collective under FSDP2
        return summary
    finally:
        with contextlib.suppress(Exception):
            sync.close()
        if server is not None:
            server.close()
        progress.close()
        sink.close()


class Silent:
    """The metrics sink and progress bar of ranks other than 0 (rank 0 reports for all)."""

    def record(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def summary(self, summary: Mapping[str, object]) -> None: ...

    def update(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...


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
