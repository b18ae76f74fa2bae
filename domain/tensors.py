"""Tensor metadata as the wire sees it: a name, a dtype name and a full (unsharded) shape.

Dtype names are spelled as vLLM's `update_weights` expects them (`"bfloat16"`, no `torch.`
prefix); the byte sizes here are what the packed-broadcast bucket rule counts.
"""

from __future__ import annotations

import math

import attrs

DTYPE_ITEMSIZE: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
}


def _known_dtype(_instance: object, _attribute: attrs.Attribute, value: str) -> None:
    if value not in DTYPE_ITEMSIZE:
        raise ValueError(f"unknown dtype name {value!r}; known: {sorted(DTYPE_ITEMSIZE)}")


@attrs.frozen
class TensorSpec:
    """One tensor as announced to a server before its bytes travel."""

    name: str
    dtype: str = attrs.field(validator=_known_dtype)
    shape: tuple[int, ...] = attrs.field(converter=tuple)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPE_ITEMSIZE[self.dtype]
