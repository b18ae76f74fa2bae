"""`StepChannel`: bounded collectives of the env-GRPO ranks over a gloo side group.

Rank 0 (the lead) `send`s a picklable message to every other rank, which `receive` it; every
rank `exchange`s a short text (its error, or None) and gets every rank's. Each call is posted asynchronously and waited on with its own bound: a rank
that never arrives, or a vanished peer, raises `ChannelTimeout` (`bounded_wait.py`) naming the call instead of
hanging. The group is gloo even when training runs on NCCL (these are CPU objects), so a
message never queues behind the training collectives of the default group. Messages are
pickled: both ends are ranks of the same job, never a network peer.
"""

from __future__ import annotations

import pickle

import torch
import torch.distributed as dist

from adapters.distributed.bounded_wait import wait_bounded

MESSAGE_BYTES = 4096  # an exchanged text is cut to this many UTF-8 bytes
LEAD = 0


class StepChannel:
    def __init__(self, group: object, rank: int, world: int) -> None:
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is outside a world of {world}")
        self._group = group
        self.rank, self.world = rank, world

    def send(self, message: object, timeout: float) -> None:
        """Lead only: every other rank's `receive` returns `message`."""
        if self.rank != LEAD:
            raise RuntimeError(f"rank {self.rank} cannot send: only rank {LEAD} leads")
        data = pickle.dumps(message)
        self._broadcast(torch.tensor([len(data)], dtype=torch.int64), timeout, "send (size)")
        self._broadcast(torch.frombuffer(bytearray(data), dtype=torch.uint8), timeout, "send (message)")

    def receive(self, timeout: float) -> object:
        """Not the lead: the next message the lead sends, within `timeout` seconds."""
        size = torch.zeros(1, dtype=torch.int64)
        self._broadcast(size, timeout, f"rank {self.rank} waiting for rank {LEAD}'s next message")
        data = torch.empty(int(size.item()), dtype=torch.uint8)
        self._broadcast(data, timeout, f"rank {self.rank} receiving rank {LEAD}'s message")
        return pickle.loads(data.numpy().tobytes())

    def exchange(self, text: str | None, timeout: float) -> list[str | None]:
        """Every rank's `text` (None stays None), by rank; all ranks call it together."""
        mine = torch.zeros(MESSAGE_BYTES + 1, dtype=torch.uint8)  # byte 0: 1 = a text follows
        if text is not None:
            raw = text.encode()[:MESSAGE_BYTES]
            mine[0] = 1
            mine[1 : 1 + len(raw)] = torch.frombuffer(bytearray(raw), dtype=torch.uint8)
        every = [torch.empty_like(mine) for _ in range(self.world)]
        work = dist.all_gather(every, mine, group=self._group, async_op=True)
        wait_bounded(work, timeout, "exchange of step outcomes")
        return [self._decode(t) for t in every]

    def _broadcast(self, tensor: torch.Tensor, timeout: float, what: str) -> None:
        work = dist.broadcast(tensor, src=dist.get_global_rank(self._group, LEAD), group=self._group, async_op=True)
        wait_bounded(work, timeout, what)

    @staticmethod
    def _decode(buffer: torch.Tensor) -> str | None:
        if int(buffer[0]) == 0:
            return None
        return buffer[1:].numpy().tobytes().rstrip(b"\0").decode(errors="replace")
