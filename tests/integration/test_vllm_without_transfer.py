"""A vLLM server started WITHOUT a weight-transfer backend: weight calls fail fast with a clear error.

Runs against the session's second server (`reasoning_vllm` in conftest.py, started without a
backend). Checked: each weight route names the server and the endpoint; `SyncWeights.connect()`
stops as soon as the server refuses `/init_weight_transfer_engine` (the rendezvous is called off,
not waited out), and its error carries the server's answer.
"""

from __future__ import annotations

import time

import pytest
import torch

from adapters.transport.gloo_transport import GlooTransport
from adapters.vllm.errors import ServerError
from adapters.vllm.http_server import VllmHttpServer
from adapters.weights.gather import ModelWeightSource
from application.ports.weight_sync import TransferInit
from application.sync_report import SyncTarget, WeightSyncError
from application.sync_weights import SyncWeights

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

RENDEZVOUS_TIMEOUT_S = 120.0


def test_weight_calls_without_backend_name_server_and_endpoint(reasoning_vllm, port_factory) -> None:
    server = VllmHttpServer(reasoning_vllm.url, timeout=60)
    try:
        init = TransferInit(master_address="127.0.0.1", master_port=port_factory(), rank_offset=1, world_size=2)
        with pytest.raises(ServerError) as caught:
            server.init_weight_transfer(init, rank_offset=1)
        assert reasoning_vllm.url in str(caught.value) and "/init_weight_transfer_engine" in str(caught.value)
        with pytest.raises(ServerError, match="/start_weight_update"):
            server.start_weight_update()
    finally:
        server.close()


def test_connect_is_called_off_when_the_server_refuses_the_transfer_engine(reasoning_vllm, port_factory) -> None:
    server = VllmHttpServer(reasoning_vllm.url, timeout=60, transfer_timeout=RENDEZVOUS_TIMEOUT_S)
    init = TransferInit(master_address="127.0.0.1", master_port=port_factory(), rank_offset=1, world_size=0)
    model = torch.nn.Linear(4, 4)
    sync = SyncWeights([SyncTarget(server, GlooTransport(), init)], ModelWeightSource(model),
                       timeout=RENDEZVOUS_TIMEOUT_S, chunk_bytes=1 << 20)
    started = time.monotonic()
    try:
        with pytest.raises(WeightSyncError) as caught:
            sync.connect()
    finally:
        sync.close()
        server.close()
    elapsed = time.monotonic() - started
    message = str(caught.value)
    print(f"\n[connect] refused in {elapsed:.2f}s: {message[:300]}")
    assert elapsed < 20, f"connect() waited {elapsed:.1f}s of its {RENDEZVOUS_TIMEOUT_S:.0f}s timeout"
    assert reasoning_vllm.url in message and "/init_weight_transfer_engine" in message
