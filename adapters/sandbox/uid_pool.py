"""Unprivileged host uids for sandbox runs, one per concurrent run, and the sweep that ends them.

When the trainer runs as root the sandbox must not: RLIMIT_NPROC is ignored for root, and a uid
of its own lets the run's processes be found and killed afterwards. Each run leases a uid from
a fixed range (`UID_BASE` + 0..`UID_COUNT`-1, ids no account uses) by taking a non-blocking
`flock` on a per-uid lock file, so concurrent runs in any process on the host never share a uid
(and never share a process-count budget). The lease is held for the run; `kill_uid` sweeps the
host's /proc for anything still running under the uid before the lease is released.
When the trainer is not root there is nothing to drop to: runs use the trainer's own uid and
rely on the pid namespace alone to end their processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import signal
import time
from collections.abc import Iterator

UID_BASE = 210_000_000  # far above any account's uid
UID_COUNT = 4096
LOCK_DIR = "/tmp/rlsetup-sandbox-uids"


class NoFreeSandboxUid(RuntimeError):
    """Every uid of the pool is leased (more than UID_COUNT concurrent sandbox runs)."""


@contextlib.contextmanager
def lease_uid() -> Iterator[int | None]:
    """Yields a free unprivileged uid (root) or None (not root: run as ourselves)."""
    if os.geteuid() != 0:
        yield None
        return
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    start = secrets.randbelow(UID_COUNT)
    for offset in range(UID_COUNT):
        uid = UID_BASE + (start + offset) % UID_COUNT
        fd = os.open(os.path.join(LOCK_DIR, str(uid)), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            kill_uid(uid)  # leftovers of a crashed lease holder
            yield uid
        finally:
            kill_uid(uid)
            os.close(fd)  # releases the flock
        return
    raise NoFreeSandboxUid(f"all {UID_COUNT} sandbox uids from {UID_BASE} are in use (lock dir {LOCK_DIR})")


def pids_of_uid(uid: int) -> list[int]:
    """Live host pids whose real uid is `uid` (zombies hold nothing and are skipped: bwrap's
    pid-1 reaper can outlive bwrap as a zombie until the host's init reaps it)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", encoding="ascii", errors="replace") as status:
                fields = dict(line.split(":", 1) for line in status if ":" in line)
            if int(fields["Uid"].split()[0]) == uid and not fields["State"].strip().startswith(("Z", "X")):
                pids.append(int(entry))
        except (FileNotFoundError, ProcessLookupError, PermissionError, ValueError, IndexError, KeyError):
            continue
    return pids


def kill_uid(uid: int, timeout: float = 5.0) -> int:
    """SIGKILL every process of `uid` until none is left (or `timeout`); returns how many were hit."""
    deadline = time.monotonic() + timeout
    hit = 0
    while time.monotonic() < deadline:
        pids = pids_of_uid(uid)
        if not pids:
            return hit
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                hit += 1
        time.sleep(0.01)
    raise RuntimeError(f"sandbox uid {uid}: processes {pids_of_uid(uid)} survived SIGKILL for {timeout}s")
