"""Env GRPO under torchrun (`WORLD_SIZE > 1`): the rank roles of an FSDP2 data-parallel run.

Supported: FSDP2 DP over N ranks (`adapters.learner.sharded`: the update equals the
single-rank update on the whole batch), one node or several; gloo and CPU training when no GPU
is visible, otherwise NCCL with each rank on `cuda:LOCAL_RANK` (the CPU gloo path is the one
tested here). Not built: TP / EP learners, context parallelism.

Global rank 0 leads: it alone starts the embedded server, owns the Ray rollout pool, the
rollouts and the HTTP calls to the servers, the weight-transfer transports, the held-out
evaluation, the metrics file, the progress bar, the printed lines and the final save's file. It
runs the env-GRPO loop exactly as one rank does, with the learner and the weight sync replaced
by their leading ends (`ShardedLearner`, `LeadSync`), which make every other rank mirror each
collective action: the train step (each rank trains its block of micro-batches), connect, every
weight sync (every rank joins the gather, rank 0 sends; `TorchRankAgreement`: every rank
finishes the sync or every rank raises), the verifier's probe forward and the full-state save.

Failures: a command that fails on any rank raises `RanksFailed` on every rank, naming the ranks;
rank 0 failing anywhere else sends `Abort` and the others raise naming rank 0. Bounds
(`rank_bounds`): the default group's timeout bounds a training collective or a gather waiting
for a peer; `step` bounds a command's send and outcome exchange; `idle` bounds a follower's wait
for rank 0's next command (server start, held-out evaluation, one step's rollouts, a sync).
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TypeVar

import attrs
import torch
import torch.distributed as dist
from torch import nn

from adapters.distributed.rank_agreement import TorchRankAgreement
from adapters.distributed.step_channel import StepChannel
from adapters.learner.policy import TorchPolicy
from adapters.learner.sharded import (
    Fsdp2Share, Lead, LeadSync, RanksFailed, SaveFull, ShardedLearner, agree, follow_steps,
)
from adapters.weights.gather import ModelWeightSource
from application.run_env_grpo import RunSummary
from application.sync_report import SyncTarget
from application.sync_weights import SyncWeights
from domain.config import RunConfig
from infrastructure import wiring
from infrastructure.model_assets import resolve_model_path

MARGIN_S = 120.0  # model loading, Ray start-up, metrics: what no configured timeout covers
T = TypeVar("T")


@attrs.frozen
class RankBounds:
    collective: float  # default group: one training collective, or a gather waiting for the sender
    step: float  # a command's send and its outcome exchange
    idle: float  # a follower waiting for rank 0's next command


@attrs.frozen
class Ranks:
    rank: int
    world: int
    device: str
    mesh: object
    control: object  # the gloo side group of the channel and the sync's agreement
    channel: StepChannel


def rank_bounds(config: RunConfig) -> RankBounds:
    sync = config.training.weight_sync_timeout
    eval_batches = math.ceil(config.eval.num_problems / config.training.eval_rollout_batch_size)
    evaluation = eval_batches * wiring.batch_timeout(config, config.training.eval_rollout_batch_size)
    rollouts = wiring.batch_timeout(config, config.training.prompts_per_step * config.grpo.num_generations)
    step = 4 * sync + MARGIN_S  # a sync: pause, stream, finish, resume, each within `sync`
    return RankBounds(collective=sync + MARGIN_S, step=step,
                      idle=config.server.startup_timeout + evaluation + rollouts + step + MARGIN_S)


def init_ranks(bounds: RankBounds) -> Ranks:
    """The default group (nccl on GPUs, else gloo), a gloo side group and the 1-D FSDP mesh."""
    from torch.distributed.device_mesh import init_device_mesh

    world = int(os.environ.get("WORLD_SIZE", "1"))
    cuda = torch.cuda.is_available()
    device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", timeout=timedelta(seconds=bounds.collective))
    if dist.get_world_size() != world:
        raise RuntimeError(f"WORLD_SIZE={world} but the process group has {dist.get_world_size()} ranks")
    control = dist.new_group(backend="gloo", timeout=timedelta(seconds=max(bounds.idle, bounds.step)))
    mesh = init_device_mesh("cuda" if cuda else "cpu", (world,))
    rank = dist.get_rank()
    return Ranks(rank, world, device, mesh, control, StepChannel(control, rank, world))


def rank_policy(config: RunConfig, model_path: Path, ranks: Ranks, bounds: RankBounds) -> TorchPolicy:
    """This rank's FSDP2-sharded policy (the same arguments as the container's single-rank learner)."""
    return TorchPolicy(
        model_path, config.grpo, dtype=config.model.dtype,
        max_train_row_tokens=config.training.max_train_row_tokens,
        temperature=wiring.sampling(config).temperature, device=ranks.device,
        share=Fsdp2Share(ranks.mesh),
    )


def rank_sync(config: RunConfig, model: nn.Module, ranks: Ranks, targets: Sequence[SyncTarget] = ()) -> SyncWeights:
    """Every rank's `SyncWeights` over the same sharded model; only rank 0 has targets."""
    return SyncWeights(
        targets, ModelWeightSource(model, dtype=config.model.dtype),
        timeout=config.training.weight_sync_timeout, chunk_bytes=wiring.CHUNK_BYTES,
        agreement=TorchRankAgreement(ranks.control),
    )


