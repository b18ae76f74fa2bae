"""The environment contract, run against every registered environment and a custom environment_cls.

Every environment must: state its class facts, give deterministic seeded problems with disjoint
train/eval splits, open with system/user messages, answer every action (garbage, huge, unknown
tools) with a StepResult rather than an exception, score finished episodes in [0, 1], finish no
later than its turn limit, behave deterministically, and reject unknown kwargs by name.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from adapters.environments.base import BaseEnvironment, KwargSpec, UnknownEnvironmentKwarg
from adapters.environments.registry import get_environment_class, registered_names
from application.ports.environment import Message, Problem, StepResult


class KeywordEnvironment(BaseEnvironment):
    """A custom environment as a user would write one: say the secret word; <hint></hint> helps."""

    name = "keyword"
    requires_answer = True
    max_turns = 2
    kwargs = {"case_sensitive": KwargSpec(False, "whether the word must match in case")}

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._turn = 0

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        cls.resolve_kwargs(kwargs)
        offset = 0 if split == "train" else 10**6
        return [Problem(prompt="Say the secret word.", answer=f"word{offset + seed * 1000 + i}") for i in range(count)]

    def reset(self) -> list[Message]:
        self._turn = 0
        return [Message(role="user", content=self.problem.prompt)]

    def step(self, action: str) -> StepResult:
        self._turn += 1
        tag = re.search(r"<(\w{1,20})>", action[:10_000])
        if tag and self._turn < self.max_turns:
            text = f"hint: {len(self.problem.answer)} letters" if tag.group(1) == "hint" else f"error: unknown tool {tag.group(1)!r}"
            return StepResult(observation=(Message(role="tool", content=text),))
        said = action if self.options["case_sensitive"] else action.lower()
        return StepResult(done=True, score=float(str(self.problem.answer) in said))


ENVIRONMENTS = [*registered_names(), KeywordEnvironment]
HOSTILE_ACTIONS = [
    "",
    "garbage \x00\x01\x7f ☃ ￿",
    "x" * 200_000,
    "<" * 50_000 + ">" * 50_000,
    "<nosuchtool>1</nosuchtool>",
    '{"name": "nosuchtool", "arguments": {"x": 1}}',
    "<tool_call>{\"name\": \"rm\", \"arguments\": \"-rf /\"}</tool_call>",
    "Action: nosuchtool[1]",
    "<calc>9**9**9</calc>",
    "<calc>__import__('os').system('true')</calc>",
]


def _cls(entry: str | type[BaseEnvironment]) -> type[BaseEnvironment]:
    return get_environment_class(entry) if isinstance(entry, str) else entry


@pytest.fixture(params=ENVIRONMENTS, ids=lambda e: e if isinstance(e, str) else e.name)
def env_cls(request) -> type[BaseEnvironment]:
    return _cls(request.param)


@pytest.fixture
def problem(env_cls) -> Problem:
    return env_cls.problems("train", 1, seed=0)[0]


def _check(result: Any) -> StepResult:
    assert isinstance(result, StepResult)
    if result.done:
        assert isinstance(result.score, (int, float)) and 0.0 <= result.score <= 1.0
    else:
        assert result.score is None or 0.0 <= result.score <= 1.0
        assert result.observation and all(isinstance(m, Message) for m in result.observation)
        assert all(m.role in ("tool", "user") and isinstance(m.content, str) for m in result.observation)
    return result


def test_class_facts(env_cls):
    assert isinstance(env_cls.name, str) and env_cls.name
    assert isinstance(env_cls.requires_answer, bool)
    assert isinstance(env_cls.max_turns, int) and env_cls.max_turns >= 1
    assert all(isinstance(spec, KwargSpec) and spec.description for spec in env_cls.kwargs.values())


def test_problems_are_seeded_counted_and_split(env_cls):
    train = env_cls.problems("train", 8, seed=11)
    assert len(train) == 8 and all(isinstance(p, Problem) and p.prompt for p in train)
    assert train == env_cls.problems("train", 8, seed=11)
    if env_cls.requires_answer:
        assert all(p.answer is not None for p in train)
    evaluation = env_cls.problems("eval", 8, seed=11)
    assert not {(p.prompt, p.answer) for p in train} & {(p.prompt, p.answer) for p in evaluation}


def test_reset_opens_with_system_or_user_messages(env_cls, problem):
    env = env_cls(problem)
    try:
        messages = list(env.reset())
        assert messages and all(isinstance(m, Message) and m.role in ("system", "user") for m in messages)
        assert messages[-1].role == "user"
    finally:
        env.close()


@pytest.mark.parametrize("action", HOSTILE_ACTIONS, ids=range(len(HOSTILE_ACTIONS)))
def test_any_action_gets_a_step_result_never_an_exception(env_cls, problem, action):
    env = env_cls(problem)
    try:
        env.reset()
        _check(env.step(action))
    finally:
        env.close()


@pytest.mark.parametrize("limit", [1, 2, None])
def test_episode_finishes_within_the_turn_limit(env_cls, problem, limit):
    env = env_cls(problem, max_turns=limit)
    expected = env_cls.max_turns if limit is None else limit
    try:
        env.reset()
        results = [_check(env.step("<nosuchtool>1</nosuchtool>"))]
        while not results[-1].done:
            assert len(results) < expected
            results.append(_check(env.step("<nosuchtool>1</nosuchtool>")))
        assert len(results) <= expected
    finally:
        env.close()


def test_same_problem_and_actions_give_the_same_results(env_cls, problem):
    actions = ["<nosuchtool>1</nosuchtool>", str(problem.answer)]
    runs = []
    for _ in range(2):
        env = env_cls(problem)
        try:
            opening = env.reset()
            runs.append((tuple(opening), [env.step(a) for a in actions[: env.max_turns]]))
        finally:
            env.close()
    assert runs[0] == runs[1]


def test_unknown_kwargs_are_rejected_by_name(env_cls, problem):
    with pytest.raises(UnknownEnvironmentKwarg, match="no_such_knob"):
        env_cls(problem, no_such_knob=1)
    with pytest.raises(UnknownEnvironmentKwarg, match="no_such_knob"):
        env_cls.problems("train", 1, seed=0, no_such_knob=1)


def test_declared_defaults_fill_the_options(env_cls, problem):
    env = env_cls(problem)
    try:
        assert env.options == {k: spec.default for k, spec in env_cls.kwargs.items()}
    finally:
        env.close()
