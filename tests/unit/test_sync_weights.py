"""SyncWeights against the in-memory fakes: the happy path and each failure, step by step."""

from __future__ import annotations

import threading
import time

import pytest

from application.ports.weight_publisher import PublishReport
from application.ports.weight_sync import TransferInit
from application.sync_report import SyncTarget, WeightSyncError
from application.sync_weights import SyncWeights
from domain.packing import bucket_boundaries
from domain.sync_protocol import ServerState, SyncStep
from domain.tensors import TensorSpec
from tests.fakes.fake_sync import FakeSyncServer, FakeTransport, FakeWeightSource, ThreadRanks

SPECS = tuple(TensorSpec(f"model.layers.{i}.w", "float32", (4, 4 + i)) for i in range(6))
CHUNK_BYTES = 150
NUM_CHUNKS = len(bucket_boundaries(SPECS, CHUNK_BYTES))


def build(n: int = 1, timeout: float = 2.0, source: FakeWeightSource | None = None, agreement=None):
    servers = [FakeSyncServer(f"http://s{i}:8000", SPECS, workers=2, collective_timeout=timeout) for i in range(n)]
    transports = [FakeTransport(s) for s in servers]
    init = TransferInit(master_address="127.0.0.1", master_port=51216, rank_offset=1, world_size=0)
    targets = [SyncTarget(s, t, init) for s, t in zip(servers, transports)]
    source = source or FakeWeightSource(SPECS)
    sync = SyncWeights(targets, source, timeout=timeout, chunk_bytes=CHUNK_BYTES, agreement=agreement)
    return sync, servers, transports, source


def release_all(servers, transports):
    for item in (*servers, *transports):
        item.release()


def test_happy_path_one_server():
    sync, [server], [transport], _ = build()
    sync.connect()
    assert server.init_infos[0].world_size == 1 + 2
    report = sync.sync(1)
    assert (report.chunks, report.bytes, report.sync_number) == (NUM_CHUNKS, sum(s.nbytes for s in SPECS), 1)
    assert server.version == 1 and sync.versions == {server.url: 1}
    assert not server.paused and server.model == "intact" and server.prefix_cache_resets == 1
    assert [s for chunk in transport.sent for s in chunk] == list(SPECS)
    assert transport.bytes_sent == report.bytes
    assert report.servers[0].chunks == NUM_CHUNKS and report.servers[0].weight_version == 1
    assert sync.sync(2).weight_version == 2 and server.version == 2


def test_every_chunk_reaches_every_server():
    sync, servers, _, _ = build(n=3)
    sync.connect()
    report = sync.sync(7)
    assert len(report.servers) == 3
    for server in servers:
        assert server.version == 7 and server.model == "intact" and not server.paused
        assert [s for chunk in server.received for s in chunk] == list(SPECS)


def test_publish_reports_for_the_training_loop():
    sync, _, _, _ = build()
    sync.connect()
    report = sync.publish(3)
    assert isinstance(report, PublishReport) and report.version == 3
    assert report.bytes_sent == sum(s.nbytes for s in SPECS)


# step, fault kind, calls to let through, state after, is the new version recorded?
FAILURES = [
    ("pause", "error", 0, ServerState.SERVING, False, SyncStep.PAUSE),
    ("pause", "reset", 0, ServerState.SERVING, False, SyncStep.PAUSE),
    ("start_weight_update", "error", 0, ServerState.DEAD, False, SyncStep.START),
    ("start_weight_update", "reset", 0, ServerState.DEAD, False, SyncStep.START),
    ("update_weights", "error", 1, ServerState.DEAD, False, SyncStep.UPDATE),
    ("update_weights", "reset", 0, ServerState.DEAD, False, SyncStep.UPDATE),
    ("finish_weight_update", "error", 0, ServerState.DEAD, False, SyncStep.FINISH),
    ("finish_weight_update", "reset", 0, ServerState.DEAD, False, SyncStep.FINISH),
    ("weight_version", "error", 0, ServerState.SERVING, False, SyncStep.CHECK_VERSION),
    ("weight_version", "error", 1, ServerState.SERVING, False, SyncStep.CONFIRM_VERSION),
    ("reset_prefix_cache", "error", 0, ServerState.SERVING, True, SyncStep.RESET_PREFIX_CACHE),
    ("resume", "error", 0, ServerState.DEAD, True, SyncStep.RESUME),
]


