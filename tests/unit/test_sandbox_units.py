"""Sandbox pieces that need no namespaces: paths, argv, verdicts, run-argument checks."""

from __future__ import annotations

import pytest

from adapters.sandbox.bwrap_argv import BadSandboxPath, bwrap_argv, check_relative_path, prlimit_argv
from adapters.sandbox.classify import classify, killed_by
from adapters.sandbox.limits import SandboxLimits
from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable


@pytest.mark.parametrize("path", ["/etc/passwd", "../x", "a/../../x", "", ".", "a\x00b"])
def test_paths_that_leave_work_are_refused(path: str) -> None:
    with pytest.raises(BadSandboxPath):
        check_relative_path(path)


def test_relative_paths_are_normalised() -> None:
    assert check_relative_path("a/./b/../c.py") == "a/c.py"


def test_argv_isolates_and_limits() -> None:
    limits = SandboxLimits(cpu_seconds=3, memory_bytes=100, file_size_bytes=200, max_processes=5)
    argv = prlimit_argv("prlimit", limits) + bwrap_argv("bwrap", {"pkg/m.py": 7}, 9, limits)
    joined = " ".join(argv)
    for flag in ("--unshare-all", "--die-with-parent", "--new-session", "--clearenv", "--cpu=3:4", "--as=100", "--fsize=200", "--nproc=8"):
        assert flag in joined
    assert "--dir /work/pkg" in joined and "--file 7 /work/pkg/m.py" in joined and "--json-status-fd 9" in joined
    assert "--bind" not in argv  # nothing of the host is writable
    assert not any(a in argv for a in ("/etc", "/root", "/home"))


@pytest.mark.parametrize(
    ("code", "timed_out", "stderr", "verdict"),
    [
        (0, False, "", "ok"),
        (1, False, "Traceback\nMemoryError\n", "memory_limit"),
        (152, False, "", "cpu_limit"),
        (153, False, "", "output_limit"),
        (1, False, "OSError: [Errno 27] File too large", "output_limit"),
        (None, True, "", "timeout"),
        (137, False, "", "runtime_error"),
        (2, False, "ValueError: boom", "runtime_error"),
    ],
)
def test_classify(code, timed_out, stderr, verdict) -> None:
    got, reason = classify(code, timed_out, stderr, 1.0)
    assert got == verdict and reason


def test_killed_by_reads_shell_style_status() -> None:
    assert killed_by(137) == "SIGKILL" and killed_by(1) is None and killed_by(None) is None


def test_limits_are_validated_by_name() -> None:
    with pytest.raises(ValueError, match="cpu_seconds"):
        SandboxLimits(cpu_seconds=0)


def test_missing_prlimit_is_a_clear_error() -> None:
    with pytest.raises(SandboxUnavailable, match="prlimit not found"):
        Sandbox(prlimit="no-such-prlimit-h10")


def test_bad_run_arguments_are_refused_before_anything_runs() -> None:
    try:
        sandbox = Sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(str(exc))
    with pytest.raises(ValueError, match="argv"):
        sandbox.run({}, "python3 -c 1")
    with pytest.raises(ValueError, match="timeout"):
        sandbox.run({}, ["/usr/bin/true"], timeout=0)
    with pytest.raises(BadSandboxPath):
        sandbox.run({"../escape.py": ""}, ["/usr/bin/true"])
