"""Tensors -> uint8 buckets for the packed weight broadcast (sender side, transport-agnostic).

Same wire format as vLLM 0.32 `packed_tensor.pack_tensors`: each tensor is flattened to its raw
bytes (`.contiguous().view(-1).view(torch.uint8)`), tensors are concatenated in metadata order,
and the bucket boundaries are `domain.packing.bucket_boundaries` (vLLM's `total > buffer_size`
rule), so the receiver can recompute them from names/dtypes/shapes. No padding, no per-bucket
header. Every tensor is checked against its `TensorSpec` (dtype name and shape) before any byte is
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
