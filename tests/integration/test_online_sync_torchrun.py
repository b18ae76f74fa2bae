"""The online job's weight sync at world size 2 (torchrun, gloo, FSDP2 on CPU) against a fake server.

This process hosts `FakeSglangServer` (real HTTP, real gloo receive, SGLang's rules); the two
ranks of `online_sync_worker.py` build their sync with the online job's own `online_sync` and
`online_publisher`, rank 0 owning the server. Checked, per publish:
- version 0: the server fails its pause; EVERY rank raises `WeightSyncError` (rank 0 naming the
  pause, rank 1 told another rank failed) and nobody deadlocks;
- versions 1 and 2: both ranks finish; the gather runs on both, only rank 0 sends;
- version 3 (the third successful publish, `verify_sync_every_n_syncs: 3`): the sync lands, then
  the verification (both ranks run the FSDP2 forward on the probe, rank 0 asks the server, whose
  log-probs are a stand-in) fails and EVERY rank raises `SyncVerificationError` naming the server.
The server ends up holding exactly the unsharded model after four nudges (bit for bit).
Not covered: TRL's GRPOTrainer itself at world size 2 (see `infrastructure.online_job`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import online_sync_worker as worker
from tests.fakes.fake_sglang_server import FakeSglangServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
WORLD = 2
TIMEOUT_S = 240


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _reference() -> dict[str, torch.Tensor]:
    model = worker.build_model()
    for _ in range(worker.PUBLISHES):
        worker.nudge(model)
    return {name: param.detach() for name, param in model.named_parameters()}


@pytest.fixture(scope="module")
def outcome(tmp_path_factory):
    out_dir = tmp_path_factory.mktemp("online_sync")
    state = {name: torch.zeros_like(p) for name, p in worker.build_model().named_parameters()}
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{Path(__file__).parent}", OMP_NUM_THREADS="1")
    with FakeSglangServer(state) as fake:
        fake.fail_next("/pause_generation", 500, "injected: pause failed")
        command = [
            str(Path(sys.executable).parent / "torchrun"), "--standalone", f"--nproc_per_node={WORLD}",
            str(Path(__file__).parent / "online_sync_worker.py"), str(out_dir), fake.url, str(_free_port()),
        ]
        result = subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)
        assert result.returncode == 0, f"torchrun failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
        statuses = [json.loads((out_dir / f"rank{r}.json").read_text()) for r in range(WORLD)]
        yield statuses, fake.url, {n: t.clone() for n, t in fake.state.items()}, fake.weight_version


def test_every_rank_connects_and_closes(outcome) -> None:
    statuses, _, _, _ = outcome
    for status in statuses:
        assert status["connect"] == "ok" and "close" not in status, status
        assert len(status["publishes"]) == worker.PUBLISHES


def test_a_server_failure_on_rank_0_raises_on_every_rank(outcome) -> None:
    statuses, url, _, _ = outcome
    first = [status["publishes"][0] for status in statuses]
    assert all(line.startswith("WeightSyncError") for line in first), first
    assert url in first[0] and "pause" in first[0].lower()
    assert "another training rank reported a failure" in first[1]


def test_both_ranks_finish_the_syncs_that_work(outcome) -> None:
    statuses, _, _, _ = outcome
    assert all(status["publishes"][1:3] == ["ok", "ok"] for status in statuses), statuses


def test_a_failed_verification_stops_every_rank_naming_the_server(outcome) -> None:
    statuses, url, _, version = outcome
    last = [status["publishes"][3] for status in statuses]
    assert all(line.startswith("SyncVerificationError") for line in last), last
    assert all(f"{url}: prompt log-probs" in line and "publish #3" in line for line in last), last
    assert last[0] == last[1]  # rank 0's verdict, shared
    assert version == "3"  # the sync itself landed before it was verified


def test_the_server_holds_the_unsharded_model_bit_for_bit(outcome) -> None:
    _, _, state, _ = outcome
    expected = _reference()
    assert sorted(state) == sorted(expected)
    for name, tensor in expected.items():
        assert torch.equal(state[name], tensor), f"{name} differs from the unsharded model"