@pytest.mark.parametrize(("step", "kind", "after", "state", "recorded", "sync_step"), FAILURES)
def test_each_failure_is_named_and_recovered(step, kind, after, state, recorded, sync_step):
    sync, [server], _, _ = build()
    sync.connect()
    server.fail_next(step, kind, after=after)
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(1)
    err = caught.value
    assert (err.server, err.step, err.sync_number) == (server.url, sync_step, 1)
    assert server.url in str(err) and sync_step.value in str(err) and "sync 1" in str(err)
    assert sync.states[server.url] is state
    assert server.paused == (state is ServerState.DEAD)  # I1: paused only when reported dead
    assert not server.resumed_mid_update and not server.served_broken_model  # I3
    assert not server.committed_partial_stream
    assert sync.versions[server.url] == (1 if recorded else None)  # I2


def test_an_unconfirmed_version_is_confirmed_by_the_next_sync():
    sync, [server], _, _ = build()
    sync.connect()
    server.fail_next("weight_version", "error", after=1)  # the read right after finish
    with pytest.raises(WeightSyncError):
        sync.sync(1)
    assert server.version == 1 and sync.versions[server.url] is None and not server.paused
    sync.sync(2)
    assert sync.versions[server.url] == 2 == server.version


def test_hanging_update_fails_within_the_timeout_and_names_everything():
    sync, [server], transports, _ = build(timeout=0.3)
    sync.connect()
    server.fail_next("update_weights", "timeout", after=1)
    started = time.monotonic()
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(1)
    took = time.monotonic() - started
    release_all([server], transports)
    assert took < 2.0
    err = caught.value
    assert err.server == server.url and err.sync_number == 1 and err.elapsed < 1.0
    assert err.step in (SyncStep.BROADCAST, SyncStep.UPDATE)
    assert sync.states[server.url] is ServerState.DEAD and not server.resumed_mid_update


def test_hanging_transport_open_fails_connect_within_the_timeout():
    sync, [server], [transport], _ = build(timeout=0.3)
    server.collective_timeout = 2.0  # the server's side waits on: the hung open is the cause
    transport.fail_next("open", "timeout")
    with pytest.raises(WeightSyncError) as caught:
        sync.connect()
    release_all([server], [transport])
    assert caught.value.step is SyncStep.OPEN and caught.value.elapsed < 1.5
    assert sync.states[server.url] is ServerState.UNCONNECTED


def test_a_failing_init_calls_the_open_off_at_once_and_a_later_connect_succeeds():
    sync, [server], [transport], _ = build(timeout=5.0)
    server.fail_next("init_weight_transfer", "error")
    started = time.monotonic()
    with pytest.raises(WeightSyncError) as caught:
        sync.connect()
    assert time.monotonic() - started < 1.0  # not the 5 s the open would wait for a peer
    assert caught.value.step is SyncStep.INIT and "HTTP 500" in str(caught.value)
    assert sync.states[server.url] is ServerState.UNCONNECTED and transport.opened == 0
    sync.connect()
    assert sync.states[server.url] is ServerState.SERVING and transport.opened == 1
    assert sync.sync(1).weight_version == 1


