"""Shared episode plumbing of the coding environments: kwargs, the sandbox, turn bookkeeping.

Each coding environment composes a `CodingTurns` (no base-class inheritance beyond
`BaseEnvironment`): it counts turns, decides whether a turn is the last one, and turns a sandbox
failure into a finished, zero-score step whose metadata says why, so a worker never crashes on
model code. `carry_reasoning` is declared by the multi-turn coding environments (native_coding,
code_contests, swe): `CodingTurns` records the conversation as the model should see it before its
next turn (`context()`, a `search_turns.Conversation`: assistant turns verbatim, or without their
`<think>` reasoning when false), and the rollout loop renders each turn's prompt from it when the
kwarg is false. The environments themselves always drop `<think>` blocks before reading code.
`coding_kwargs` is the kwargs table they share; `CodingTurns.open` starts a fresh episode (turn 0).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs

from adapters.environments.base import KwargSpec
from adapters.environments.search_turns import Conversation, split_reasoning
from adapters.sandbox.limits import SandboxLimits
from adapters.sandbox.sandbox import Sandbox, SandboxError
from application.ports.environment import Message, StepResult

TIMEOUT_PER_TEST = KwargSpec(3.0, "wall-clock seconds each test may run in the sandbox")
CARRY_REASONING = KwargSpec(
    False,
    "keep earlier turns' <think> reasoning in the context; false: each turn's prompt is re-rendered without it "
    "and trained as its own row (code inside <think> is never run)",
)
MEMORY_MB = KwargSpec(512, "address-space limit of the sandboxed program, in MiB")
EVAL_FRACTION = KwargSpec(0.2, "share of the problem space reserved for the eval split, in (0, 1)")


def coding_kwargs(timeout_per_test: float = TIMEOUT_PER_TEST.default, multi_turn: bool = True) -> dict[str, KwargSpec]:
    """eval_fraction, timeout_per_test, memory_mb, then carry_reasoning when `multi_turn`: in `rlsetup envs` order."""
    table = {"eval_fraction": EVAL_FRACTION, "timeout_per_test": attrs.evolve(TIMEOUT_PER_TEST, default=timeout_per_test),
             "memory_mb": MEMORY_MB}  # fmt: skip
    return {**table, "carry_reasoning": CARRY_REASONING} if multi_turn else table


def check_timeout(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 60:
        raise ValueError(f"environment {name!r}: timeout_per_test must be a number of seconds in (0, 60], got {value!r}")
    return float(value)


def check_fraction(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"environment {name!r}: eval_fraction must be a number in (0, 1), got {value!r}")
    return float(value)


def make_sandbox(name: str, options: dict[str, Any]) -> Sandbox:
    memory = options.get("memory_mb", 512)
    if isinstance(memory, bool) or not isinstance(memory, int) or not 64 <= memory <= 16384:
        raise ValueError(f"environment {name!r}: memory_mb must be an int in [64, 16384], got {memory!r}")
    timeout = check_timeout(name, options["timeout_per_test"])
    return Sandbox(SandboxLimits(cpu_seconds=int(timeout) + 1, memory_bytes=memory * 1024 * 1024, output_bytes=1024 * 1024))


class CodingTurns:
    """Turn counter, the episode's context, and the conversions every coding environment needs."""

    def __init__(self, max_turns: int, carry_reasoning: bool = True) -> None:
        self.max_turns = max_turns
        self.turn = 0
        self._conversation = Conversation(carry_reasoning)

    def open(self, messages: Iterable[Message]) -> list[Message]:
        """Start a fresh episode (turn 0) with the opening messages as its context; returns them (for `reset`)."""
        self.turn = 0
        return self._conversation.open(messages)

    def next(self, action: str) -> bool:
        """Count a turn and record it in the context; True when it is the episode's last one."""
        self.turn += 1
        text = action if isinstance(action, str) else str(action)
        self._conversation.add_turn(text, split_reasoning(text)[1])
        return self.turn >= self.max_turns

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._conversation.messages()

    def feedback(self, text: str, **metadata: Any) -> StepResult:
        return self.reply((Message(role="user", content=text),), **metadata)

    def reply(self, observation: tuple[Message, ...], **metadata: Any) -> StepResult:
        """A step that continues the episode: the observation joins the context and goes to the model."""
        self._conversation.add(observation)
        return StepResult(observation=observation, metadata={"turns": self.turn, **metadata})

    def finish(self, score: float, **metadata: Any) -> StepResult:
        return StepResult(done=True, score=float(score), metadata={"turns": self.turn, **metadata})

    def sandbox_failure(self, exc: SandboxError) -> StepResult:
        return self.finish(0.0, verdict="sandbox_error", reason=f"sandbox failure: {exc}"[:500])
