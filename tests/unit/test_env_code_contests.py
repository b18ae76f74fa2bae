"""code_contests: judge verdicts, accepted-only scoring, retries, determinism."""

from __future__ import annotations

import pytest

from adapters.environments.code_contests import CodeContests
from adapters.environments.coding_format import fenced
from adapters.environments.coding_stdio_episode import as_problem
from adapters.environments.problems_stdio import make_problem
from adapters.environments.problems_stdio_templates import TEMPLATES
from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

try:
    Sandbox()
except SandboxUnavailable as exc:
    pytest.skip(f"no sandbox: {exc}", allow_module_level=True)


def _run(problem, actions, **kwargs):
    env = CodeContests(problem, **kwargs)
    try:
        env.reset()
        return [env.step(a) for a in actions]
    finally:
        env.close()


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda t: t.name)
def test_every_template_reference_is_accepted(template) -> None:
    stdio = make_problem(template, (1, "train", 0), num_tests=5, num_examples=1)
    assert len({out for _, out in stdio.tests}) > 1, "a template whose tests all share one answer cannot tell programs apart"
    problem = as_problem(stdio, "train")
    [result] = _run(problem, [fenced(problem.metadata["reference"])], num_tests=5)
    assert result.score == 1.0 and result.metadata["verdict"] == "accepted", result.metadata


def test_reference_of_listed_problems_is_accepted() -> None:
    for problem in CodeContests.problems("train", 2, seed=1):
        [result] = _run(problem, [problem.metadata["reference"]])
        assert result.score == 1.0


@pytest.mark.parametrize(
    ("program", "verdict"),
    [
        ("print(-123456789)", "wrong_answer"),
        ("while True:\n    pass", "time_limit_exceeded"),
        ("raise ValueError('boom')", "runtime_error"),
        ("x = bytearray(2 ** 31)", "memory_limit_exceeded"),
    ],
)
def test_judge_verdicts(program: str, verdict: str) -> None:
    [problem] = CodeContests.problems("train", 1, seed=0, num_tests=2)
    [result] = _run(problem, [f"```python\n{program}\n```"], max_turns=1, timeout_per_test=0.5, num_tests=2)
    assert result.done and result.score == 0.0 and result.metadata["verdict"] == verdict, result.metadata


def test_rejected_submission_gets_feedback_then_may_be_fixed() -> None:
    [problem] = CodeContests.problems("train", 1, seed=0)
    first, second = _run(problem, ["```python\nprint(0)\n```", problem.metadata["reference"]])
    assert not first.done and "Rejected: test 1" in first.observation[0].content
    assert second.done and second.score == 1.0


def test_problems_are_deterministic_and_splits_disjoint() -> None:
    train = CodeContests.problems("train", 20, seed=2)
    assert train == CodeContests.problems("train", 20, seed=2)
    evaluation = CodeContests.problems("eval", 20, seed=2)
    assert not {p.prompt for p in train} & {p.prompt for p in evaluation}
