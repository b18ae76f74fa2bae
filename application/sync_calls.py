"""Bounded calls of one weight sync: each turns into a result or a `StepFailed` naming the
server, the endpoint, the sync number and the seconds waited (invariant I4 of
`domain.sync_protocol`); the once-per-server rendezvous of the transfer group, called off
at once when the server's side of it fails; and `SyncRound`, the per-server steps of one sync
(check, pause, start, send, finish..resume, recovery) that both the concurrent flush
(`application.sync_weights`) and the rolling one (`application.rolling_sync`) are made of."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

import attrs

from application.bounded_call import PendingCall, call_bounded
from application.ports.ranks import RankAgreement
from application.ports.weight_sync import TransferInit, WeightChunk, WeightSource, WeightSyncServer
from application.sync_report import SyncTarget
from domain.sync_protocol import Recovery, ServerState, ServerSync, SyncFailure, SyncStep

T = TypeVar("T")
RANKS_NAME = "<training ranks>"
SOURCE_NAME = "<weight source>"


class StepFailed(Exception):
    """A step of the handshake failed; carries the failure record."""

    def __init__(self, failure: SyncFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


class BoundedSteps:
    """Runs every call of a sync under one timeout and records failures with the sync number."""

    def __init__(self, timeout: float, agreement: RankAgreement) -> None:
        if timeout <= 0:
            raise ValueError(f"weight sync timeout must be > 0, got {timeout}")
        self.timeout = timeout
        self.sync_number = 0
        self._agreement = agreement

    def call(self, server: str, step: SyncStep, fn: Callable[[], T]) -> T:
        """Run `fn` on a daemon thread and wait at most the timeout for it."""
        return self.wait(server, step, PendingCall(fn, f"{step.name.lower()} {server}"), time.monotonic())

    def here(self, server: str, step: SyncStep, fn: Callable[[], T]) -> T:
        """Run `fn` on this thread (transport calls: their state is thread-bound; they honour
        the timeout they are given themselves)."""
        started = time.monotonic()
        try:
            return fn()
        except Exception as exc:
            raise StepFailed(self.failure(server, step, started, exc)) from exc

    def wait(self, server: str, step: SyncStep, pending: PendingCall[T], since: float) -> T:
        """Wait for a call already running, at most the timeout counted from `since`."""
        try:
            return pending.wait(self.timeout - (time.monotonic() - since))
        except Exception as exc:
            raise StepFailed(self.failure(server, step, pending.started, exc)) from exc

    def failure_of(self, server: str, step: SyncStep, pending: PendingCall[T]) -> SyncFailure | None:
        """The failure of a call that already ended with an exception; None if it has not."""
        if not pending.failed():
            return None
        try:
            pending.wait(0.0)
        except Exception as exc:
            return self.failure(server, step, pending.started, exc)
        return None

    def agree(self, ok: bool, failures: list[SyncFailure]) -> bool:
        """Whether every rank passed ok=True; an agreement that fails or times out counts as no."""
        started = time.monotonic()
        try:
            return bool(call_bounded(lambda: self._agreement.all_succeeded(ok, self.timeout), self.timeout))
        except Exception as exc:
            failures.append(self.failure(RANKS_NAME, SyncStep.AGREE, started, exc))
            return False

    def failure(self, server: str, step: SyncStep, started: float, exc: BaseException | str) -> SyncFailure:
        reason = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        return SyncFailure(server, step, self.sync_number, time.monotonic() - started, reason)


def open_transfer_group(steps: BoundedSteps, target: SyncTarget, on_open: Callable[[], None]) -> int | None:
    """GET /get_world_size, then init_weight_transfer (daemon thread) || transport.open (this
    thread), both bounded; returns the weight version the server reports once connected.

    A failed init sets the open's `abort` event, so the trainer stops waiting for a peer that is
    not coming; the init's own failure (the server's answer) is then the one raised."""
    url, server = target.server.url, target.server
    world = steps.call(url, SyncStep.WORLD_SIZE, server.world_size)
    init = attrs.evolve(target.init, world_size=target.init.rank_offset + world)
    abort = threading.Event()
    pending = PendingCall(functools.partial(_init_or_abort, server, init, abort), f"init {url}")
    try:
        steps.here(url, SyncStep.OPEN, lambda: target.transport.open(init, steps.timeout, abort))
    except StepFailed:
        if abort.is_set():  # called off by the init's failure: report that (it is ending right now)
            steps.wait(url, SyncStep.INIT, pending, time.monotonic())
        raise
    on_open()
    steps.wait(url, SyncStep.INIT, pending, time.monotonic())
    return steps.call(url, SyncStep.CHECK_VERSION, server.weight_version)


def _init_or_abort(server: WeightSyncServer, init: TransferInit, abort: threading.Event) -> None:
    try:
        server.init_weight_transfer(init, init.rank_offset)
    except BaseException:
        abort.set()
        raise


class SyncRound:
    """The per-server steps of one sync, each bounded, each reported to the server's `ServerSync`;
    a failure is recorded in `failures` and recovered as the domain says (resume when the model
    is intact, abandon when a reload session may be open). `seconds` holds, per server, the time
    from its pause to its resume."""

    def __init__(self, steps: BoundedSteps, machines: Mapping[str, ServerSync]) -> None:
        self.steps = steps
        self.machines = machines
        self.failures: list[SyncFailure] = []
        self.seconds: dict[str, float] = {}
        self._paused_at: dict[str, float] = {}

    def check(self, target: SyncTarget) -> bool:
        """Precondition: the server is serving the version we recorded; False pauses nothing."""
        url, machine = target.server.url, self.machines[target.server.url]
        if machine.state is not ServerState.SERVING:
            why = machine.failure.describe() if machine.failure else "never connected"
            reason = f"server is {machine.state.name} ({why}); restart it if dead, then connect()"
            self.failures.append(self.steps.failure(url, SyncStep.PRECONDITION, time.monotonic(), reason))
            return False
        machine.begin(self.steps.sync_number)
        started = time.monotonic()
        try:
            reported = self.steps.call(url, SyncStep.CHECK_VERSION, target.server.weight_version)
        except StepFailed as failed:
            self.recover(target, failed.failure)
            return False
        if machine.version_matches(reported):
            return True
        reason = (
            f"server reports weight version {reported!r} but we recorded {machine.version!r}: "
            "restarted or updated by someone else; call connect()"
        )
        failure = self.steps.failure(url, SyncStep.CHECK_VERSION, started, reason)
        self.failures.append(failure)
        machine.version_mismatch(failure)
        return False

    def pause(self, target: SyncTarget) -> bool:
        url = target.server.url
        self._paused_at[url] = time.monotonic()
        return self._step(target, SyncStep.PAUSE, target.server.pause, self.machines[url].paused)

    def start(self, target: SyncTarget) -> bool:
        """start_weight_update on a paused server (from here on its reload session may be open)."""
        machine = self.machines[target.server.url]
        if machine.state is not ServerState.PAUSED:
            return False
        machine.starting()
        return self._step(target, SyncStep.START, target.server.start_weight_update, lambda: None)

    def updating(self, targets: Sequence[SyncTarget]) -> list[SyncTarget]:
        return [t for t in targets if self.machines[t.server.url].state is ServerState.UPDATING]

    def stream(
        self, source: WeightSource, chunk_bytes: int, targets: Sequence[SyncTarget], *, drain: bool
    ) -> tuple[bool, int, int]:
        """Iterate the source, sending each chunk to every target still updating; returns
        (source ok, chunks, bytes). `drain`: iterate to the end even with no target left (other
        training ranks are inside the same collective gathers); otherwise stop there."""
        chunks = nbytes = 0
        started = time.monotonic()
        iterator = source.chunks(chunk_bytes)
        try:
            for chunk in iterator:
                chunks += 1
                nbytes += sum(spec.nbytes for spec in chunk.specs)
                live = self.updating(targets)
                if live:
                    self.send(live, chunk)
                elif not drain:
                    break
                started = time.monotonic()
        except Exception as exc:  # the gather failed on this rank
            self.failures.append(self.steps.failure(SOURCE_NAME, SyncStep.SOURCE, started, exc))
            return False, chunks, nbytes
        finally:
            close = getattr(iterator, "close", None)
            if close is not None:
                close()
        return True, chunks, nbytes

    def send(self, live: Sequence[SyncTarget], chunk: WeightChunk) -> None:
        """Per server: HTTP update_weights on a worker thread || its broadcast on this thread.

        Each server's HTTP call starts right before its own broadcast (a server waits for its
        bytes only from then on, so one hanging server cannot time the next one out); the HTTP
        answers are collected after every broadcast went out."""
        pending: dict[str, tuple[PendingCall[None], float]] = {}
        for target in live:
            url = target.server.url
            call = PendingCall(functools.partial(target.server.update_weights, chunk.specs), f"update {url}")
            try:
                target.transport.broadcast(chunk, self.steps.timeout)
            except Exception as exc:  # the HTTP side's own error, when it has one, is the cause
                failure = self.steps.failure(url, SyncStep.BROADCAST, call.started, exc)
                self.recover(target, self.steps.failure_of(url, SyncStep.UPDATE, call) or failure)
                continue
            pending[url] = (call, time.monotonic())
        for target in live:
            url = target.server.url
            if url not in pending:
                continue
            try:
                self.steps.wait(url, SyncStep.UPDATE, *pending[url])
                self.machines[url].chunk_loaded()
            except StepFailed as failed:
                self.recover(target, failed.failure)

    def finish(self, target: SyncTarget, version: int) -> bool:
        """finish_weight_update(version) -> GET /weight_info == version -> reset_prefix_cache
        -> resume; True when the server is serving the new version."""
        url, server, machine = target.server.url, target.server, self.machines[target.server.url]
        try:
            self.steps.call(url, SyncStep.FINISH, lambda: server.finish_weight_update(version))
            machine.finished(version)
            started = time.monotonic()
            reported = self.steps.call(url, SyncStep.CONFIRM_VERSION, server.weight_version)
            try:
                machine.confirm_version(reported)
            except ValueError as exc:
                raise StepFailed(self.steps.failure(url, SyncStep.CONFIRM_VERSION, started, exc)) from exc
            self.steps.call(url, SyncStep.RESET_PREFIX_CACHE, server.reset_prefix_cache)
            machine.prefix_cache_reset()
        except StepFailed as failed:
            self.recover(target, failed.failure)
            return False
        return self.resume(target)

    def close(
        self, targets: Sequence[SyncTarget], version: int, *, streamed: bool, step: SyncStep, reason: str
    ) -> None:
        """Every target still updating: finish it when its stream was complete and agreed on;
        otherwise abandon its session with a failure at `step` (it is DEAD, never finished)."""
        for target in self.updating(targets):
            if streamed:
                self.finish(target, version)
            else:
                self.abandon(target, step, reason)

    def abandon(self, target: SyncTarget, step: SyncStep, reason: str) -> None:
        """The stream cannot be completed for this server: a failure at `step`, then recovery."""
        self.recover(target, self.steps.failure(target.server.url, step, time.monotonic(), reason))

    def recover(self, target: SyncTarget, failure: SyncFailure) -> None:
        self.failures.append(failure)
        if self.machines[target.server.url].fail(failure) is Recovery.RESUME:
            self.resume(target)

    def resume(self, target: SyncTarget) -> bool:
        url = target.server.url
        resumed = self._step(target, SyncStep.RESUME, target.server.resume, self.machines[url].resumed)
        if url in self._paused_at:
            self.seconds[url] = time.monotonic() - self._paused_at[url]
        return resumed

    def _step(self, target: SyncTarget, step: SyncStep, call: Callable[[], object], event: Callable[[], None]) -> bool:
        """One bounded call; its success event, or the domain's recovery for its failure."""
        try:
            self.steps.call(target.server.url, step, call)
        except StepFailed as failed:
            self.recover(target, failed.failure)
            return False
        event()
        return True
