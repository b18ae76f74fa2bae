"""Port: a multi-turn environment, as the rollout loop sees it.

An environment *class* is registered by name; it lists its problems (`problems`) and is
instantiated once per episode (`cls(problem, **environment_kwargs)`), gym-style: `reset()`
gives the opening messages, `step(action)` answers one assistant turn, `close()` frees what the
episode held (sandboxes, temp dirs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import attrs


@attrs.frozen(kw_only=True)
class Problem:
    """One data row in the async-GRPO format: `prompt`, plus `answer` where required."""

    prompt: str
    answer: str | None = None
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


@attrs.frozen(kw_only=True)
class Message:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: str


@attrs.frozen(kw_only=True)
class StepResult:
    """The environment's answer to one assistant turn."""

    observation: tuple[Message, ...] = ()  # messages to append (tool results, feedback)
    done: bool = False
    score: float | None = None  # in [0, 1]; required when done
    metadata: Mapping[str, Any] = attrs.field(factory=dict)


class EpisodeEnvironment(Protocol):
    """One episode's environment instance."""

    def reset(self) -> Sequence[Message]: ...

    def step(self, action: str) -> StepResult: ...

    def close(self) -> None: ...


class EnvironmentClass(Protocol):
    """What the registry holds: the class, with its class-level facts and its data."""

    name: str
    requires_answer: bool
    max_turns: int

    def __call__(self, problem: Problem, **kwargs: Any) -> EpisodeEnvironment: ...

    def problems(self, split: str, count: int, seed: int, **kwargs: Any) -> Sequence[Problem]: ...
