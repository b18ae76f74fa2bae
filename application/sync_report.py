"""Values of the weight-sync use case: what it syncs to, what it reports, how it fails."""

from __future__ import annotations

import attrs

from application.ports.weight_sync import TransferInit, WeightSyncServer, WeightTransport
from domain.sync_protocol import ServerState, SyncFailure, SyncStep


@attrs.frozen
class SyncTarget:
    """One server with its own weight-transfer group.

    `init.world_size` is overwritten at `connect()` by `init.rank_offset + server.world_size()`.
    """

    server: WeightSyncServer
    transport: WeightTransport
    init: TransferInit


@attrs.frozen
class ServerReport:
    url: str
    weight_version: int | None
    chunks: int
    seconds: float  # from its pause to its resume


@attrs.frozen
class SyncReport:
    sync_number: int
    weight_version: int
    seconds: float
    bytes: int  # tensor bytes announced by the source (each server received all of them)
    chunks: int  # update_weights calls per server
    servers: tuple[ServerReport, ...]


class WeightSyncError(RuntimeError):
    """A sync (or connect) failed; names every failed server, endpoint, sync number and wait.

    The first failure is exposed as attributes; `failures` has them all; `states` the state
    each server ended in (DEAD ones must be restarted and re-connected before the next sync);
    `versions` the weight version recorded for each server (a DEAD one's is its last confirmed).
    """

    def __init__(
        self, failures: tuple[SyncFailure, ...], states: dict[str, ServerState],
        versions: dict[str, int | None] | None = None,
    ) -> None:
        if not failures:
            raise ValueError("WeightSyncError needs at least one failure")
        self.failures = failures
        self.states = dict(states)
        self.versions = dict(versions or {})
        first = failures[0]
        self.server: str = first.server
        self.step: SyncStep = first.step
        self.endpoint: str = first.step.value
        self.sync_number: int = first.sync_number
        self.elapsed: float = first.elapsed
        lines = [f.describe() for f in failures]
        ended = ", ".join(_ended(url, state, self.versions) for url, state in self.states.items())
        if ended:
            lines.append(f"servers now: {ended}")
        super().__init__("weight sync failed: " + "; ".join(lines))


def _ended(url: str, state: ServerState, versions: dict[str, int | None]) -> str:
    """`url=STATE`, with the weight version it serves (or last confirmed) when known."""
    if url not in versions:
        return f"{url}={state.name}"
    version = "no confirmed version" if versions[url] is None else f"v{versions[url]}"
    if state is ServerState.DEAD:
        return f"{url}=DEAD (last confirmed {version}; restart it, then connect())"
    return f"{url}={state.name} at {version}"
