"""`react_math`: procedurally generated arithmetic solved in a ReAct loop with a calculator tool.

Problems come from reasoning-gym (`create_dataset(task, size=, seed=, **task_config)`), by
default `chain_sum` with one-digit numbers. Train and eval are disjoint by construction: a
problem belongs to the eval split iff a hash of its question text falls in the eval bucket
(`eval_fraction`), so the same question can never appear in both, whatever the seeds; each
split also draws from its own seed stream.

The episode: the user message states the problem and the tool. An assistant turn that contains
a tool call `<calc>EXPRESSION</calc>` gets a `tool` message with the result (evaluated by the
AST calculator, never `eval`); a malformed call, an unknown tool (`<name>...</name>` with another
name) or a calculator error gets a `tool` message saying what went wrong. A turn without a tool
call is the final answer, scored 1 or 0 by math-verify (falling back to the last number). On the
episode's last allowed turn the text is scored as the answer even if it calls a tool.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Any

from adapters.environments.answer_check import score_answer
from adapters.environments.base import BaseEnvironment, KwargSpec, check_split
from adapters.environments.calculator import CalculatorError, evaluate, format_number
from adapters.environments.registry import register
from adapters.environments.search_turns import opening
from application.ports.environment import Message, Problem, StepResult

TOOL_NAMES = ("calc", "calculator")
_TOOL_CALL = re.compile(r"<([A-Za-z_][A-Za-z0-9_]{0,30})>(.{0,1000}?)</\1\s*>", re.DOTALL)
MAX_ACTION_CHARS = 20_000  # a tool call is looked for in this many leading characters
_MAX_ATTEMPTS_PER_PROBLEM = 50

INSTRUCTIONS = (
    "{question}\n"
    "You can use a calculator: write <calc>expression</calc>, for example <calc>3 + 4</calc>, "
    "and you will get the result. When you know the result, reply with: Answer: <number>"
)
DEFAULT_TASK_CONFIG: Mapping[str, Any] = {"min_digits": 1, "max_digits": 1, "min_terms": 2, "max_terms": 3}


@register
class ReactMath(BaseEnvironment):
    """Arithmetic from reasoning-gym with a calculator tool; score 1 for the right final answer."""

    name = "react_math"
    requires_answer = True
    max_turns = 3
    kwargs = {
        "task": KwargSpec("chain_sum", "reasoning-gym dataset name (chain_sum, basic_arithmetic, gcd, ...)"),
        "task_config": KwargSpec(
            None, "the reasoning-gym dataset's own knobs (None: one-digit 2-3 term sums for chain_sum, else its defaults)"
        ),
        "eval_fraction": KwargSpec(0.1, "share of the problem space reserved for the eval split, in (0, 1)"),
        "system_prompt": KwargSpec(None, "an optional system message (None = the chat template's default)"),
    }

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._turn = 0

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        fraction = _check_fraction(options["eval_fraction"])
        attempts = max(count, 1) * _MAX_ATTEMPTS_PER_PROBLEM
        task_config = options["task_config"]
        if task_config is None:
            task_config = DEFAULT_TASK_CONFIG if options["task"] == "chain_sum" else {}
        dataset = _dataset(options["task"], task_config, _split_seed(seed, split), attempts)
        rows: list[Problem] = []
        for index in range(attempts):
            if len(rows) == count:
                return rows
            item = dataset[index]
            if _in_eval_bucket(item["question"], fraction) == (split == "eval"):
                rows.append(_problem(item, options["task"], split, index))
        if len(rows) < count:
            raise ValueError(
                f"react_math: found only {len(rows)} {split} problems of task {options['task']!r} in {attempts} draws "
                f"(asked for {count}); widen task_config or eval_fraction"
            )
        return rows

    def reset(self) -> list[Message]:
        self._turn = 0
        return opening(self.options["system_prompt"], INSTRUCTIONS.format(question=self.problem.prompt))

    def step(self, action: str) -> StepResult:
        self._turn += 1
        text = action if isinstance(action, str) else str(action)
        call = _TOOL_CALL.search(text[:MAX_ACTION_CHARS])
        if call is None or self._turn >= self.max_turns:
            score = score_answer(text, str(self.problem.answer))
            return StepResult(done=True, score=score, metadata={"turns": self._turn, "tool_call_pending": call is not None})
        return StepResult(observation=(Message(role="tool", content=_run_tool(call.group(1), call.group(2))),))


def _run_tool(name: str, argument: str) -> str:
    if name.lower() not in TOOL_NAMES:
        return f"error: unknown tool {name[:30]!r}; the only tool is calc, used as <calc>3 + 4</calc>"
    try:
        value = evaluate(argument)
    except CalculatorError as exc:
        return f"calc error: {exc}"
    return f"{argument.strip()} = {format_number(value)}"


def _dataset(task: str, task_config: Mapping[str, Any], seed: int, size: int) -> Any:
    import reasoning_gym  # slow to import (all generators); only needed for data

    if not isinstance(task_config, Mapping):
        raise ValueError(f"react_math: task_config must be a mapping, got {task_config!r}")
    try:
        return reasoning_gym.create_dataset(task, size=size, seed=seed, **dict(task_config))
    except TypeError as exc:
        raise ValueError(f"react_math: task_config {dict(task_config)!r} does not fit task {task!r}: {exc}") from exc
    except (ValueError, AssertionError) as exc:
        raise ValueError(f"react_math: cannot create task {task!r} with {dict(task_config)!r}: {exc}") from exc


def _problem(item: Mapping[str, Any], task: str, split: str, index: int) -> Problem:
    return Problem(
        prompt=str(item["question"]),
        answer=str(item["answer"]),
        metadata={"task": task, "split": split, "index": index},
    )


def _split_seed(seed: int, split: str) -> int:
    digest = hashlib.sha256(f"react_math/{split}/{int(seed)}".encode()).digest()
    return int.from_bytes(digest[:6], "big")


def _in_eval_bucket(question: str, fraction: float) -> bool:
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def _check_fraction(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"react_math: eval_fraction must be a number in (0, 1), got {value!r}")
    return float(value)

