"""`code_contests`: stdin/stdout problems generated in the project, judged like a contest.

A submission is accepted only if every hidden test is (score 1, else 0), as in CodeContests;
the episode allows retries: a rejected submission before the last turn gets the judge's verdict
on the first failing test (accepted / wrong_answer / time_limit_exceeded / runtime_error /
memory_limit_exceeded / output_limit_exceeded) and may be resubmitted. Problems: 12 templates
with seeded parameters and tests (`problems_stdio`), since no code-contest data ships offline.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import BaseEnvironment, check_split
from adapters.environments.coding_episode import CodingTurns, check_fraction, make_sandbox
from adapters.environments.coding_stdio_episode import (
    as_problem, judge_submission, report_notes, stdio_kwargs, tests_and_examples, unjudged_step,
)  # fmt: skip
from adapters.environments.problems_stdio import generate
from adapters.environments.registry import register
from application.ports.environment import Message, Problem, StepResult


@register
class CodeContests(BaseEnvironment):
    """Generated stdin/stdout contest problems; score 1 iff every hidden test is accepted (retries allowed)."""

    name = "code_contests"
    requires_answer = False
    max_turns = 2
    kwargs = stdio_kwargs(num_tests=8, multi_turn=True)

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._sandbox = make_sandbox(self.name, self.options)
        self._turns = CodingTurns(self.max_turns, self.options["carry_reasoning"])

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        tests, examples = tests_and_examples(cls.name, options)
        found = generate(cls.name, split, count, seed, check_fraction(cls.name, options["eval_fraction"]), tests, examples)
        return [as_problem(p, split) for p in found]

    def reset(self) -> list[Message]:
        return self._turns.open([Message(role="user", content=self.problem.prompt)])

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._turns.context()

    def step(self, action: str) -> StepResult:
        last = self._turns.next(action)
        report = judge_submission(self._sandbox, action, self.problem, self.options["timeout_per_test"])
        if isinstance(report, str):
            return unjudged_step(self._turns, last, report)
        notes = report_notes(report)
        accepted = report.passed == len(report.verdicts)
        if accepted or last:
            return self._turns.finish(1.0 if accepted else 0.0, **notes)
        return self._turns.feedback(f"Rejected: {report.first_failure()}. Fix the program and submit it again.", **notes)
