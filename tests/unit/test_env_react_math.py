"""react_math: seeded disjoint splits, the safe calculator, scoring and the turn limit."""

from __future__ import annotations

import time

import pytest

from adapters.environments.base import UnknownEnvironmentKwarg
from adapters.environments.calculator import CalculatorError, evaluate, format_number
from adapters.environments.react_math import ReactMath
from application.ports.environment import Problem, StepResult


def _problem(answer: str = "7") -> Problem:
    return Problem(prompt="State the final answer to the following arithmetic problem: 3 + 4 =", answer=answer)


# ---- problems ----------------------------------------------------------------------------


def test_problems_are_deterministic_under_a_seed_and_change_with_it():
    first = ReactMath.problems("train", 20, seed=3)
    assert first == ReactMath.problems("train", 20, seed=3)
    assert first != ReactMath.problems("train", 20, seed=4)
    assert len(first) == 20 and all(p.answer is not None for p in first)


def test_train_and_eval_splits_never_share_a_question():
    train = {p.prompt for p in ReactMath.problems("train", 400, seed=0)}
    evaluation = {p.prompt for p in ReactMath.problems("eval", 60, seed=0)}
    other_seed_eval = {p.prompt for p in ReactMath.problems("eval", 60, seed=1)}
    assert train and evaluation
    assert not train & evaluation
    assert not train & other_seed_eval


def test_answers_match_the_arithmetic_of_the_question():
    for problem in ReactMath.problems("train", 30, seed=5):
        expression = problem.prompt.rsplit(":", 1)[1].rstrip("= ")
        assert evaluate(expression) == int(problem.answer)


def test_task_and_task_config_are_configurable():
    rows = ReactMath.problems("train", 5, seed=0, task="gcd", task_config={"min_value": 2, "max_value": 50})
    assert all(row.metadata["task"] == "gcd" for row in rows)
    assert "gcd" in rows[0].prompt.lower() or "common" in rows[0].prompt.lower()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"task": "no_such_task"}, "no_such_task"),
        ({"task_config": {"max_digitz": 1}}, "max_digitz"),
        ({"eval_fraction": 1.5}, "eval_fraction"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_kwargs_raise_naming_the_offender(kwargs, message):
    with pytest.raises((ValueError, UnknownEnvironmentKwarg), match=message):
        ReactMath.problems("train", 3, seed=0, **kwargs)


def test_unknown_split_raises():
    with pytest.raises(ValueError, match="test"):
        ReactMath.problems("test", 3, seed=0)


# ---- calculator --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "value"),
    [("3 + 4", 7), ("2*(3-5)", -4), ("7/2", 3.5), ("2^10", 1024), ("-3 + +2", -1), ("8 // 3 % 2", 0), ("6 ÷ 3 × 2 =", 4)],
)
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate(expression) == value


@pytest.mark.parametrize(
    "hostile",
    [
        "9**9**9",
        "10**10000",
        "__import__('os').system('echo hi')",
        "open('/etc/passwd').read()",
        "(lambda: 1)()",
        "[1] * 10**9",
        "'a' * 10**9",
        "1/0",
        "2 ** -2000",
        "1e400",
        "9" * 40,
        "1 +" * 5000,
        "(" * 150 + "1" + ")" * 150,
        "1+" * 60 + "1",
        "(-8) ** 0.5",
        "10**30 * 10**30",
        "x" * 1_000_000,
        "True + 1",
        "",
    ],
)
def test_calculator_refuses_hostile_input_quickly(hostile):
    start = time.monotonic()
    with pytest.raises(CalculatorError):
        evaluate(hostile)
    assert time.monotonic() - start < 0.5


def test_format_number():
    assert format_number(7.0) == "7" and format_number(-2) == "-2" and format_number(1 / 3) == "0.3333333333"


# ---- episodes ----------------------------------------------------------------------------


def test_reset_states_the_problem_and_the_tool():
    (message,) = ReactMath(_problem()).reset()
    assert message.role == "user" and "3 + 4" in message.content and "<calc>" in message.content


def test_system_prompt_kwarg_adds_a_system_message():
    messages = ReactMath(_problem(), system_prompt="Be brief.").reset()
    assert [m.role for m in messages] == ["system", "user"]


@pytest.mark.parametrize("text", ["Answer: 7", "The final answer is 7.", "3 + 4 = 7", "\\boxed{7}", "seven is 7"])
def test_correct_final_answer_scores_one(text):
    env = ReactMath(_problem())
    env.reset()
    assert env.step(text) == StepResult(done=True, score=1.0, metadata={"turns": 1, "tool_call_pending": False})


@pytest.mark.parametrize("text", ["Answer: 8", "I do not know", "", "x" * 100_000, "-7"])
def test_wrong_final_answer_scores_zero(text):
    env = ReactMath(_problem())
    env.reset()
    result = env.step(text)
    assert result.done and result.score == 0.0


def test_negative_answers_are_checked_by_value():
    env = ReactMath(_problem(answer="-4"))
    env.reset()
    assert env.step("Answer: -4").score == 1.0


def test_calculator_call_returns_a_tool_message_then_answer_scores():
    env = ReactMath(_problem())
    env.reset()
    first = env.step("Let me use it: <calc>3 + 4</calc>")
    assert not first.done and first.score is None
    assert [(m.role, m.content) for m in first.observation] == [("tool", "3 + 4 = 7")]
    assert env.step("Answer: 7").score == 1.0


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("<calc>9**9**9</calc>", "calc error"),
        ("<calc>__import__('os')</calc>", "calc error"),
        ("<calc>" + "9" * 500 + "</calc>", "calc error"),
        ("<search>weather</search>", "unknown tool 'search'"),
    ],
)
def test_bad_tool_calls_become_tool_messages(action, expected):
    env = ReactMath(_problem())
    env.reset()
    result = env.step(action)
    assert not result.done
    (message,) = result.observation
    assert message.role == "tool" and expected in message.content


def test_max_turns_scores_the_last_turn_as_the_answer():
    env = ReactMath(_problem(), max_turns=2)
    env.reset()
    assert not env.step("<calc>3+4</calc>").done
    last = env.step("<calc>1+1</calc> so the answer is 7")
    assert last.done and last.score == 1.0 and last.metadata["tool_call_pending"] is True


def test_class_max_turns_is_the_default_limit():
    env = ReactMath(_problem())
    env.reset()
    results = [env.step("<calc>1+1</calc>") for _ in range(ReactMath.max_turns)]
    assert [r.done for r in results] == [False] * (ReactMath.max_turns - 1) + [True]


def test_reset_restarts_the_turn_count():
    env = ReactMath(_problem(), max_turns=2)
    env.reset()
    env.step("<calc>1+1</calc>")
    env.reset()
    assert not env.step("<calc>1+1</calc>").done


def test_requires_an_answer():
    with pytest.raises(ValueError, match="requires an answer"):
        ReactMath(Problem(prompt="3 + 4 ="))


def test_unknown_or_reserved_instance_kwargs_raise():
    with pytest.raises(UnknownEnvironmentKwarg, match="temprature"):
        ReactMath(_problem(), temprature=0.3)
    with pytest.raises(UnknownEnvironmentKwarg, match="max_turns"):
        ReactMath.resolve_kwargs({"max_turns": 2})
