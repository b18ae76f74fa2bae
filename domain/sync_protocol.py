"""The weight-sync handshake of one generation server, as an explicit state machine.

Handshake (ARCHITECTURE.md): once `get_world_size -> init_weight_transfer_engine || open`; per
sync `pause -> start_weight_update -> N x (update_weights || broadcast) ->
finish_weight_update(version) -> reset_prefix_cache -> resume`. The use case
(`application.sync_weights`) performs the I/O and reports each outcome here as an event; an
event that the current state does not allow raises `IllegalTransition`.

States:
    UNCONNECTED  no weight-transfer group yet (or the server restarted and lost it)
    SERVING      connected, generating, weights at `version`
    PAUSED       /pause accepted; generation frozen, model intact
    UPDATING     /start_weight_update attempted or accepted: a reload session may be open
    FINISHED     /finish_weight_update accepted: model consistent with the new weights
    FAILED       a step failed while the model is intact; the only way on is resume
    DEAD         not resumable: resume failed, or the weights are indeterminate; stays so
                 until the server process is replaced

Specification (the invariants `tests/property/test_sync_protocol.py` checks after every step):
  I1. A sync never ends with a server paused and alive: every server ends SERVING (resumed),
      DEAD (reported by name in the `WeightSyncError`) or UNCONNECTED (reported by name; it
      was never paused in this sync).
  I2. The recorded `version` moves only to a version v that `finish_weight_update(v)`
      accepted AND `/weight_info` reported (`confirm_version`, or the next sync's check when
      that read failed: `pending_version`); a SERVING server reports its recorded version, or
      its unconfirmed `pending_version`.
  I3. `resume` is never issued between `start_weight_update` and a successful
      `finish_weight_update` (`resumed` from UPDATING is illegal).
  I4. Every wait is bounded (enforced by the use case); a failure is a `SyncFailure` naming the
      server, the step (endpoint), the sync number and the elapsed seconds.
  I5. Multi-rank: every rank ends a sync the same way, all return or all raise (use case,
      through `application.ports.ranks.RankAgreement`).

Recovery after a failure inside the reload session (deliberate, from vLLM 0.32's code):
`start_weight_update` runs `initialize_layerwise_reload`, which moves every layer's parameters
to the meta device (the old kernel tensors are kept aside); a layer is rebuilt only once all
its elements have arrived. An exception in `update_weights` makes the worker drop its session
flag (`_weight_update_active = False`) but nothing finalizes the reload: fully received layers
already hold NEW weights, the others are still on meta. So after a failure in UPDATING:
  - we do not call `finish_weight_update`: finalizing a partial stream puts old kernel tensors
    back for layers never sent but processes partly sent layers with their un-sent part left
    uninitialized, a silently mixed/garbage model (and after a worker-side exception vLLM
    refuses it anyway: "finish_weight_update called without a matching start");
  - we do not resume: the first forward would touch meta tensors (engine crash) or a mix of
    old and new layers;
  - the server is DEAD ("weights indeterminate, session abandoned"), named in the error, and
    left paused so no request is computed on broken weights. The repair is a new server
    process: restart it, report it (`replaced`), `connect()`; the next sync sends every tensor.
A failed `start_weight_update` counts as inside the session: vLLM may have moved some layers to
meta before raising, and a lost response cannot be told from a refused call.
Failures outside the session (version check, pause, /weight_info after finish,
reset_prefix_cache) leave the model intact, so the server is resumed. A failed resume is not
retried: the server is DEAD. A server that reports another version than recorded before a
sync (restarted, or updated by someone else) becomes UNCONNECTED and is not paused.
"""

from __future__ import annotations

import enum

import attrs


class ServerState(enum.Enum):
    UNCONNECTED = "unconnected"
    SERVING = "serving"
    PAUSED = "paused"
    UPDATING = "updating"
    FINISHED = "finished"
    FAILED = "failed"
    DEAD = "dead"


class SyncStep(enum.Enum):
    """One step of the handshake; the value names the endpoint (or collective) involved."""

    WORLD_SIZE = "GET /get_world_size"
    INIT = "POST /init_weight_transfer_engine"
    OPEN = "transport.open"
    CLOSE = "transport.close"
    CHECK_VERSION = "GET /weight_info"
    PAUSE = "POST /pause"
    START = "POST /start_weight_update"
    UPDATE = "POST /update_weights"
    BROADCAST = "transport.broadcast"
    FINISH = "POST /finish_weight_update"
    CONFIRM_VERSION = "GET /weight_info (after finish)"
    RESET_PREFIX_CACHE = "POST /reset_prefix_cache"
    RESUME = "POST /resume"
    SOURCE = "weight source"
    AGREE = "rank agreement"
    PRECONDITION = "precondition (server must be serving)"


class Recovery(enum.Enum):
    """What the use case must do right after a failure."""

    RESUME = "resume"  # model intact, server possibly paused: resume it
    ABANDON = "abandon"  # weights indeterminate: neither finish nor resume
    NONE = "none"  # nothing to undo (never paused, or already dead)


class IllegalTransition(RuntimeError):
    """An event the server's current state does not allow (a bug in the driver)."""


@attrs.frozen
class SyncFailure:
    """One failed step: which server, which endpoint, which sync, how long we waited, why."""

    server: str
    step: SyncStep
    sync_number: int
    elapsed: float
    reason: str

    def describe(self) -> str:
        return (
            f"server {self.server}: {self.step.value} failed in sync {self.sync_number} "
            f"after {self.elapsed:.3f}s: {self.reason}"
        )


