"""The training ranks of an online-GRPO launch: who talks to the server, and what every rank shares.

`TrainingRanks.from_env()` reads torchrun's `WORLD_SIZE`. One rank: no process group; `share`
returns its argument and the agreement is `SingleProcessAgreement`. Several ranks: the default
process group is initialised here unless someone already did (nccl with device `LOCAL_RANK` when
CUDA is visible, else gloo; accelerate's `PartialState` then reuses it), plus a gloo side group
for what travels as CPU objects even when training runs on NCCL: `share` (rank 0's object on
every rank, `broadcast_object_list`) and the rank agreement of the weight sync
(`TorchRankAgreement`). Collectives here are bounded by the group timeout (`timeout`).
Rank 0 is the global rank 0, the sender of `adapters.weights.layout.is_global_sender`.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from adapters.distributed.rank_agreement import TorchRankAgreement
from application.ports.ranks import RankAgreement
from application.single_process import SingleProcessAgreement

DEFAULT_GROUP_TIMEOUT_S = 1800.0


class TrainingRanks:
    def __init__(self, rank: int = 0, world: int = 1, group: object | None = None) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside a world of {world}")
        self.rank, self.world = rank, world
        self._group = group

    @classmethod
    def from_env(cls, timeout: float = DEFAULT_GROUP_TIMEOUT_S) -> TrainingRanks:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world == 1:
            return cls()
        delta = timedelta(seconds=timeout)
        if not dist.is_initialized():
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
            dist.init_process_group(backend, timeout=delta)
        if dist.get_world_size() != world:
            raise RuntimeError(f"WORLD_SIZE={world} but the process group has {dist.get_world_size()} ranks")
        return cls(dist.get_rank(), world, dist.new_group(backend="gloo", timeout=delta))

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, value: Any) -> Any:
        """Rank 0's `value` on every rank (the others pass anything, e.g. None); all ranks call it."""
        if self.world == 1:
            return value
        box = [value]
        dist.broadcast_object_list(box, src=0, group=self._group)
        return box[0]

    def agreement(self) -> RankAgreement:
        return SingleProcessAgreement() if self.world == 1 else TorchRankAgreement(self._group)
