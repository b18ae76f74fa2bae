"""vLLM's packed-broadcast bucket rule, on metadata alone.

Tensors are appended to a bucket until the bucket's byte count *exceeds* the buffer size; the
tensor that crosses the threshold is included, and the bucket is then closed (vLLM
`packed_tensor.py`: `total_bytes > buffer_size_bytes`). A tensor larger than the buffer is
therefore sent in a bucket of its own (or closes the bucket it joins). The receiver recomputes
the same boundaries from the names/dtypes/shapes it got over HTTP, so both ends must agree on
this function exactly: there is no per-bucket metadata on the wire and no alignment padding.
"""

from __future__ import annotations

from collections.abc import Sequence

from domain.tensors import TensorSpec


def bucket_boundaries(specs: Sequence[TensorSpec], buffer_size_bytes: int) -> list[range]:
    """Index ranges into `specs`, one per broadcast, in order."""
    if buffer_size_bytes <= 0:
        raise ValueError(f"buffer_size_bytes must be > 0, got {buffer_size_bytes}")
    buckets: list[range] = []
    start = 0
    total = 0
    for index, spec in enumerate(specs):
        total += spec.nbytes
        if total > buffer_size_bytes:
            buckets.append(range(start, index + 1))
            start = index + 1
            total = 0
    if start < len(specs):
        buckets.append(range(start, len(specs)))
    return buckets


def bucket_sizes(specs: Sequence[TensorSpec], buffer_size_bytes: int) -> list[int]:
    """Byte size of each bucket that `bucket_boundaries` makes."""
    return [
        sum(specs[i].nbytes for i in bucket)
        for bucket in bucket_boundaries(specs, buffer_size_bytes)
    ]
