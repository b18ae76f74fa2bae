"""Receive side of the packed weight broadcast: vLLM's bucket rule, over a gloo group.

Mirrors vLLM 0.32 `packed_tensor.packed_nccl_broadcast_consumer`: the bucket boundaries are
recomputed from the HTTP metadata alone (each tensor is `prod(shape) * itemsize` bytes; tensors
join the bucket until its total *exceeds* the buffer size, the crossing tensor included, so a
tensor larger than the buffer closes its bucket), each bucket arrives as one uint8 broadcast from
rank 0, is split in metadata order and each piece viewed as `dtype` and `shape`, then handed to
`load` as one list. Unpacked mode is one broadcast per tensor in its own dtype, `load([(name, t)])`.

Departures: a tensor whose offset in the bucket is not a multiple of its itemsize (it follows one
of odd byte size) is copied out before the dtype view, where vLLM's `view` would raise.

Pipelining (`num_buffers`, vLLM's `packed_num_buffers`): vLLM's consumer overlaps buckets with
`num_buffers` CUDA streams; on CPU the same overlap comes from gloo's own worker threads:
`broadcast` may only *post* the receive and return its wait, and with `num_buffers = n` up to
n - 1 buckets are posted ahead of the one being split and loaded, so the next bucket arrives
while `load` runs (n = 1 is strictly receive-then-load). Bucket order, boundaries and bytes on
the wire are unchanged. Buffers come from a `BufferPool` when one is given (reused only when no
view of them survives, see `buffers.py`), else fresh per bucket like vLLM's consumer.
Imports torch only.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from rlsetup_vllm_gloo.buffers import BufferPool
from rlsetup_vllm_gloo.info import TensorMeta

Wait = Callable[[], None]
# Receives into the tensor: returns None when done already, or the wait of a posted receive.
Broadcast = Callable[[torch.Tensor], "Wait | None"]
Load = Callable[[list[tuple[str, torch.Tensor]]], Any]


def bucket_boundaries(sizes: Sequence[int], buffer_size_bytes: int) -> list[range]:
    """Index ranges of the tensors in each broadcast (vLLM's `total > buffer_size` rule)."""
    if buffer_size_bytes <= 0:
        raise ValueError(f"packed_buffer_size_bytes must be > 0, got {buffer_size_bytes}")
    buckets: list[range] = []
    start, total = 0, 0
    for index, size in enumerate(sizes):
        total += size
        if total > buffer_size_bytes:
            buckets.append(range(start, index + 1))
            start, total = index + 1, 0
    if start < len(sizes):
        buckets.append(range(start, len(sizes)))
    return buckets


def unpack(buffer: torch.Tensor, metas: Sequence[TensorMeta]) -> list[tuple[str, torch.Tensor]]:
    """Split a received uint8 bucket into named tensors (views of `buffer`)."""
    expected = sum(meta.nbytes for meta in metas)
    if buffer.numel() != expected:
        raise ValueError(f"packed bucket has {buffer.numel()} bytes, metadata says {expected}")
    pieces = buffer.split([meta.nbytes for meta in metas])
    return [(meta.name, _typed_view(piece, meta)) for meta, piece in zip(metas, pieces)]


def _typed_view(piece: torch.Tensor, meta: TensorMeta) -> torch.Tensor:
    # torch can only view bytes as a wider dtype at an aligned offset; a tensor that follows
    # one of odd byte size is copied out instead (vLLM's consumer would raise there).
    if piece.storage_offset() % meta.dtype.itemsize:
        piece = piece.clone()
    return piece.view(meta.dtype).view(meta.shape)


@dataclass
class Received:
    """What one packed receive did: bytes, buckets, seconds blocked on the wire and in `load`."""

    nbytes: int = 0
    buckets: int = 0
    wait_s: float = 0.0
    load_s: float = 0.0


def receive_packed(
    metas: Sequence[TensorMeta], buffer_size_bytes: int, broadcast: Broadcast, load: Load,
    *, num_buffers: int = 1, pool: BufferPool | None = None,
) -> Received:
    """Receive every bucket and load it, up to `num_buffers - 1` buckets posted ahead of the load."""
    if num_buffers < 1:
        raise ValueError(f"packed_num_buffers must be >= 1, got {num_buffers}")
    plan = [[metas[i] for i in bucket] for bucket in bucket_boundaries([m.nbytes for m in metas], buffer_size_bytes)]
    posted: deque[tuple[torch.Tensor, Wait | None, list[TensorMeta]]] = deque()
    result = Received(buckets=len(plan))

    def post(index: int) -> None:
        size = sum(meta.nbytes for meta in plan[index])
        buffer = pool.take(size) if pool is not None else torch.empty(size, dtype=torch.uint8)
        posted.append((buffer, broadcast(buffer), plan[index]))

    next_post, last = 0, len(plan) - 1
    for index in range(len(plan)):
        while next_post <= index:  # the first bucket, or every bucket when num_buffers == 1
            post(next_post)
            next_post += 1
        buffer, wait, bucket_metas = posted.popleft()
        started = time.monotonic()
        if wait is not None:
            wait()
        result.wait_s += time.monotonic() - started
        while next_post <= min(index + num_buffers - 1, last):  # arrives while this one loads
            post(next_post)
            next_post += 1
        started = time.monotonic()
        load(unpack(buffer, bucket_metas))
        result.load_s += time.monotonic() - started
        result.nbytes += buffer.numel()
        del buffer, wait  # the pool may lend these bytes again once the loader let go of them
    return result


def receive_unpacked(metas: Sequence[TensorMeta], broadcast: Broadcast, load: Load) -> int:
    """One broadcast per tensor, in its own dtype; returns the number of bytes received."""
    received = 0
    for meta in metas:
        tensor = torch.empty(meta.shape, dtype=meta.dtype)
        wait = broadcast(tensor)
        if wait is not None:
            wait()
        load([(meta.name, tensor)])
        received += meta.nbytes
    return received
