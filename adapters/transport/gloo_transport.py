"""`GlooTransport`: the trainer's rank 0 of a gloo weight-transfer group (CPU servers).

The trainer hosts the rendezvous: `TCPStore(master_address, master_port, is_master=True,
wait_for_workers=False)` (waiting for workers in the constructor would block before the HTTP
call that brings the server in), then a `ProcessGroupGloo(store, 0, world_size, timeout)` built
directly, never through `init_process_group`, so it coexists with a training job's own default
group under torchrun. `ProcessGroupGloo`'s constructor returns once every rank has joined, or
raises after `timeout`.

`broadcast` sends one chunk: packed mode is one uint8 broadcast per bucket of
`domain.packing.bucket_boundaries` (vLLM's rule, recomputed by the server from the HTTP
metadata), unpacked mode one broadcast per tensor in its own dtype. Tensors are checked against
their specs before anything is sent. `timeout` bounds the whole chunk; a failed or timed-out
broadcast aborts the group (the receiver is in an unknown state) and raises `TransportError`.
Departure from vLLM's producer: no double buffering (`packed_num_buffers` is unused on CPU).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from adapters.transport.packed_tensors import check_payload, packed_buckets
from application.ports.weight_sync import TransferInit, WeightChunk


class TransportError(RuntimeError):
    """The weight-transfer collective failed or timed out."""


class GlooTransport:
    """Implements `application.ports.weight_sync.WeightTransport` over gloo (rank 0 only)."""

    def __init__(self) -> None:
        self._init: TransferInit | None = None
        self._store: dist.TCPStore | None = None
        self._group: dist.ProcessGroupGloo | None = None
        self.bytes_sent = 0

    @property
    def is_open(self) -> bool:
        return self._group is not None

    def open(self, init: TransferInit, timeout: float) -> None:
        if self._group is not None:
            raise TransportError(f"gloo transport already open on {self._where()}; close it first")
        where = f"{init.master_address}:{init.master_port}"
        delta = timedelta(seconds=timeout)
        try:
            store = dist.TCPStore(
                init.master_address, init.master_port, init.world_size,
                is_master=True, wait_for_workers=False, timeout=delta,
            )
            group = dist.ProcessGroupGloo(store, 0, init.world_size, delta)
        except Exception as error:  # torch raises DistStoreError / RuntimeError / DistNetworkError
            raise TransportError(
                f"gloo rendezvous at {where} (world_size={init.world_size}) failed within {timeout:.0f}s: {error}"
            ) from error
        self._init, self._store, self._group = init, store, group

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        if self._group is None or self._init is None:
            raise TransportError("gloo transport is not open: call open() before broadcast()")
        tensors: Sequence[torch.Tensor] = list(chunk.payload)
        check_payload(chunk.specs, tensors)
        for tensor, spec in zip(tensors, chunk.specs):
            if tensor.device.type != "cpu":
                raise TransportError(f"gloo transport sends CPU tensors; {spec.name!r} is on {tensor.device}")
        deadline = time.monotonic() + timeout
        if self._init.packed:
            buffers = packed_buckets(chunk.specs, tensors, self._init.packed_buffer_size_bytes)
        else:
            buffers = (tensor.detach().contiguous() for tensor in tensors)
        for index, buffer in enumerate(buffers):
            self._send(buffer, deadline, f"broadcast {index} of chunk starting at {chunk.specs[0].name!r}")

    def close(self) -> None:
        group, self._group = self._group, None
        self._store, self._init = None, None
        if group is not None:
            group.shutdown()

    def _send(self, buffer: torch.Tensor, deadline: float, what: str) -> None:
        assert self._group is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._abort()
            raise TransportError(f"gloo {what} on {self._where()}: chunk timeout exceeded before sending")
        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.rootTensor = 0
        options.timeout = timedelta(seconds=remaining)
        try:
            self._group.broadcast([buffer], options).wait(timedelta(seconds=remaining))
        except Exception as error:
            where = self._where()
            self._abort()
            raise TransportError(
                f"gloo {what} ({buffer.numel() * buffer.element_size()} bytes) on {where} failed "
                f"(receiver gone or timed out after {remaining:.1f}s): {error}"
            ) from error
        self.bytes_sent += buffer.numel() * buffer.element_size()

    def _abort(self) -> None:
        group, self._group = self._group, None
        self._store, self._init = None, None
        if group is not None:
            group.abort()

    def _where(self) -> str:
        if self._init is None:
            return "a closed group"
        return f"{self._init.master_address}:{self._init.master_port}"
