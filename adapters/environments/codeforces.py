"""`codeforces`: rated stdin/stdout problems generated in the project; score = share of tests passed.

Like `code_contests` (same generated family, `problems_stdio`), but each problem carries a
Codeforces-style rating (in `Problem.metadata["rating"]` and the statement), problems can be
restricted to a rating range, and the single submission is rewarded by pass@tests: the fraction
of hidden tests accepted, with every test's verdict in the step metadata.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import BaseEnvironment, KwargSpec, check_split
from adapters.environments.coding_episode import CodingTurns, check_fraction, make_sandbox
from adapters.environments.coding_stdio_episode import (
    as_problem, check_count, judge_submission, report_notes, stdio_kwargs, tests_and_examples, unjudged_step,
)  # fmt: skip
from adapters.environments.problems_stdio import generate
from adapters.environments.registry import register
from application.ports.environment import Message, Problem, StepResult


@register
class Codeforces(BaseEnvironment):
    """Rated generated stdin/stdout problems; score = fraction of hidden tests accepted."""

    name = "codeforces"
    requires_answer = False
    max_turns = 1
    kwargs = {
        "min_rating": KwargSpec(800, "lowest problem rating to draw"),
        "max_rating": KwargSpec(3500, "highest problem rating to draw"),
        **stdio_kwargs(num_tests=10, multi_turn=False),
    }

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._sandbox = make_sandbox(self.name, self.options)
        self._turns = CodingTurns(self.max_turns)

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        tests, examples = tests_and_examples(cls.name, options)
        ratings = (check_count(cls.name, "min_rating", options["min_rating"], 0, 5000),
                   check_count(cls.name, "max_rating", options["max_rating"], 0, 5000))  # fmt: skip
        fraction = check_fraction(cls.name, options["eval_fraction"])
        found = generate(cls.name, split, count, seed, fraction, tests, examples, ratings)
        return [_rated(as_problem(p, split)) for p in found]

    def reset(self) -> list[Message]:
        return self._turns.open([Message(role="user", content=self.problem.prompt)])

    def step(self, action: str) -> StepResult:
        last = self._turns.next(action)
        report = judge_submission(self._sandbox, action, self.problem, self.options["timeout_per_test"])
        if isinstance(report, str):
            return unjudged_step(self._turns, last, report, rating=self.problem.metadata["rating"])
        return self._turns.finish(report.fraction, rating=self.problem.metadata["rating"], **report_notes(report))


def _rated(problem: Problem) -> Problem:
    rating = problem.metadata["rating"]
    return Problem(prompt=f"[Rating {rating}]\n{problem.prompt}", metadata=problem.metadata)
