"""`AsyncTrainingConfig`: env GRPO's rollout, server and async-loop fields, under the seed's names."""

from __future__ import annotations

from typing import Any

import attrs

from domain.config.rules import in_unit_interval, non_negative, one_of, positive
from domain.config.server import RolloutServerConfig

ROLLOUT_BACKENDS = ("vllm", "sglang")


def _finite_non_negative(_i: object, a: attrs.Attribute, v: float) -> None:
    if not 0 <= v < float("inf"):
        raise ValueError(f"'{a.name}' must be finite and >= 0: {v!r}")


@attrs.frozen(kw_only=True)
class AsyncTrainingConfig:
    rollout_backend: str = attrs.field(default="vllm", validator=one_of(ROLLOUT_BACKENDS))
    rollout_server_url: str | None = None
    rollout_server_configs: tuple[RolloutServerConfig, ...] = ()
    rollout_connection_timeout: float = attrs.field(default=60.0, validator=positive)
    rollout_temperature: float | None = attrs.field(default=None, validator=positive)
    rollout_top_p: float | None = attrs.field(default=None, validator=in_unit_interval)
    rollout_max_tokens: int = attrs.field(default=256, validator=positive)
    rollout_chat_template_kwargs: dict[str, Any] = attrs.field(factory=dict)
    max_train_row_tokens: int = attrs.field(default=2048, validator=positive)
    eval_rollout_batch_size: int = attrs.field(default=64, validator=positive)
    num_rollout_workers: int = attrs.field(default=2, validator=positive)
    max_concurrent_rollouts: int = attrs.field(default=32, validator=positive)
    enable_prefetch: bool = True
    sync_weights_every_n_steps: int = attrs.field(default=1, validator=positive)
    prompts_per_step: int = attrs.field(default=4, validator=positive)
    weight_sync_timeout: float = attrs.field(default=300.0, validator=positive)
    # After every Nth weight sync, check that each server serves what the trainer holds: its
    # /weight_info version and its prompt log-probs on a probe sequence against the trainer's
    # (tolerance by model dtype); a mismatch stops training with an error naming the server.
    # 0 = off (the default): one extra forward pass and one prompt request per server each time.
    verify_sync_every_n_syncs: int = attrs.field(default=0, validator=non_negative)
    # Caps the CoT of each reasoning section of a turn, engine-side: vLLM's `thinking_token_budget`
    # forces the reasoning end token once this many reasoning tokens follow the start
    # (domain/thinking_budget.py). Needs a server reasoning parser (`server.reasoning_parser` for
    # the embedded server); refused under sglang. None = uncapped.
    rollout_max_thinking_tokens: int | None = attrs.field(default=None, validator=positive)
    # The token closing a reasoning section (e.g. `</think>`); one token of the policy's tokenizer.
    # With the cap on, the closes the engine forced are masked out of the loss (not sampled from the
    # policy). The start token defaults to its opening tag (`<think>`); give it when they don't pair.
    rollout_reasoning_end_token: str | None = None
    rollout_reasoning_start_token: str | None = None
    # The effort length terms (domain/effort_length.py), 0.0 = off: k0 prices reasoning beyond the
    # effort level's share of rollout_max_thinking_tokens, the floor weight the shortfall below it.
    effort_length_penalty_k0: float = attrs.field(default=0.0, validator=_finite_non_negative)
    effort_length_floor_weight: float = attrs.field(default=0.0, validator=_finite_non_negative)

    def __attrs_post_init__(self) -> None:
        if self.rollout_server_url and self.rollout_server_configs:
            raise ValueError("'rollout_server_url' and 'rollout_server_configs' are exclusive: give one")

    @property
    def server_urls(self) -> tuple[str, ...]:
        if self.rollout_server_configs:
            return tuple(s.url for s in self.rollout_server_configs)
        return (self.rollout_server_url,) if self.rollout_server_url else ()
