"""SyncWeights: push the policy's weights to one or many generation servers, bounded and safe.

Drives the handshake of `domain.sync_protocol` through the ports of
`application.ports.weight_sync`, one `SyncTarget` (server + its own transport/group) per server:

    connect():    per server  GET /get_world_size -> init_weight_transfer (worker thread)
                                                      || transport.open (this thread)
                              (a failed init aborts the open at once: the error is the server's
                              answer, not the rendezvous timeout)
    sync(v), concurrent flush (the default):
                  per server  GET /weight_info == recorded? -> pause -> start_weight_update
                  per chunk   every server: update_weights (worker thread) || broadcast (this thread)
                  ranks agree the gather succeeded everywhere (commit point)
                  per server  finish_weight_update(v) -> GET /weight_info == v -> reset_prefix_cache
                              -> resume
                  ranks agree the sync succeeded everywhere
    sync(v), rolling (`rolling=True`, `application.rolling_sync`): the same steps, one server at
                  a time (pause .. resume, then the next), so N-1 servers keep generating.

Which one a run uses is decided in composition (`infrastructure.wiring.rolling_sync`): rolling
when there is more than one server AND one training process AND the weight source is plain
(no PEFT fold, no EP/TP/FSDP wrappers); otherwise the concurrent flush. Multi-rank runs always
flush concurrently: every rank must join the same gathers, once per sync (a RankAgreement
other than the single-process one is refused with `rolling=True`).

Every call across a process boundary is bounded by `timeout`: server calls run on daemon
threads (a chunk's HTTP wait counts from the end of that server's broadcast); transport calls
run on this thread (collective state is thread-bound) and must honour the timeout given them.
In the concurrent flush failures never stop the source iteration: the other training ranks are
inside the same collective gathers, so the sender drains the source to its end even with no
server left. The per-server steps live in `application.sync_calls.SyncRound`, shared by both.
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

import time
from collections.abc import Sequence

import attrs

from application.ports.ranks import RankAgreement
from application.ports.weight_publisher import PublishReport
from application.ports.weight_sync import WeightSource
from application.rolling_sync import roll
from application.single_process import SingleProcessAgreement
from application.sync_calls import RANKS_NAME, SOURCE_NAME, BoundedSteps, StepFailed, SyncRound, open_transfer_group
from application.sync_report import ServerReport, SyncReport, SyncTarget, WeightSyncError
from domain.sync_protocol import ServerState, ServerSync, SyncFailure, SyncStep

__all__ = ["SOURCE_NAME", "SyncWeights"]
GATHER_FAILED = "a training rank failed its part of the gather; the stream is abandoned"


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
        rolling: bool = False,
    ) -> None:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        if rolling and not (agreement is None or isinstance(agreement, SingleProcessAgreement)):
            raise ValueError(
                "rolling=True needs a single training process: a multi-rank run (a RankAgreement "
                "was given) flushes every server concurrently, all ranks joining the same gathers"
            )
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
        self._rolling = rolling

    @property
    def rolling(self) -> bool:
        """True: one server at a time (`application.rolling_sync`); False: all at once."""
        return self._rolling

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
        calls = SyncRound(self._steps, self._machines)
        if self._rolling:
            chunks, nbytes = roll(self._targets, self._source, calls, chunk_bytes=self._chunk_bytes, version=version)
        else:
            chunks, nbytes = self._flush(calls, version)
        synced = self._steps.agree(not calls.failures, calls.failures)
        if calls.failures or not synced:
            raise self._error(calls.failures)
        servers = tuple(
            ServerReport(url, m.version, m.chunks, calls.seconds.get(url, 0.0)) for url, m in self._machines.items()
        ) if self._source.is_sender else ()
        return SyncReport(self._sync_number, version, time.monotonic() - started, nbytes, chunks, servers)

    def publish(self, version: int) -> PublishReport:
        """`WeightPublisher` port: sync and report what the training loop records."""
        report = self.sync(version)
        return PublishReport(version=version, seconds=report.seconds, bytes_sent=report.bytes)

    def _flush(self, calls: SyncRound, version: int) -> tuple[int, int]:
        """The concurrent flush: pause all -> every chunk to all -> ranks agree -> finish all.

        A server that is not serving the version we recorded pauses nothing; the source is
        still drained to its end (the other ranks are inside the same gathers)."""
        sender = self._source.is_sender
        ready = all([calls.check(t) for t in self._targets]) if sender else True
        if sender and ready:
            for target in self._targets:
                calls.pause(target)
            for target in self._targets:
                calls.start(target)
        source_ok, chunks, nbytes = calls.stream(self._source, self._chunk_bytes, self._targets, drain=True)
        gathered = self._steps.agree(ready and source_ok, calls.failures)
        calls.close(self._targets, version, streamed=gathered, step=SyncStep.AGREE, reason=GATHER_FAILED)
        return chunks, nbytes

    # ---- errors ------------------------------------------------------------------------
    def _error(self, failures: list[SyncFailure]) -> WeightSyncError:
        if not failures:
            reason = "another training rank reported a failure"
            failures = [self._steps.failure(RANKS_NAME, SyncStep.AGREE, time.monotonic(), reason)]
        return WeightSyncError(tuple(failures), self.states, self.versions)
