"""native_coding: reference solutions score 1, wrong ones less, verdicts and seeds hold."""

from __future__ import annotations

import pytest

from adapters.environments.native_coding import NativeCoding
from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

try:
    Sandbox()
except SandboxUnavailable as exc:  # .ci/run installs bubblewrap
    pytest.skip(f"no sandbox: {exc}", allow_module_level=True)


def _episode(problem, actions, **kwargs):
    env = NativeCoding(problem, **kwargs)
    try:
        env.reset()
        return [env.step(action) for action in actions]
    finally:
        env.close()


@pytest.mark.parametrize("source", ["humaneval", "generated"])
def test_reference_scores_one(source: str) -> None:
    for problem in NativeCoding.problems("train", 2, seed=3, source=source):
        [result] = _episode(problem, [problem.metadata["reference"]])
        assert result.done and result.score == 1.0, result.metadata


def test_wrong_solution_scores_below_one_with_feedback_then_partial_credit() -> None:
    [problem] = NativeCoding.problems("train", 1, seed=0, source="generated")
    entry = problem.metadata["entry_point"]
    wrong = f"```python\ndef {entry}(*args):\n    return 0\n```"
    first, second = _episode(problem, [wrong, wrong])
    assert not first.done and "tests passed" in first.observation[0].content
    assert second.done and 0.0 <= second.score < 1.0 and second.metadata["tests"] >= 5


def test_hostile_solution_gets_zero_and_a_reason() -> None:
    [problem] = NativeCoding.problems("train", 1, seed=0, source="generated")
    [result] = _episode(problem, ["```python\nimport os\nos._exit(0)\n```"], max_turns=1)
    assert result.done and result.score == 0.0 and "no result" in result.metadata["reason"]
    [result] = _episode(problem, ["```python\nwhile True:\n    pass\n```"], max_turns=1, timeout_per_test=0.5)
    assert result.done and result.score == 0.0 and "time limit exceeded" in result.metadata["reason"]
    body = f"def {problem.metadata['entry_point']}(*args):\n    while True:\n        pass"
    [result] = _episode(problem, [f"```python\n{body}\n```"], max_turns=1, timeout_per_test=0.3)
    assert result.score == 0.0 and result.metadata["reason"] == "test 1: time limit exceeded"


def test_syntax_error_is_reported_without_running() -> None:
    [problem] = NativeCoding.problems("train", 1, seed=0)
    [result] = _episode(problem, ["```python\ndef broken(:\n```"], max_turns=1)
    assert result.done and result.score == 0.0 and result.metadata["verdict"] == "compile_error"


def test_problems_are_deterministic_and_splits_disjoint() -> None:
    a = NativeCoding.problems("train", 40, seed=5)
    assert a == NativeCoding.problems("train", 40, seed=5) and a != NativeCoding.problems("train", 40, seed=6)
    ids = {p.metadata["task_id"] for p in NativeCoding.problems("eval", 40, seed=5, source="mixed")}
    assert not ids & {p.metadata["task_id"] for p in a if p.metadata["task_id"].startswith("HumanEval")}


def test_bad_kwargs_are_named() -> None:
    with pytest.raises(ValueError, match="source"):
        NativeCoding.problems("train", 1, seed=0, source="mbpp")
    [problem] = NativeCoding.problems("train", 1, seed=0)
    with pytest.raises(ValueError, match="timeout_per_test"):
        NativeCoding(problem, timeout_per_test=-1)
