"""codeforces: ratings, pass@tests fraction, per-test verdicts."""

from __future__ import annotations

import pytest

from adapters.environments.codeforces import Codeforces
from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

try:
    Sandbox()
except SandboxUnavailable as exc:
    pytest.skip(f"no sandbox: {exc}", allow_module_level=True)


def _submit(problem, action, **kwargs):
    env = Codeforces(problem, **kwargs)
    try:
        env.reset()
        return env.step(action)
    finally:
        env.close()


def test_reference_scores_one_and_carries_its_rating() -> None:
    for problem in Codeforces.problems("train", 3, seed=4):
        result = _submit(problem, problem.metadata["reference"])
        assert result.score == 1.0 and result.metadata["rating"] == problem.metadata["rating"]
        assert f"[Rating {problem.metadata['rating']}]" in problem.prompt


def test_partial_solution_gets_the_fraction_of_tests() -> None:
    [problem] = [p for p in Codeforces.problems("train", 12, seed=0) if p.metadata["template"] == "count_primes"]
    expected = [t[1] for t in problem.metadata["tests"]]
    # right on the tests whose answer is the first test's answer, wrong elsewhere
    program = f"```python\nprint({expected[0].strip()})\n```"
    result = _submit(problem, program)
    share = sum(e.split() == expected[0].split() for e in expected) / len(expected)
    assert result.done and result.score == pytest.approx(share) and 0 < result.score < 1
    assert set(result.metadata["verdicts"]) == {"accepted", "wrong_answer"}


def test_rating_range_filters_problems() -> None:
    problems = Codeforces.problems("train", 6, seed=0, min_rating=1400, max_rating=1600)
    assert all(1400 <= p.metadata["rating"] <= 1600 for p in problems)
    with pytest.raises(ValueError, match="rating"):
        Codeforces.problems("train", 1, seed=0, min_rating=4000, max_rating=4100)


def test_deterministic_under_seed() -> None:
    assert Codeforces.problems("eval", 5, seed=9) == Codeforces.problems("eval", 5, seed=9)
