"""SIGTERM unwinds `rlsetup` normally, so servers it started (context managers) are stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent(
    """
    import contextlib, sys, time, types
    marker = sys.argv[1]
    fake = types.ModuleType("infrastructure.bootstrap")

    @contextlib.contextmanager
    def server():
        try:
            yield
        finally:
            open(marker, "w").write("stopped")

    def serve(config):
        with server():
            open(marker + ".ready", "w").write("up")
            time.sleep(60)
        return 0

    fake.serve = serve
    sys.modules["infrastructure.bootstrap"] = fake
    from entrypoints.cli import main
    sys.exit(main(["serve", "examples/env_grpo_cpu.yaml"]))
    """
)


def test_sigterm_stops_what_the_command_started(tmp_path):
    marker = tmp_path / "server"
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, str(marker)], cwd=REPO_ROOT, env=env)
    try:
        deadline = time.monotonic() + 60
        while not Path(f"{marker}.ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, "the fake server never came up"
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    finally:
        proc.kill()
    assert marker.read_text() == "stopped"
