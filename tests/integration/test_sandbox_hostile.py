"""The hostile corpus: model-written code that attacks the host must be contained by `Sandbox`.

Each case runs a real bubblewrap sandbox and checks three things: a verdict with a reason came
back, the host is unchanged (files, processes, listeners), and the trainer (this process) is alive.
Skipped, not failed, where bubblewrap is not installed; `.ci/run` installs it.
"""

from __future__ import annotations

import json
import os
import socket
import time
import uuid
from pathlib import Path

import pytest

from adapters.sandbox.limits import SandboxLimits
from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

REPO_ROOT = Path(__file__).resolve().parents[2]
PY = "/usr/bin/python3"
LIMITS = SandboxLimits(cpu_seconds=5, memory_bytes=256 * 1024 * 1024, max_processes=16)


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    try:
        return Sandbox(LIMITS)
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox here: {exc}")


def run_py(sandbox: Sandbox, code: str, *args: str, timeout: float = 5.0, stdin: str = ""):
    return sandbox.run({"main.py": code}, [PY, "main.py", *args], stdin=stdin, timeout=timeout)


def host_pids_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                continue
    return found


def assert_trainer_alive() -> None:
    os.kill(os.getpid(), 0)  # raises if we were gone; we are running, but keep the check explicit
    assert os.getppid() != 1 or os.getpid() == 1


def test_infinite_loop_is_killed_at_the_deadline(sandbox: Sandbox) -> None:
    result = run_py(sandbox, "while True:\n    pass\n", timeout=1.0)
    assert result.timed_out and result.verdict == "timeout" and result.killed_by == "SIGKILL"
    assert 1.0 <= result.wall_seconds < 4.0
    assert "deadline" in result.reason


def test_cpu_limit_ends_a_busy_program_before_the_wall_clock(sandbox: Sandbox) -> None:
    tight = Sandbox(SandboxLimits(cpu_seconds=1))
    result = tight.run({}, [PY, "-c", "while True: pass"], timeout=20.0)
    assert result.verdict == "cpu_limit" and result.killed_by in ("SIGXCPU", "SIGKILL")
    assert result.wall_seconds < 10.0


def test_sleeping_past_the_deadline(sandbox: Sandbox) -> None:
    result = run_py(sandbox, "import time\ntime.sleep(60)\n", timeout=1.0)
    assert result.verdict == "timeout" and result.wall_seconds < 4.0


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "-c", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"],
        ["/bin/sh", "-c", "bomb() { bomb | bomb & }; bomb"],
    ],
    ids=["python", "shell"],
)
def test_fork_bomb_is_contained(sandbox: Sandbox, argv: list[str]) -> None:
    marker = f"bomb-{uuid.uuid4().hex}"
    before = len([p for p in os.listdir("/proc") if p.isdigit()])
    result = sandbox.run({marker: ""}, [*argv, marker] if argv[0] == PY else argv, timeout=2.0)
    assert result.verdict in ("timeout", "runtime_error", "ok"), result
    assert result.wall_seconds < 8.0
    time.sleep(0.2)
    after = len([p for p in os.listdir("/proc") if p.isdigit()])
    assert after < before + 10, f"processes left on the host: {before} -> {after}"
    assert host_pids_with(marker) == []
    assert_trainer_alive()


@pytest.mark.parametrize(
    "code",
    ["x = bytearray(2 ** 31)\n", "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))\n"],
    ids=["one-2GB", "growing"],
)
def test_memory_bomb_gives_memory_limit(sandbox: Sandbox, code: str) -> None:
    result = run_py(sandbox, code)
    assert result.verdict == "memory_limit", result
    assert "memory" in result.reason


@pytest.mark.parametrize("argv", [[PY, "-c", "while True: print('x' * 100000)"], ["/bin/sh", "-c", "yes flood"]], ids=["python", "yes"])
def test_huge_output_is_capped(sandbox: Sandbox, argv: list[str]) -> None:
    result = sandbox.run({}, argv, timeout=5.0)
    assert result.verdict == "output_limit", result
    assert len(result.stdout) <= LIMITS.output_bytes and result.stdout_truncated


WRITE_TARGETS = ["/usr/h10-canary", "/etc/h10-canary", "/root/h10-canary", "/bin/h10-canary"]


