"""Bytes the gather holds beyond the model itself, live, with their peak.

Every tensor the gather hands out is registered; one that shares storage with the parameter it
came from (a plain, already-full parameter in the server dtype) costs nothing and is skipped;
any other (a gathered full tensor, a cast copy, a folded LoRA weight) counts its whole storage
(views of one gathered tensor count it once) until the garbage collector frees it. The peak
therefore includes whatever the consumer still holds: a consumer that keeps every chunk shows
the whole state dict, one that drops each chunk after sending shows about one chunk plus the
largest unit (one module's tensors, or one MoE layer's experts).
"""

from __future__ import annotations

import weakref
from collections.abc import Iterable

import torch


class LiveBytes:
    def __init__(self) -> None:
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}

    def track(self, tensor: torch.Tensor, sources: Iterable[torch.Tensor]) -> None:
        owner = tensor._base if tensor._base is not None else tensor
        storage = owner.untyped_storage()
        if storage.data_ptr() in {s.untyped_storage().data_ptr() for s in sources}:
            return
        key = id(owner)
        if key in self._live:
            return
        self._live[key] = storage.nbytes()
        self.current += storage.nbytes()
        self.peak = max(self.peak, self.current)
        weakref.finalize(owner, self._release, key)

    def _release(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)
