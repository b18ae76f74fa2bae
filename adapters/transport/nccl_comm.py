"""One NCCL communicator on one CUDA device, where every wait is bounded.

Matches vLLM 0.32 `device_communicators/pynccl.py::PyNcclCommunicator._init_comm`: after the
communicator forms, a one-element float32 SUM `all_reduce` on the current stream is the warm-up
handshake every rank issues before any other collective (a peer that skips it deadlocks the
group), then the stream is synchronized. `broadcast` is in place on the root, as vLLM's.

Departure (bounded waits): the communicator is created NON-BLOCKING (see `nccl_library`).
Creation polls `ncclCommGetAsyncError` until it leaves `ncclInProgress`; GPU work is waited for
by polling a CUDA event beside `ncclCommGetAsyncError`. Past the deadline, or on an async error
(a peer died: `ncclRemoteError` / `ncclSystemError`), the communicator is aborted
(`ncclCommAbort`, which also stops kernels stuck waiting for a peer) and `NcclTimeout` /
`NcclError` is raised. Abort and destroy run on a daemon thread joined with a timeout, as vLLM's
`PyNcclCommunicator.destroy` does, so teardown cannot hang the trainer either. Creation also
checks an optional `abort` event in the same polling loops: once it is set (the server's
`/init_weight_transfer_engine` failed, so no peer is coming) the half-formed communicator is
aborted and `NcclAborted` raised at once instead of at the deadline.
"""

from __future__ import annotations

import threading
import time

import torch

from adapters.transport.nccl_library import DATA_TYPES, IN_PROGRESS, SUCCESS, NcclError, NcclLibrary

POLL_SECONDS = 0.0002
TEARDOWN_SECONDS = 10.0


class NcclTimeout(TimeoutError):
    """An NCCL wait ran past its deadline; the communicator was aborted."""


class NcclAborted(RuntimeError):
    """Creation was called off through its `abort` event; the communicator was aborted."""


def nccl_dtype(dtype: torch.dtype) -> int:
    name = str(dtype).removeprefix("torch.")
    if name not in DATA_TYPES:
        raise ValueError(f"NCCL cannot broadcast dtype {name}; supported: {', '.join(DATA_TYPES)}")
    return DATA_TYPES[name]


class NcclCommunicator:
    """A formed, warmed-up communicator; create it with `NcclCommunicator.create`."""

    def __init__(self, library: NcclLibrary, handle: int, rank: int, world_size: int, device: torch.device) -> None:
        self._lib = library
        self._handle: int | None = handle
        self.rank, self.world_size, self.device = rank, world_size, device

    @classmethod
    def create(
        cls, library: NcclLibrary, unique_id: bytes, rank: int, world_size: int, device: int, timeout: float,
        abort: threading.Event | None = None,
    ) -> NcclCommunicator:
        """`ncclCommInitRankConfig` + warm-up all_reduce, both within `timeout` seconds, or until `abort`."""
        deadline = time.monotonic() + timeout
        where = f"rank {rank} of {world_size} on cuda:{device}"
        with torch.cuda.device(device):
            handle, code = library.comm_init_non_blocking(world_size, unique_id, rank)
            comm = cls(library, handle, rank, world_size, torch.device("cuda", device))
            comm._settle(code, deadline, f"ncclCommInitRank ({where}): waiting for all {world_size} ranks", abort)
            comm._warm_up(deadline, where, abort)
        return comm

    @property
    def is_alive(self) -> bool:
        return self._handle is not None

    def broadcast(self, tensor: torch.Tensor, stream: torch.cuda.Stream, deadline: float, what: str) -> None:
        """Enqueue a broadcast from rank 0 of `tensor` (contiguous, on this device) on `stream`."""
        if tensor.device != self.device or not tensor.is_contiguous():
            raise ValueError(f"{what}: NCCL broadcast needs a contiguous tensor on {self.device}, got {tensor.device}")
        code = self._lib.broadcast(
            tensor.data_ptr(), tensor.numel(), nccl_dtype(tensor.dtype), 0, self._live(), stream.cuda_stream
        )
        self._settle(code, deadline, what)

    def all_reduce_sum(self, tensor: torch.Tensor, stream: torch.cuda.Stream, deadline: float, what: str) -> None:
        code = self._lib.all_reduce_sum(
            tensor.data_ptr(), tensor.data_ptr(), tensor.numel(), nccl_dtype(tensor.dtype), self._live(),
            stream.cuda_stream,
        )
        self._settle(code, deadline, what)

    def wait(self, event: torch.cuda.Event, deadline: float, what: str, abort: threading.Event | None = None) -> None:
        """Until `event` completes; aborts and raises on an async error, `abort`, or past the deadline."""
        while not event.query():
            self._check_async(what)
            self._check_abort(abort, what)
            if time.monotonic() > deadline:
                self.abort()
                raise NcclTimeout(f"{what}: not complete before the deadline; communicator aborted")
            time.sleep(POLL_SECONDS)
        self._check_async(what)

    def abort(self) -> None:
        self._teardown(self._lib.abort, "ncclCommAbort")

    def destroy(self) -> None:
        self._teardown(self._lib.destroy, "ncclCommDestroy")

    def _warm_up(self, deadline: float, where: str, abort: threading.Event | None) -> None:
        stream = torch.cuda.current_stream(self.device)
        data = torch.zeros(1, dtype=torch.float32, device=self.device)
        self.all_reduce_sum(data, stream, deadline, f"warm-up all_reduce ({where})")
        done = torch.cuda.Event()
        done.record(stream)
        self.wait(done, deadline, f"warm-up all_reduce ({where})", abort)

    def _settle(self, code: int, deadline: float, what: str, abort: threading.Event | None = None) -> None:
        """A non-blocking call returned `code`: poll until the communicator leaves ncclInProgress."""
        while code == IN_PROGRESS:
            self._check_abort(abort, what)
            if time.monotonic() > deadline:
                self.abort()
                raise NcclTimeout(f"{what}: still in progress at the deadline; communicator aborted")
            time.sleep(POLL_SECONDS)
            code = self._lib.async_error(self._live())
        if code != SUCCESS:
            self.abort()
            raise NcclError(what, code, "asynchronous error; communicator aborted")

    def _check_abort(self, abort: threading.Event | None, what: str) -> None:
        if abort is not None and abort.is_set():
            self.abort()
            raise NcclAborted(f"{what}: called off (the other side's join failed); communicator aborted")

    def _check_async(self, what: str) -> None:
        state = self._lib.async_error(self._live())
        if state not in (SUCCESS, IN_PROGRESS):
            self.abort()
            raise NcclError(what, state, "asynchronous error (a peer failed or left); communicator aborted")

    def _live(self) -> int:
        if self._handle is None:
            raise NcclError("communicator", 5, "used after it was aborted or destroyed")
        return self._handle

    def _teardown(self, call, name: str) -> None:
        handle, self._handle = self._handle, None
        if handle is None:
            return
        device = self.device.index

        def run() -> None:
            with torch.cuda.device(device):
                call(handle)

        thread = threading.Thread(target=run, name=f"nccl-{name}", daemon=True)
        thread.start()
        thread.join(TEARDOWN_SECONDS)
