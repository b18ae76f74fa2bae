"""Generation servers: one entry of `rollout_server_configs`, and the embedded local server."""

from __future__ import annotations

import attrs

from domain.config.rules import one_of, port, positive


@attrs.frozen(kw_only=True)
class RolloutServerConfig:
    """One external server of a multi-server run."""

    url: str
    group_port: int | None = attrs.field(default=None, validator=port)


@attrs.frozen(kw_only=True)
class ServerConfig:
    """The embedded vLLM CPU server that `rlsetup train|serve` starts when no URL is configured."""

    host: str = "127.0.0.1"
    port: int = attrs.field(default=8011, validator=port)
    cpu_threads: str = "0-1"
    kv_cache_gib: int = attrs.field(default=1, validator=positive)  # whole GiB: vLLM's CPU backend refuses fractions
    max_model_len: int = attrs.field(default=2048, validator=positive)
    startup_timeout: float = attrs.field(default=600.0, validator=positive)
    # The weight-transfer collective: `gloo` (CPUs; our vLLM engine plugin) or `nccl` (GPUs; vLLM's
    # native engine). It is both what the embedded server is started with and the transport the
    # trainer opens towards configured (external) servers.
    weight_transfer_backend: str = attrs.field(default="gloo", validator=one_of(("gloo", "nccl")))
    # vLLM's `--reasoning-parser` for the embedded server (e.g. `qwen3`, `deepseek_r1`): what
    # `training.rollout_max_thinking_tokens` needs. External servers are started with their own.
    reasoning_parser: str | None = None
