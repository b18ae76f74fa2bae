"""Ports of the weight sync: the server's control surface, the collective, and the weight source.

The use case (`application.sync_weights`) drives the handshake through these; it never sees a
tensor. Payloads are opaque to the application: the source yields them, the transport sends them.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import Any, Protocol

import attrs

from domain.tensors import TensorSpec


@attrs.frozen(kw_only=True)
class TransferInit:
    """The rendezvous both ends of the weight-transfer group agree on (vLLM's init_info)."""

    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    packed: bool = True
    packed_buffer_size_bytes: int = 1024**3
    packed_num_buffers: int = 2

    def as_init_info(self) -> dict[str, Any]:
        return attrs.asdict(self)


@attrs.frozen
class WeightChunk:
    """Tensors announced in one `/update_weights` call and broadcast right after it."""

    specs: tuple[TensorSpec, ...]
    payload: Any  # the tensors themselves, in `specs` order; only the transport looks inside


class WeightSyncServer(Protocol):
    """The control endpoints of one generation server (vLLM's RL routes, or SGLang's)."""

    @property
    def url(self) -> str: ...

    def world_size(self) -> int: ...

    def init_weight_transfer(self, init: TransferInit, rank_offset: int) -> None:
        """Blocks server-side until the collective forms; run beside `WeightTransport.open`."""
        ...

    def pause(self) -> None: ...

    def start_weight_update(self) -> None: ...

    def update_weights(self, specs: Sequence[TensorSpec]) -> None:
        """Blocks server-side until the matching broadcast has arrived."""
        ...

    def finish_weight_update(self, weight_version: int) -> None: ...

    def reset_prefix_cache(self) -> None: ...

    def resume(self) -> None: ...

    def weight_version(self) -> int | None: ...


class WeightTransport(Protocol):
    """Rank 0 of the weight-transfer collective (gloo on CPU, NCCL on GPU)."""

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        """Join the group within `timeout`; once `abort` is set (the server's side of the join
        failed, no peer is coming) raise promptly instead, leaving nothing open."""
        ...

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        """Send the chunk's tensors packed by the bucket rule of `domain.packing`."""
        ...

    def close(self) -> None: ...


class WeightSource(Protocol):
    """The policy's weights in the server's names, gathered across ranks as needed.

    Every training rank iterates `chunks`; only the rank whose `is_sender` is true gets
    payloads to send (the others take part in the collective gathers and receive None payloads).
    """

    @property
    def is_sender(self) -> bool: ...

    def chunks(self, chunk_bytes: int) -> Iterator[WeightChunk]: ...
