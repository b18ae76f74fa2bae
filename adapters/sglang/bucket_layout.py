"""The `flattened_bucket` layout of SGLang's `/update_weights_from_distributed`, on metadata alone.

SGLang 0.5.23 (`weight_sync/tensor_bucket.py::FlattenedTensorBucket.empty`) receives ONE uint8
buffer per HTTP call: the tensors' raw bytes back to back, in the order of `names/dtypes/shapes`,
no padding, no header. It allocates the buffer from that metadata and refuses a tensor whose byte
offset is not a multiple of its dtype's itemsize (`ValueError("Unaligned received tensor ...")`),
after which the HTTP call fails with 400 and the trainer's broadcast would wait for nobody.

Deliberate departure from SGLang's own sender (`FlattenedTensorBucket(named_tensors=...)`, which
keeps the caller's order and can produce such offsets): both our ends (the HTTP adapter that
announces the metadata and the transport that sends the bytes) apply `flattened_layout`, which
orders a chunk's tensors by descending itemsize, stable otherwise. With power-of-two itemsizes
every offset is then a sum of sizes that are multiples of the current itemsize, so the receiver
never sees a misaligned tensor. SGLang loads a call's tensors by name (`model.load_weights`),
so the order inside one call does not matter to it. Pure Python: no torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs

from domain.tensors import DTYPE_ITEMSIZE, TensorSpec


@attrs.frozen
class BucketEntry:
    """One tensor of the bucket: its spec, its index in the chunk's payload and its byte range."""

    spec: TensorSpec
    source_index: int
    offset: int

    @property
    def end(self) -> int:
        return self.offset + self.spec.nbytes


@attrs.frozen
class FlattenedLayout:
    """The bucket of one `/update_weights_from_distributed` call, in wire order."""

    entries: tuple[BucketEntry, ...]
    nbytes: int

    @property
    def specs(self) -> tuple[TensorSpec, ...]:
        return tuple(entry.spec for entry in self.entries)


def flattened_layout(specs: Sequence[TensorSpec]) -> FlattenedLayout:
    """Wire order and byte offsets of a chunk (every offset aligned to its tensor's itemsize)."""
    if not specs:
        raise ValueError("a flattened bucket needs at least one tensor (SGLang refuses an empty bucket)")
    order = sorted(range(len(specs)), key=lambda i: -DTYPE_ITEMSIZE[specs[i].dtype])
    entries: list[BucketEntry] = []
    offset = 0
    for index in order:
        spec = specs[index]
        if any(dim < 0 for dim in spec.shape):
            raise ValueError(f"tensor {spec.name!r} has a negative dimension: {spec.shape}")
        entries.append(BucketEntry(spec, index, offset))
        offset += spec.nbytes
    return FlattenedLayout(tuple(entries), offset)
