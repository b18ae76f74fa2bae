"""The one dependency-injector container: the only place that names concrete adapters.

It receives the typed `RunConfig` (parsed and validated by cattrs beforehand: the container's
own `Configuration` provider would accept any key, so it is not used) plus the facts resolved at
start-up (model folder, server URLs, output folder). Backends are chosen by `Selector`s keyed on
config values, never by an `if` inside a use case:
- `rollout_backend` picks the server adapter (`vllm`);
- `server.weight_transfer_backend` picks the collective (`gloo` on CPUs).
Resources (the Ray pool, the metrics file, the progress bar) are started and shut down with
`init_resources()` / `shutdown_resources()`. Tests override any provider with a fake.
"""

from __future__ import annotations

import functools
from pathlib import Path

from dependency_injector import containers, providers

from adapters.learner.policy import TorchPolicy
from adapters.rollout.ray_pool import RayRolloutPool
from adapters.sglang.http_server import SglangHttpServer
from adapters.transport.gloo_transport import GlooTransport
from adapters.transport.nccl_transport import NcclTransport
from adapters.transport.sglang_transport import C10dBucketTransport
from adapters.vllm.http_server import VllmHttpServer
from adapters.weights.gather import ModelWeightSource
from application.evaluate import HeldOutEvaluator
from application.run_env_grpo import EnvGRPOLoop
from application.sync_weights import SyncWeights
from application.verified_publisher import VerifyingPublisher
from domain.config import RunConfig
from infrastructure import reasoning_tokens, wiring
from infrastructure.episode_runner import EpisodeRunnerSpec, build_episode_runner, environment_class
from infrastructure.metrics import JsonlMetricsSink, TqdmProgress
from infrastructure.sync_verification import build_verifier


def _resource(build, close_name: str):
    """Adapt a constructor into a generator resource that closes what it built."""

    def resource(*args, **kwargs):
        thing = build(*args, **kwargs)
        try:
            yield thing
        finally:
            getattr(thing, close_name)()

    return resource


class EnvGRPOContainer(containers.DeclarativeContainer):
    config = providers.Dependency(instance_of=RunConfig)
    model_path = providers.Dependency(instance_of=Path)
    server_urls = providers.Dependency(instance_of=tuple)
    output_dir = providers.Dependency(instance_of=Path)

    control_server = providers.Selector(
        config.provided.training.rollout_backend,
        vllm=providers.Factory(VllmHttpServer, timeout=config.provided.training.weight_sync_timeout),
        sglang=providers.Factory(
            SglangHttpServer,
            timeout=config.provided.training.weight_sync_timeout,
            backend=config.provided.server.weight_transfer_backend,
        ),
    )
    # vLLM: our gloo engine plugin on CPUs, vLLM's native NCCL engine on GPUs.
    # SGLang: its own c10d group and flattened buckets, gloo or nccl alike.
    transport = providers.Selector(
        config.provided.training.rollout_backend,
        vllm=providers.Selector(
            config.provided.server.weight_transfer_backend,
            gloo=providers.Factory(GlooTransport),
            nccl=providers.Factory(NcclTransport),
        ),
        sglang=providers.Factory(C10dBucketTransport, backend=config.provided.server.weight_transfer_backend),
    )

    env_cls = providers.Singleton(environment_class, config.provided.environment)
    learner = providers.Singleton(
        TorchPolicy,
        model_path,
        config.provided.grpo,
        dtype=config.provided.model.dtype,
        max_train_row_tokens=config.provided.training.max_train_row_tokens,
        # the loss scores tokens at the temperature they were sampled at (TRL does the same)
        temperature=providers.Callable(lambda c: wiring.sampling(c).temperature, config),
    )
    weight_source = providers.Singleton(
        ModelWeightSource, learner.provided.model, dtype=config.provided.model.dtype
    )
    sync_targets = providers.Singleton(
        wiring.sync_targets, server_urls, config, control_server.provider, transport.provider
    )
    weight_sync = providers.Singleton(
        SyncWeights,
        sync_targets,
        weight_source,
        timeout=config.provided.training.weight_sync_timeout,
        chunk_bytes=wiring.CHUNK_BYTES,
        # one server at a time when several serve a plain single-process policy (logged once)
        rolling=providers.Callable(wiring.rolling_sync, server_urls, learner.provided.model),
    )

    # every `verify_sync_every_n_syncs` syncs, the servers' log-probs are checked against ours
    sync_verifier = providers.Singleton(build_verifier, config, model_path, learner, sync_targets)
    publisher = providers.Singleton(
        VerifyingPublisher,
        weight_sync,
        sync_verifier,
        every_n_syncs=config.provided.training.verify_sync_every_n_syncs,
    )

    # `rollout_reasoning_end_token` (and its start) as token ids; None without a thinking budget
    reasoning_markers = providers.Singleton(reasoning_tokens.reasoning_markers, config.provided.training, model_path)
    runner_spec = providers.Singleton(
        EpisodeRunnerSpec,
        rollout_backend=config.provided.training.rollout_backend,
        server_urls=server_urls,
        request_timeout=config.provided.training.rollout_connection_timeout,
        model_path=providers.Callable(str, model_path),
        chat_template_kwargs=config.provided.training.rollout_chat_template_kwargs,
        environment=config.provided.environment,
        token_budget=config.provided.training.max_train_row_tokens,
        reasoning_markers=reasoning_markers,
    )
    pool = providers.Resource(
        _resource(RayRolloutPool, "close"),
        num_workers=config.provided.training.num_rollout_workers,
        max_concurrent=config.provided.training.max_concurrent_rollouts,
        runner_factory=providers.Callable(functools.partial, build_episode_runner, runner_spec),
    )
    metrics = providers.Resource(
        _resource(JsonlMetricsSink, "close"), providers.Callable(lambda d: d / "metrics.jsonl", output_dir)
    )
    progress = providers.Resource(_resource(TqdmProgress, "close"), config.provided.grpo.max_steps)

    evaluator = providers.Singleton(wiring.evaluator, config, env_cls, pool)
    loop = providers.Factory(
        EnvGRPOLoop,
        settings=providers.Callable(wiring.loop_settings, config, server_urls, reasoning_markers),
        problems=providers.Callable(wiring.training_problems, config, env_cls),
        pool=pool,
        learner=learner,
        publisher=publisher,
        evaluator=evaluator,
        metrics=metrics,
        progress=progress,
    )
