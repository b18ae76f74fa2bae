"""`TorchRankAgreement`: the ranks of the training group agree on a step's outcome.

An all-reduce (MIN) of 1 (ok) / 0 (failed) over the training process group, waited on with a
bound: a rank that never arrives makes the others raise `TimeoutError` instead of hanging.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from adapters.distributed.bounded_wait import wait_bounded


class TorchRankAgreement:
    def __init__(self, group: object | None = None) -> None:
        if not dist.is_initialized():
            raise RuntimeError("TorchRankAgreement needs an initialised torch.distributed process group")
        self._group = group

    def all_succeeded(self, ok: bool, timeout: float) -> bool:
        if timeout <= 0:
            raise ValueError(f"agreement timeout must be > 0, got {timeout}")
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self._group, async_op=True)
        wait_bounded(work, timeout, "rank agreement")
        return bool(flag.item())
