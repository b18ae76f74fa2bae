"""The worker's side of the weight-transfer gloo group, outside torch's default process group.

vLLM's NCCL engine joins through `StatelessProcessGroup` (a TCPStore whose rank 0, the trainer,
listens at `master_address:master_port`) and then a `PyNcclCommunicator`. Here the worker connects
a `TCPStore` client to the same address and builds a `ProcessGroupGloo` on it directly, so the
group never touches `torch.distributed`'s default group (vLLM's CPU workers have their own).
Every wait is bounded: the store connection and the group formation by `timeout_s`, and each
broadcast by `work.wait(timeout)`. A timed-out or broken group is unusable afterwards.
`post_broadcast` only enqueues the receive (gloo runs it on its own worker threads) and returns
the bounded wait, so the caller can load one bucket while the next one arrives.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import torch
import torch.distributed as dist

TIMEOUT_ENV = "RLSETUP_GLOO_TIMEOUT_S"
DEFAULT_TIMEOUT_S = 300.0


def join_gloo_group(address: str, port: int, rank: int, world_size: int, timeout_s: float) -> dist.ProcessGroupGloo:
    """Connect to the trainer's store as `rank` and form the gloo group (blocks until all joined)."""
    timeout = timedelta(seconds=timeout_s)
    try:
        store = dist.TCPStore(address, port, world_size, is_master=False, timeout=timeout)
        return dist.ProcessGroupGloo(store, rank, world_size, timeout)
    except Exception as error:  # torch raises several types (DistStoreError, RuntimeError)
        raise RuntimeError(
            f"gloo weight-transfer group: rank {rank}/{world_size} could not join the trainer's "
            f"store at {address}:{port} within {timeout_s:.0f}s: {error}"
        ) from error


def post_broadcast(group: dist.ProcessGroupGloo, tensor: torch.Tensor, timeout_s: float) -> Callable[[], None]:
    """Enqueue the broadcast of `tensor` from rank 0; returns its wait (at most `timeout_s` each)."""
    options = dist.BroadcastOptions()
    options.rootRank = 0
    options.rootTensor = 0
    options.timeout = timedelta(seconds=timeout_s)
    work = group.broadcast([tensor], options)
    nbytes = tensor.numel() * tensor.element_size()

    def wait() -> None:
        try:
            work.wait(timedelta(seconds=timeout_s))
        except Exception as error:  # gloo raises RuntimeError / DistBackendError
            raise RuntimeError(
                f"gloo weight-transfer group: broadcast of {nbytes} bytes from the trainer (rank 0) "
                f"not received within {timeout_s:.0f}s: {error}"
            ) from error

    return wait


def broadcast_from_root(group: dist.ProcessGroupGloo, tensor: torch.Tensor, timeout_s: float) -> None:
    """Broadcast `tensor` in place from rank 0, waiting at most `timeout_s`."""
    post_broadcast(group, tensor, timeout_s)()
