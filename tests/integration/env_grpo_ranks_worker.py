"""torchrun worker for tests/integration/test_env_grpo_multirank.py: env GRPO over 2 gloo ranks.

    torchrun --standalone --nproc_per_node 2 env_grpo_ranks_worker.py OUT_DIR MODEL_DIR CASE

CASE `train`: for each loss type of `LOSSES`, rank 0 runs the real env-GRPO loop
(`EnvGRPOLoop`) with a seeded random rollout pool, the leading learner and sync of
`infrastructure.env_grpo_ranks` and one in-memory server (`FakeSyncServer` behind a transport
that records every tensor it broadcasts); rank 1 runs `follow`, the real follower role. Rank 0
writes under OUT_DIR/<loss>/: the batches it trained on, every synced state, the saved model
folder (`final/`), the step metrics and the probe log-probs; the test replays the batches on one rank.
CASE `fail`: first `abort` (rank 0's rollouts fail before step 2: rank 1 is told and raises),
then `fail` (rank 1's forward raises during step 2: rank 0 waits in an FSDP collective until
the default group's timeout, then both agree and raise). Every rank writes
OUT_DIR/<case>/rank<r>.json with its outcome, then exits (non-zero if any case failed).
"""

from __future__ import annotations

import json
import os
import pickle
import random
import sys
import traceback
from pathlib import Path

import torch

from adapters.learner.sharded import Lead, LeadSync, ShardedLearner, follow_steps
from application.ports.environment import Problem
from application.ports.training import RolloutRequest
from application.ports.weight_sync import TransferInit
from application.run_env_grpo import EnvGRPOLoop
from application.sync_report import SyncTarget
from domain.config import RunConfig
from domain.config.grpo import GRPOConfig
from domain.config.model import ModelConfig
from domain.config.run import EvalConfig
from domain.config.training import AsyncTrainingConfig
from domain.episodes import Episode, Segment
from domain.tensors import TensorSpec
from infrastructure import wiring
from infrastructure.env_grpo_ranks import (
    FullStateModel, RankBounds, follow, full_state, init_ranks, leading, rank_policy, rank_sync, train_and_save,
)
from tests.fakes.fake_sync import FakeSyncServer, FakeTransport
from tests.fakes.fake_training import FakeTicket, RecordingSink

VOCAB = 96
LOSSES = {"dapo": {"loss_type": "dapo"}, "grpo_beta": {"loss_type": "grpo", "beta": 0.05}}
PROBE = [5, 17, 33, 2, 90, 41, 7, 64]
STEPS = 3


def config_for(model_dir: str, **grpo) -> RunConfig:
    """2 problems x 3 generations = 6 rows; micro-batches of 2 -> 3: rank 0 runs 2, rank 1 runs 1 + 1 pad."""
    fields = dict(num_generations=3, max_steps=STEPS, per_device_train_batch_size=2, learning_rate=1e-3,
                  max_grad_norm=0.5, temperature=0.9, seed=3, **grpo)
    return RunConfig(
        model=ModelConfig(name_or_path=model_dir), grpo=GRPOConfig(**fields),
        training=AsyncTrainingConfig(prompts_per_step=2, max_train_row_tokens=16, enable_prefetch=False,
                                     weight_sync_timeout=20.0, rollout_server_url="http://fake:8000"),
        eval=EvalConfig(num_problems=0),
    )


class RandomEpisodes:
    """`RolloutPool`: seeded random episodes (uneven lengths, environment tokens, a truncated row)."""

    def __init__(self, fail_at_version: int | None = None) -> None:
        self._fail_at = fail_at_version

    def submit(self, request: RolloutRequest) -> FakeTicket:
        if request.weight_version == self._fail_at:
            raise RuntimeError(f"rollout server unreachable at version {self._fail_at} (injected on rank 0)")
        return FakeTicket([[self._episode(p, g, request.weight_version) for g in range(request.num_generations)]
                           for p in request.problems])

    def close(self) -> None:
        pass

    @staticmethod
    def _episode(problem: Problem, g: int, version: int) -> Episode:
        rng = random.Random(f"{problem.prompt}/{g}/{version}")
        draw = lambda n: [rng.randrange(VOCAB) for _ in range(n)]  # noqa: E731
        sampled = lambda n: Segment.from_engine(draw(n), [-1.0 - 2.0 * rng.random() for _ in range(n)])  # noqa: E731
        segments = [sampled(rng.randint(2, 5)), Segment.from_environment(draw(rng.randint(1, 3))), sampled(rng.randint(1, 9))]
        return Episode(prompt_token_ids=draw(rng.randint(3, 6)), segments=segments,
                       scores={"environment": rng.random()}, weight_version=version)


def problems():
    i = 0
    while True:
        yield Problem(prompt=f"p{i}")
        i += 1


