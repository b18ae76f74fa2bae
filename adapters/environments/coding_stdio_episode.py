"""What `code_contests` and `codeforces` share: problems as `Problem`s and one judged submission.

The model answers with a complete Python program in a ```python block that reads stdin and
writes stdout. `judge_submission` runs it on every hidden test (`coding_judge`) and returns the
report, or a reason why nothing could be judged (no code, a syntax error, a sandbox failure).
"""

from __future__ import annotations

from typing import Any

from adapters.environments.coding_format import extract_code, syntax_error
from adapters.environments.coding_judge import JudgeReport, judge
from adapters.environments.problems_stdio import StdioProblem, problem_metadata
from adapters.sandbox.sandbox import Sandbox, SandboxError
from application.ports.environment import Problem

INSTRUCTIONS = (
    "Solve this programming problem in Python 3. Your program reads from standard input and writes to "
    "standard output. Reply with the complete program in a single ```python code block.\n\n{statement}"
)


def as_problem(problem: StdioProblem, split: str) -> Problem:
    return Problem(prompt=INSTRUCTIONS.format(statement=problem.statement), metadata=problem_metadata(problem, split))


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


def report_notes(report: JudgeReport) -> dict[str, Any]:
    return {"verdict": report.overall, "verdicts": report.verdicts, "passed": report.passed, "tests": len(report.verdicts),
            "reason": report.first_failure() or "all tests passed", "sandbox_verdict": report.sandbox_verdict}  # fmt: skip
