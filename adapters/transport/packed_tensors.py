"""Tensors -> uint8 buckets for the packed weight broadcast (sender side, transport-agnostic).

Same wire format as vLLM 0.32 `packed_tensor.pack_tensors`: each tensor is flattened to its raw
bytes (`.contiguous().view(-1).view(torch.uint8)`), tensors are concatenated in metadata order,
and the bucket boundaries are `domain.packing.bucket_boundaries` (vLLM's `total > buffer_size`
rule), so the receiver can recompute them from names/dtypes/shapes. No padding, no per-bucket
header. `PackBuffers` packs a bucket into a reused buffer (`torch.cat(out=)`): the bytes are the
same as a fresh `torch.cat`, but warm memory packs several times faster on CPU (a fresh buffer
page-faults on every 4 KiB). Every tensor is checked against its `TensorSpec` (dtype name and shape) before any byte is
sent, because a mismatch would make the receiver split the stream wrongly or hang. Shared by the
gloo transport and, later, the NCCL one.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch

from domain.packing import bucket_boundaries
from domain.tensors import TensorSpec


class TensorMismatch(ValueError):
    """A payload tensor disagrees with the metadata announced for it."""


def dtype_name(dtype: torch.dtype) -> str:
    """`torch.bfloat16` -> `"bfloat16"`, the spelling vLLM's `update_weights` expects."""
    return str(dtype).removeprefix("torch.")


def spec_of(name: str, tensor: torch.Tensor) -> TensorSpec:
    return TensorSpec(name, dtype_name(tensor.dtype), tuple(tensor.shape))


def check_payload(specs: Sequence[TensorSpec], tensors: Sequence[torch.Tensor]) -> None:
    """Refuse a payload that does not match its specs, naming the first offending tensor."""
    if len(tensors) != len(specs):
        raise TensorMismatch(f"payload has {len(tensors)} tensors but {len(specs)} specs were announced")
    for spec, tensor in zip(specs, tensors):
        if not isinstance(tensor, torch.Tensor):
            raise TensorMismatch(f"payload for {spec.name!r} is a {type(tensor).__name__}, not a torch.Tensor")
        got = (dtype_name(tensor.dtype), tuple(tensor.shape))
        if got != (spec.dtype, spec.shape):
            raise TensorMismatch(
                f"tensor {spec.name!r}: announced {spec.dtype} {spec.shape}, payload is {got[0]} {got[1]}"
            )


def as_bytes(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's raw bytes as a flat uint8 tensor (a view when already contiguous)."""
    return tensor.detach().contiguous().view(-1).view(torch.uint8)


def packed_buckets(
    specs: Sequence[TensorSpec], tensors: Sequence[torch.Tensor], buffer_size_bytes: int
) -> Iterator[torch.Tensor]:
    """One uint8 buffer per broadcast, built lazily so only one bucket is in memory at a time."""
    for bucket in bucket_boundaries(specs, buffer_size_bytes):
        pieces = [as_bytes(tensors[i]) for i in bucket]
        yield pieces[0] if len(pieces) == 1 else torch.cat(pieces)


class PackBuffers:
    """Reusable uint8 buffers, one per slot, that buckets are packed into.

    A slot's buffer grows to the largest bucket packed into it and is kept until `clear()`;
    the caller must not pack into a slot whose previous bucket is still being sent. A bucket of
    one tensor is that tensor's own bytes (no copy), as `packed_buckets` gives it."""

    def __init__(self) -> None:
        self._slots: dict[int, torch.Tensor] = {}

    @property
    def nbytes(self) -> int:
        return sum(buffer.numel() for buffer in self._slots.values())

    def pack(self, tensors: Sequence[torch.Tensor], slot: int) -> torch.Tensor:
        pieces = [as_bytes(tensor) for tensor in tensors]
        if len(pieces) == 1:
            return pieces[0]
        size = sum(piece.numel() for piece in pieces)
        buffer = self._slots.get(slot)
        if buffer is None or buffer.numel() < size:
            buffer = self._slots[slot] = torch.empty(size, dtype=torch.uint8)
        return torch.cat(pieces, out=buffer[:size])

    def clear(self) -> None:
        self._slots = {}
