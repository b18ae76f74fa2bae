"""Shared episode plumbing of the coding environments: kwargs, the sandbox, turn bookkeeping.

Each coding environment composes a `CodingTurns` (no base-class inheritance beyond
`BaseEnvironment`): it counts turns, decides whether a turn is the last one, and turns a sandbox
failure into a finished, zero-score step whose metadata says why, so a worker never crashes on
model code. `carry_reasoning` is declared by the multi-turn coding environments and read by the
rollout loop; the environments themselves always drop `<think>` blocks before reading code.
"""

from __future__ import annotations

from typing import Any

from adapters.environments.base import KwargSpec
from adapters.sandbox.limits import SandboxLimits
from adapters.sandbox.sandbox import Sandbox, SandboxError
from application.ports.environment import Message, StepResult

TIMEOUT_PER_TEST = KwargSpec(3.0, "wall-clock seconds each test may run in the sandbox")
CARRY_REASONING = KwargSpec(
    False, "keep earlier turns' <think> reasoning in the context (read by the rollout loop; code inside <think> is never run)"
)
MEMORY_MB = KwargSpec(512, "address-space limit of the sandboxed program, in MiB")
EVAL_FRACTION = KwargSpec(0.2, "share of the problem space reserved for the eval split, in (0, 1)")


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
    """Turn counter plus the conversions every coding environment needs."""

    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns
        self.turn = 0

    def next(self) -> bool:
        """Count a turn; True when it is the episode's last one."""
        self.turn += 1
        return self.turn >= self.max_turns

    def feedback(self, text: str, **metadata: Any) -> StepResult:
        return StepResult(observation=(Message(role="user", content=text),), metadata={"turns": self.turn, **metadata})

    def finish(self, score: float, **metadata: Any) -> StepResult:
        return StepResult(done=True, score=float(score), metadata={"turns": self.turn, **metadata})

    def sandbox_failure(self, exc: SandboxError) -> StepResult:
        return self.finish(0.0, verdict="sandbox_error", reason=f"sandbox failure: {exc}"[:500])
