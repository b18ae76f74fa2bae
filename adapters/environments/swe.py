"""`swe`: fix a bug in a generated mini-repository with file tools; reward when hidden tests pass.

Each task is a HumanEval reference solution broken by one AST mutation (`coding_swe_repo`), laid
out as a small package with visible tests in a real git repository in a temp dir (created at
`reset`, removed at `close`). The model acts through the tools of `coding_swe_tools` (syntax in
the system prompt); `submit`, or the last turn, runs ALL of the task's tests (hidden: the visible
file holds only half) in the sandbox on `solution_pkg/core.py`: score 1 if every one passes, else 0.
Problems are verified when listed: a mutant that still passes its tests is skipped.
"""

from __future__ import annotations

import shutil
import tempfile
from typing import Any

from adapters.environments.base import BaseEnvironment, check_split
from adapters.environments.coding_episode import CodingTurns, check_fraction, coding_kwargs, make_sandbox
from adapters.environments.coding_format import strip_reasoning
from adapters.environments.coding_harness import run_function_tests, split_check
from adapters.environments.coding_swe_repo import PACKAGE, build_task
from adapters.environments.coding_swe_tools import TOOLS_HELP, init_repo, parse_call, repo_snapshot, run_tool
from adapters.environments.problems_functions import humaneval_tasks, in_eval_bucket, seeded_rng
from adapters.environments.registry import register
from adapters.sandbox.sandbox import SandboxError
from application.ports.environment import Message, Problem, StepResult

TASK_TEXT = "The tests in tests/test_core.py fail: there is a bug in {package}/core.py (function `{entry}`). Find and fix it, then submit."


@register
class Swe(BaseEnvironment):
    """Fix a one-mutation bug in a generated git repository with file tools; score 1 iff hidden tests pass."""

    name = "swe"
    requires_answer = False
    max_turns = 12
    kwargs = coding_kwargs()

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._sandbox = make_sandbox(self.name, self.options)
        self._turns = CodingTurns(self.max_turns, self.options["carry_reasoning"])
        self._root: str | None = None

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        fraction = check_fraction(cls.name, options["eval_fraction"])
        rng = seeded_rng(cls.name, split, seed)
        pool = [t for t in humaneval_tasks() if in_eval_bucket(t.task_id, fraction) == (split == "eval")]
        rng.shuffle(pool)
        sandbox = make_sandbox(cls.name, options)
        found: list[Problem] = []
        for task in pool:
            if len(found) == count:
                break
            facts = build_task(sandbox, task, seeded_rng(cls.name, task.task_id, seed))
            if facts is not None:
                prompt = TASK_TEXT.format(package=PACKAGE, entry=task.entry_point)
                found.append(Problem(prompt=prompt, metadata={**facts, "split": split}))
        if len(found) < count:
            raise ValueError(f"environment {cls.name!r}: only {len(found)} {split} tasks could be built (asked for {count})")
        return found

    def reset(self) -> list[Message]:
        self.close()
        self._root = tempfile.mkdtemp(prefix="rlsetup-swe-")
        init_repo(self._root, dict(self.problem.metadata["files"]))
        return self._turns.open([Message(role="system", content=TOOLS_HELP), Message(role="user", content=self.problem.prompt)])

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._turns.context()

    def step(self, action: str) -> StepResult:
        if self._root is None:
            raise RuntimeError("swe: step() before reset()")
        last = self._turns.next(action)
        call = parse_call(strip_reasoning(action))
        if (call is not None and call[0] == "submit") or last:
            return self._score(submitted=call is not None and call[0] == "submit")
        if call is None:
            return self._turns.feedback("tool error: no <tool>...</tool> call found; see the tool list, or <tool>submit</tool>")
        reply = run_tool(self._root, call, self._sandbox, self.options["timeout_per_test"] * 4)
        return self._turns.reply((Message(role="tool", content=reply),), tool=call[0][:40])

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)
            self._root = None

    def _score(self, submitted: bool) -> StepResult:
        code = repo_snapshot(self._root).get(f"{PACKAGE}/core.py", "")
        spec = split_check(self.problem.metadata["test"])
        try:
            report = run_function_tests(self._sandbox, code, self.problem.metadata["entry_point"], spec, self.options["timeout_per_test"])
        except SandboxError as exc:
            return self._turns.sandbox_failure(exc)
        score = 1.0 if report.passed and all(report.passed) else 0.0
        return self._turns.finish(score, submitted=submitted, passed=sum(report.passed), tests=len(report.passed),
                                  verdict=report.sandbox_verdict, reason=report.first_failure() or "all hidden tests passed")  # fmt: skip
