"""The command line of one sandboxed run: `prlimit ... -- bwrap ... -- program`.

The sandbox sees: the host's /usr read-only (with the usual /bin, /lib, /lib64 links, so the
system interpreter `/usr/bin/python3` works), a fresh /proc and a minimal /dev, a size-capped
tmpfs at /tmp and another at /work (the only writable places), the run's files copied into
/work from file descriptors, and nothing else: no /etc, /root, /home, no host /tmp, no trainer
files. `--unshare-all` gives it empty network, pid, ipc, uts and cgroup namespaces (loopback
only, so no host listener or outside address is reachable); `--clearenv` drops the trainer's
environment; `--new-session` detaches it from the terminal; `--die-with-parent` kills it when
bwrap dies, and the pid namespace takes every descendant (daemons included) with it.
Resource limits are set by `prlimit` on the process that execs bwrap, so the sandbox inherits them.
"""

from __future__ import annotations

import math
import posixpath
from collections.abc import Mapping, Sequence

from adapters.sandbox.limits import SandboxLimits

WORKDIR = "/work"
SANDBOX_UID = 65534  # the uid inside the user namespace ("nobody")
SANDBOX_ENV: Mapping[str, str] = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": WORKDIR,
    "LANG": "C.UTF-8",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONHASHSEED": "0",
    "PYTHONIOENCODING": "utf-8",
}
BOOKKEEPING_PROCESSES = 3  # bwrap, its pid-1 reaper, and the program itself


class BadSandboxPath(ValueError):
    """A file path for the sandbox that is absolute, escapes /work or is empty."""


def check_relative_path(path: str) -> str:
    """`path` normalised, relative to /work; raises naming it when it would leave /work."""
    if not isinstance(path, str) or not path or "\x00" in path:
        raise BadSandboxPath(f"sandbox file path must be a non-empty string, got {path!r}")
    normal = posixpath.normpath(path)
    if posixpath.isabs(path) or normal == "." or normal.startswith("../") or normal == "..":
        raise BadSandboxPath(f"sandbox file path {path!r} must be relative and stay inside {WORKDIR}")
    return normal


def prlimit_argv(prlimit: str, limits: SandboxLimits, extra_processes: int = 0) -> list[str]:
    cpu = math.ceil(limits.cpu_seconds)
    nproc = limits.max_processes + BOOKKEEPING_PROCESSES + extra_processes
    return [
        prlimit,
        f"--cpu={cpu}:{cpu + 1}",
        f"--as={limits.memory_bytes}",
        f"--fsize={limits.file_size_bytes}",
        f"--nproc={nproc}",
        f"--nofile={limits.open_files}",
        "--core=0",
        "--",
    ]


def bwrap_argv(bwrap: str, file_fds: Mapping[str, int], status_fd: int, limits: SandboxLimits) -> list[str]:
    """bwrap's own arguments; `file_fds` maps a relative path under /work to a readable fd."""
    argv = [
        bwrap,
        "--unshare-all",
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--uid", str(SANDBOX_UID),
        "--gid", str(SANDBOX_UID),
        "--hostname", "sandbox",
        "--ro-bind", "/usr", "/usr",
        "--symlink", "usr/bin", "/bin",
        "--symlink", "usr/lib", "/lib",
        "--symlink", "usr/lib64", "/lib64",
        "--symlink", "usr/sbin", "/sbin",
        "--proc", "/proc",
        "--dev", "/dev",
        "--size", str(limits.scratch_bytes), "--perms", "1777", "--tmpfs", "/tmp",
        "--size", str(limits.scratch_bytes), "--perms", "0755", "--tmpfs", WORKDIR,
    ]  # fmt: skip
    for directory in _parent_dirs(file_fds):
        argv += ["--perms", "0755", "--dir", posixpath.join(WORKDIR, directory)]
    for path, fd in sorted(file_fds.items()):
        argv += ["--perms", "0644", "--file", str(fd), posixpath.join(WORKDIR, path)]
    for key, value in SANDBOX_ENV.items():
        argv += ["--setenv", key, value]
    argv += ["--chdir", WORKDIR, "--json-status-fd", str(status_fd), "--"]
    return argv


def _parent_dirs(paths: Sequence[str] | Mapping[str, int]) -> list[str]:
    dirs: set[str] = set()
    for path in paths:
        parent = posixpath.dirname(path)
        while parent:
            dirs.add(parent)
            parent = posixpath.dirname(parent)
    return sorted(dirs, key=lambda d: (d.count("/"), d))
