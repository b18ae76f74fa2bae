"""swe: generated buggy repositories, tools, hidden-test reward, temp dirs removed at close."""

from __future__ import annotations

import os

import pytest

from adapters.environments.swe import Swe
from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

try:
    Sandbox()
except SandboxUnavailable as exc:
    pytest.skip(f"no sandbox: {exc}", allow_module_level=True)


@pytest.fixture(scope="module")
def problems():
    return Swe.problems("train", 2, seed=0)


def test_the_fix_scores_one_and_the_repo_is_a_git_repo(problems) -> None:
    problem = problems[0]
    env = Swe(problem)
    env.reset()
    root = env._root
    assert os.path.isdir(os.path.join(root, ".git"))
    failing = env.step("<tool>run_tests</tool>").observation[0].content
    assert "FAILED" in failing or "error" in failing.lower() or "timeout" in failing
    env.step(f"<tool>write solution_pkg/core.py\n{problem.metadata['fix']}</tool>")
    assert "solution_pkg/core.py" in env.step("<tool>diff</tool>").observation[0].content
    result = env.step("<tool>submit</tool>")
    env.close()
    assert result.done and result.score == 1.0 and result.metadata["submitted"]
    assert not os.path.exists(root)


def test_submitting_the_bug_scores_zero(problems) -> None:
    env = Swe(problems[1])
    env.reset()
    result = env.step("<tool>submit</tool>")
    env.close()
    assert result.done and result.score == 0.0 and result.metadata["passed"] < result.metadata["tests"]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("<tool>read ../../etc/passwd</tool>", "bad path"),
        ("<tool>read .git/config</tool>", "bad path"),
        ("<tool>rm -rf /</tool>", "unknown command"),
        ("<tool>edit solution_pkg/core.py\nno markers</tool>", "SEARCH"),
        ("<tool>edit solution_pkg/core.py\n<<<<<<< SEARCH\nnot there\n=======\nx\n>>>>>>> REPLACE</tool>", "not found"),
        ("<tool>write big.py\n" + "x" * 60_000 + "</tool>", "at most"),
        ("just text", "no <tool>"),
    ],
)
def test_bad_tool_calls_are_tool_errors(problems, action: str, expected: str) -> None:
    env = Swe(problems[0])
    env.reset()
    try:
        result = env.step(action)
    finally:
        env.close()
    assert not result.done and expected in result.observation[0].content


def test_edit_search_and_read_tools(problems) -> None:
    env = Swe(problems[0])
    env.reset()
    try:
        entry = problems[0].metadata["entry_point"]
        assert f"def {entry}" in env.step(f"<tool>search def {entry}</tool>").observation[0].content
        env.step("<tool>write notes.txt\nhello</tool>")
        edit = "<tool>edit notes.txt\n<<<<<<< SEARCH\nhello\n=======\nbye\n>>>>>>> REPLACE</tool>"
        assert "wrote" in env.step(edit).observation[0].content
        assert env.step("<tool>read notes.txt</tool>").observation[0].content == "bye"
    finally:
        env.close()


def test_problems_are_deterministic_and_splits_disjoint(problems) -> None:
    assert Swe.problems("train", 2, seed=0) == problems
    evaluation = {p.metadata["task_id"] for p in Swe.problems("eval", 2, seed=0)}
    assert not evaluation & {p.metadata["task_id"] for p in problems}
