"""`SyncWeights.connect()` over a real gloo rendezvous against the fake vLLM HTTP server.

A server whose `/init_weight_transfer_engine` fails must end the trainer's rendezvous wait at once
(not after the rendezvous timeout) with an error naming the server, the endpoint and the server's
answer, leaving no thread, socket or listening port behind. Also: the client's
`/reset_prefix_cache` after a sync while requests are kept by `/pause?mode=keep`.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from datetime import timedelta

import pytest
import torch
import torch.distributed as dist

from adapters.transport.gloo_transport import GlooTransport, TransportError
from adapters.transport.sglang_transport import C10dBucketTransport
from adapters.vllm.errors import ServerError
from adapters.vllm.http_server import VllmHttpServer
from application.ports.weight_sync import TransferInit, WeightChunk
from application.sync_report import SyncTarget, WeightSyncError
from application.sync_weights import SyncWeights
from domain.sync_protocol import ServerState, SyncStep
from domain.tensors import TensorSpec
from tests.fakes.fake_sync import FakeWeightSource
from tests.fakes.fake_vllm_server import UNCONFIGURED, FakeVllmServer

RENDEZVOUS_TIMEOUT = 30.0  # what connect() used to wait out when the init failed
SPECS = (TensorSpec("w", "float32", (2, 2)),)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_is_free(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def build(url: str, port: int) -> tuple[SyncWeights, VllmHttpServer, GlooTransport]:
    server = VllmHttpServer(url, timeout=RENDEZVOUS_TIMEOUT, connect_timeout=2.0)
    transport = GlooTransport()
    init = TransferInit(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=0)
    sync = SyncWeights(
        [SyncTarget(server, transport, init)], FakeWeightSource(SPECS), timeout=RENDEZVOUS_TIMEOUT, chunk_bytes=64
    )
    return sync, server, transport


# init mode, what the error must quote of the server's answer
FAILING_INITS = [
    ("unconfigured", ["HTTP 500", UNCONFIGURED]),
    ("unmounted", ["HTTP 404", "Not Found"]),
    ("drop", ["no response", "RemoteProtocolError"]),
]


@pytest.mark.parametrize(("mode", "answer"), FAILING_INITS)
def test_a_failing_init_ends_the_rendezvous_at_once_and_names_the_servers_answer(mode, answer):
    port = free_port()
    with FakeVllmServer(init=mode) as fake:
        sync, server, transport = build(fake.url, port)
        threads_before = native_threads()
        started = time.monotonic()
        with pytest.raises(WeightSyncError) as caught:
            sync.connect()
        took = time.monotonic() - started
        server.close()
    err = caught.value
    assert took < 2.0, f"connect took {took:.1f}s: the init failure did not cut the rendezvous short"
    assert (err.server, err.step) == (fake.url, SyncStep.INIT)
    message = str(err)
    for text in (fake.url, "/init_weight_transfer_engine", *answer):
        assert text in message
    assert sync.states[fake.url] is ServerState.UNCONNECTED and not transport.is_open
    # nothing left behind: no init thread, no gloo threads, the rendezvous port is free again
    assert not [t for t in threading.enumerate() if t.name.startswith("init ")]
    assert native_threads() <= threads_before
    assert port_is_free(port)


@pytest.mark.parametrize("transport", [GlooTransport, lambda: C10dBucketTransport("gloo")], ids=["vllm", "sglang"])
def test_the_open_is_called_off_by_the_abort_event_and_says_so(transport):
    port = free_port()
    abort = threading.Event()
    init = TransferInit(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2)
    timer = threading.Timer(0.2, abort.set)
    timer.start()
    started = time.monotonic()
    with pytest.raises(TransportError, match="called off") as caught:
        transport().open(init, timeout=RENDEZVOUS_TIMEOUT, abort=abort)
    timer.join()
    assert time.monotonic() - started < 2.0 and f"127.0.0.1:{port}" in str(caught.value)
    assert port_is_free(port)


def test_a_server_that_joins_connects_through_the_abortable_rendezvous_and_receives():
    port = free_port()
    with FakeVllmServer(init="join") as fake:
        sync, server, transport = build(fake.url, port)
        sync.connect()
        assert sync.states[fake.url] is ServerState.SERVING and transport.is_open
        [(_, _, _, body)] = [call for call in fake.calls if call[1] == "/init_weight_transfer_engine"]
        assert body["init_info"]["world_size"] == 2 and body["init_info"]["master_port"] == port
        sent = torch.arange(4, dtype=torch.float32).reshape(2, 2)
        received = torch.zeros(16, dtype=torch.uint8)  # the one packed bucket of the chunk
        options = dist.BroadcastOptions()
        work = fake.group.broadcast([received], options)
        transport.broadcast(WeightChunk(SPECS, [sent]), timeout=10.0)
        work.wait(timedelta(seconds=10))
        assert torch.equal(received.view(torch.float32).reshape(2, 2), sent)
        sync.close()
        server.close()
    assert not transport.is_open


# ---- /reset_prefix_cache while requests are kept ----------------------------------------------


def test_reset_after_a_keep_pause_preempts_the_kept_requests_and_succeeds():
    with FakeVllmServer() as fake:
        fake.running_requests = 3
        client = VllmHttpServer(fake.url, timeout=5.0, reset_cache_retries=2, reset_cache_interval_s=0.01)
        client.pause()
        client.reset_prefix_cache()
        client.resume()
        client.close()
    sent = [(method, path, query) for method, path, query, _ in fake.calls]
    assert sent == [
        ("POST", "/pause", {"mode": "keep"}),
        ("POST", "/reset_prefix_cache", {"reset_running_requests": "true"}),
        ("POST", "/resume", {}),
    ]
    assert fake.prefix_cache_resets == 1 and fake.running_requests == 3  # recomputed after /resume


def test_a_server_that_ignores_reset_running_requests_fails_the_reset_naming_the_endpoint():
    with FakeVllmServer(reset_running_requests=False) as fake:  # an older route: kept blocks stay held
        fake.running_requests = 1
        client = VllmHttpServer(fake.url, timeout=5.0, reset_cache_retries=2, reset_cache_interval_s=0.01)
        client.pause()
        with pytest.raises(ServerError) as caught:
            client.reset_prefix_cache()
        client.close()
    assert caught.value.endpoint == "/reset_prefix_cache" and "3 tries" in str(caught.value)
    assert fake.url in str(caught.value) and "reset_running_requests=true" in str(caught.value)
    assert len([call for call in fake.calls if call[1] == "/reset_prefix_cache"]) == 3
    assert fake.prefix_cache_resets == 0
