"""Value objects of the sandbox: the limits a run gets and the result it returns.

`SandboxLimits` bounds one run: CPU seconds, address space, the size of any file it writes
(stdout and stderr included: they go to files, so RLIMIT_FSIZE caps them too), the number of
processes, open files, the size of its writable tmpfs mounts, and how much of stdout/stderr is
kept in the result. `SandboxResult.verdict` is one of `VERDICTS`; `reason` says why in a line.
"""

from __future__ import annotations

import attrs

OK = "ok"
RUNTIME_ERROR = "runtime_error"
TIMEOUT = "timeout"
CPU_LIMIT = "cpu_limit"
MEMORY_LIMIT = "memory_limit"
OUTPUT_LIMIT = "output_limit"
VERDICTS = (OK, RUNTIME_ERROR, TIMEOUT, CPU_LIMIT, MEMORY_LIMIT, OUTPUT_LIMIT)

MIB = 1024 * 1024


def _positive(instance: object, attribute: attrs.Attribute, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ValueError(f"SandboxLimits.{attribute.name} must be a positive number, got {value!r}")


@attrs.frozen(kw_only=True)
class SandboxLimits:
    """Per-run limits. `cpu_seconds` is per process (RLIMIT_CPU); the wall clock is `run`'s timeout."""

    cpu_seconds: int = attrs.field(default=10, validator=_positive)
    memory_bytes: int = attrs.field(default=512 * MIB, validator=_positive)  # RLIMIT_AS, per process
    file_size_bytes: int = attrs.field(default=8 * MIB, validator=_positive)  # RLIMIT_FSIZE (stdout/stderr too)
    max_processes: int = attrs.field(default=32, validator=_positive)  # RLIMIT_NPROC, the sandbox's own uid
    open_files: int = attrs.field(default=64, validator=_positive)  # RLIMIT_NOFILE
    scratch_bytes: int = attrs.field(default=64 * MIB, validator=_positive)  # tmpfs size of /work and of /tmp
    output_bytes: int = attrs.field(default=64 * 1024, validator=_positive)  # kept of stdout and of stderr


@attrs.frozen(kw_only=True)
class SandboxResult:
    exit_code: int | None  # the program's exit status; None when it was killed at the deadline
    stdout: str  # at most `output_bytes` (decoded with errors="replace")
    stderr: str
    timed_out: bool
    killed_by: str | None  # signal name ("SIGKILL", "SIGXCPU", ...) when a signal ended the program
    wall_seconds: float
    verdict: str  # one of VERDICTS
    reason: str
    stdout_truncated: bool = False
    stderr_truncated: bool = False

    @property
    def ok(self) -> bool:
        return self.verdict == OK
