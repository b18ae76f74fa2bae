"""Episodes and turns, token-in/token-out.

An episode is a prompt followed by segments. A segment is either tokens the engine sampled
(kept exactly as the engine returned them, with their behaviour log-probs; trained on) or tokens
the environment inserted (tool results, the next turn's header; masked out of the loss).
Nothing is ever re-tokenised: the next turn's prompt is the concatenation of these ids, so what
the trainer scores is exactly what the engine saw and produced.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs


def _same_length_logprobs(instance: "Segment", _attribute: attrs.Attribute, value: tuple[float, ...]) -> None:
    if instance.sampled and len(value) != len(instance.token_ids):
        raise ValueError(
            f"a sampled segment needs one log-prob per token: {len(instance.token_ids)} tokens, {len(value)} log-probs"
        )
    if not instance.sampled and value:
        raise ValueError("an environment segment carries no log-probs")


@attrs.frozen
class Segment:
    """A run of tokens: sampled by the engine (trainable) or inserted by the environment."""

    token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    sampled: bool
    logprobs: tuple[float, ...] = attrs.field(converter=tuple, default=(), validator=_same_length_logprobs)

    @classmethod
    def from_engine(cls, token_ids: Sequence[int], logprobs: Sequence[float]) -> "Segment":
        return cls(token_ids=token_ids, sampled=True, logprobs=logprobs)

    @classmethod
    def from_environment(cls, token_ids: Sequence[int]) -> "Segment":
        return cls(token_ids=token_ids, sampled=False)


@attrs.frozen
class Episode:
    """One finished rollout of one prompt: tokens, behaviour log-probs, scores and provenance."""

    prompt_token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    segments: tuple[Segment, ...] = attrs.field(converter=tuple)
    scores: Mapping[str, float] = attrs.field(factory=dict)
    weight_version: int = 0
    num_turns: int = 1
    finish_reason: str = "stop"
    metadata: Mapping[str, Any] = attrs.field(factory=dict)

    @property
    def completion_token_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def completion_mask(self) -> list[int]:
        """1 where the engine sampled the token (trained on), 0 where the environment inserted it."""
        return [int(s.sampled) for s in self.segments for _ in s.token_ids]

    @property
    def behaviour_logprobs(self) -> list[float]:
        """The engine's log-prob of each completion token; 0.0 on environment tokens (masked)."""
        out: list[float] = []
        for s in self.segments:
            out.extend(s.logprobs if s.sampled else [0.0] * len(s.token_ids))
        return out

    @property
    def num_sampled_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.sampled)

    @property
    def total_tokens(self) -> int:
        return len(self.prompt_token_ids) + sum(len(s.token_ids) for s in self.segments)


@attrs.frozen
class EpisodeGroup:
    """The `num_generations` episodes of one prompt; GRPO's advantages are taken within it."""

    prompt_index: int
    episodes: tuple[Episode, ...] = attrs.field(converter=tuple)
