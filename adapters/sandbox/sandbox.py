"""`Sandbox.run`: execute untrusted code under bubblewrap, bounded in time, memory and processes.

One run = one fresh sandbox: the given files are copied into a size-capped tmpfs at /work,
`argv` runs there with `stdin`, and the result carries the exit status, capped stdout/stderr
and a verdict (`limits.VERDICTS`) with a reason. Nothing written inside survives the run.

Containment, layer by layer (see `bwrap_argv` for the namespace side):
- the run's host processes drop to a leased unprivileged uid (`uid_pool`) when the trainer is
  root, so RLIMIT_NPROC holds and stragglers can be found by uid;
- `prlimit` sets CPU, address space, file size, process and open-file limits before bwrap starts;
- stdout/stderr go to files capped by RLIMIT_FSIZE (a flood ends with SIGXFSZ), not to pipes;
- at the wall-clock deadline the whole process group is SIGKILLed; bwrap's death kills the
  sandbox's pid namespace (daemons included), and a final sweep kills anything left under the uid.
If bwrap or prlimit is missing, or namespaces cannot be created, `SandboxUnavailable` is raised:
there is no unsandboxed fallback.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from adapters.sandbox import limits as v
from adapters.sandbox.bwrap_argv import bwrap_argv, check_relative_path, prlimit_argv
from adapters.sandbox.classify import classify, killed_by
from adapters.sandbox.limits import SandboxLimits, SandboxResult
from adapters.sandbox.uid_pool import lease_uid

KILL_GRACE_SECONDS = 5.0  # how long a SIGKILLed bwrap may take to be reaped
MAX_FILES = 256
_availability: dict[tuple[str, str], str] = {}  # (bwrap, prlimit) -> "" (works) or the reason it does not
_availability_lock = threading.Lock()


class SandboxUnavailable(RuntimeError):
    """bubblewrap/prlimit is missing or cannot create namespaces; code is never run unsandboxed."""


class SandboxError(RuntimeError):
    """bwrap failed to set one run up (not the program's fault)."""


class Sandbox:
    """Runs programs under bubblewrap with `limits`; safe to share between threads."""

    def __init__(self, limits: SandboxLimits | None = None, *, bwrap: str = "bwrap", prlimit: str = "prlimit") -> None:
        self.limits = limits or SandboxLimits()
        self._bwrap = _which(bwrap, "bubblewrap (bwrap)", "apt-get install -y bubblewrap")
        self._prlimit = _which(prlimit, "prlimit", "apt-get install -y util-linux")
        self._check_namespaces()

    def run(
        self,
        files: Mapping[str, str | bytes],
        argv: Sequence[str],
        stdin: str | bytes = b"",
        timeout: float = 10.0,
    ) -> SandboxResult:
        """Run `argv` in /work holding `files`; killed with every descendant after `timeout` seconds."""
        _check_run_args(files, argv, timeout)
        with tempfile.TemporaryDirectory(prefix="rlsetup-sandbox-") as host_dir, lease_uid() as uid:
            return self._run_in(host_dir, uid, files, list(argv), _as_bytes(stdin), float(timeout))

    def _run_in(
        self, host_dir: str, uid: int | None, files: Mapping[str, str | bytes], argv: list[str], stdin: bytes, timeout: float
    ) -> SandboxResult:
        fds: list[int] = []
        try:
            file_fds = {check_relative_path(path): _staged_fd(host_dir, i, content, fds) for i, (path, content) in enumerate(files.items())}
            stdin_fd = _staged_fd(host_dir, "stdin", stdin, fds)
            out_fd = _output_fd(host_dir, "stdout", fds)
            err_fd = _output_fd(host_dir, "stderr", fds)
            status_r, status_w = os.pipe()
            fds += [status_r, status_w]
            command = prlimit_argv(self._prlimit, self.limits) + bwrap_argv(self._bwrap, file_fds, status_w, self.limits) + argv
            started = time.monotonic()
            proc = subprocess.Popen(
                command, stdin=stdin_fd, stdout=out_fd, stderr=err_fd, pass_fds=(*file_fds.values(), status_w),
                cwd="/", env={"PATH": "/usr/bin:/bin"}, start_new_session=True, close_fds=True,
                **_drop_privileges(uid),
            )  # fmt: skip
            os.close(status_w)
            fds.remove(status_w)
            timed_out = _wait_or_kill(proc, timeout)
            wall = time.monotonic() - started
            status = _read_status(status_r)
        finally:
            for fd in fds:
                os.close(fd)
        return self._result(host_dir, proc.returncode, status, timed_out, wall, timeout)

    def _result(self, host_dir: str, returncode: int, status: dict, timed_out: bool, wall: float, timeout: float) -> SandboxResult:
        stdout, out_cut = _read_capped(os.path.join(host_dir, "stdout"), self.limits.output_bytes)
        stderr, err_cut = _read_capped(os.path.join(host_dir, "stderr"), self.limits.output_bytes)
        if "child-pid" not in status and not timed_out:
            raise SandboxError(f"bwrap could not set the sandbox up (exit status {returncode}): {stderr.strip()[:500]}")
        exit_code = None if timed_out else status.get("exit-code", returncode if returncode >= 0 else 128 - returncode)
        verdict, reason = classify(exit_code, timed_out, stderr[-2000:], timeout)
        return SandboxResult(
            exit_code=exit_code, stdout=stdout, stderr=stderr, timed_out=timed_out,
            killed_by="SIGKILL" if timed_out else killed_by(exit_code), wall_seconds=wall,
            verdict=verdict, reason=reason, stdout_truncated=out_cut, stderr_truncated=err_cut,
        )  # fmt: skip

    def _check_namespaces(self) -> None:
        key = (self._bwrap, self._prlimit)
        with _availability_lock:
            if key not in _availability:
                _availability[key] = self._probe()
        if _availability[key]:
            raise SandboxUnavailable(_availability[key])

    def _probe(self) -> str:
        try:
            result = self.run({}, ["/usr/bin/true"], timeout=30.0)
        except SandboxError as exc:
            return f"bubblewrap at {self._bwrap} cannot create its namespaces here ({exc}); refusing to run code unsandboxed"
        if not result.ok:
            return f"bubblewrap at {self._bwrap} cannot run /usr/bin/true: {result.reason}; {result.stderr.strip()[:300]}"
        return ""


def _which(program: str, what: str, install: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise SandboxUnavailable(f"{what} not found (looked for {program!r} on PATH); install it ({install}); refusing to run code unsandboxed")
    return path


def _check_run_args(files: Mapping[str, str | bytes], argv: Sequence[str], timeout: float) -> None:
    if isinstance(argv, str) or not argv or not all(isinstance(a, str) and "\x00" not in a for a in argv):
        raise ValueError(f"sandbox argv must be a non-empty list of strings, got {argv!r}")
    if len(files) > MAX_FILES:
        raise ValueError(f"sandbox run with {len(files)} files; at most {MAX_FILES}")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= 3600:
        raise ValueError(f"sandbox timeout must be a number of seconds in (0, 3600], got {timeout!r}")


def _as_bytes(content: str | bytes) -> bytes:
    return content.encode("utf-8") if isinstance(content, str) else bytes(content)


def _staged_fd(host_dir: str, name: object, content: str | bytes, fds: list[int]) -> int:
    path = os.path.join(host_dir, f"in-{name}")
    with open(path, "wb") as handle:
        handle.write(_as_bytes(content))
    fd = os.open(path, os.O_RDONLY)
    fds.append(fd)
    return fd


def _output_fd(host_dir: str, name: str, fds: list[int]) -> int:
    fd = os.open(os.path.join(host_dir, name), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    fds.append(fd)
    return fd


def _drop_privileges(uid: int | None) -> dict:
    return {} if uid is None else {"user": uid, "group": uid, "extra_groups": []}


def _wait_or_kill(proc: subprocess.Popen, timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
        return False
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait(timeout=KILL_GRACE_SECONDS)
    return True


def _read_status(fd: int) -> dict:
    os.set_blocking(fd, False)
    chunks = []
    try:
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    status: dict = {}
    decoder = json.JSONDecoder()
    text, index = b"".join(chunks).decode("utf-8", "replace"), 0
    while index < len(text):
        while index < len(text) and text[index].isspace():
            index += 1
        if index >= len(text):
            break
        try:
            document, index = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            break
        if isinstance(document, dict):
            status.update(document)
    return status


def _read_capped(path: str, cap: int) -> tuple[str, bool]:
    with open(path, "rb") as handle:
        data = handle.read(cap + 1)
    return data[:cap].decode("utf-8", "replace"), len(data) > cap
