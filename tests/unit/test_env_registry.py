"""The environment registry: lookup by name, descriptions for the CLI, and environment_cls paths."""

from __future__ import annotations

from typing import Any

import pytest

from adapters.environments import registry
from adapters.environments.base import BaseEnvironment, KwargSpec
from adapters.environments.react_math import ReactMath
from application.ports.environment import Message, Problem, StepResult


class Minimal(BaseEnvironment):
    """One-turn environment used to test loading by import path."""

    name = "minimal_for_registry_test"

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        return [Problem(prompt=str(i)) for i in range(count)]

    def reset(self) -> list[Message]:
        return [Message(role="user", content=self.problem.prompt)]

    def step(self, action: str) -> StepResult:
        return StepResult(done=True, score=1.0)


class Incomplete(BaseEnvironment):
    name = "incomplete"


NOT_AN_ENVIRONMENT = object()


def test_react_math_is_registered_by_name():
    assert "react_math" in registry.registered_names()
    assert registry.get_environment_class("react_math") is ReactMath


def test_unknown_name_lists_the_known_ones():
    with pytest.raises(registry.UnknownEnvironment, match="'reakt_math'.*react_math"):
        registry.get_environment_class("reakt_math")


def test_environment_info_describes_kwargs_for_the_cli():
    (info,) = [i for i in registry.environment_info() if i.name == "react_math"]
    assert info.requires_answer is True and info.max_turns == ReactMath.max_turns
    kwargs = {k.name: k for k in info.kwargs}
    assert kwargs["task"].default == "chain_sum" and kwargs["task"].description
    assert info.summary.startswith("Arithmetic")


def test_load_environment_cls_imports_a_subclass():
    assert registry.load_environment_cls(f"{__name__}:Minimal") is Minimal


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("no_colon_here", "package.module:ClassName"),
        ("no_such_module_xyz:Env", "cannot import module 'no_such_module_xyz'"),
        (f"{__name__}:Missing", "has no attribute 'Missing'"),
        (f"{__name__}:NOT_AN_ENVIRONMENT", "not a BaseEnvironment subclass"),
        (f"{__name__}:Incomplete", "does not implement: .*problems"),
    ],
)
def test_load_environment_cls_errors_name_the_problem(path, message):
    with pytest.raises(registry.EnvironmentClassError, match=message):
        registry.load_environment_cls(path)


def test_resolve_prefers_environment_cls_over_the_type():
    assert registry.resolve_environment_class("react_math", f"{__name__}:Minimal") is Minimal
    assert registry.resolve_environment_class("react_math", None) is ReactMath
    with pytest.raises(registry.UnknownEnvironment, match="neither"):
        registry.resolve_environment_class(None, None)


def test_register_refuses_a_taken_name_and_non_environments():
    class Impostor(Minimal):
        name = "react_math"

    with pytest.raises(ValueError, match="taken"):
        registry.register(Impostor)
    with pytest.raises(TypeError):
        registry.register(dict)


def test_class_facts_are_checked_when_the_subclass_is_defined():
    with pytest.raises(TypeError, match="max_turns"):

        class BadTurns(Minimal):
            max_turns = 0

    with pytest.raises(TypeError, match="KwargSpec"):

        class BadKwargs(Minimal):
            kwargs = {"depth": 3}

    with pytest.raises(TypeError, match="reserved"):

        class Reserved(Minimal):
            kwargs = {"max_turns": KwargSpec(2, "no")}


def test_instance_max_turns_must_be_positive():
    with pytest.raises(ValueError, match="max_turns"):
        Minimal(Problem(prompt="p"), max_turns=0)
