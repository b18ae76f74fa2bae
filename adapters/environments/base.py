"""`BaseEnvironment`: what a user subclasses to plug an environment in (`environment_cls`).

An environment class states its facts as class attributes (`name`, `requires_answer`,
`max_turns`, and `kwargs`: the knobs it accepts, each with a default and a description, so
`rlsetup envs` can list them). The rollout loop builds one instance per episode,
`cls(problem, max_turns=..., **environment_kwargs)`, then calls `reset()`, `step(action)` per
assistant turn and `close()`. `problems(split, count, seed, **environment_kwargs)` gives the data
rows (prompt, plus answer when `requires_answer`).

The base class is an interface plus validation only: it checks the class attributes when a
subclass is defined, rejects unknown `environment_kwargs` (naming the key and the known ones),
fills defaults into `self.options`, and resolves the per-episode turn limit (`self.max_turns`;
the rollout config's `max_turns` overrides the class's own). `max_turns` is therefore a reserved
name, not an environment kwarg. `step` must return `done=True` with a score in [0, 1] no later
than turn `self.max_turns`.
"""

from __future__ import annotations

import abc
import copy
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import attrs

from application.ports.environment import Message, Problem, StepResult

RESERVED_KWARGS = frozenset({"max_turns"})


@attrs.frozen
class KwargSpec:
    """One knob of an environment: its default and what it does."""

    default: Any
    description: str


class UnknownEnvironmentKwarg(ValueError):
    """An `environment_kwargs` key the environment does not declare."""


class BaseEnvironment(abc.ABC):
    """Subclass this for `environment_cls`; register built-ins with `registry.register`."""

    name: ClassVar[str] = ""
    requires_answer: ClassVar[bool] = False
    max_turns: ClassVar[int] = 1  # the instance attribute of the same name is this episode's limit
    kwargs: ClassVar[Mapping[str, KwargSpec]] = {}

    def __init_subclass__(cls, **class_kwargs: Any) -> None:
        super().__init_subclass__(**class_kwargs)
        _check_class_facts(cls)

    def __init__(self, problem: Problem, *, max_turns: int | None = None, **kwargs: Any) -> None:
        if not isinstance(problem, Problem):
            raise TypeError(f"environment {self.name!r} needs a Problem, got {type(problem).__name__}")
        if self.requires_answer and problem.answer is None:
            raise ValueError(f"environment {self.name!r} requires an answer, but the problem has none: {problem.prompt[:80]!r}")
        limit = type(self).max_turns if max_turns is None else max_turns
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise ValueError(f"environment {self.name!r}: max_turns must be a positive int, got {limit!r}")
        self.problem = problem
        self.max_turns = limit
        self.options: dict[str, Any] = self.resolve_kwargs(kwargs)

    @classmethod
    def resolve_kwargs(cls, kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The declared defaults overlaid with `kwargs`; an unknown key raises, naming it."""
        for key in kwargs:
            if key in RESERVED_KWARGS:
                raise UnknownEnvironmentKwarg(
                    f"environment_kwargs of {cls.name!r}: {key!r} is reserved; set it in the environment config instead"
                )
            if key not in cls.kwargs:
                known = ", ".join(sorted(cls.kwargs)) or "none"
                raise UnknownEnvironmentKwarg(f"environment {cls.name!r} has no kwarg {key!r} (known: {known})")
        return {key: kwargs[key] if key in kwargs else copy.deepcopy(spec.default) for key, spec in cls.kwargs.items()}

    @classmethod
    @abc.abstractmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> Sequence[Problem]:
        """`count` data rows of `split` ("train" or "eval"; disjoint), deterministic under `seed`."""

    @abc.abstractmethod
    def reset(self) -> Sequence[Message]:
        """The opening messages of the episode (system and/or user)."""

    @abc.abstractmethod
    def step(self, action: str) -> StepResult:
        """Answer one assistant turn; bad actions become messages, never exceptions."""

    def close(self) -> None:
        """Free what the episode held; the default holds nothing."""
        return None


def check_split(env_name: str, split: str) -> None:
    if split not in ("train", "eval"):
        raise ValueError(f"environment {env_name!r}: unknown split {split!r} (known: train, eval)")


def _check_class_facts(cls: type[BaseEnvironment]) -> None:
    if not isinstance(cls.name, str):
        raise TypeError(f"{cls.__qualname__}.name must be a str, got {cls.name!r}")
    if not isinstance(cls.requires_answer, bool):
        raise TypeError(f"{cls.__qualname__}.requires_answer must be a bool, got {cls.requires_answer!r}")
    turns = cls.max_turns
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 1:
        raise TypeError(f"{cls.__qualname__}.max_turns must be a positive int, got {turns!r}")
    if not isinstance(cls.kwargs, Mapping):
        raise TypeError(f"{cls.__qualname__}.kwargs must map names to KwargSpec, got {type(cls.kwargs).__name__}")
    for key, spec in cls.kwargs.items():
        if not isinstance(spec, KwargSpec):
            raise TypeError(f"{cls.__qualname__}.kwargs[{key!r}] must be a KwargSpec(default, description), got {spec!r}")
        if key in RESERVED_KWARGS:
            raise TypeError(f"{cls.__qualname__}.kwargs may not declare the reserved name {key!r}")
