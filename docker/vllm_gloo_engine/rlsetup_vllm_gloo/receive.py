"""Receive side of the packed weight broadcast: vLLM's bucket rule, over a gloo group.

Mirrors vLLM 0.32 `packed_tensor.packed_nccl_broadcast_consumer`: the bucket boundaries are
recomputed from the HTTP metadata alone (each tensor is `prod(shape) * itemsize` bytes; tensors
join the bucket until its total *exceeds* the buffer size, the crossing tensor included, so a
tensor larger than the buffer closes its bucket), each bucket arrives as one uint8 broadcast from
rank 0, is split in metadata order and each piece viewed as `dtype` and `shape`, then handed to
`load` as one list. Unpacked mode is one broadcast per tensor in its own dtype, `load([(name, t)])`.

Departures: a tensor whose offset in the bucket is not a multiple of its itemsize (it follows one
of odd byte size) is copied out before the dtype view, where vLLM's `view` would raise;
`packed_num_buffers` is accepted but unused (gloo's broadcast is synchronous on CPU, so
the CUDA-stream double buffering has nothing to overlap); a fresh buffer per bucket keeps the views
that layerwise reload buffers valid, as vLLM's consumer does by re-allocating. Imports torch only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from rlsetup_vllm_gloo.info import TensorMeta

Broadcast = Callable[[torch.Tensor], None]
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


def receive_packed(metas: Sequence[TensorMeta], buffer_size_bytes: int, broadcast: Broadcast, load: Load) -> int:
    """Receive every bucket and load it; returns the number of bytes received."""
    received = 0
    for bucket in bucket_boundaries([meta.nbytes for meta in metas], buffer_size_bytes):
        bucket_metas = [metas[i] for i in bucket]
        buffer = torch.empty(sum(meta.nbytes for meta in bucket_metas), dtype=torch.uint8)
        broadcast(buffer)
        load(unpack(buffer, bucket_metas))
        received += buffer.numel()
    return received


def receive_unpacked(metas: Sequence[TensorMeta], broadcast: Broadcast, load: Load) -> int:
    """One broadcast per tensor, in its own dtype; returns the number of bytes received."""
    received = 0
    for meta in metas:
        tensor = torch.empty(meta.shape, dtype=meta.dtype)
        broadcast(tensor)
        load([(meta.name, tensor)])
        received += meta.nbytes
    return received
