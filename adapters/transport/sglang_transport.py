"""`C10dBucketTransport`: the trainer's rank 0 of SGLang's weight-update group (gloo on CPU, nccl on GPU).

SGLang's workers join with `init_custom_process_group(backend, init_method="tcp://addr:port",
world_size, rank=rank_offset + tp_rank, group_name)` (`utils/common.py`): torch's tcp rendezvous
(rank 0 hosts the TCPStore), wrapped in `PrefixStore(group_name)`, then
`_new_process_group_helper`, which adds `PrefixStore(f"{group_name}/")` and the device prefix of
the backend (`"cpu/"` for gloo, `"cuda/"` for nccl) and sets the group's sequence number. This
transport builds the same store chain around its own `TCPStore(is_master=True,
wait_for_workers=False)` (waiting in the constructor would block before the HTTP call that brings
the workers in) and constructs the backend directly, never through `init_process_group` or
torch's group registry, so it coexists with a training job's own default group under torchrun
and can be reopened with the same group name after a server restart. With gloo the constructor
waits for the workers through `AbortableStore` (on top of the prefix chain), so `open` stops as soon
as `abort` is set; torch's nccl backend forms its communicator lazily, at the first broadcast, so
its `open` does not wait for the workers at all.

Data plane (`load_format: "flattened_bucket"`): ONE broadcast per chunk, src 0, of one uint8
buffer holding the chunk's tensors back to back in `adapters.sglang.bucket_layout` order, the
order `SglangHttpServer.update_weights` announces (SGLang receives it with
`FlattenedTensorBucket.empty(names, dtypes, shapes)`). Not vLLM's packed buckets: there is no
`packed_buffer_size_bytes` split; the chunk size the use case picks is the buffer size. Tensors
are checked against their specs before anything is sent. `timeout` bounds the broadcast; a failed
or timed-out broadcast aborts the group (the receiver is in an unknown state) and raises
`TransportError`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from adapters.sglang.bucket_layout import FlattenedLayout, flattened_layout
from adapters.sglang.wire import BACKENDS, DEFAULT_GROUP_NAME
from adapters.transport.abortable_store import AbortableStore, rendezvous_failure
from adapters.transport.gloo_transport import TransportError
from adapters.transport.packed_tensors import as_bytes, check_payload
from application.ports.weight_sync import TransferInit, WeightChunk


class C10dBucketTransport:
    """Implements `application.ports.weight_sync.WeightTransport` for SGLang servers (rank 0 only)."""

    def __init__(
        self, backend: str = "gloo", device: str | torch.device | None = None, group_name: str = DEFAULT_GROUP_NAME
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"SGLang weight-transfer backend must be one of {BACKENDS}, got {backend!r}")
        self._backend = backend
        self._device = torch.device(device) if device is not None else self._default_device(backend)
        self._group_name = group_name
        self._init: TransferInit | None = None
        self._store: dist.TCPStore | None = None
        self._group: dist.ProcessGroup | None = None
        self.bytes_sent = 0

    @staticmethod
    def _default_device(backend: str) -> torch.device:
        if backend == "nccl":
            return torch.device("cuda", torch.cuda.current_device())
        return torch.device("cpu")

    @property
    def is_open(self) -> bool:
        return self._group is not None

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        if self._group is not None:
            raise TransportError(f"{self._backend} transport already open on {self._where()}; close it first")
        delta = timedelta(seconds=timeout)
        store: dist.TCPStore | None = None
        what = (
            f"{self._backend} rendezvous of group {self._group_name!r} at {init.master_address}:{init.master_port} "
            f"(world_size={init.world_size})"
        )
        try:
            store = dist.TCPStore(
                init.master_address, init.master_port, init.world_size,
                is_master=True, wait_for_workers=False, timeout=delta,
            )
            group = self._make_group(store, init.world_size, delta, abort)
        except Exception as error:  # torch raises DistStoreError / RuntimeError / DistNetworkError
            store = None  # noqa: F841 - the traceback keeps this frame: stop listening on the port now
            raise TransportError(rendezvous_failure(what, timeout, abort, error)) from error
        self._init, self._store, self._group = init, store, group

    def _make_group(
        self, store: dist.TCPStore, world_size: int, timeout: timedelta, abort: threading.Event | None
    ) -> dist.ProcessGroup:
        """The backend over SGLang's store chain: group_name / f"{group_name}/" / f"{device}/"."""
        device_type = "cuda" if self._backend == "nccl" else "cpu"
        named = dist.PrefixStore(f"{self._group_name}/", dist.PrefixStore(self._group_name, store))
        chain = dist.PrefixStore(f"{device_type}/", named)
        if self._backend == "nccl":
            options = dist.ProcessGroupNCCL.Options()
            options.is_high_priority_stream = False
            options._timeout = timeout
            group = dist.ProcessGroupNCCL(chain, 0, world_size, options)
        else:
            waits = AbortableStore(chain, abort, timeout.total_seconds())
            group = dist.ProcessGroupGloo(waits, 0, world_size, timeout)
        group._set_sequence_number_for_group()  # as `_new_process_group_helper` does on every rank
        return group

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        if self._group is None or self._init is None:
            raise TransportError(f"{self._backend} transport is not open: call open() before broadcast()")
        tensors: Sequence[torch.Tensor] = list(chunk.payload)
        check_payload(chunk.specs, tensors)
        layout = flattened_layout(chunk.specs)
        buffer = self._flatten(layout, tensors)
        self._send(buffer, time.monotonic() + timeout, f"flattened bucket starting at {layout.specs[0].name!r}")

    def _flatten(self, layout: FlattenedLayout, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
        """One uint8 buffer on the transport's device, tensors at their layout offsets."""
        buffer = torch.empty(layout.nbytes, dtype=torch.uint8, device=self._device)
        for entry in layout.entries:
            buffer[entry.offset:entry.end].copy_(as_bytes(tensors[entry.source_index]))
        return buffer

    def close(self) -> None:
        group, self._group = self._group, None
        self._store, self._init = None, None
        if group is not None:
            group.shutdown()

    def _send(self, buffer: torch.Tensor, deadline: float, what: str) -> None:
        assert self._group is not None
        remaining = deadline - time.monotonic()
        options = dist.BroadcastOptions()
        options.rootRank = 0
        options.rootTensor = 0
        options.timeout = timedelta(seconds=max(remaining, 0.001))
        try:
            self._group.broadcast([buffer], options).wait(timedelta(seconds=max(remaining, 0.001)))
        except Exception as error:
            where = self._where()
            self._abort()
            raise TransportError(
                f"{self._backend} broadcast of the {what} ({buffer.numel()} bytes) on {where} failed "
                f"(receiver gone or timed out after {remaining:.1f}s): {error}"
            ) from error
        self.bytes_sent += buffer.numel()

    def _abort(self) -> None:
        group, self._group = self._group, None
        self._store, self._init = None, None
        if group is not None:
            group.abort()

    def _where(self) -> str:
        if self._init is None:
            return "a closed group"
        return f"{self._init.master_address}:{self._init.master_port} (group {self._group_name!r})"