class RecordingTransport:
    """`WeightTransport`: the fake collective, keeping a copy of every tensor it carries."""

    def __init__(self, server: FakeSyncServer) -> None:
        self._inner = FakeTransport(server, hang_limit=20.0)
        self.tensors: list[tuple[str, torch.Tensor]] = []

    def open(self, init: TransferInit, timeout: float, abort=None) -> None:
        self._inner.open(init, timeout)

    def broadcast(self, chunk, timeout: float) -> None:
        self.tensors.extend((s.name, t.detach().clone()) for s, t in zip(chunk.specs, chunk.payload, strict=True))
        self._inner.broadcast(chunk, timeout)

    def close(self) -> None:
        self._inner.close()


class RecordingLearner:
    """`Learner` that keeps each step's batch, then trains through the leading learner."""

    def __init__(self, inner: ShardedLearner) -> None:
        self._inner = inner
        self.batches: list[tuple[list[Episode], list[float]]] = []

    def train_step(self, episodes, advantages):
        self.batches.append((list(episodes), list(advantages)))
        return self._inner.train_step(episodes, advantages)


def model_specs(model_dir: str) -> list[TensorSpec]:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return [TensorSpec(name, "float32", tuple(p.shape)) for name, p in model.named_parameters()]


def lead_case(config: RunConfig, ranks, bounds: RankBounds, out: Path, pool: RandomEpisodes) -> None:
    lead = Lead(ranks.channel, bounds.step)
    model_dir = config.model.name_or_path
    sharded = ShardedLearner(rank_policy(config, Path(model_dir), ranks, bounds), lead)
    learner = RecordingLearner(sharded)
    server = FakeSyncServer("http://fake:8000", model_specs(model_dir), collective_timeout=20.0, hang_limit=20.0)
    transport = RecordingTransport(server)
    init = TransferInit(master_address="127.0.0.1", master_port=1, rank_offset=1, world_size=0)
    sync = LeadSync(rank_sync(config, sharded.model, ranks, [SyncTarget(server, transport, init)]), lead)
    sink = RecordingSink()
    loop = EnvGRPOLoop(settings=wiring.loop_settings(config, ("http://fake:8000",)), problems=problems(),
                       pool=pool, learner=learner, publisher=sync, evaluator=None, metrics=sink, progress=sink)

    def run_loop():
        summary = loop.run()
        (out / "probe.json").write_text(json.dumps(sharded.sequence_logprobs(PROBE)))  # a command too
        return summary

    def save() -> Path:  # what the real run saves, less the tokenizer files
        FullStateModel(sharded.model, full_state(sharded.model)).save_pretrained(out / "final")
        return out / "final"

    leading(lead, lambda: train_and_save(lead, sync, run_loop, save))
    with open(out / "batches.pkl", "wb") as f:
        pickle.dump(learner.batches, f)
    torch.save(transport.tensors, out / "synced.pt")
    (out / "metrics.json").write_text(json.dumps([row for _, row in sink.rows]))
    (out / "server.json").write_text(json.dumps({"model": server.model, "versions": server.finished_versions,
                                                 "partial": server.committed_partial_stream}))


def failing_follower(config: RunConfig, ranks, bounds: RankBounds) -> None:
    """`follow`, with a forward that raises on this rank during the second step."""
    policy = rank_policy(config, Path(config.model.name_or_path), ranks, bounds)

    def fail_in_step_two(module, args):
        if policy.steps == 1:
            raise RuntimeError(f"injected failure on rank {ranks.rank} in step 2")

    policy.model.model.layers[1].register_forward_pre_hook(fail_in_step_two)
    follow_steps(ranks.channel, policy, rank_sync(config, policy.model, ranks), lambda: full_state(policy.model),
                 idle_timeout=bounds.idle, step_timeout=bounds.step)


def run_case(name: str, config: RunConfig, ranks, bounds: RankBounds, out_dir: Path) -> bool:
    out = out_dir / name
    out.mkdir(parents=True, exist_ok=True)
    status = {"rank": ranks.rank, "ok": True, "error": None}
    try:
        if ranks.rank == 0:
            lead_case(config, ranks, bounds, out, RandomEpisodes(fail_at_version=1 if name == "abort" else None))
        elif name == "fail":
            failing_follower(config, ranks, bounds)
        else:
            follow(config, Path(config.model.name_or_path), ranks, bounds)
    except Exception as exc:  # noqa: BLE001 - recorded for the test
        status.update(ok=False, error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    (out / f"rank{ranks.rank}.json").write_text(json.dumps(status))
    return status["ok"]


def main(out_dir: Path, model_dir: str, case: str) -> None:
    torch.set_num_threads(1)
    fail = case == "fail"
    bounds = RankBounds(collective=6.0 if fail else 30.0, step=30.0, idle=60.0)
    ranks = init_ranks(bounds)
    cases = [("abort", {}), ("fail", {})] if fail else list(LOSSES.items())
    outcomes = [run_case(name, config_for(model_dir, **grpo), ranks, bounds, out_dir) for name, grpo in cases]
    ok = all(outcomes)
    # Every result is on disk. Skip the C++ teardown of the gloo groups (see gather_worker.py).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0 if ok else 1)


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2], sys.argv[3])