def test_restart_between_syncs_is_detected_before_pausing_then_reconnected():
    sync, [server], [transport], _ = build()
    sync.connect()
    sync.sync(1)
    server.restart()
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(2)
    assert caught.value.step is SyncStep.CHECK_VERSION and "call connect()" in str(caught.value)
    assert sync.states[server.url] is ServerState.UNCONNECTED and not server.paused
    sync.connect()
    assert (transport.closed, transport.opened, len(server.init_infos)) == (1, 2, 2)  # a new group
    assert sync.sync(3).weight_version == 3 and server.version == 3
    sync.close()
    assert transport.closed == 2


def test_a_rank_that_never_agrees_fails_the_sync_within_the_timeout():
    sync, [server], _, _ = build(timeout=0.3, agreement=ThreadRanks(2))  # the other rank never comes
    with pytest.raises(WeightSyncError) as caught:
        sync.connect()
    assert caught.value.step is SyncStep.AGREE and caught.value.elapsed < 1.5


def test_a_dead_server_blocks_the_next_sync_without_pausing_the_others():
    sync, [a, b], _, _ = build(n=2)
    sync.connect()
    a.fail_next("update_weights", "error")
    with pytest.raises(WeightSyncError):
        sync.sync(1)
    assert sync.states == {a.url: ServerState.DEAD, b.url: ServerState.SERVING}
    assert b.version == 1 and not b.paused and a.paused
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(2)
    assert caught.value.step is SyncStep.PRECONDITION and caught.value.server == a.url
    assert b.version == 1 and not b.paused and b.finished_versions == [1]
    a.restart()
    sync.server_restarted(a.url)
    sync.connect()
    sync.sync(3)
    assert (a.version, b.version) == (3, 3)


def test_a_source_failure_on_the_sender_abandons_the_stream():
    source = FakeWeightSource(SPECS)
    sync, [server], _, _ = build(source=source)
    sync.connect()
    source.fail_at_chunk = 1
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(1)
    assert caught.value.step is SyncStep.SOURCE
    assert sync.states[server.url] is ServerState.DEAD
    assert not server.committed_partial_stream and not server.resumed_mid_update


def run_ranks(syncs, version):
    outcomes: list[object] = [None] * len(syncs)

    def rank(i: int) -> None:
        try:
            outcomes[i] = syncs[i].sync(version)
        except WeightSyncError as exc:
            outcomes[i] = exc

    threads = [threading.Thread(target=rank, args=(i,)) for i in range(len(syncs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return outcomes


def test_two_ranks_succeed_together_and_fail_together():
    ranks = ThreadRanks(2)
    follower_source = FakeWeightSource(SPECS, is_sender=False)
    sync0, [server], _, _ = build(agreement=ranks)
    sync1 = SyncWeights([], follower_source, timeout=2.0, chunk_bytes=CHUNK_BYTES, agreement=ranks)
    threads = [threading.Thread(target=s.connect) for s in (sync0, sync1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    ok = run_ranks([sync0, sync1], 1)
    assert not any(isinstance(o, Exception) for o in ok) and ok[1].servers == ()
    follower_source.fail_at_chunk = 1
    failed = run_ranks([sync0, sync1], 2)
    assert all(isinstance(o, WeightSyncError) for o in failed)
    assert server.version == 1 and not server.committed_partial_stream and not server.resumed_mid_update
    assert sync0.states[server.url] is ServerState.DEAD  # stream abandoned, never finished


def test_constructor_refuses_bad_settings():
    server = FakeSyncServer("http://a", SPECS)
    target = SyncTarget(server, FakeTransport(server), TransferInit(master_address="h", master_port=1, rank_offset=1, world_size=0))
    with pytest.raises(ValueError, match="duplicate"):
        SyncWeights([target, target], FakeWeightSource(SPECS), timeout=1.0, chunk_bytes=10)
    with pytest.raises(ValueError, match="timeout"):
        SyncWeights([target], FakeWeightSource(SPECS), timeout=0.0, chunk_bytes=10)
    with pytest.raises(ValueError, match="chunk_bytes"):
        SyncWeights([target], FakeWeightSource(SPECS), timeout=1.0, chunk_bytes=0)
