"""`rlsetup train` end to end against the shared real vLLM CPU server: env GRPO on react_math.

Two steps of 2 problems x 4 episodes, a gloo sync after each, held-out reward before and after.
Checks what a user sees: exit code, the held-out line, the metrics file, and that the server
ends at the trainer's last weight version; then `rlsetup check --sync` restores and verifies the
untrained weights.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parents[2]

CONFIG = """
job: env_grpo
model: {{name_or_path: smollm2-135m-instruct, dtype: float32}}
grpo:
  num_generations: 4
  learning_rate: 1.0e-5
  max_steps: 2
  per_device_train_batch_size: 4
  output_dir: {output}
  vllm_group_port: {group_port}
training:
  rollout_server_url: {url}
  rollout_temperature: 0.7
  rollout_max_tokens: 48
  prompts_per_step: 2
  num_rollout_workers: 1
  max_concurrent_rollouts: 8
  enable_prefetch: false
  eval_rollout_batch_size: 4
environment:
  environment_type: react_math
rewards:
  - source: environment
eval:
  num_problems: 4
"""


def test_env_grpo_trains_two_steps_against_the_real_server(running_vllm, port_factory, tmp_path):
    config = tmp_path / "tiny.yaml"
    output = tmp_path / "runs"
    config.write_text(CONFIG.format(output=output, group_port=port_factory(), url=running_vllm.url))
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", "train", str(config)],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "held-out reward: before " in done.stdout and "(n=4)" in done.stdout
    metrics_path = Path(done.stdout.split("metrics: ")[-1].strip())
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines()]
    steps = [r for r in rows if "step" in r]
    assert [r["step"] for r in steps] == [1, 2]
    for row in steps:
        assert row["episodes"] == 8 and row["sync_seconds"] > 0
        assert row["staleness_max"] == 0
        # behaviour log-probs come from the server; after our syncs they are the trainer's own
        assert row["logprob_abs_diff"] < 0.05
    assert rows[-1]["summary"]["final_version"] == 2
    info = httpx.get(f"{running_vllm.url}/weight_info", timeout=10).json()
    assert str(info["weight_version"]) == "2"

    # `rlsetup check --sync` pushes the configured (untrained) model back and verifies it, which
    # also leaves the shared server as the other tests expect it.
    checked = subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", "check", str(config), "--sync"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr[-3000:]
    assert running_vllm.url in checked.stdout
