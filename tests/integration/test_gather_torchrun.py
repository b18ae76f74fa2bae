"""`gather_and_send_weights` under torchrun with gloo on CPU, against the single-process oracle.

Each world size runs once (a module-scoped fixture) over several layouts; the sender's record is
compared BIT-IDENTICAL (names, order, dtypes, values) with `gather_worker.reference`, the plain
unsharded model (per-expert expansion for MoE; peft's `merge_and_unload()` on a copy for LoRA).
Every rank must report its local weights untouched. Failure cases: a misdeclared shard on rank 1
only, and a `send` that raises on the sender; every rank must raise, and the cases that follow
in the same process group must still pass (no rank left stuck, the group still usable).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import gather_worker

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
RUNS = {
    1: ["plain", "fsdp2", "plain_lora", "fsdp2_lora"],
    2: ["fsdp2", "tp", "ep", "fsdp2_lora", "tp_lora", "fail_rank", "fail_send", "plain"],
    4: ["fsdp2", "hsdp_tp"],
}
TIMEOUT_S = 240


def _torchrun(world: int, out_dir: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{Path(__file__).parent}", OMP_NUM_THREADS="1")
    command = [
        str(Path(sys.executable).parent / "torchrun"), "--standalone", f"--nproc_per_node={world}",
        str(Path(__file__).parent / "gather_worker.py"), str(out_dir), *RUNS[world],
    ]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module", params=sorted(RUNS))
def run(request, tmp_path_factory) -> tuple[int, Path]:
    world = request.param
    out_dir = tmp_path_factory.mktemp(f"gather_w{world}")
    result = _torchrun(world, out_dir)
    assert result.returncode == 0, f"torchrun world={world} failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return world, out_dir


def _statuses(out_dir: Path, case: str, world: int) -> list[dict]:
    return [json.loads((out_dir / f"{case}.rank{r}.json").read_text()) for r in range(world)]


def _assert_matches_reference(out_dir: Path, case: str) -> None:
    record = torch.load(out_dir / f"{case}.pt")
    expected = gather_worker.reference(case)
    assert record["names"] == [name for name, _ in expected]
    assert len(record["tensors"]) == len(expected)
    for (name, want), got in zip(expected, record["tensors"], strict=True):
        assert got.dtype == want.dtype and got.shape == want.shape, name
        assert torch.equal(got, want), f"{case}: {name} differs from the single-process reference"
    assert record["dtypes"] == [str(t.dtype).removeprefix("torch.") for _, t in expected]
    assert len(record["chunks"]) > 1  # chunked, not one state dict


def test_every_layout_sends_the_reference_bit_identical(run) -> None:
    world, out_dir = run
    for case in RUNS[world]:
        if case.startswith("fail_"):
            continue
        statuses = _statuses(out_dir, case, world)
        assert all(s["ok"] for s in statuses), (case, statuses)
        assert all(s["unchanged"] for s in statuses), f"{case}: a rank's weights changed during the gather"
        assert statuses[0]["bytes"] > 0 and all(s["bytes"] == 0 for s in statuses[1:])
        _assert_matches_reference(out_dir, case)


def test_a_failing_rank_makes_every_rank_raise(run) -> None:
    world, out_dir = run
    if "fail_rank" not in RUNS[world]:
        pytest.skip("failure cases run at world size 2")
    for status in _statuses(out_dir, "fail_rank", world):
        assert not status["ok"]
        assert status["error"].startswith("GatherAborted")
        assert "rank 1: ValueError" in status["error"] and "shard dim 5" in status["error"]
        assert "rank 0:" not in status["error"]


def test_a_failing_send_makes_every_rank_raise(run) -> None:
    world, out_dir = run
    if "fail_send" not in RUNS[world]:
        pytest.skip("failure cases run at world size 2")
    for status in _statuses(out_dir, "fail_send", world):
        assert not status["ok"]
        assert "rank 0: RuntimeError: server gone while receiving chunk 2" in status["error"]
    assert not (out_dir / "fail_send.pt").exists()
