"""Env GRPO over 2 ranks under torchrun (gloo, CPU, FSDP2) against a single rank on the whole batch.

`env_grpo_ranks_worker.py` runs the real loop on rank 0 and the real follower on rank 1 (tiny
random Llama, seeded random episodes, an in-memory server behind a recording transport). Here the
batches rank 0 trained on are replayed by one `TorchPolicy`: after every step the state the
server received equals the single-rank parameters (float32 tolerance; the first step is
bit-identical), the metrics and the probe log-probs agree, every sync committed the full model
(versions 0..3), and the saved model folder loads as the last synced state bit for bit.
Failures: rank 0 failing between commands, and rank 1 raising inside a step, make both ranks
exit non-zero naming the failed rank, within the bounds.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

import env_grpo_ranks_worker as worker

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TIMEOUT_S = 120


def _torchrun(out_dir: Path, model_dir: Path, case: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{Path(__file__).parent}", OMP_NUM_THREADS="1")
    command = [
        str(Path(sys.executable).parent / "torchrun"), "--standalone", "--nproc_per_node=2", "--monitor-interval=2",
        str(Path(__file__).parent / "env_grpo_ranks_worker.py"), str(out_dir), str(model_dir), case,
    ]
    return subprocess.run(command, env=env, cwd=REPO, capture_output=True, text=True, timeout=TIMEOUT_S)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=worker.VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def trained(model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("env_grpo_w2")
    result = _torchrun(out, model_dir, "train")
    assert result.returncode == 0, f"torchrun failed:\n{result.stdout[-3000:]}\n{result.stderr[-6000:]}"
    return out


@pytest.fixture(scope="module")
def failed(model_dir, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess, float]:
    out = tmp_path_factory.mktemp("env_grpo_w2_fail")
    started = time.monotonic()
    result = _torchrun(out, model_dir, "fail")
    return out, result, time.monotonic() - started


def _single_rank(model_dir: Path, case: str):
    from adapters.learner.policy import TorchPolicy
    from infrastructure import wiring

    config = worker.config_for(str(model_dir), **worker.LOSSES[case])
    return TorchPolicy(model_dir, config.grpo, dtype=config.model.dtype, num_threads=1,
                       max_train_row_tokens=config.training.max_train_row_tokens,
                       temperature=wiring.sampling(config).temperature)


def _synced_states(out: Path, names: list[str]) -> list[list[tuple[str, torch.Tensor]]]:
    flat = torch.load(out / "synced.pt")
    assert len(flat) % len(names) == 0
    states = [flat[i : i + len(names)] for i in range(0, len(flat), len(names))]
    for state in states:
        assert [name for name, _ in state] == names  # every sync carries the whole model, in order
    return states


def _assert_state_equals(state, policy, step: int, exact: bool) -> None:
    for (name, got), (_, want) in zip(state, policy.model.named_parameters(), strict=True):
        if exact:
            assert torch.equal(got, want.detach()), f"step {step}: {name} differs"
        else:
            torch.testing.assert_close(got, want.detach(), rtol=1e-6, atol=1e-7, msg=f"step {step}: {name}")


@pytest.mark.parametrize("case", sorted(worker.LOSSES))
def test_two_ranks_take_the_single_rank_update_and_sync_the_full_state(trained, model_dir, case) -> None:
    out = trained / case
    assert all(json.loads((out / f"rank{r}.json").read_text())["ok"] for r in (0, 1))
    server = json.loads((out / "server.json").read_text())
    assert server == {"model": "intact", "versions": [0, 1, 2, 3], "partial": False}
    policy = _single_rank(model_dir, case)
    names = [name for name, _ in policy.model.named_parameters()]
    states = _synced_states(out, names)
    batches = pickle.loads((out / "batches.pkl").read_bytes())
    metrics = json.loads((out / "metrics.json").read_text())
    assert len(states) == len(batches) + 1 == worker.STEPS + 1
    _assert_state_equals(states[0], policy, 0, exact=True)
    for step, ((episodes, advantages), logged) in enumerate(zip(batches, metrics, strict=True), start=1):
        expected = policy.train_step(episodes, advantages)
        _assert_state_equals(states[step], policy, step, exact=step == 1)
        for key in ("loss", "grad_norm", "tokens", "rows", "kl", "ratio_mean", "truncated_rows"):
            assert logged[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), (step, key)
    probe = json.loads((out / "probe.json").read_text())
    assert probe == pytest.approx(policy.sequence_logprobs(worker.PROBE), abs=1e-5)
    from transformers import AutoModelForCausalLM

    saved = dict(AutoModelForCausalLM.from_pretrained(out / "final").named_parameters())
    assert all(torch.equal(saved[name], tensor) for name, tensor in states[-1])


def test_rank_zero_failing_between_steps_stops_every_rank(failed) -> None:
    out, result, seconds = failed
    assert result.returncode != 0
    lead, follower = (json.loads((out / "abort" / f"rank{r}.json").read_text()) for r in (0, 1))
    assert not lead["ok"] and "rollout server unreachable at version 1" in lead["error"]
    assert not follower["ok"] and follower["error"].startswith("RanksFailed: rank 1 stops: rank 0 failed")
    assert "rollout server unreachable" in follower["error"]


def test_a_rank_raising_inside_a_step_makes_both_exit_non_zero_naming_it(failed) -> None:
    out, result, seconds = failed
    assert result.returncode != 0
    assert seconds < TIMEOUT_S / 2, f"the failure took {seconds:.0f} s to surface"
    for rank in (0, 1):
        status = json.loads((out / "fail" / f"rank{rank}.json").read_text())
        assert not status["ok"]
        assert status["error"].startswith("RanksFailed: train step failed on 2 of 2 ranks")
        assert "rank 1: RuntimeError: injected failure on rank 1 in step 2" in status["error"]
