"""The reward term list as TRL `reward_funcs` + `reward_weights`, keeping `weight * score ** exponent` exact.

One TRL reward function per term returns `score ** exponent` (the score validated in [0, 1] by
its `RewardSource`); the term's `weight` goes into TRL's `reward_weights`. With TRL's
`multi_objective_aggregation="sum_then_normalize"` (which `trl_config` pins) TRL's reward is
`sum_k w_k * r_k`: exactly our priced term list, and TRL logs each term as
`rewards/<name>/mean`. Chosen over one combined function so the per-term logs survive.
Departure: TRL turns a `None` reward into NaN and skips it; our sources refuse `None`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from adapters.verifiers.registry import RewardSource
from domain.rewards import RewardTerm


class TermReward:
    """A TRL reward function: `score(source) ** exponent` for each completion."""

    def __init__(self, term: RewardTerm, source: RewardSource, name: str) -> None:
        if source.name != term.source:
            raise ValueError(f"term source {term.source!r} was given the reward source {source.name!r}")
        self.term = term
        self._source = source
        self.__name__ = name  # what TRL logs it under (`rewards/<name>/mean`)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        return [score**self.term.exponent for score in self._source(prompts, completions, **kwargs)]


def term_names(terms: Sequence[RewardTerm]) -> list[str]:
    """Log names: the source, with `#k` appended where a source appears in several terms."""
    names = []
    for index, term in enumerate(terms):
        repeated = sum(1 for t in terms if t.source == term.source) > 1
        names.append(f"{term.source}#{index}" if repeated else term.source)
    return names


def trl_reward_funcs(
    terms: Sequence[RewardTerm], sources: Mapping[str, RewardSource]
) -> tuple[list[TermReward], list[float]]:
    """(`reward_funcs`, `reward_weights`) for TRL's GRPOTrainer / GRPOConfig."""
    if not terms:
        raise ValueError("online GRPO needs at least one reward term")
    missing = sorted({t.source for t in terms} - set(sources))
    if missing:
        raise KeyError(f"no reward source built for {missing} (have: {sorted(sources)})")
    funcs = [TermReward(t, sources[t.source], name) for t, name in zip(terms, term_names(terms))]
    return funcs, [float(t.weight) for t in terms]
