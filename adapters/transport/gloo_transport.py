"""`GlooTransport`: the trainer's rank 0 of a gloo weight-transfer group (CPU servers).

The trainer hosts the rendezvous: `TCPStore(master_address, master_port, is_master=True,
wait_for_workers=False)` (waiting for workers in the constructor would block before the HTTP
call that brings the server in), then a `ProcessGroupGloo(store, 0, world_size, timeout)` built
directly, never through `init_process_group`, so it coexists with a training job's own default
group under torchrun. `ProcessGroupGloo`'s constructor returns once every rank has joined, or
raises after `timeout`, or as soon as `abort` is set: its store waits go through `AbortableStore`,
so a server whose `/init_weight_transfer_engine` failed does not cost the whole timeout. A
called-off or failed open leaves nothing behind (store, listening socket, half-built group dropped).

`broadcast` sends one chunk: packed mode is one uint8 broadcast per bucket of
`domain.packing.bucket_boundaries` (vLLM's rule, recomputed by the server from the HTTP
metadata), unpacked mode one broadcast per tensor in its own dtype. Tensors are checked against
their specs before anything is sent. `timeout` bounds the whole chunk; a failed or timed-out
broadcast aborts the group (the receiver is in an unknown state) and raises `TransportError`.

Packed mode double-buffers like vLLM's producer (`packed_num_buffers` slots, round-robin; there
CUDA streams, here gloo's own worker threads): a bucket's broadcast is posted asynchronously and
the next bucket is packed into the next slot meanwhile; a slot is packed again only after its
previous broadcast completed. Departure: the slots are kept warm between chunks and syncs (up to
`packed_num_buffers` x the largest bucket of trainer memory, freed by `close()`), because fresh
CPU memory page-faults while it is packed; vLLM re-allocates per bucket. The wire (bucket order,
boundaries, bytes) is exactly vLLM's.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from adapters.transport.abortable_store import AbortableStore, rendezvous_failure
from adapters.transport.packed_tensors import PackBuffers, check_payload
from application.ports.weight_sync import TransferInit, WeightChunk
from domain.packing import bucket_boundaries
from domain.tensors import TensorSpec


class TransportError(RuntimeError):
    """The weight-transfer collective failed or timed out."""


class GlooTransport:
    """Implements `application.ports.weight_sync.WeightTransport` over gloo (rank 0 only)."""

    def __init__(self) -> None:
        self._init: TransferInit | None = None
        self._store: dist.TCPStore | None = None
        self._group: dist.ProcessGroupGloo | None = None
        self._slots = PackBuffers()
        self.bytes_sent = 0

    @property
    def is_open(self) -> bool:
        return self._group is not None

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        if self._group is not None:
            raise TransportError(f"gloo transport already open on {self._where()}; close it first")
        what = f"gloo rendezvous at {init.master_address}:{init.master_port} (world_size={init.world_size})"
        delta = timedelta(seconds=timeout)
        store: dist.TCPStore | None = None
        try:
            store = dist.TCPStore(
                init.master_address, init.master_port, init.world_size,
                is_master=True, wait_for_workers=False, timeout=delta,
            )
            group = dist.ProcessGroupGloo(AbortableStore(store, abort, timeout), 0, init.world_size, delta)
        except Exception as error:  # torch raises DistStoreError / RuntimeError / DistNetworkError
            store = None  # noqa: F841 - the traceback keeps this frame: stop listening on the port now
            raise TransportError(rendezvous_failure(what, timeout, abort, error)) from error
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
        what = f"chunk starting at {chunk.specs[0].name!r}" if chunk.specs else "empty chunk"
        if self._init.packed:
            self._send_packed(chunk.specs, tensors, deadline, what)
            return
        for index, tensor in enumerate(tensors):
            work = self._post(tensor.detach().contiguous(), deadline, f"broadcast {index} of {what}")
            self._wait(work, deadline)

    def close(self) -> None:
        group, self._group = self._group, None
        self._store, self._init = None, None
        self._slots.clear()
        if group is not None:
            group.shutdown()

    def _send_packed(
        self, specs: Sequence[TensorSpec], tensors: Sequence[torch.Tensor], deadline: float, what: str
    ) -> None:
        """Pack bucket k+1 into the next slot while bucket k is on the wire (round-robin slots)."""
        assert self._init is not None
        slots = self._init.packed_num_buffers
        in_flight: deque[_Sending] = deque()
        for index, bucket in enumerate(bucket_boundaries(specs, self._init.packed_buffer_size_bytes)):
            if len(in_flight) >= slots:
                self._wait(in_flight.popleft(), deadline)
            try:
                buffer = self._slots.pack([tensors[i] for i in bucket], slot=index % slots)
            except Exception as error:  # e.g. out of memory, after earlier buckets went out
                self._abort()
                raise TransportError(f"gloo packing of bucket {index} of {what} failed: {error}") from error
            in_flight.append(self._post(buffer, deadline, f"broadcast {index} of {what}"))
        while in_flight:
            self._wait(in_flight.popleft(), deadline)

    def _post(self, buffer: torch.Tensor, deadline: float, what: str) -> _Sending:
        assert self._group is not None
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            self._abort()
            raise TransportError(f"gloo {what} on {self._where()}: chunk timeout exceeded before sending")
        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.rootTensor = 0
        options.timeout = timedelta(seconds=remaining)
        sending = _Sending(None, buffer.numel() * buffer.element_size(), what)
        try:
            sending.work = self._group.broadcast([buffer], options)
        except Exception as error:
            self._fail(sending, remaining, error)
        return sending

    def _wait(self, sending: _Sending, deadline: float) -> None:
        remaining = max(deadline - time.monotonic(), 0.001)
        try:
            sending.work.wait(timedelta(seconds=remaining))
        except Exception as error:
            self._fail(sending, remaining, error)
        self.bytes_sent += sending.nbytes

    def _fail(self, sending: _Sending, remaining: float, error: Exception) -> None:
        where = self._where()
        self._abort()
        raise TransportError(
            f"gloo {sending.what} ({sending.nbytes} bytes) on {where} failed "
            f"(receiver gone or timed out after {remaining:.1f}s): {error}"
        ) from error

    def _abort(self) -> None:
        group, self._group = self._group, None
        self._store, self._init = None, None
        self._slots.clear()
        if group is not None:
            group.abort()

    def _where(self) -> str:
        if self._init is None:
            return "a closed group"
        return f"{self._init.master_address}:{self._init.master_port}"


class _Sending:
    """A posted broadcast: its gloo work (which keeps the buffer alive), size and description."""

    __slots__ = ("work", "nbytes", "what")

    def __init__(self, work: dist.Work | None, nbytes: int, what: str) -> None:
        self.work, self.nbytes, self.what = work, nbytes, what
