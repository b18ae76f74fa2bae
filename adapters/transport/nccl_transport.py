"""`NcclTransport`: the trainer's rank 0 of vLLM's native NCCL weight-transfer group, without vLLM.

Interoperates with vLLM 0.32's `distributed/weight_transfer/nccl_engine.py::NCCLWeightTransferEngine`
(the worker side) by matching, step by step, what vLLM's own trainer side does:
- rendezvous (`nccl_common.py::trainer_init` -> `stateless_init_process_group`, or the
  `nccl_unique_id_b64` path of `worker_init_process_group` / `uid_init_process_group`): in address
  mode we host the `StatelessProcessGroup` TCPStore at (master_address, master_port) and publish the
  ncclUniqueId under `broadcast_from/0/0` exactly as `PyNcclCommunicator.__init__` does on rank 0
  (`nccl_rendezvous` documents the key and the pickle); in unique-id mode there is no store and the
  id is the one in `init_info` (mint it here with `mint_unique_id_b64`: the process that mints an
  id hosts its bootstrap root, so it must stay alive);
- `ncclCommInitRank(world_size, id, rank=0)` then the one-element float32 warm-up all_reduce
  (`PyNcclCommunicator._init_comm`; see `nccl_comm`);
- packed broadcast (`packed_tensor.py::packed_nccl_broadcast_producer`): buckets by
  `domain.packing.bucket_boundaries` (vLLM's `total > buffer_size` rule, tensor that crosses
  included) built by `packed_tensors.packed_buckets` as uint8 concatenations, each broadcast from
  rank 0 on one of `packed_num_buffers` cached CUDA streams, round-robin, a slot reused only once
  its previous broadcast completed; unpacked: one broadcast per tensor in its own dtype
  (`NCCLTrainerWeightTransferEngine._broadcast`). Payloads are checked against their specs first
  (`_checked_iter`'s job).

Departures: (1) every wait is bounded by `timeout` (non-blocking communicator, event polling,
abort on expiry: a dead receiver is a `TransportError`, never a hang); vLLM blocks forever.
(2) each side stream first waits for the current stream, so packing never reads a tensor the
trainer's stream is still writing (vLLM's producer relies on host-side ordering). (3) world_size 1
is allowed (a group with no receiver; vLLM disables PyNccl then) so the device path is testable on
one GPU. (4) The store does not wait for workers in its constructor (see `nccl_rendezvous`).
(5) `open` takes an optional `abort` event, checked in the communicator's creation polling: when the
server's init call failed, the rendezvous stops at once (communicator aborted, store dropped).
Failures raise the same `TransportError` as the gloo transport.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from datetime import timedelta

import torch
import torch.distributed as dist

from adapters.transport.abortable_store import rendezvous_failure
from adapters.transport.gloo_transport import TransportError
from adapters.transport.nccl_comm import NcclCommunicator, NcclTimeout
from adapters.transport.nccl_library import NcclError, NcclLibrary
from adapters.transport.nccl_rendezvous import UNIQUE_ID_KEY, NcclInitInfo, encode_unique_id_b64, unique_id_pickle
from adapters.transport.packed_tensors import check_payload, packed_buckets
from application.ports.weight_sync import WeightChunk
from domain.packing import bucket_boundaries


class NcclTransport:
    """Implements `application.ports.weight_sync.WeightTransport` over NCCL (rank 0 only)."""

    def __init__(
        self, library_path: str | None = None, device: int | None = None, library: NcclLibrary | None = None
    ) -> None:
        self._library_path = library_path
        self._lib = library
        self._device = device
        self._info: NcclInitInfo | None = None
        self._store: dist.TCPStore | None = None
        self._comm: NcclCommunicator | None = None
        self._streams: tuple[torch.cuda.Stream, ...] = ()
        self.bytes_sent = 0

    @property
    def is_open(self) -> bool:
        return self._comm is not None and self._comm.is_alive

    @property
    def communicator(self) -> NcclCommunicator:
        """The open group's communicator, for measurements beside the transport (raw broadcast, barrier)."""
        if self._comm is None or not self._comm.is_alive:
            raise TransportError("NCCL transport is not open: no communicator")
        return self._comm

    def library(self) -> NcclLibrary:
        if self._lib is None:
            self._lib = NcclLibrary(self._library_path)
        return self._lib

    def mint_unique_id_b64(self) -> str:
        """A fresh ncclUniqueId for `init_info.nccl_unique_id_b64`; this process hosts its root."""
        return encode_unique_id_b64(self.library().unique_id())

    def open(self, init: object, timeout: float, abort: threading.Event | None = None) -> None:
        """Rank 0 joins the group described by `init` (a `TransferInit` or an `NcclInitInfo`)."""
        if self.is_open:
            raise TransportError(f"NCCL transport already open on {self._where()}; close it first")
        info = init if isinstance(init, NcclInitInfo) else NcclInitInfo.from_transfer_init(init)
        device = torch.cuda.current_device() if self._device is None else self._device
        try:
            unique_id = info.unique_id_bytes() or self._host_store(info, timeout)
            comm = NcclCommunicator.create(self.library(), unique_id, 0, info.world_size, device, timeout, abort)
        except (NcclError, NcclTimeout, RuntimeError, ValueError) as error:  # NcclAborted is a RuntimeError
            self._store = None
            what = f"NCCL rendezvous at {info.where()} (world_size={info.world_size}, cuda:{device})"
            raise TransportError(rendezvous_failure(what, timeout, abort, error)) from error
        self._info, self._comm = info, comm
        # Cached like vLLM's `_get_streams`: the caching allocator keys blocks by stream.
        self._streams = tuple(torch.cuda.Stream(device=device) for _ in range(info.packed_num_buffers))

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        if self._comm is None or self._info is None or not self._comm.is_alive:
            raise TransportError("NCCL transport is not open: call open() before broadcast()")
        tensors: Sequence[torch.Tensor] = list(chunk.payload)
        check_payload(chunk.specs, tensors)
        for tensor, spec in zip(tensors, chunk.specs):
            if tensor.device != self._comm.device:
                raise TransportError(f"NCCL transport sends tensors on {self._comm.device}; {spec.name!r} is on {tensor.device}")
        deadline = time.monotonic() + timeout
        what = f"NCCL broadcast of chunk starting at {chunk.specs[0].name!r} on {self._where()}"
        try:
            if self._info.packed:
                self._send_packed(chunk, tensors, deadline, what)
            else:
                self._send_unpacked(tensors, deadline, what)
        except (NcclError, NcclTimeout, ValueError) as error:
            self._abort()
            raise TransportError(f"{what} failed (receiver gone or timed out after {timeout:.1f}s): {error}") from error

    def close(self) -> None:
        comm, self._comm = self._comm, None
        self._store, self._info, self._streams = None, None, ()
        if comm is not None:
            comm.destroy()

    def _host_store(self, info: NcclInitInfo, timeout: float) -> bytes:
        """Address mode: host vLLM's StatelessProcessGroup store, publish a fresh id, return it."""
        self._store = dist.TCPStore(
            host_name=info.master_address, port=info.master_port, world_size=info.world_size,
            is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout), use_libuv=False,
        )
        unique_id = self.library().unique_id()
        self._store.set(UNIQUE_ID_KEY, unique_id_pickle(unique_id))
        return unique_id

    def _send_packed(self, chunk: WeightChunk, tensors: Sequence[torch.Tensor], deadline: float, what: str) -> None:
        assert self._comm is not None and self._info is not None
        producer = torch.cuda.current_stream(self._comm.device)
        ready = torch.cuda.Event()
        ready.record(producer)
        buckets = packed_buckets(chunk.specs, tensors, self._info.packed_buffer_size_bytes)
        count = len(bucket_boundaries(chunk.specs, self._info.packed_buffer_size_bytes))
        in_flight: list[tuple[torch.cuda.Event, torch.Tensor] | None] = [None] * len(self._streams)
        for index in range(count):
            slot = index % len(self._streams)
            self._drain(in_flight, slot, deadline, what)
            stream = self._streams[slot]
            with torch.cuda.stream(stream):
                stream.wait_event(ready)
                buffer = next(buckets)  # the concatenation runs here, on this slot's stream
                self._comm.broadcast(buffer, stream, deadline, f"{what}, bucket {index}")
                done = torch.cuda.Event()
                done.record(stream)
            in_flight[slot] = (done, buffer)  # keep the buffer alive until its broadcast completed
            self.bytes_sent += buffer.numel()
        for slot in range(len(in_flight)):
            self._drain(in_flight, slot, deadline, what)

    def _send_unpacked(self, tensors: Sequence[torch.Tensor], deadline: float, what: str) -> None:
        assert self._comm is not None
        stream = torch.cuda.current_stream(self._comm.device)
        sends = [tensor.detach().contiguous() for tensor in tensors]  # held until the wait below
        for index, send in enumerate(sends):
            self._comm.broadcast(send, stream, deadline, f"{what}, tensor {index}")
            self.bytes_sent += send.numel() * send.element_size()
        done = torch.cuda.Event()
        done.record(stream)
        self._comm.wait(done, deadline, what)

    def _drain(self, in_flight: list, slot: int, deadline: float, what: str) -> None:
        assert self._comm is not None
        if in_flight[slot] is not None:
            self._comm.wait(in_flight[slot][0], deadline, f"{what}, buffer slot {slot}")
            in_flight[slot] = None

    def _abort(self) -> None:
        comm, self._comm = self._comm, None
        self._store, self._info, self._streams = None, None, ()
        if comm is not None:
            comm.abort()

    def _where(self) -> str:
        return "a closed group" if self._info is None else self._info.where()
