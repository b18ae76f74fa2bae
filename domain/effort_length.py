"""The effort length term: price an episode's reasoning length against its effort level's budget.

Effort level. The run's `reasoning_effort` chat-template kwarg (`rollout_chat_template_kwargs`,
the key gpt-oss-style templates read): `low`, `medium` or `high`; absent means `high`.

Budget. A level's thinking budget per turn is a fraction of `rollout_max_thinking_tokens` (B,
the engine's cap): low 1/4, medium 1/2, high 1. An episode of T sampled turns has the budget
b = fraction * B * T. Its reasoning length L is the number of sampled tokens inside reasoning
sections (after the start token, before the end token, markers excluded; `domain/thinking_budget`).

The term, added to the episode's reward before the group advantages are taken:

    adjustment = - k0 * max(0, L - b) / b  -  w_floor * max(0, b - L) / b

`effort_length_penalty_k0` (k0) prices the excess over the budget in units of the budget, so the
same extra tokens cost 1/fraction times more at a lower level: that is how the level prices
length. `effort_length_floor_weight` (w_floor) prices the shortfall below the budget, at most
w_floor: the floor that keeps a level from collapsing its reasoning once length is penalised.
Both 0.0 (the default) leave the reward as it was.

Example: B = 1000, level medium, one turn (b = 500), k0 = 0.5, w_floor = 0.1:
L = 700 gives -0.5 * 200/500 = -0.2; L = 300 gives -0.1 * 200/500 = -0.04; L = 500 gives 0.

Departures, deliberate: the level is run-wide (the chat template renders one `reasoning_effort`
for every prompt; a per-problem level would need per-problem template kwargs). The term is not
gated on correctness: a wrong, long episode pays it too. The engine caps each reasoning section
at B, so the excess is at most (1/fraction - 1) budgets per section (3 at `low`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from domain.episodes import Episode
from domain.thinking_budget import ReasoningMarkers, sampled_reasoning_tokens

EFFORT_KEY = "reasoning_effort"
DEFAULT_EFFORT = "high"
EFFORT_FRACTIONS: Mapping[str, float] = {"low": 0.25, "medium": 0.5, "high": 1.0}


def effort_level(template_kwargs: Mapping[str, Any]) -> str:
    """The run's effort level from its chat-template kwargs; a ValueError names an unknown one."""
    level = template_kwargs.get(EFFORT_KEY, DEFAULT_EFFORT)
    if level not in EFFORT_FRACTIONS:
        raise ValueError(f"'{EFFORT_KEY}' must be one of {sorted(EFFORT_FRACTIONS)} for the effort length terms: {level!r}")
    return str(level)


def length_adjustment(reasoning_tokens: int, budget: float, penalty_k0: float, floor_weight: float) -> float:
    """`-k0 * excess/budget - floor_weight * shortfall/budget` (see the module docstring)."""
    if budget <= 0:
        raise ValueError(f"the effort budget must be > 0: {budget}")
    excess = max(0.0, reasoning_tokens - budget) / budget
    shortfall = max(0.0, budget - reasoning_tokens) / budget
    return -penalty_k0 * excess - floor_weight * shortfall


def _non_negative(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not 0 <= value < float("inf"):
        raise ValueError(f"'{attribute.name}' must be finite and >= 0: {value}")


@attrs.frozen(kw_only=True)
class EffortLength:
    """The term for one run: its budget, level, weights and the reasoning markers to count with."""

    max_thinking_tokens: int = attrs.field(validator=attrs.validators.gt(0))
    effort: str = attrs.field(validator=attrs.validators.in_(tuple(EFFORT_FRACTIONS)))
    penalty_k0: float = attrs.field(validator=_non_negative)
    floor_weight: float = attrs.field(validator=_non_negative)
    markers: ReasoningMarkers

    def budget(self, turns: int) -> float:
        return EFFORT_FRACTIONS[self.effort] * self.max_thinking_tokens * max(1, turns)

    def reasoning_tokens(self, episode: Episode) -> int:
        return sum(sampled_reasoning_tokens(row.prompt_token_ids, row.segments, self.markers) for row in episode.rows())

    def adjustment(self, episode: Episode) -> float:
        return length_adjustment(
            self.reasoning_tokens(episode), self.budget(episode.num_turns), self.penalty_k0, self.floor_weight
        )