def full_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """Collective: the full state dict on CPU on rank 0 (empty elsewhere)."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


class FullStateModel:
    """What `bootstrap.save_final` saves: the model with its gathered full state dict."""

    def __init__(self, model: nn.Module, state: dict[str, torch.Tensor]) -> None:
        self._model, self._state = model, state

    def save_pretrained(self, target: Path) -> None:
        self._model.save_pretrained(target, state_dict=self._state)


def train_and_save(lead: Lead, sync: LeadSync, run_loop: Callable[[], RunSummary],
                   save: Callable[[], Path]) -> tuple[RunSummary, Path]:
    """Rank 0: connect every rank, run the loop, save the full state; the caller handles failures."""
    sync.connect()
    try:
        summary = run_loop()
    finally:
        sync.close()
    return summary, lead.run(SaveFull(), save)


def leading(lead: Lead, body: Callable[[], T]) -> T:
    """Rank 0 runs `body`, then stops the followers; if it fails, they are told and raise too."""
    try:
        result = body()
        lead.stop()
    except BaseException as exc:
        lead.abort(exc)
        raise
    return result


def follow(config: RunConfig, model_path: Path, ranks: Ranks, bounds: RankBounds) -> int:
    """A rank other than 0: build the shard, then mirror rank 0's commands until it stops."""
    policy = rank_policy(config, model_path, ranks, bounds)
    sync = rank_sync(config, policy.model, ranks)
    follow_steps(ranks.channel, policy, sync, lambda: full_state(policy.model),
                 idle_timeout=bounds.idle, step_timeout=bounds.step)
    return 0


def resolved_model(config: RunConfig, ranks: Ranks, bounds: RankBounds) -> Path:
    """Rank 0 resolves (and may build the offline copy of) the model first; then the others."""
    path, error = None, None
    if ranks.rank == 0:
        try:
            path = resolve_model_path(config.model.name_or_path)
        except Exception as exc:  # noqa: BLE001 - agreed on, then raised on every rank
            error = exc
    try:
        agree(ranks.channel, "model resolution", error, bounds.idle)
    except RanksFailed:
        if error is not None:
            raise error from None  # rank 0: the user's mistake itself (the CLI prints its one line)
        raise
    return path or resolve_model_path(config.model.name_or_path)


def run_env_grpo_ranks(config: RunConfig, config_path: Path) -> int:
    """`rlsetup train` of job env_grpo on every rank of a torchrun launch."""
    from infrastructure.logs import quiet_logging

    quiet_logging()
    bounds = rank_bounds(config)
    ranks = init_ranks(bounds)
    model_path = resolved_model(config, ranks, bounds)
    if ranks.rank != 0:
        return follow(config, model_path, ranks, bounds)
    lead = Lead(ranks.channel, bounds.step)
    summary, final, output_dir = leading(lead, lambda: _lead_run(config, model_path, ranks, bounds, lead))
    from infrastructure.bootstrap import held_out_line

    print(held_out_line(summary))
    print(f"trained model: {final} (FSDP2 over {ranks.world} ranks)")
    print(f"metrics: {output_dir / 'metrics.jsonl'}")
    return 0


def _lead_run(config: RunConfig, model_path: Path, ranks: Ranks, bounds: RankBounds,
              lead: Lead) -> tuple[RunSummary, Path, Path]:
    from infrastructure.bootstrap import save_final, servers_for
    from infrastructure.container import EnvGRPOContainer

    output_dir = Path(config.grpo.output_dir) / time.strftime("%Y%m%d-%H%M%S")
    output_dir.mkdir(parents=True, exist_ok=True)
    learner = ShardedLearner(rank_policy(config, model_path, ranks, bounds), lead)
    with servers_for(config, model_path, output_dir) as urls:
        container = EnvGRPOContainer(config=config, model_path=model_path, server_urls=tuple(urls), output_dir=output_dir)
        container.learner.override(learner)
        sync = LeadSync(rank_sync(config, learner.model, ranks, container.sync_targets()), lead)
        container.weight_sync.override(sync)

        def run_loop() -> RunSummary:
            try:
                return container.loop().run()
            finally:
                container.shutdown_resources()

        def save() -> Path:
            return save_final(FullStateModel(learner.model, full_state(learner.model)), model_path, output_dir)

        summary, final = train_and_save(lead, sync, run_loop, save)
    return summary, final, output_dir