def test_writes_outside_the_scratch_dir_never_reach_the_host(sandbox: Sandbox, tmp_path: Path) -> None:
    name = f"h10-canary-{uuid.uuid4().hex}"
    targets = [*WRITE_TARGETS, str(REPO_ROOT / name), str(tmp_path / name), f"/tmp/{name}", f"/work/{name}"]
    code = (
        "import json, sys\nout = {}\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n        open(path, 'w').write('pwned')\n        out[path] = 'written'\n"
        "    except OSError as exc:\n        out[path] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    listing = sorted(os.listdir(REPO_ROOT))
    result = run_py(sandbox, code, *targets)
    assert result.ok, result
    outcome = json.loads(result.stdout)
    assert all(outcome[t] != "written" for t in targets[:6]), outcome  # the host paths are not even writable inside
    assert outcome[f"/tmp/{name}"] == "written" and outcome[f"/work/{name}"] == "written"  # the sandbox's own tmpfs
    for target in [*targets[:6], f"/tmp/{name}", f"/work/{name}"]:
        assert not os.path.exists(target), f"{target} appeared on the host"
    assert sorted(os.listdir(REPO_ROOT)) == listing


def test_trainer_files_and_environment_are_invisible(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    secret = f"s3cret-{uuid.uuid4().hex}"
    monkeypatch.setenv("RLSETUP_H10_SECRET", secret)
    paths = [str(REPO_ROOT / "pyproject.toml"), "/etc/shadow", "/etc/passwd", "/root", str(REPO_ROOT), "/proc/1/environ"]
    code = (
        "import json, os, sys\nout = {'env': dict(os.environ), 'pids': sorted(int(p) for p in os.listdir('/proc') if p.isdigit())}\n"
        "for path in sys.argv[1:]:\n"
        "    try:\n"
        "        out[path] = os.listdir(path) if os.path.isdir(path) else open(path, 'rb').read(200).decode('latin-1')\n"
        "    except OSError as exc:\n        out[path] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    result = run_py(sandbox, code, *paths)
    assert result.ok, result
    assert secret not in result.stdout and "RLSETUP_H10_SECRET" not in result.stdout
    outcome = json.loads(result.stdout)
    for path in paths[:5]:
        assert outcome[path] in ("FileNotFoundError", "PermissionError"), (path, outcome[path])
    assert max(outcome["pids"]) < 10, "host processes are visible"
    assert set(outcome["env"]) <= {"PWD", "PATH", "HOME", "LANG", "PYTHONDONTWRITEBYTECODE", "PYTHONHASHSEED", "PYTHONIOENCODING"}


def test_no_network_to_the_host_or_outside(sandbox: Sandbox) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.2)
    port = listener.getsockname()[1]
    code = (
        "import json, socket, sys\nout = {}\n"
        "for host, port in [('127.0.0.1', int(sys.argv[1])), ('8.8.8.8', 53), ('1.1.1.1', 443)]:\n"
        "    s = socket.socket(); s.settimeout(1.0)\n"
        "    out[host] = s.connect_ex((host, port))\n"
        "try:\n    socket.getaddrinfo('example.com', 80); out['dns'] = 'resolved'\n"
        "except OSError as exc:\n    out['dns'] = type(exc).__name__\n"
        "print(json.dumps(out))\n"
    )
    try:
        result = run_py(sandbox, code, str(port))
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    assert result.ok, result
    outcome = json.loads(result.stdout)
    assert all(outcome[h] != 0 for h in ("127.0.0.1", "8.8.8.8", "1.1.1.1")), outcome
    assert outcome["dns"] != "resolved"


@pytest.mark.parametrize(
    "argv",
    [
        [PY, "-c", "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\nos.kill(1, signal.SIGKILL)\nprint('still here')"],
        ["/bin/sh", "-c", "kill -9 -1; echo survived"],
    ],
    ids=["kill-parent", "kill-all"],
)
def test_killing_the_parent_or_everything_leaves_the_trainer_alive(sandbox: Sandbox, argv: list[str]) -> None:
    result = sandbox.run({}, argv, timeout=3.0)
    assert result.verdict in ("ok", "runtime_error", "timeout"), result
    assert result.reason
    assert_trainer_alive()
    assert Sandbox(LIMITS).run({}, ["/usr/bin/true"], timeout=5.0).ok  # the sandbox machinery still works


@pytest.mark.parametrize("main_loops", [False, True], ids=["main-exits", "main-times-out"])
def test_daemons_do_not_outlive_the_run(sandbox: Sandbox, main_loops: bool) -> None:
    marker = f"daemon-{uuid.uuid4().hex}"
    code = (
        "import os, sys, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
        "        time.sleep(1.5)\n"
        "        for path in ('/work/late', '/tmp/' + sys.argv[1]):\n"
        "            open(path, 'w').write('alive')\n"
        "        time.sleep(30)\n"
        "    os._exit(0)\n"
        f"{'while True: pass' if main_loops else 'print(1)'}\n"
    )
    result = run_py(sandbox, code, marker, timeout=1.0)
    assert result.verdict == ("timeout" if main_loops else "ok"), result
    assert host_pids_with(marker) == [], "a daemon outlived the run"
    time.sleep(2.0)
    assert host_pids_with(marker) == []
    assert not os.path.exists(f"/tmp/{marker}") and not os.path.exists("/work/late")


def test_missing_bubblewrap_is_a_clear_error() -> None:
    with pytest.raises(SandboxUnavailable, match="bubblewrap .*not found.*unsandboxed"):
        Sandbox(bwrap="no-such-bwrap-h10")
