"""The rolling weight sync (one server at a time, N-1 keep generating) and the rule that picks it.

Against the in-memory fakes: the handshake order per server, at most one server paused while the
others answer generate requests (`tests/fakes/generating_fleet.py`), version bookkeeping, a
failure on the 2nd of 3 servers, and the composition rule of `infrastructure.wiring`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from dependency_injector import providers
from peft import LoraConfig, get_peft_model
from torch import nn

from adapters.weights.gather import ModelWeightSource
from adapters.weights.shards import declare_expert_shard
from application.ports.weight_sync import TransferInit
from application.sync_report import SyncTarget, WeightSyncError
from application.sync_weights import SOURCE_NAME, SyncWeights
from domain.config import RunConfig
from domain.packing import bucket_boundaries
from domain.sync_protocol import ServerState, SyncStep
from domain.tensors import TensorSpec
from infrastructure import wiring
from infrastructure.container import EnvGRPOContainer
from tests.fakes.fake_sync import FakeSyncServer, FakeTransport, FakeWeightSource, ThreadRanks
from tests.fakes.generating_fleet import GeneratingFleet

SPECS = tuple(TensorSpec(f"model.layers.{i}.w", "float32", (4, 4 + i)) for i in range(6))
CHUNK_BYTES = 150
NUM_CHUNKS = len(bucket_boundaries(SPECS, CHUNK_BYTES))
HANDSHAKE = [
    "weight_version", "pause", "start_weight_update", *["update_weights"] * NUM_CHUNKS,
    "finish_weight_update", "weight_version", "reset_prefix_cache", "resume",
]


def build(n: int = 3, *, rolling: bool = True, timeout: float = 2.0, source=None):
    fakes = [FakeSyncServer(f"http://s{i}:8000", SPECS, collective_timeout=timeout) for i in range(n)]
    fleet = GeneratingFleet(fakes)
    init = TransferInit(master_address="127.0.0.1", master_port=51216, rank_offset=1, world_size=0)
    targets = [SyncTarget(fleet.server(f), FakeTransport(f), init) for f in fakes]
    source = source or FakeWeightSource(SPECS)
    sync = SyncWeights(targets, source, timeout=timeout, chunk_bytes=CHUNK_BYTES, rolling=rolling)
    sync.connect()
    fleet.calls.clear()
    return sync, fakes, fleet, source


class FailingPass:
    """A weight source whose `fail_on`-th pass raises at chunk `chunk` (the gather failed)."""

    def __init__(self, fail_on: int, chunk: int) -> None:
        self.inner = FakeWeightSource(SPECS)
        self.fail_on, self.chunk = fail_on, chunk

    @property
    def is_sender(self) -> bool:
        return True

    def chunks(self, chunk_bytes: int):
        if self.inner.iterations + 1 == self.fail_on:
            self.inner.fail_at_chunk = self.chunk
        return self.inner.chunks(chunk_bytes)


# ---- the roll ------------------------------------------------------------------------------
def test_each_server_goes_through_the_whole_handshake_before_the_next_is_paused():
    sync, fakes, fleet, source = build()
    report = sync.sync(1)
    urls = [f.url for f in fakes]
    check_phase = [(url, "weight_version") for url in urls]  # every version checked before any pause
    assert fleet.calls[:3] == check_phase
    rolled = fleet.calls[3:]
    assert rolled == [(url, m) for url in urls for m in HANDSHAKE[1:]]  # server by server, in order
    for fake in fakes:
        assert fleet.calls_of(fake.url) == HANDSHAKE
        assert [s for chunk in fake.received for s in chunk] == list(SPECS)  # a full pass each
    assert source.iterations == 3  # one pass of the (local) source per server
    assert (report.chunks, report.bytes) == (NUM_CHUNKS, sum(s.nbytes for s in SPECS))
    assert [(s.url, s.weight_version, s.chunks) for s in report.servers] == [(u, 1, NUM_CHUNKS) for u in urls]
    assert all(s.seconds > 0 for s in report.servers)


def test_at_most_one_server_is_paused_while_the_others_answer_generate_requests():
    sync, fakes, fleet, _ = build()
    sync.sync(1)
    sync.sync(2)
    urls = frozenset(f.url for f in fakes)
    assert fleet.max_paused == 1
    for snap in fleet.snapshots:
        assert len(snap.paused) <= 1 and snap.answered == urls - snap.paused and not snap.broken
    for url in urls:  # each one was paused in turn, and then the other two kept answering
        during = [s for s in fleet.snapshots if s.paused == {url}]
        assert during and all(s.answered == urls - {url} for s in during)


def test_the_concurrent_flush_pauses_every_server_at_once():
    sync, fakes, fleet, source = build(rolling=False)
    sync.sync(1)
    assert fleet.max_paused == 3 and source.iterations == 1
    assert all(f.version == 1 for f in fakes)


def test_versions_are_recorded_per_server_across_syncs():
    sync, fakes, _, _ = build()
    for version in (4, 5):
        report = sync.sync(version)
        assert report.weight_version == version
        assert sync.versions == {f.url: version for f in fakes}
        assert all(f.version == version and f.finished_versions[-1] == version for f in fakes)
        assert all(f.model == "intact" and not f.paused and f.prefix_cache_resets == version - 3 for f in fakes)
    assert sync.states == {f.url: ServerState.SERVING for f in fakes}


# ---- a failure on the 2nd of 3 servers ------------------------------------------------------
# fault on server 2, the step named, its state after, its recorded version after (sync 2 of v=2)
SECOND_FAILS = [
    ("pause", SyncStep.PAUSE, ServerState.SERVING, 1),  # model intact: resumed at v-1
    ("start_weight_update", SyncStep.START, ServerState.DEAD, 1),  # session may be open: abandoned
    ("update_weights", SyncStep.UPDATE, ServerState.DEAD, 1),
    ("finish_weight_update", SyncStep.FINISH, ServerState.DEAD, 1),
    ("reset_prefix_cache", SyncStep.RESET_PREFIX_CACHE, ServerState.SERVING, 2),  # confirmed, resumed
    ("resume", SyncStep.RESUME, ServerState.DEAD, 2),
]


@pytest.mark.parametrize(("step", "sync_step", "state", "version"), SECOND_FAILS)
def test_a_failure_on_the_second_server_stops_the_roll_and_names_every_version(step, sync_step, state, version):
    sync, [first, second, third], fleet, _ = build()
    sync.sync(1)
    fleet.calls.clear()
    second.fail_next(step, "error", after=1 if step == "update_weights" else 0)
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(2)
    err = caught.value
    assert (err.server, err.step, err.sync_number) == (second.url, sync_step, 2)
    assert [f.server for f in err.failures] == [second.url]
    # server 1 already done: serving v; server 3 never paused: serving v-1
    assert sync.states[first.url] is ServerState.SERVING and sync.versions[first.url] == 2 == first.version
    assert sync.states[third.url] is ServerState.SERVING and sync.versions[third.url] == 1 == third.version
    assert fleet.calls_of(third.url) == ["weight_version"] and not third.paused
    assert f"{first.url}=SERVING at v2" in str(err) and f"{third.url}=SERVING at v1" in str(err)
    # server 2 recovered as the domain says
    assert sync.states[second.url] is state and sync.versions[second.url] == version
    assert second.paused == (state is ServerState.DEAD)  # I1: left paused only when dead
    dead = state is ServerState.DEAD
    ended = f"=DEAD (last confirmed v{version}" if dead else f"=SERVING at v{version}"
    assert second.url + ended in str(err)
    for fake in (first, second, third):  # I3
        assert not fake.resumed_mid_update and not fake.served_broken_model and not fake.committed_partial_stream
    assert fleet.max_paused == 1


def test_a_source_failure_mid_roll_abandons_only_the_server_it_was_streaming_to():
    sync, [first, second, third], _, _ = build(source=FailingPass(fail_on=2, chunk=1))
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(1)
    err = caught.value
    assert [(f.server, f.step) for f in err.failures] == [(SOURCE_NAME, SyncStep.SOURCE), (second.url, SyncStep.SOURCE)]
    assert sync.states == {first.url: ServerState.SERVING, second.url: ServerState.DEAD, third.url: ServerState.SERVING}
    assert (first.version, second.version, third.version) == (1, None, None)
    assert not second.committed_partial_stream and not second.resumed_mid_update and second.paused


def test_a_server_off_its_recorded_version_pauses_nothing():
    sync, [first, second, third], fleet, _ = build()
    sync.sync(1)
    third.restart()
    fleet.calls.clear()
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(2)
    assert (caught.value.server, caught.value.step) == (third.url, SyncStep.CHECK_VERSION)
    assert [m for _, m in fleet.calls] == ["weight_version"] * 3
    assert (first.version, second.version) == (1, 1) and sync.states[third.url] is ServerState.UNCONNECTED


def test_a_hanging_pause_is_bounded_and_the_next_servers_are_not_touched():
    sync, [first, second, third], fleet, _ = build(timeout=0.3)
    second.fail_next("pause", "timeout")
    started = time.monotonic()
    with pytest.raises(WeightSyncError) as caught:
        sync.sync(1)
    second.release()
    assert time.monotonic() - started < 2.0
    assert (caught.value.server, caught.value.step) == (second.url, SyncStep.PAUSE) and caught.value.elapsed < 1.0
    assert sync.states[second.url] is ServerState.SERVING and not second.paused  # resumed: model intact
    assert first.version == 1 and third.version is None and fleet.calls_of(third.url) == ["weight_version"]


# ---- when it applies ------------------------------------------------------------------------
class Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_proj = nn.Linear(4, 4)
        self.experts = nn.Module()
        self.experts.gate_up_proj = nn.Parameter(torch.zeros(2, 4, 8))


def test_rolling_needs_several_servers_one_process_and_plain_weights():
    assert wiring.sync_mode(2, Tiny(), world_size=1)[0] is True
    single = wiring.sync_mode(1, Tiny(), world_size=1)
    assert single[0] is False and "single server" in single[1]
    multi = wiring.sync_mode(3, Tiny(), world_size=2)
    assert multi[0] is False and "2 training ranks" in multi[1]


def test_a_peft_model_flushes_concurrently():
    model = get_peft_model(Tiny(), LoraConfig(r=2, target_modules=["q_proj"]))
    rolling, why = wiring.sync_mode(2, model, world_size=1)
    assert rolling is False and "PEFT adapter at" in why and "q_proj" in why


def test_a_model_with_declared_expert_shards_flushes_concurrently():
    model = Tiny()
    declare_expert_shard(model.experts, group=object())
    rolling, why = wiring.sync_mode(2, model, world_size=1)
    assert rolling is False and "declared shard experts.gate_up_proj" in why


def test_a_multi_rank_agreement_refuses_rolling():
    fake = FakeSyncServer("http://s0:8000", SPECS)
    init = TransferInit(master_address="127.0.0.1", master_port=51216, rank_offset=1, world_size=0)
    with pytest.raises(ValueError, match="rolling=True needs a single training process"):
        SyncWeights([SyncTarget(fake, FakeTransport(fake), init)], FakeWeightSource(SPECS), timeout=1.0,
                    chunk_bytes=CHUNK_BYTES, agreement=ThreadRanks(2), rolling=True)


@pytest.mark.parametrize(("urls", "rolling"), [(("http://a:1", "http://b:1"), True), (("http://a:1",), False)])
def test_the_container_picks_the_mode_and_logs_it_once(urls, rolling, caplog):
    container = EnvGRPOContainer(config=RunConfig(), model_path=Path("unused"), server_urls=urls, output_dir=Path("."))
    container.learner.override(providers.Object(SimpleNamespace(model=Tiny())))
    fakes = [FakeSyncServer(url, SPECS) for url in urls]
    init = TransferInit(master_address="127.0.0.1", master_port=51216, rank_offset=1, world_size=0)
    container.sync_targets.override(providers.Object([SyncTarget(f, FakeTransport(f), init) for f in fakes]))
    with caplog.at_level(logging.INFO, logger="rlsetup"):
        assert container.weight_sync().rolling is rolling
        assert container.weight_sync() is container.weight_sync()
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("weight sync:")]
    assert len(lines) == 1 and ("rolling" in lines[0]) is rolling


def test_the_real_model_source_is_read_once_per_server_and_survives_a_pass_stopped_early():
    source = ModelWeightSource(Tiny(), dtype="float32")
    specs = tuple(s for chunk in source.chunks(CHUNK_BYTES) for s in chunk.specs)
    fakes = [FakeSyncServer(f"http://m{i}:8000", specs) for i in range(2)]
    init = TransferInit(master_address="127.0.0.1", master_port=51216, rank_offset=1, world_size=0)
    sync = SyncWeights([SyncTarget(f, FakeTransport(f), init) for f in fakes], source, timeout=2.0,
                       chunk_bytes=CHUNK_BYTES, rolling=True)
    sync.connect()
    fakes[0].fail_next("update_weights", "error")  # the first pass stops at its first chunk
    with pytest.raises(WeightSyncError):
        sync.sync(1)
    assert sync.states[fakes[0].url] is ServerState.DEAD and fakes[1].finished_versions == []
    fakes[0].restart()
    sync.server_restarted(fakes[0].url)
    sync.connect()
    assert sync.sync(2).chunks == len(list(source.chunks(CHUNK_BYTES)))
    for fake in fakes:
        assert tuple(s for chunk in fake.received for s in chunk) == specs and fake.version == 2
