"""Bounded calls of one weight sync: each turns into a result or a `StepFailed` naming the
server, the endpoint, the sync number and the seconds waited (invariant I4 of
`domain.sync_protocol`); and the once-per-server rendezvous of the transfer group, called off
at once when the server's side of it fails."""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from typing import TypeVar

import attrs

from application.bounded_call import PendingCall, call_bounded
from application.ports.ranks import RankAgreement
from application.ports.weight_sync import TransferInit, WeightSyncServer
from application.sync_report import SyncTarget
from domain.sync_protocol import SyncFailure, SyncStep

T = TypeVar("T")
RANKS_NAME = "<training ranks>"


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
