"""The rolling weight sync: one server at a time, so the other N-1 keep generating.

The seed: "the rolling sync that keeps (N-1) servers generating exists only on the
single-process path (no EP wrappers, no PEFT)". Whether a run rolls is decided in composition
(`infrastructure.wiring.rolling_sync`), never by a config key: more than one server, one
training process, plain weights. Otherwise `SyncWeights` flushes every server concurrently.

    before the roll   every server: GET /weight_info == recorded?  (one does not: pause nothing)
    per server k      pause -> start_weight_update -> every chunk (a fresh pass over the source:
                      on one process that only reads the local model) -> finish_weight_update(v)
                      -> GET /weight_info == v -> reset_prefix_cache -> resume;  then server k+1

Server k+1 is paused only once server k has resumed, so at any instant at most one server is
paused and the others answer generate requests (with `enable_prefetch`, the env-GRPO loop keeps
submitting rollouts to them). Each server goes through the same bounded steps
(`application.sync_calls.SyncRound`) and the same invariants (I1-I5 of `domain.sync_protocol`)
as in the concurrent flush.

A failure on server k stops the roll: k is recovered as the domain says (resumed when its model
is intact; abandoned DEAD when its reload session may be open), servers before k serve the new
version, servers after k were never paused and serve the old one; the `WeightSyncError` lists
every server's state and version.

Departure from the concurrent flush: the source is iterated once per server (N passes, each
server paused for one pass only), and a pass stops as soon as its server failed, since no other
training rank is inside its gathers.
"""

from __future__ import annotations

from collections.abc import Sequence

from application.ports.weight_sync import WeightSource
from application.sync_calls import SyncRound
from application.sync_report import SyncTarget
from domain.sync_protocol import SyncStep

SOURCE_FAILED = "the weight source failed mid-stream; this server's reload session is abandoned"


def roll(
    targets: Sequence[SyncTarget], source: WeightSource, calls: SyncRound, *, chunk_bytes: int, version: int
) -> tuple[int, int]:
    """Sync `version` to each target in turn; returns the (chunks, bytes) of one source pass.

    Stops at the first failure, which `calls.failures` then holds (the caller raises)."""
    if not all([calls.check(target) for target in targets]):  # check every one, then pause none
        return 0, 0
    chunks = nbytes = 0
    for target in targets:
        chunks, nbytes = sync_one(target, source, calls, chunk_bytes=chunk_bytes, version=version)
        if calls.failures:
            break
    return chunks, nbytes


def sync_one(
    target: SyncTarget, source: WeightSource, calls: SyncRound, *, chunk_bytes: int, version: int
) -> tuple[int, int]:
    """The whole handshake with one server, from its pause to its resume."""
    if not (calls.pause(target) and calls.start(target)):
        return 0, 0
    source_ok, chunks, nbytes = calls.stream(source, chunk_bytes, [target], drain=False)
    calls.close([target], version, streamed=source_ok, step=SyncStep.SOURCE, reason=SOURCE_FAILED)
    return chunks, nbytes
