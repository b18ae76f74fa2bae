"""Working in-memory fakes of the weight-sync ports, with the failures real servers have.

`FakeSyncServer` follows vLLM 0.32's worker rules (`v1/worker/gpu_worker.py`): update before
start and finish without start raise; an exception inside update drops the session but leaves
the layerwise reload unfinished (model `"partial"`); finishing a stream that did not carry every
tensor of the model leaves it `"garbage"`. It records what a sync must never do (resume
mid-update, serve a model that is not intact, commit a partial stream) so tests can assert it.
`FakeTransport` is rank 0 of a collective shared with its server: `broadcast` blocks until the
server's `update_weights` took the chunk, as a real collective does.

Faults (`fail_next(step, kind)`): "error" = HTTP 5xx before any effect; "reset" = the effect
happens, then the connection resets (response lost); "timeout" = the call blocks until
`release()` or `hang_limit` seconds, then raises TimeoutError without effect.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator, Sequence

import attrs

from application.ports.weight_sync import TransferInit, WeightChunk
from domain.packing import bucket_boundaries
from domain.tensors import TensorSpec

KINDS = ("error", "reset", "timeout")


class FakeHttpError(RuntimeError):
    def __init__(self, url: str, step: str, status: int = 500) -> None:
        super().__init__(f"HTTP {status} from {url} on {step}")
        self.status = status


@attrs.define
class _Fault:
    kind: str
    after: int  # calls of that step to let through first


class _Faults:
    """Armed faults by step name, and the release switch of hanging calls."""

    def __init__(self, owner: str, hang_limit: float) -> None:
        self._owner = owner
        self._armed: dict[str, list[_Fault]] = {}
        self._release = threading.Event()
        self.hang_limit = hang_limit

    def arm(self, step: str, kind: str, after: int = 0) -> None:
        if kind not in KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; known: {KINDS}")
        self._armed.setdefault(step, []).append(_Fault(kind, after))

    def release(self) -> None:
        self._release.set()

    def before(self, step: str, timeout: float | None = None) -> str | None:
        """Raise or block for an armed fault; returns "reset" when the effect must happen first.

        A hang lasts until `release()`, `hang_limit`, or the caller's own `timeout` when the
        port passes one (transport calls must honour theirs)."""
        faults = self._armed.get(step, [])
        for fault in list(faults):
            if fault.after > 0:
                fault.after -= 1
                continue
            faults.remove(fault)
            if fault.kind == "error":
                raise FakeHttpError(self._owner, step)
            if fault.kind == "timeout":
                self._release.wait(self.hang_limit if timeout is None else min(timeout, self.hang_limit))
                raise TimeoutError(f"{self._owner} {step}: no answer (fake hang)")
            return "reset"
        return None

    def after(self, step: str, outcome: str | None) -> None:
        if outcome == "reset":
            raise ConnectionResetError(f"{self._owner} {step}: connection reset by peer (fake)")


class _Link:
    """The collective of one transfer group: chunks travel trainer -> server in order."""

    def __init__(self) -> None:
        self.trainer_joined = threading.Event()
        self.chunks: queue.Queue[tuple[tuple[TensorSpec, ...], threading.Event]] = queue.Queue()
        self.broken = False


class FakeSyncServer:
    """A generation server's RL control surface (`WeightSyncServer`), in memory."""

    def __init__(self, url: str, model_specs: Sequence[TensorSpec], *, workers: int = 1,
                 collective_timeout: float = 1.0, hang_limit: float = 2.0) -> None:
        self._url = url
        self.model_specs = tuple(model_specs)
        self.workers = workers
        self.collective_timeout = collective_timeout
        self.faults = _Faults(url, hang_limit)
        self._lock = threading.Condition()
        self.link: _Link | None = None
        self.paused = False
        self.session_active = False
        self.model = "intact"  # intact | reloading | partial | garbage
        self.version: int | None = None
        self.received: list[tuple[TensorSpec, ...]] = []
        self.finished_versions: list[int] = []
        self.init_infos: list[TransferInit] = []
        self.prefix_cache_resets = 0
        self.restarts = 0
        self.resumed_mid_update = False
        self.served_broken_model = False
        self.committed_partial_stream = False

    @property
    def url(self) -> str:
        return self._url

    def fail_next(self, step: str, kind: str, after: int = 0) -> None:
        self.faults.arm(step, kind, after)

    def release(self) -> None:
        self.faults.release()

    def restart(self) -> None:
        """The server process restarted: a fresh model, no session, no group, no version."""
        with self._lock:
            if self.link is not None:
                self.link.broken = True
            self.link, self.paused, self.session_active = None, False, False
            self.model, self.version, self.received = "intact", None, []
            self.restarts += 1

    def _guard(self, step: str, effect):  # noqa: ANN001, ANN202 - tiny internal helper
        outcome = self.faults.before(step)
        result = effect()
        self.faults.after(step, outcome)
        return result

    def world_size(self) -> int:
        return self._guard("world_size", lambda: self.workers)

    def init_weight_transfer(self, init: TransferInit, rank_offset: int) -> None:
        def effect() -> None:
            if init.world_size != rank_offset + self.workers:
                raise FakeHttpError(self._url, f"init_weight_transfer: world_size {init.world_size}", 400)
            with self._lock:
                self.link = _Link()
                self.init_infos.append(init)
                self._lock.notify_all()
                link = self.link
            if not link.trainer_joined.wait(self.collective_timeout):
                raise TimeoutError(f"{self._url}: trainer never joined the transfer group")
        self._guard("init_weight_transfer", effect)

    def join_as_trainer(self, timeout: float, abort: threading.Event | None = None) -> _Link:
        """Called by FakeTransport.open: meet the server's side of the group (polls `abort`)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self.link is None or self.link.trainer_joined.is_set():
                if abort is not None and abort.is_set():
                    raise ConnectionAbortedError(f"{self._url}: rendezvous called off")
                if not self._lock.wait(min(max(deadline - time.monotonic(), 0.0), 0.01)) and time.monotonic() >= deadline:
                    raise TimeoutError(f"{self._url}: server never joined the transfer group")
            self.link.trainer_joined.set()
            return self.link

    def pause(self) -> None:
        self._guard("pause", lambda: setattr(self, "paused", True))

    def start_weight_update(self) -> None:
        def effect() -> None:
            if self.session_active:
                raise FakeHttpError(self._url, "start_weight_update: a weight update is already active")
            self.session_active, self.model, self.received = True, "reloading", []
        self._guard("start_weight_update", effect)

    def update_weights(self, specs: Sequence[TensorSpec]) -> None:
        self._guard("update_weights", lambda: self._receive(tuple(specs)))

    def _receive(self, specs: tuple[TensorSpec, ...]) -> None:
        if not self.session_active:
            raise FakeHttpError(self._url, "start_weight_update must be called before update_weights")
        try:
            link = self.link
            if link is None or link.broken:
                raise ConnectionError(f"{self._url}: no transfer group")
            try:
                sent, arrived = link.chunks.get(timeout=self.collective_timeout)
            except queue.Empty:
                raise TimeoutError(f"{self._url}: broadcast never arrived") from None
            if sent != specs:
                raise ValueError(f"{self._url}: broadcast carries {sent}, update_weights announced {specs}")
            arrived.set()
            self.received.append(specs)
        except BaseException:
            self.session_active, self.model = False, "partial"  # vLLM: session reset, reload unfinished
            if self.link is not None:
                self.link.broken = True
            raise

    def finish_weight_update(self, weight_version: int) -> None:
        def effect() -> None:
            if not self.session_active:
                raise FakeHttpError(self._url, "finish_weight_update called without a matching start")
            complete = tuple(s for chunk in self.received for s in chunk) == self.model_specs
            self.session_active = False
            self.model = "intact" if complete else "garbage"
            self.committed_partial_stream |= not complete
            self.version = weight_version
            self.finished_versions.append(weight_version)
        self._guard("finish_weight_update", effect)

    def reset_prefix_cache(self) -> None:
        self._guard("reset_prefix_cache", lambda: setattr(self, "prefix_cache_resets", self.prefix_cache_resets + 1))

    def resume(self) -> None:
        def effect() -> None:
            self.resumed_mid_update |= self.session_active
            self.served_broken_model |= self.model != "intact"
            self.paused = False
        self._guard("resume", effect)

    def weight_version(self) -> int | None:
        return self._guard("weight_version", lambda: self.version)


class FakeTransport:
    """Rank 0 of the fake collective (`WeightTransport`); can hang or fail on open/broadcast."""

    def __init__(self, server: FakeSyncServer, hang_limit: float = 2.0) -> None:
        self.server = server
        self.faults = _Faults(f"transport of {server.url}", hang_limit)
        self.link: _Link | None = None
        self.opened = 0
        self.closed = 0
        self.bytes_sent = 0
        self.sent: list[tuple[TensorSpec, ...]] = []

    def fail_next(self, step: str, kind: str, after: int = 0) -> None:
        """step: "open" or "broadcast"."""
        self.faults.arm(step, kind, after)

    def release(self) -> None:
        self.faults.release()

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        outcome = self.faults.before("open", timeout)
        self.link = self.server.join_as_trainer(timeout, abort)
        self.opened += 1
        self.faults.after("open", outcome)

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        outcome = self.faults.before("broadcast", timeout)
        link = self.link
        if link is None or link.broken:
            raise ConnectionError(f"transport of {self.server.url}: collective is not open or broken")
        arrived = threading.Event()
        link.chunks.put((tuple(chunk.specs), arrived))
        if not arrived.wait(timeout):
            link.broken = True
            raise TimeoutError(f"transport of {self.server.url}: broadcast not received within {timeout}s")
        self.sent.append(tuple(chunk.specs))
        self.bytes_sent += sum(spec.nbytes for spec in chunk.specs)
        self.faults.after("broadcast", outcome)

    def close(self) -> None:
        self.link = None
        self.closed += 1


class FakeWeightSource:
    """A model's tensors in wire order, chunked by the packed-bucket rule (`WeightSource`)."""

    def __init__(self, specs: Sequence[TensorSpec], *, is_sender: bool = True) -> None:
        self.specs = tuple(specs)
        self._is_sender = is_sender
        self.fail_at_chunk: int | None = None
        self.iterations = 0
        self.chunks_yielded = 0

    @property
    def is_sender(self) -> bool:
        return self._is_sender

    def chunks(self, chunk_bytes: int) -> Iterator[WeightChunk]:
        self.iterations += 1
        for index, bucket in enumerate(bucket_boundaries(self.specs, chunk_bytes)):
            if self.fail_at_chunk == index:
                self.fail_at_chunk = None
                raise RuntimeError(f"gather failed at chunk {index} (fake)")
            specs = tuple(self.specs[i] for i in bucket)
            payload = tuple(spec.name for spec in specs) if self._is_sender else None
            self.chunks_yielded += 1
            yield WeightChunk(specs, payload)


class ThreadRanks:
    """`RankAgreement` for ranks running as threads of one process: an all-reduce of booleans."""

    def __init__(self, world_size: int) -> None:
        self._barrier = threading.Barrier(world_size)
        self._votes: list[bool] = []
        self._lock = threading.Lock()
        self._verdict = True

    def all_succeeded(self, ok: bool, timeout: float) -> bool:
        with self._lock:
            self._votes.append(ok)
        try:
            index = self._barrier.wait(timeout)
            if index == 0:
                with self._lock:
                    self._verdict, self._votes = all(self._votes), []
            self._barrier.wait(timeout)
        except threading.BrokenBarrierError:
            raise TimeoutError("a rank did not reach the agreement in time") from None
        return self._verdict
