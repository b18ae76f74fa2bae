"""Episodes and turns, token-in/token-out.

An episode is a prompt followed by segments. A segment is either tokens the engine sampled
(kept exactly as the engine returned them, with their behaviour log-probs; trained on) or tokens
the environment inserted (tool results, the next turn's header; masked out of the loss).
Nothing is ever re-tokenised: the next turn's prompt is the concatenation of these ids, so what
the trainer scores is exactly what the engine saw and produced.

Per-turn episodes (`carry_reasoning: false`): each turn's prompt is the conversation re-rendered
without earlier reasoning, so no single token sequence holds the episode. `turns` then holds, per
turn, the prompt the engine saw and that turn's segments (`Episode.from_turns` builds one);
`segments` is their concatenation (no environment tokens between turns: the next prompt carries
them). `rows()` gives one `RowTokens` per turn; a token-in/token-out episode gives exactly one.
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


# The completion views `RowTokens` and `Episode` both expose, read off their `segments`; each class
# binds them with `property(...)` (shared functions, no common base class).


def _completion_token_ids(tokens: "RowTokens | Episode") -> list[int]:
    return [t for s in tokens.segments for t in s.token_ids]


def _completion_mask(tokens: "RowTokens | Episode") -> list[int]:
    """1 where the engine sampled the token (trained on), 0 where the environment inserted it."""
    return [int(s.sampled) for s in tokens.segments for _ in s.token_ids]


def _behaviour_logprobs(tokens: "RowTokens | Episode") -> list[float]:
    """The engine's log-prob of each completion token; 0.0 on environment tokens (masked)."""
    out: list[float] = []
    for s in tokens.segments:
        out.extend(s.logprobs if s.sampled else [0.0] * len(s.token_ids))
    return out


@attrs.frozen
class RowTokens:
    """What one training row is cut from: the prompt the engine saw, then the completion segments."""

    prompt_token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    segments: tuple[Segment, ...] = attrs.field(converter=tuple)

    completion_token_ids = property(_completion_token_ids)
    completion_mask = property(_completion_mask)
    behaviour_logprobs = property(_behaviour_logprobs)


def _turns_match_the_episode(instance: "Episode", _attribute: attrs.Attribute, value: tuple[RowTokens, ...]) -> None:
    if not value:
        return
    if value[0].prompt_token_ids != instance.prompt_token_ids:
        raise ValueError("a per-turn episode's prompt_token_ids must be its first turn's prompt")
    if tuple(s for turn in value for s in turn.segments) != instance.segments:
        raise ValueError("a per-turn episode's segments must be its turns' segments, in order")


@attrs.frozen
class Episode:
    """One finished rollout of one prompt: tokens, behaviour log-probs, scores and provenance.

    `turns` is empty for a token-in/token-out episode (one row: prompt + all segments); a per-turn
    episode holds each turn's prompt and segments there (see the module docstring).
    """

    prompt_token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    segments: tuple[Segment, ...] = attrs.field(converter=tuple)
    scores: Mapping[str, float] = attrs.field(factory=dict)
    weight_version: int = 0
    num_turns: int = 1
    finish_reason: str = "stop"
    metadata: Mapping[str, Any] = attrs.field(factory=dict)
    turns: tuple[RowTokens, ...] = attrs.field(default=(), converter=tuple, validator=_turns_match_the_episode)

    @classmethod
    def from_turns(cls, turns: Sequence[RowTokens], **fields: Any) -> "Episode":
        """A per-turn episode: its prompt is the first turn's, its segments all turns' in order."""
        if not turns:
            raise ValueError("a per-turn episode needs at least one turn")
        segments = [s for turn in turns for s in turn.segments]
        return cls(prompt_token_ids=turns[0].prompt_token_ids, segments=segments, turns=turns, **fields)

    def rows(self) -> tuple[RowTokens, ...]:
        """The training rows: the whole episode, or one per turn for a per-turn episode."""
        return self.turns or (RowTokens(self.prompt_token_ids, self.segments),)

    completion_token_ids = property(_completion_token_ids)
    completion_mask = property(_completion_mask)
    behaviour_logprobs = property(_behaviour_logprobs)

    @property
    def num_sampled_tokens(self) -> int:
        return sum(len(s.token_ids) for s in self.segments if s.sampled)

    @property
    def total_tokens(self) -> int:
        """Prompt plus completion tokens; for a per-turn episode, those of its longest row."""
        return max(len(r.prompt_token_ids) + len(r.completion_token_ids) for r in self.rows())


@attrs.frozen
class EpisodeGroup:
    """The `num_generations` episodes of one prompt; GRPO's advantages are taken within it."""

    prompt_index: int
    episodes: tuple[Episode, ...] = attrs.field(converter=tuple)
