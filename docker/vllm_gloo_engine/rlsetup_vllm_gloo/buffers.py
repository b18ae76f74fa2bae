"""Receive buffers for the packed broadcast, reused only once nothing else holds their bytes.

vLLM's consumer allocates a fresh buffer per bucket, so the views that layerwise reload keeps for
a layer not yet complete stay valid. On CPU a fresh large buffer costs a page fault per 4 KiB
page while gloo writes into it (about as long as the transfer itself on a small machine), so here
a buffer is handed out again only when its storage is referenced by the pool alone: no view of it
survives in the model loader, the unpacked tensors, or a pending gloo work. A buffer still
referenced is simply not reused (a fresh one is allocated), so reuse can never overwrite bytes
someone still reads. The pool holds at most `keep` buffers and is dropped by the engine when the
weight-update session ends, so it costs memory only during a sync. Imports torch only.
"""

from __future__ import annotations

import torch

# A buffer referenced only by the pool: the pool's tensor + the temporary storage wrapper.
_FREE_USE_COUNT = 2


def _unreferenced(buffer: torch.Tensor) -> bool:
    return torch._C._storage_Use_Count(buffer.untyped_storage()._cdata) <= _FREE_USE_COUNT


class BufferPool:
    """At most `keep` uint8 buffers, lent as `buffer[:nbytes]` views when free."""

    def __init__(self, keep: int) -> None:
        if keep < 0:
            raise ValueError(f"buffer pool size must be >= 0, got {keep}")
        self._keep = keep
        self._buffers: list[torch.Tensor] = []
        self.reused = 0
        self.allocated = 0

    def take(self, nbytes: int) -> torch.Tensor:
        """A uint8 tensor of `nbytes` whose bytes nobody else references."""
        free = [b for b in self._buffers if _unreferenced(b)]
        fitting = [b for b in free if b.numel() >= nbytes]
        if fitting:
            self.reused += 1
            return min(fitting, key=torch.Tensor.numel)[:nbytes]
        buffer = torch.empty(nbytes, dtype=torch.uint8)
        self.allocated += 1
        if len(self._buffers) < self._keep:
            self._buffers.append(buffer)
        elif free:  # replace the smallest free buffer, which was too small for this bucket
            smallest = min(free, key=torch.Tensor.numel)
            self._buffers = [buffer if b is smallest else b for b in self._buffers]
        return buffer[:nbytes]

    def clear(self) -> None:
        self._buffers = []
