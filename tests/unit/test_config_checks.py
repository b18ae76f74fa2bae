"""Cross-field config checks: environment, environment_kwargs, reward sources, job, backend.

The environment classes here are real `BaseEnvironment` subclasses served by a fake catalog
(an in-memory registry), so the checks run against the real base-class validation.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from adapters.environments.base import BaseEnvironment, KwargSpec
from adapters.environments.registry import describe, load_environment_cls
from application.ports.environment import Message, Problem, StepResult
from infrastructure.config_checks import REWARD_SOURCES
from infrastructure.config_loader import ConfigError, parse_run_config


class EchoEnv(BaseEnvironment):
    """Done after one turn; scores 1 when the action equals the answer."""

    name = "echo"
    requires_answer = True
    max_turns = 1
    kwargs = {"task": KwargSpec(default="chain_sum", description="which generator"), "digits": KwargSpec(1, "digits per term")}

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: object) -> Sequence[Problem]:
        return [Problem(prompt=f"say {seed + i}", answer=str(seed + i)) for i in range(count)]

    def reset(self) -> Sequence[Message]:
        return [Message(role="user", content=self.problem.prompt)]

    def step(self, action: str) -> StepResult:
        return StepResult(done=True, score=float(action.strip() == self.problem.answer))


class FakeCatalog:
    def __init__(self, classes: dict[str, type]) -> None:
        self._classes = classes

    def registered_names(self) -> tuple[str, ...]:
        return tuple(self._classes)

    def get_environment_class(self, name: str) -> type:
        return self._classes[name]

    def load_environment_cls(self, path: str) -> type:
        return load_environment_cls(path)  # the real importer: only the name -> class map is faked

    def environment_info(self) -> list[object]:
        return [describe(cls) for cls in self._classes.values()]


CATALOG = FakeCatalog({"react_math": EchoEnv, "echo": EchoEnv})


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_run_config(data, CATALOG)
    return info.value.problems


def test_a_registered_environment_with_declared_kwargs_passes() -> None:
    config = parse_run_config({"environment": {"environment_type": "echo", "environment_kwargs": {"digits": 2}}}, CATALOG)
    assert config.environment.environment_kwargs == {"digits": 2}


def test_an_unregistered_environment_type_is_refused_with_a_hint() -> None:
    assert problems_of({"environment": {"environment_type": "ehco"}}) == [
        "unknown environment_type 'ehco' (registered: echo, react_math) @ $.environment (did you mean 'echo'?)"
    ]


def test_neither_type_nor_cls_is_refused() -> None:
    assert problems_of({"environment": {"environment_type": None}}) == [
        "give 'environment_type' (a registered name) or 'environment_cls' (module:Class) @ $.environment"
    ]


def test_each_unknown_environment_kwarg_is_one_line() -> None:
    lines = problems_of({"environment": {"environment_kwargs": {"taks": "x", "max_turns": 3, "digits": 2}}})
    assert len(lines) == 2
    assert "'taks'" in lines[0] and lines[0].endswith("@ $.environment.environment_kwargs (did you mean 'task'?)")
    assert "'max_turns' is reserved" in lines[1]


USER_MODULE = """
from adapters.environments.base import BaseEnvironment, KwargSpec
from adapters.environments.registry import describe, load_environment_cls
from application.ports.environment import Message, Problem, StepResult


class MyEnv(BaseEnvironment):
    name = "mine"
    kwargs = {"level": KwargSpec(default=1, description="difficulty")}

    @classmethod
    def problems(cls, split, count, seed, **kwargs):
        return [Problem(prompt=str(i)) for i in range(count)]

    def reset(self):
        return [Message(role="user", content=self.problem.prompt)]

    def step(self, action):
        return StepResult(done=True, score=1.0)


class NotAnEnv:
    pass


class Abstract(BaseEnvironment):
    name = "abstract"

    @classmethod
    def problems(cls, split, count, seed, **kwargs):
        return []

    def reset(self):
        return []
