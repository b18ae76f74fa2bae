"""`rlsetup train` on each environment's example config, shrunk to one fast step, against the real server.

For the seven environments of examples/envs/ (react_math's own run is test_train_e2e.py): load the
example, point it at the shared vLLM CPU server, shrink it to one step of 1 problem x 2 episodes
with evaluation off, and run the real CLI in a subprocess. Checks the exit code and that
metrics.jsonl holds one step row of 2 episodes with a finite loss. The module finaliser runs
`rlsetup check --sync` once, which pushes the untrained weights back and verifies them, so the
other tests find the server as they expect it.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = REPO_ROOT / "examples" / "envs"
ENVIRONMENTS = ["native_coding", "swe", "mcp", "qa_search", "code_contests", "codeforces", "exam_qa"]
# The fixture's own server runs with max_model_len 1024: no episode may grow past it.
SERVER_CONTEXT_TOKENS = 1024
TRAIN_TIMEOUT_S = 420
# Seconds one generation request may take: the shared 2-core machine can be slow under load.
GENERATION_TIMEOUT_S = 180.0


def fast_config(name: str, url: str, group_port: int, output_dir: Path, path: Path) -> Path:
    """The example for `name` with overrides for one quick step against `url`, written to `path`."""
    data: dict[str, Any] = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
    grpo, training = data.setdefault("grpo", {}), data.setdefault("training", {})
    grpo.update(max_steps=1, num_generations=2, vllm_group_port=group_port, output_dir=str(output_dir))
    training.update(rollout_server_url=url, prompts_per_step=1, rollout_connection_timeout=GENERATION_TIMEOUT_S)
    training["max_train_row_tokens"] = min(training.get("max_train_row_tokens", 2048), SERVER_CONTEXT_TOKENS)
    data.setdefault("eval", {})["num_problems"] = 0
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", *args],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )


@pytest.fixture(scope="module")
def restored_server(running_vllm, port_factory, tmp_path_factory):
    """The shared server; afterwards `rlsetup check --sync` puts the untrained weights back."""
    yield running_vllm
    folder = tmp_path_factory.mktemp("restore")
    config = fast_config("exam_qa", running_vllm.url, port_factory(), folder / "runs", folder / "restore.yaml")
    checked = cli("check", str(config), "--sync", timeout=600)
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    assert running_vllm.url in checked.stdout


@pytest.mark.parametrize("name", ENVIRONMENTS)
def test_example_trains_one_step(name, restored_server, port_factory, tmp_path):
    config = fast_config(name, restored_server.url, port_factory(), tmp_path / "runs", tmp_path / f"{name}.yaml")
    done = cli("train", str(config), timeout=TRAIN_TIMEOUT_S)
    assert done.returncode == 0, f"{name}: exit {done.returncode}\n{done.stderr[-3000:]}"
    metrics_path = Path(done.stdout.split("metrics: ")[-1].strip())
    assert metrics_path.is_file() and metrics_path.is_relative_to(tmp_path), done.stdout[-2000:]
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    steps = [row for row in rows if "step" in row]
    assert [row["step"] for row in steps] == [1], rows
    assert steps[0]["episodes"] == 2
    assert math.isfinite(steps[0]["loss"]), steps[0]
