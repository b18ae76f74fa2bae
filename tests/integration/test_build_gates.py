"""The server image's build gates, run in the CPU server's own virtualenv (the real vLLM build)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_build_gates_pass_in_the_server_environment(vllm_python_path):
    done = subprocess.run(
        [str(vllm_python_path), str(REPO_ROOT / "docker" / "build_gates.py")],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    gates = [line for line in done.stdout.splitlines() if line.startswith(("ok", "FAIL"))]
    assert len(gates) == 4 and all(line.startswith("ok") for line in gates), gates