"""


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A user's module on sys.path holding one environment subclass and one unrelated class."""
    (tmp_path / "my_envs_h3.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "my_envs_h3", raising=False)
    return "my_envs_h3"


def test_environment_cls_that_subclasses_base_environment_passes(user_module: str) -> None:
    config = parse_run_config({"environment": {"environment_cls": f"{user_module}:MyEnv"}}, CATALOG)
    assert config.environment.environment_cls == f"{user_module}:MyEnv"


def test_environment_cls_kwargs_are_checked_too(user_module: str) -> None:
    [line] = problems_of({"environment": {"environment_cls": f"{user_module}:MyEnv", "environment_kwargs": {"nope": 1}}})
    assert "'nope'" in line and line.endswith("@ $.environment.environment_kwargs")


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ("{m}:NotAnEnv", "not a BaseEnvironment subclass"),
        ("{m}:Missing", "has no attribute 'Missing'"),
        ("no_such_module_h3.sub:Env", "cannot import module 'no_such_module_h3.sub'"),
        ("{m}.MyEnv", "must look like 'package.module:ClassName'"),
        ("{m}:Abstract", "does not implement: step"),
    ],
)
def test_a_bad_environment_cls_is_one_line(user_module: str, spec: str, says: str) -> None:
    spec = spec.format(m=user_module)
    [line] = problems_of({"environment": {"environment_cls": spec}})
    assert line.startswith(f"environment_cls {spec!r}") and says in line
    assert line.endswith("@ $.environment.environment_cls")


def test_an_environment_cls_whose_module_fails_to_run_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "broken_env_h3.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert problems_of({"environment": {"environment_cls": "broken_env_h3:Env"}}) == [
        "cannot import environment_cls 'broken_env_h3:Env': RuntimeError: boom at import @ $.environment.environment_cls"
    ]


def test_an_unknown_reward_source_is_refused_with_its_index() -> None:
    rewards = [{"source": "environment"}, {"source": "enviroment", "weight": 0.5}]
    assert problems_of({"rewards": rewards}) == [
        "unknown reward source 'enviroment' for job 'env_grpo' (known: environment) @ $.rewards[1] (did you mean 'environment'?)"
    ]


def test_an_empty_reward_list_is_refused() -> None:
    assert problems_of({"rewards": []}) == ["'rewards' must list at least one term, e.g. [{source: environment}] @ $"]


def test_reward_sources_per_job() -> None:
    assert REWARD_SOURCES["env_grpo"] == ("environment",)
    assert "math_verify" in REWARD_SOURCES["online_grpo"] and "environment" not in REWARD_SOURCES["online_grpo"]
    lines = problems_of({"job": "online_grpo", "grpo": {"use_vllm": True}})
    assert any("unknown reward source 'environment' for job 'online_grpo'" in line and "$.rewards[0]" in line for line in lines)


def test_online_grpo_needs_trl_server_mode() -> None:
    verifier = [{"source": "math_verify"}]
    assert problems_of({"job": "online_grpo", "rewards": verifier}) == [
        "job 'online_grpo' needs 'use_vllm: true' (TRL's vLLM server mode) @ $.grpo"
    ]
    config = parse_run_config(
        {"job": "online_grpo", "grpo": {"use_vllm": True, "vllm_mode": "server"}, "rewards": verifier}, CATALOG
    )
    assert config.grpo.use_vllm


def test_carry_reasoning_is_refused_under_sglang_only() -> None:
    env = {"environment_type": "echo", "environment_kwargs": {}}
    assert parse_run_config({"training": {"rollout_backend": "sglang"}, "environment": env}, CATALOG)
    data = {"training": {"rollout_backend": "sglang"}, "environment": {"environment_kwargs": {"carry_reasoning": True}}}
    lines = problems_of(data)
    assert "'carry_reasoning' is refused under 'rollout_backend: sglang' @ $.environment.environment_kwargs" in lines


class BrokenCatalog(FakeCatalog):
    def registered_names(self) -> tuple[str, ...]:
        raise ImportError("registry exploded")


def test_a_broken_registry_is_one_line_not_a_traceback() -> None:
    with pytest.raises(ConfigError) as info:
        parse_run_config({}, BrokenCatalog({}))
    assert info.value.problems == [
        "cannot look up environment_type 'react_math': ImportError: registry exploded @ $.environment"
    ]


def test_fields_a_job_never_reads_are_refused_not_ignored() -> None:
    lines = problems_of({"grpo": {"gradient_accumulation_steps": 4, "use_vllm": True}})
    assert any("'gradient_accumulation_steps' does nothing for job 'env_grpo'" in line and line.endswith("@ $.grpo") for line in lines)
    assert any("'use_vllm' does nothing for job 'env_grpo'" in line for line in lines)
    online = {"job": "online_grpo", "grpo": {"use_vllm": True}, "rewards": [{"source": "math_verify"}]}
    assert parse_run_config(online, CATALOG).job == "online_grpo"
    lines = problems_of({**online, "training": {"num_rollout_workers": 4, "weight_sync_timeout": 100.0}})
    assert lines == [
        "'num_rollout_workers' does nothing for job 'online_grpo' (online GRPO reads only weight_sync_timeout, "
        "eval_rollout_batch_size, verify_sync_every_n_syncs of this section); remove it @ $.training"
    ]
