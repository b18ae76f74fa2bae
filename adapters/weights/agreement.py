"""Every rank raises when one rank fails during the gather: no rank is left blocked.

Before each unit's collectives (a module's parameters, a layer's experts), every rank calls
`GatherAgreement.check(error, where)`: a MAX all-reduce of a 0/1 failure flag over the training
group. If any rank reports an error, the ranks exchange their messages (`all_gather_object`) and
all raise the same `GatherAborted` naming the failed ranks, instead of the healthy ranks waiting
in the next gather for a rank that is gone. A final check after the last unit catches a failure
of the sender's last `send`. Collectives are bounded by the process group's timeout (set at
`init_process_group`), which is the limit if a rank dies without reaching a check.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from adapters.weights.layout import world_size


class GatherAborted(RuntimeError):
    """A rank failed during the weight gather; raised on every rank."""


class GatherAgreement:
    """The failure check all training ranks run in lockstep (a no-op in a single process)."""

    def __init__(self, group: object | None = None) -> None:
        self._group = group
        self._world = world_size() if group is None else dist.get_world_size(group)
        self.aborted = False

    def check(self, error: BaseException | None, where: str) -> None:
        """Return if no rank failed; otherwise raise `GatherAborted` on every rank."""
        if self._world == 1:
            if error is not None:
                self.aborted = True
                raise error
            return
        flag = torch.tensor([0 if error is None else 1], dtype=torch.int32, device=self._device())
        dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group)
        if int(flag.item()) == 0:
            return
        self.aborted = True
        mine = None if error is None else f"{type(error).__name__}: {error}"
        reports: list[str | None] = [None] * self._world
        dist.all_gather_object(reports, mine, group=self._group)
        failed = "; ".join(f"rank {self._global(r)}: {m}" for r, m in enumerate(reports) if m is not None)
        raise GatherAborted(f"weight gather aborted at {where}: {failed}") from error

    def _device(self) -> torch.device:
        if dist.get_backend(self._group) == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    def _global(self, group_rank: int) -> int:
        return group_rank if self._group is None else dist.get_global_rank(self._group, group_rank)
