"""Materialise DTensor parameters (FSDP2 shards, DTensor TP/EP placements) into full tensors.

`DTensor.full_tensor()` is a collective over the parameter's device mesh: every rank of that
mesh must call it for every DTensor parameter, in the same order, even ranks that will not send.
The result is a new full tensor on every rank (an all-gather); the caller drops it where unused.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import DTensor


def is_dtensor(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, DTensor)


def global_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    """The full (unsharded) shape, known locally on every rank without communication."""
    return tuple(tensor.shape)


def local_part(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's own storage (the local shard of a DTensor, else the tensor itself)."""
    return tensor.to_local() if isinstance(tensor, DTensor) else tensor


def materialize(tensor: torch.Tensor) -> torch.Tensor:
    """A full, detached tensor: collective for a DTensor, a no-copy detach otherwise."""
    if isinstance(tensor, DTensor):
        return tensor.detach().full_tensor()
    return tensor.detach()
