"""Reward terms: each term prices one source's score in [0, 1] as `weight * score ** exponent`.

The episode's reward is the sum over terms. The default term list is
`[{source: environment}]` (weight 1, exponent 1): the environment's own score, unchanged.
A score outside [0, 1] is a bug in its source and raises, naming the source.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import attrs


def _finite(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not math.isfinite(value):
        raise ValueError(f"'{attribute.name}' must be finite: {value}")


def _positive(_instance: object, attribute: attrs.Attribute, value: float) -> None:
    if not value > 0:
        raise ValueError(f"'{attribute.name}' must be > 0: {value}")


@attrs.frozen
class RewardTerm:
    """`weight * score(source) ** exponent`."""

    source: str = attrs.field(validator=attrs.validators.min_len(1))
    weight: float = attrs.field(default=1.0, validator=_finite)
    exponent: float = attrs.field(default=1.0, validator=[_finite, _positive])

    def price(self, score: float) -> float:
        check_score(self.source, score)
        return self.weight * score**self.exponent


DEFAULT_REWARD_TERMS: tuple[RewardTerm, ...] = (RewardTerm(source="environment"),)


class ScoreOutOfRange(ValueError):
    """A reward source produced a score outside [0, 1]."""


def check_score(source: str, score: float) -> None:
    if not (isinstance(score, (int, float)) and 0.0 <= score <= 1.0):
        raise ScoreOutOfRange(f"reward source {source!r} gave score {score!r}; scores must lie in [0, 1]")


def total_reward(terms: Sequence[RewardTerm], scores: Mapping[str, float]) -> float:
    """Sum of the priced terms; a term whose source gave no score raises, naming it."""
    total = 0.0
    for term in terms:
        if term.source not in scores:
            raise KeyError(f"reward source {term.source!r} produced no score (have: {sorted(scores)})")
        total += term.price(scores[term.source])
    return total
