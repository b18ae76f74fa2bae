"""The env-GRPO learner over N training ranks: FSDP2 data parallelism, rank 0 leading.

Supported: FSDP2 DP (`torch.distributed.fsdp.fully_shard`) over any number of ranks, one node
or several, gloo on CPUs, NCCL on GPUs. Not built: tensor or expert parallel learners (the
weight gather supports those layouts, the learner does not lay them out) and context
parallelism (refused for GRPO). The frozen reference model (beta > 0) is a full replica per rank.

Layout (`Fsdp2Share`): each decoder layer (the model's `_no_split_modules` classes) is one FSDP
unit and a `TokenScorer` around the model is the root, so the backbone and the LM head run inside
one hooked forward; the root reshards after forward too, so between steps every parameter is a
DTensor shard (what the weight gather and the full-state save expect). Gradients are SUMMED
over ranks (no 1/N division: each rank's loss already carries the global normaliser).

One step: every rank gets the WHOLE batch and plans all its rows, so the normalisers are global
(dapo: the step's loss tokens; the others: the number of micro-batches). The micro-batches are
exactly those one rank would build with the same `per_device_train_batch_size`, dealt out in
contiguous blocks of ceil(count / N); a rank short of a block runs padding steps with a zero
loss, because FSDP2's collectives need the same number of forwards and backwards on every rank.
So the update equals the single-rank update (up to float summation order) for every loss type;
with fewer micro-batches than ranks some ranks only pad (lower `per_device_train_batch_size`).

Rank 0 runs the env-GRPO loop; before each collective action it sends a command on the
`StepChannel` (`ShardedLearner`: a train step, the verifier's probe forward; `LeadSync`: connect,
publish; the final full-state save), runs its part, and every rank then exchanges its outcome:
if any rank failed, every rank raises `RanksFailed` naming the failed ranks. The other ranks run
`follow_steps`, which mirrors those commands until `Stop` (exit 0) or `Abort` (rank 0 failed
outside a command: they raise naming it). A rank that never arrives makes the others raise
`ChannelTimeout`; a rank stuck inside a training collective is bounded by the process group's
timeout. The step's own collectives (FSDP, metric sums, the grad norm) use the default group;
the channel's gloo side group carries only commands, outcomes and the sync's rank agreement.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

import attrs
import torch
import torch.distributed as dist
from torch import nn

from adapters.distributed.step_channel import StepChannel
from adapters.learner.logprobs import TokenScorer
from adapters.learner.policy import TorchPolicy
from application.ports.weight_publisher import PublishReport
from domain.episodes import Episode

log = logging.getLogger(__name__)


class RanksFailed(RuntimeError):
    """A command failed on at least one rank; raised on every rank, naming the failed ones."""


# ---- the FSDP2 layout of one rank's policy ---------------------------------------------------


class Fsdp2Share:
    """`StepShare` of this rank of the 1-D `mesh`: FSDP2 over it, metric totals summed over it.

    Every collective of a train step runs on the mesh's (default) group, bounded by its timeout,
    never on the channel's side group: a rank that raised mid-step must not meet another rank's
    step collective with its outcome exchange."""

    def __init__(self, mesh: object) -> None:
        self._mesh = mesh
        self._warned = False

    def wrap(self, scorer: TokenScorer) -> nn.Module:
        from torch.distributed.fsdp import FSDPModule, fully_shard

        for layer in decoder_layers(scorer.model):
            fully_shard(layer, mesh=self._mesh)
        fully_shard(scorer, mesh=self._mesh, reshard_after_forward=True)
        for module in scorer.modules():
            if isinstance(module, FSDPModule):
                module.set_gradient_divide_factor(1.0)  # a sum: the loss already holds the global normaliser
                module.set_force_sum_reduction_for_comms(True)  # gloo has no AVG / PREMUL_SUM
        return scorer

    def my_micro_batches(self, count: int) -> list[int | None]:
        rank, world = self._mesh.get_local_rank(), self._mesh.size()
        block = math.ceil(count / world)
        if count < world and not self._warned:
            self._warned = True
            log.warning("%d micro-batches for %d ranks: some ranks only run padding steps "
                        "(lower per_device_train_batch_size to spread the step)", count, world)
        mine = list(range(min(rank * block, count), min((rank + 1) * block, count)))
        return [*mine, *[None] * (block - len(mine))]

    def total(self, values: Sequence[float]) -> list[float]:
        on_gpu = self._mesh.device_type == "cuda"  # NCCL reduces CUDA tensors only
        device = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
        tensor = torch.tensor(list(values), dtype=torch.float64, device=device)
        dist.all_reduce(tensor, group=self._mesh.get_group())
        return tensor.tolist()


def decoder_layers(model: nn.Module) -> list[nn.Module]:
    """The repeated blocks HF marks as never to be split (`_no_split_modules`): one FSDP unit each."""
    names = set(getattr(model, "_no_split_modules", None) or ())
    return [m for m in model.modules() if type(m).__name__ in names]


# ---- commands from rank 0 --------------------------------------------------------------------


@attrs.frozen
class Connect:
    name = "connect"


@attrs.frozen
class TrainStep:
    episodes: tuple[Episode, ...] = attrs.field(converter=tuple)
    advantages: tuple[float, ...] = attrs.field(converter=tuple)
    name = "train step"


@attrs.frozen
class Publish:
    version: int
    name = "weight sync"


@attrs.frozen
class ScoreProbe:
    token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    name = "probe log-probs"


@attrs.frozen
class SaveFull:
    name = "full-state save"


@attrs.frozen
class Stop:
    name = "stop"


@attrs.frozen
class Abort:
    reason: str
    name = "abort"


class RankSync(Protocol):
    """What every rank calls on its `SyncWeights` together."""

    def connect(self) -> None: ...

    def publish(self, version: int) -> PublishReport: ...


def agree(channel: StepChannel, what: str, error: BaseException | None, timeout: float) -> None:
    """Every rank reports its outcome; if any failed, every rank raises `RanksFailed` naming them."""
    reports = channel.exchange(None if error is None else f"{type(error).__name__}: {error}", timeout)
    failed = [f"rank {r}: {text}" for r, text in enumerate(reports) if text is not None]
    if failed:
        raise RanksFailed(f"{what} failed on {len(failed)} of {channel.world} ranks: " + "; ".join(failed)) from error


class Lead:
    """Rank 0's end: announce a command, run rank 0's part, agree on the outcome."""

    def __init__(self, channel: StepChannel, timeout: float, abort_timeout: float = 60.0) -> None:
        self._channel = channel
        self.timeout = timeout
        self._abort_timeout = min(timeout, abort_timeout)  # the followers are idle in `receive` then

    def run(self, command: object, action: Callable[[], object]) -> object:
        self._channel.send(command, self.timeout)
        result, error = None, None
        try:
            result = action()
        except Exception as exc:  # noqa: BLE001 - agreed on, then raised on every rank
            error = exc
        agree(self._channel, command.name, error, self.timeout)
        return result

    def stop(self) -> None:
        self._channel.send(Stop(), self.timeout)

    def abort(self, error: BaseException) -> None:
        """Rank 0 failed outside a command: tell the followers (best effort, bounded), who raise."""
        if isinstance(error, RanksFailed):
            return  # every rank already raised it
        try:
            self._channel.send(Abort(f"rank 0: {type(error).__name__}: {error}"), self._abort_timeout)
        except Exception as exc:  # noqa: BLE001 - the followers may be gone; rank 0 raises anyway
            log.warning("could not tell the other ranks that rank 0 failed: %s", exc)


class ShardedLearner:
    """The `Learner` (and verifier's `TrainerLogprobs`) on rank 0: each call is a command to all ranks."""

    def __init__(self, policy: TorchPolicy, lead: Lead) -> None:
        self._policy = policy
        self._lead = lead

    @property
    def model(self) -> nn.Module:
        return self._policy.model

    @property
    def steps(self) -> int:
        return self._policy.steps

    def train_step(self, episodes: Sequence[Episode], advantages: Sequence[float]) -> Mapping[str, float]:
        command = TrainStep(episodes, [float(a) for a in advantages])
        return self._lead.run(command, lambda: self._policy.train_step(command.episodes, command.advantages))

    def sequence_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        command = ScoreProbe([int(t) for t in token_ids])
        return self._lead.run(command, lambda: self._policy.sequence_logprobs(command.token_ids))


class LeadSync:
    """Rank 0's weight sync: `connect` and `publish` are commands; `close` is rank 0's alone."""

    def __init__(self, sync: object, lead: Lead) -> None:
        self._sync = sync
        self._lead = lead

    def connect(self) -> None:
        self._lead.run(Connect(), self._sync.connect)

    def publish(self, version: int) -> PublishReport:
        return self._lead.run(Publish(version), lambda: self._sync.publish(version))

    def close(self) -> None:
        self._sync.close()


def follow_steps(channel: StepChannel, policy: TorchPolicy, sync: RankSync, save: Callable[[], None], *,
                 idle_timeout: float, step_timeout: float) -> int:
    """A rank other than 0: mirror rank 0's commands until `Stop`; returns the commands run."""
    actions: dict[type, Callable[[object], object]] = {
        Connect: lambda c: sync.connect(),
        TrainStep: lambda c: policy.train_step(c.episodes, c.advantages),
        Publish: lambda c: sync.publish(c.version),
        ScoreProbe: lambda c: policy.sequence_logprobs(c.token_ids),
        SaveFull: lambda c: save(),
    }
    done = 0
    while True:
        command = channel.receive(idle_timeout)
        if isinstance(command, Stop):
            return done
        if isinstance(command, Abort):
            raise RanksFailed(f"rank {channel.rank} stops: rank 0 failed ({command.reason})")
        if type(command) not in actions:
            raise RanksFailed(f"rank {channel.rank} got an unknown command {command!r} from rank 0")
        error = None
        try:
            actions[type(command)](command)
        except Exception as exc:  # noqa: BLE001 - agreed on, then raised on every rank
            error = exc
        agree(channel, command.name, error, step_timeout)
        done += 1
