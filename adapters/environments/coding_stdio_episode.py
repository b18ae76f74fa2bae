"""What `code_contests` and `codeforces` share: problems as `Problem`s and one judged submission.

The model answers with a complete Python program in a ```python block that reads stdin and
writes stdout. `judge_submission` runs it on every hidden test (`coding_judge`) and returns the
report, or a reason why nothing could be judged (no code, a syntax error, a sandbox failure);
`unjudged_step` answers such a submission. `stdio_kwargs` and `tests_and_examples` are the
kwargs both declare and their checks.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import KwargSpec
from adapters.environments.coding_episode import CodingTurns, coding_kwargs
from adapters.environments.coding_format import extract_code, syntax_error
from adapters.environments.coding_judge import JudgeReport, judge
from adapters.environments.problems_stdio import StdioProblem, problem_metadata
from adapters.sandbox.sandbox import Sandbox, SandboxError
from application.ports.environment import Problem, StepResult

INSTRUCTIONS = (
    "Solve this programming problem in Python 3. Your program reads from standard input and writes to "
    "standard output. Reply with the complete program in a single ```python code block.\n\n{statement}"
)


def as_problem(problem: StdioProblem, split: str) -> Problem:
    return Problem(prompt=INSTRUCTIONS.format(statement=problem.statement), metadata=problem_metadata(problem, split))


def stdio_kwargs(num_tests: int, multi_turn: bool) -> dict[str, KwargSpec]:
    """num_tests (default `num_tests`), num_examples, then `coding_kwargs` with 2 s per test."""
    return {
        "num_tests": KwargSpec(num_tests, "hidden tests per problem (the first num_examples are shown)"),
        "num_examples": KwargSpec(2, "tests shown as examples in the statement"),
        **coding_kwargs(timeout_per_test=2.0, multi_turn=multi_turn),
    }


def tests_and_examples(env_name: str, options: dict[str, Any]) -> tuple[int, int]:
    """(num_tests, num_examples), checked: 1-100 tests, of which at most all are shown."""
    tests = check_count(env_name, "num_tests", options["num_tests"], 1, 100)
    return tests, check_count(env_name, "num_examples", options["num_examples"], 0, tests)


def check_count(env_name: str, key: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"environment {env_name!r}: {key} must be an int in [{low}, {high}], got {value!r}")
    return value


def judge_submission(sandbox: Sandbox, action: str, problem: Problem, timeout_per_test: float) -> JudgeReport | str:
    """The judge's report on the reply's program, or why it could not be judged."""
    code = extract_code(action)
    error = syntax_error(code)
    if error is not None:
        return error
    try:
        return judge(sandbox, code, problem.metadata["tests"], timeout_per_test)
    except SandboxError as exc:
        return f"sandbox failure: {exc}"[:500]


def unjudged_step(turns: CodingTurns, last: bool, reason: str, **notes: Any) -> StepResult:
    """A submission `judge_submission` could not judge: the end on the last turn or a sandbox failure
    (score 0, `notes` added), else a request to resubmit."""
    if last or reason.startswith("sandbox failure"):
        return turns.finish(0.0, verdict="not_judged", reason=reason, **notes)
    return turns.feedback(f"Not judged: {reason}. Reply with the program in a ```python block.")


def report_notes(report: JudgeReport) -> dict[str, Any]:
    return {"verdict": report.overall, "verdicts": report.verdicts, "passed": report.passed, "tests": len(report.verdicts),
            "reason": report.first_failure() or "all tests passed", "sandbox_verdict": report.sandbox_verdict}  # fmt: skip
