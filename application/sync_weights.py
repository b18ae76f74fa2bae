"""SyncWeights: push the policy's weights to one or many generation servers, bounded and safe.

Drives the handshake of `domain.sync_protocol` through the ports of
`application.ports.weight_sync`, one `SyncTarget` (server + its own transport/group) per server:

    connect():    per server  GET /get_world_size -> init_weight_transfer (worker thread)
                                                      || transport.open (this thread)
                              (a failed init aborts the open at once: the error is the server's
                              answer, not the rendezvous timeout)
    sync(v):      per server  GET /weight_info == recorded? -> pause -> start_weight_update
                  per chunk   every server: update_weights (worker thread) || broadcast (this thread)
                  ranks agree the gather succeeded everywhere (commit point)
                  per server  finish_weight_update(v) -> GET /weight_info == v -> reset_prefix_cache
                              -> resume
                  ranks agree the sync succeeded everywhere

Every call across a process boundary is bounded by `timeout`: server calls run on daemon
threads (a chunk's HTTP wait counts from the end of that server's broadcast); transport calls
run on this thread (collective state is thread-bound) and must honour the timeout given them.
Failures never stop the source iteration: the other training ranks are inside the same
collective gathers, so the sender drains the source to its end even with no server left.
A failed server is recovered as the domain says (resume when the model is intact; abandon,
neither finish nor resume, when the reload session was open) and the sync raises
`WeightSyncError` on every rank. A DEAD server blocks later syncs (nothing is paused) until it
is restarted, reported with `server_restarted(url)`, and `connect()`ed.

Departure from TRL/vLLM clients: TRL's sync GRPO skips /pause and checks nothing after
finish; we pause (mode chosen by the server adapter), confirm the version through /weight_info,
and agree across ranks before finishing, so a rank that failed its gather never lets a server
commit weights built from a partial gather.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence

import attrs

from application.bounded_call import PendingCall
from application.ports.ranks import RankAgreement
from application.ports.weight_publisher import PublishReport
from application.ports.weight_sync import WeightChunk, WeightSource
from application.single_process import SingleProcessAgreement
from application.sync_calls import RANKS_NAME, BoundedSteps, StepFailed, open_transfer_group
from application.sync_report import ServerReport, SyncReport, SyncTarget, WeightSyncError
from domain.sync_protocol import Recovery, ServerState, ServerSync, SyncFailure, SyncStep

SOURCE_NAME = "<weight source>"


class SyncWeights:
    """The weight-sync use case; build one per training rank with the same source and targets."""

    def __init__(
        self,
        targets: Sequence[SyncTarget],
        source: WeightSource,
        *,
        timeout: float,
        chunk_bytes: int,
        agreement: RankAgreement | None = None,
    ) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        urls = [t.server.url for t in targets]
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate server urls in sync targets: {urls}")
        self._targets = tuple(targets)
        self._source = source
        self._steps = BoundedSteps(timeout, agreement or SingleProcessAgreement())
        self._chunk_bytes = chunk_bytes
        self._machines = {url: ServerSync(url) for url in urls}
        self._opened: set[str] = set()
        self._sync_number = 0
        self._paused_at: dict[str, float] = {}
        self._seconds: dict[str, float] = {}

    @property
    def states(self) -> dict[str, ServerState]:
        return {url: m.state for url, m in self._machines.items()}

    @property
    def versions(self) -> dict[str, int | None]:
        """The recorded (confirmed) weight version of each server."""
        return {url: m.version for url, m in self._machines.items()}

    def server_sync(self, url: str) -> ServerSync:
        """A copy of one server's protocol state."""
        return attrs.evolve(self._machines[url])

    # ---- connect -----------------------------------------------------------------------
    def connect(self) -> None:
        """Form the transfer group of every UNCONNECTED server; all ranks call it together."""
        failures: list[SyncFailure] = []
        if self._source.is_sender:
            for target in self._targets:
                machine = self._machines[target.server.url]
                if machine.state is not ServerState.UNCONNECTED:
                    continue
                try:
                    self._connect_one(target, machine)
                except StepFailed as failed:
                    failures.append(failed.failure)
                    machine.fail(failed.failure)
        if not self._steps.agree(not failures, failures) or failures:
            raise self._error(failures)

    def _connect_one(self, target: SyncTarget, machine: ServerSync) -> None:
        url = target.server.url
        if url in self._opened:  # reconnect after a restart: the old group is gone
            self._opened.discard(url)
            self._steps.here(url, SyncStep.CLOSE, target.transport.close)
        machine.connected(open_transfer_group(self._steps, target, lambda: self._opened.add(url)))

    def server_restarted(self, url: str) -> None:
        """Whoever restarted the server process says so (the way out of DEAD); then `connect()`."""
        if url not in self._machines:
            raise KeyError(f"no sync target with url {url!r} (have: {sorted(self._machines)})")
        self._machines[url].replaced()

    def close(self) -> None:
        """Close every open transport (bounded); raises WeightSyncError naming those that failed."""
        failures: list[SyncFailure] = []
        for target in self._targets:
            url = target.server.url
            if url in self._opened:
                self._opened.discard(url)
                try:
                    self._steps.here(url, SyncStep.CLOSE, target.transport.close)
                except StepFailed as failed:
                    failures.append(failed.failure)
        if failures:
            raise self._error(failures)

    # ---- sync --------------------------------------------------------------------------
    def sync(self, version: int) -> SyncReport:
        """Push the source's weights as `version` to every server; all ranks call it together."""
        self._sync_number += 1
        self._steps.sync_number = self._sync_number
        started = time.monotonic()
        failures: list[SyncFailure] = []
        self._paused_at.clear()
        self._seconds.clear()
        sender = self._source.is_sender
        ready = self._prepare(failures) if sender else True
        if sender and ready:
            self._open_sessions(failures)
        source_ok, chunks, nbytes = self._stream(failures)
        gathered = self._steps.agree(ready and source_ok, failures)
        self._close_sessions(version, gathered, failures)
        synced = self._steps.agree(not failures, failures)
        if failures or not (gathered and synced):
            raise self._error(failures)
        servers = tuple(
            ServerReport(url, m.version, m.chunks, self._seconds.get(url, 0.0)) for url, m in self._machines.items()
        ) if sender else ()
        return SyncReport(self._sync_number, version, time.monotonic() - started, nbytes, chunks, servers)

    def publish(self, version: int) -> PublishReport:
        """`WeightPublisher` port: sync and report what the training loop records."""
        report = self.sync(version)
        return PublishReport(version=version, seconds=report.seconds, bytes_sent=report.bytes)

    def _prepare(self, failures: list[SyncFailure]) -> bool:
        """Every server must be serving at the version we recorded; otherwise pause nothing."""
        for target in self._targets:
            url, machine = target.server.url, self._machines[target.server.url]
            if machine.state is not ServerState.SERVING:
                why = machine.failure.describe() if machine.failure else "never connected"
                reason = f"server is {machine.state.name} ({why}); restart it if dead, then connect()"
                failures.append(self._steps.failure(url, SyncStep.PRECONDITION, time.monotonic(), reason))
                continue
            machine.begin(self._sync_number)
            started = time.monotonic()
            try:
                reported = self._steps.call(url, SyncStep.CHECK_VERSION, target.server.weight_version)
            except StepFailed as failed:
                self._recover(target, failed.failure, failures)
                continue
            if not machine.version_matches(reported):
                reason = (
                    f"server reports weight version {reported!r} but we recorded {machine.version!r}: "
                    "restarted or updated by someone else; call connect()"
                )
                failure = self._steps.failure(url, SyncStep.CHECK_VERSION, started, reason)
                failures.append(failure)
                machine.version_mismatch(failure)
        return not failures

    def _open_sessions(self, failures: list[SyncFailure]) -> None:
        for target in self._targets:
            url = target.server.url
            self._paused_at[url] = time.monotonic()
            self._step(target, SyncStep.PAUSE, target.server.pause, self._machines[url].paused, failures)
        for target in self._targets:
            machine = self._machines[target.server.url]
            if machine.state is ServerState.PAUSED:
                machine.starting()
                self._step(target, SyncStep.START, target.server.start_weight_update, lambda: None, failures)

    def _stream(self, failures: list[SyncFailure]) -> tuple[bool, int, int]:
        """Iterate the whole source; send each chunk to every server still updating."""
        chunks = nbytes = 0
        started = time.monotonic()
        try:
            for chunk in self._source.chunks(self._chunk_bytes):
                chunks += 1
                nbytes += sum(spec.nbytes for spec in chunk.specs)
                live = [t for t in self._targets if self._machines[t.server.url].state is ServerState.UPDATING]
                if live:
                    self._send(live, chunk, failures)
                started = time.monotonic()
        except Exception as exc:  # the gather failed on this rank
            failures.append(self._steps.failure(SOURCE_NAME, SyncStep.SOURCE, started, exc))
            return False, chunks, nbytes
        return True, chunks, nbytes

    def _send(self, live: list[SyncTarget], chunk: WeightChunk, failures: list[SyncFailure]) -> None:
        """Per server: HTTP update_weights on a worker thread || its broadcast on this thread.

        Each server's HTTP call starts right before its own broadcast (a server waits for its
        bytes only from then on, so one hanging server cannot time the next one out); the HTTP
        answers are collected after every broadcast went out."""
        pending: dict[str, tuple[PendingCall[None], float]] = {}
        for target in live:
            url = target.server.url
            call = PendingCall(functools.partial(target.server.update_weights, chunk.specs), f"update {url}")
            try:
                target.transport.broadcast(chunk, self._steps.timeout)
            except Exception as exc:  # the HTTP side's own error, when it has one, is the cause
                failure = self._steps.failure(url, SyncStep.BROADCAST, call.started, exc)
                self._recover(target, self._steps.failure_of(url, SyncStep.UPDATE, call) or failure, failures)
                continue
            pending[url] = (call, time.monotonic())
        for target in live:
            url = target.server.url
            if url not in pending:
                continue
            try:
                self._steps.wait(url, SyncStep.UPDATE, *pending[url])
                self._machines[url].chunk_loaded()
            except StepFailed as failed:
                self._recover(target, failed.failure, failures)

    def _close_sessions(self, version: int, gathered: bool, failures: list[SyncFailure]) -> None:
        for target in self._targets:
            url, server, machine = target.server.url, target.server, self._machines[target.server.url]
            if machine.state is not ServerState.UPDATING:
                continue
            if not gathered:
                reason = "a training rank failed its part of the gather; the stream is abandoned"
                self._recover(target, self._steps.failure(url, SyncStep.AGREE, time.monotonic(), reason), failures)
                continue
            try:
                self._steps.call(url, SyncStep.FINISH, lambda: server.finish_weight_update(version))
                machine.finished(version)
                started = time.monotonic()
                reported = self._steps.call(url, SyncStep.CONFIRM_VERSION, server.weight_version)
                try:
                    machine.confirm_version(reported)
                except ValueError as exc:
                    raise StepFailed(self._steps.failure(url, SyncStep.CONFIRM_VERSION, started, exc)) from exc
                self._steps.call(url, SyncStep.RESET_PREFIX_CACHE, server.reset_prefix_cache)
                machine.prefix_cache_reset()
            except StepFailed as failed:
                self._recover(target, failed.failure, failures)
                continue
            self._resume(target, failures)

    # ---- recovery ----------------------------------------------------------------------
    def _recover(self, target: SyncTarget, failure: SyncFailure, failures: list[SyncFailure]) -> None:
        failures.append(failure)
        if self._machines[target.server.url].fail(failure) is Recovery.RESUME:
            self._resume(target, failures)

    def _resume(self, target: SyncTarget, failures: list[SyncFailure]) -> None:
        url = target.server.url
        self._step(target, SyncStep.RESUME, target.server.resume, self._machines[url].resumed, failures)
        if url in self._paused_at:
            self._seconds[url] = time.monotonic() - self._paused_at[url]

    def _step(
        self, target: SyncTarget, step: SyncStep, call: Callable[[], object], event: Callable[[], None],
        failures: list[SyncFailure],
    ) -> None:
        """One bounded call; its success event, or the domain's recovery for its failure."""
        try:
            self._steps.call(target.server.url, step, call)
        except StepFailed as failed:
            self._recover(target, failed.failure, failures)
            return
        event()

    # ---- errors ------------------------------------------------------------------------
    def _error(self, failures: list[SyncFailure]) -> WeightSyncError:
        if not failures:
            reason = "another training rank reported a failure"
            failures = [self._steps.failure(RANKS_NAME, SyncStep.AGREE, time.monotonic(), reason)]
        return WeightSyncError(tuple(failures), self.states)