# State a failure leads to, and what to do about it, by the state the server was in.
_ON_FAILURE: dict[ServerState, tuple[ServerState, Recovery]] = {
    ServerState.UNCONNECTED: (ServerState.UNCONNECTED, Recovery.NONE),
    ServerState.PAUSED: (ServerState.DEAD, Recovery.ABANDON),  # start_weight_update failed
    ServerState.UPDATING: (ServerState.DEAD, Recovery.ABANDON),
    ServerState.FINISHED: (ServerState.FAILED, Recovery.RESUME),
    ServerState.FAILED: (ServerState.DEAD, Recovery.NONE),  # resume failed
    ServerState.DEAD: (ServerState.DEAD, Recovery.NONE),
}


@attrs.define
class ServerSync:
    """The handshake state of one server, its recorded weight version and its last failure."""

    url: str
    state: ServerState = ServerState.UNCONNECTED
    version: int | None = None
    sync_number: int = 0
    chunks: int = 0
    pending_version: int | None = None
    cache_reset: bool = False
    failure: SyncFailure | None = None

    def _expect(self, event: str, *allowed: ServerState) -> None:
        if self.state not in allowed:
            names = ", ".join(s.name for s in allowed)
            raise IllegalTransition(f"server {self.url}: {event} in state {self.state.name} (allowed from: {names})")

    def connected(self, reported_version: int | None) -> None:
        """The transfer group formed; adopt the version the server reports."""
        self._expect("connected", ServerState.UNCONNECTED)
        self.state = ServerState.SERVING
        self.version = reported_version
        self.failure = None

    def begin(self, sync_number: int) -> None:
        """A new sync starts; the server must be serving."""
        self._expect("begin sync", ServerState.SERVING)
        if sync_number <= self.sync_number:
            raise IllegalTransition(f"server {self.url}: sync {sync_number} after sync {self.sync_number}")
        self.sync_number = sync_number
        self.chunks = 0
        self.cache_reset = False
        self.failure = None

    def version_matches(self, reported: int | None) -> bool:
        """Precondition of a sync: the server still reports the version we recorded (or the one
        it finished with last time, whose confirmation failed: recorded now)."""
        self._expect("version check", ServerState.SERVING)
        if self.pending_version is not None and reported == self.pending_version:
            self.version, self.pending_version = self.pending_version, None
        return reported == self.version

    def paused(self) -> None:
        self._expect("paused", ServerState.SERVING)
        self.state = ServerState.PAUSED

    def starting(self) -> None:
        """About to call start_weight_update: from here on the reload session may be open."""
        self._expect("start", ServerState.PAUSED)
        self.state = ServerState.UPDATING
        self.pending_version = None

    def chunk_loaded(self) -> None:
        self._expect("chunk loaded", ServerState.UPDATING)
        self.chunks += 1

    def finished(self, version: int) -> None:
        """finish_weight_update(version) succeeded; the version is not recorded until confirmed."""
        self._expect("finished", ServerState.UPDATING)
        self.state = ServerState.FINISHED
        self.pending_version = version

    def confirm_version(self, reported: int | None) -> None:
        """Record the new version, only if the server reports exactly what we finished with."""
        self._expect("confirm version", ServerState.FINISHED)
        if reported != self.pending_version:
            raise ValueError(f"server {self.url} reports weight version {reported!r}, expected {self.pending_version!r}")
        self.version, self.pending_version = self.pending_version, None

    def prefix_cache_reset(self) -> None:
        self._expect("prefix cache reset", ServerState.FINISHED)
        self.cache_reset = True

    def resumed(self) -> None:
        self._expect("resumed", ServerState.PAUSED, ServerState.FINISHED, ServerState.FAILED)
        self.state = ServerState.SERVING

    def fail(self, failure: SyncFailure) -> Recovery:
        """Record a failed step; returns what the driver must do next (never finish after this)."""
        if failure.server != self.url:
            raise IllegalTransition(f"failure of {failure.server} reported to server {self.url}")
        self.failure = failure
        if failure.step is SyncStep.RESUME:  # no retry: a server that cannot be resumed is dead
            self.state = ServerState.DEAD
            return Recovery.NONE
        if self.state is ServerState.SERVING:
            return self._fail_while_serving(failure)
        self.state, recovery = _ON_FAILURE[self.state]
        return recovery

    def _fail_while_serving(self, failure: SyncFailure) -> Recovery:
        if failure.step is SyncStep.PAUSE:  # the pause may have taken effect
            self.state = ServerState.FAILED
            return Recovery.RESUME
        return Recovery.NONE  # e.g. /weight_info unanswered: nothing was changed, still serving

    def version_mismatch(self, failure: SyncFailure) -> None:
        """The server reports another version than recorded: it restarted (lost its group) or
        someone else updated it. Either way it needs `connect()` before the next sync."""
        self._expect("version mismatch", ServerState.SERVING)
        self.failure = failure
        self.state = ServerState.UNCONNECTED

    def replaced(self) -> None:
        """The server process was restarted (told from outside): fresh model, no group, no
        session. The only way out of DEAD; `connect()` follows."""
        self._expect("replaced", ServerState.SERVING, ServerState.DEAD, ServerState.UNCONNECTED)
        self.state = ServerState.UNCONNECTED
        self.version = None

    @property
    def settled(self) -> bool:
        """True in the states a sync may end in (invariant I1)."""
        return self.state in (ServerState.SERVING, ServerState.DEAD, ServerState.UNCONNECTED)
