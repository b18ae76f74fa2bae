"""Turn how a sandboxed program ended into a verdict and a one-line reason.

bwrap reports the program's status in its JSON status stream as an exit code, 128 + signal
number when a signal killed it (like a shell). A program that itself exits with such a code
is read as killed by that signal: the sandbox cannot tell them apart, and a judge does not need to.
Python ignores SIGXFSZ, so an output flood shows there as `OSError: File too large`. Memory exhaustion under RLIMIT_AS shows as a failed allocation, not a signal: Python prints
`MemoryError`, C code `Cannot allocate memory` or `std::bad_alloc`, so stderr's tail is read.
"""

from __future__ import annotations

import signal

from adapters.sandbox import limits as v

_MEMORY_MARKERS = ("MemoryError", "Cannot allocate memory", "std::bad_alloc", "out of memory")


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def killed_by(exit_code: int | None) -> str | None:
    if exit_code is not None and 128 < exit_code <= 128 + 64:
        return signal_name(exit_code - 128)
    return None


def classify(exit_code: int | None, timed_out: bool, stderr_tail: str, wall_timeout: float) -> tuple[str, str]:
    """(verdict, reason) for a finished run."""
    if timed_out:
        return v.TIMEOUT, f"killed at the wall-clock deadline of {wall_timeout:g}s"
    signal_ = killed_by(exit_code)
    if signal_ == "SIGXCPU" or (signal_ == "SIGKILL" and _cpu_hard_limit_likely(stderr_tail)):
        return v.CPU_LIMIT, "CPU time limit exceeded (SIGXCPU)"
    if signal_ == "SIGXFSZ" or "File too large" in stderr_tail:
        return v.OUTPUT_LIMIT, "output or file size limit exceeded (RLIMIT_FSIZE)"
    if any(marker in stderr_tail for marker in _MEMORY_MARKERS):
        return v.MEMORY_LIMIT, "memory limit exceeded (allocation failed under RLIMIT_AS)"
    if exit_code == 0:
        return v.OK, "exited with status 0"
    if signal_ is not None:
        return v.RUNTIME_ERROR, f"killed by {signal_}"
    return v.RUNTIME_ERROR, f"exited with status {exit_code}" + _last_line(stderr_tail)


def _cpu_hard_limit_likely(stderr_tail: str) -> bool:
    return "CPU time limit" in stderr_tail


def _last_line(stderr_tail: str) -> str:
    lines = [line for line in stderr_tail.strip().splitlines() if line.strip()]
    return f": {lines[-1][:200]}" if lines else ""
