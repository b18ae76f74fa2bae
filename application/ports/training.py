"""Ports of the env-GRPO loop: the learner, the rollout pool, and where metrics go."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

import attrs

from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from domain.episodes import Episode


class Learner(Protocol):
    """The policy being trained (torch lives behind this port)."""

    def train_step(self, episodes: Sequence[Episode], advantages: Sequence[float]) -> Mapping[str, float]: ...


@attrs.frozen(kw_only=True)
class RolloutRequest:
    """Run `num_generations` episodes for each problem at the given weight version."""

    problems: tuple[Problem, ...] = attrs.field(converter=tuple)
    num_generations: int
    sampling: SamplingParams
    weight_version: int
    max_turns: int | None = None


class RolloutTicket(Protocol):
    """A submitted batch of rollouts, running in the background."""

    def result(self, timeout: float) -> list[list[Episode]]:
        """One list of `num_generations` episodes per problem, in the request's order."""
        ...


class RolloutPool(Protocol):
    def submit(self, request: RolloutRequest) -> RolloutTicket: ...

    def close(self) -> None: ...


class MetricsSink(Protocol):
    def record(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def summary(self, summary: Mapping[str, object]) -> None: ...

    def close(self) -> None: ...


class Progress(Protocol):
    """What the user watches: one update per step, free text notes."""

    def update(self, step: int, metrics: Mapping[str, float]) -> None: ...

    def note(self, text: str) -> None: ...

    def close(self) -> None: ...
