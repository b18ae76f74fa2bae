"""The SGLang flavour of the weight sync, end to end on CPU: H2's `SyncWeights` drives
`SglangHttpServer` + `C10dBucketTransport` (gloo) against `FakeSglangServer`, whose worker forms the
group the way SGLang does and rebuilds tensors from the flattened bucket the way SGLang does.

The model mixes bf16 and fp32 with an odd-sized bf16 tensor first, the case where keeping the
trainer's order would make SGLang's receiver refuse a misaligned offset.
"""

from __future__ import annotations

import socket

import pytest
import torch
from torch import nn

from adapters.sglang.http_server import SglangHttpServer
from adapters.sglang.refusals import UnsupportedServer
from adapters.transport.packed_tensors import TensorMismatch
from adapters.transport.sglang_transport import C10dBucketTransport
from adapters.vllm.errors import ServerError
from adapters.weights.gather import ModelWeightSource
from application.ports.weight_sync import TransferInit, WeightChunk
from application.sync_report import SyncTarget, WeightSyncError
from application.sync_weights import SyncWeights
from domain.tensors import TensorSpec
from tests.fakes.fake_sglang_server import OUTSIDE_SESSION, FakeSglangServer

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]
TIMEOUT = 20.0


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Tiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(13, 7).to(torch.bfloat16)  # 182 bytes: an fp32 after it would misalign
        self.norm = nn.Parameter(torch.randn(7))  # fp32
        self.proj = nn.Linear(7, 5, dtype=torch.bfloat16)
        self.head = nn.Linear(5, 3)  # fp32


def _zeros_like(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: torch.zeros_like(param) for name, param in model.named_parameters()}


def _assert_bit_identical(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    for name, param in model.named_parameters():
        assert state[name].dtype == param.dtype, name
        assert torch.equal(state[name].view(torch.uint8), param.detach().view(torch.uint8)), name


def _sync_weights(
    fake: FakeSglangServer, model: nn.Module, chunk_bytes: int = 200, timeout: float = TIMEOUT
) -> tuple[SyncWeights, SglangHttpServer, C10dBucketTransport]:
    server = SglangHttpServer(fake.url, timeout=TIMEOUT, backend="gloo")
    transport = C10dBucketTransport("gloo")
    init = TransferInit(master_address="127.0.0.1", master_port=_free_port(), rank_offset=1, world_size=0)
    target = SyncTarget(server=server, transport=transport, init=init)
    sync = SyncWeights([target], ModelWeightSource(model), timeout=timeout, chunk_bytes=chunk_bytes)
    return sync, server, transport


def test_sync_is_bit_identical_and_records_the_version() -> None:
    torch.manual_seed(0)
    model = _Tiny()
    with FakeSglangServer(_zeros_like(model)) as fake:
        sync, server, _ = _sync_weights(fake, model)
        try:
            sync.connect()
            report = sync.sync(1)
            _assert_bit_identical(model, fake.state)
            assert fake.weight_version == "1" and server.weight_version() == 1
            assert sync.versions == {server.url: 1}
            assert report.chunks > 1 and fake.session is None and fake.paused is None and fake.flushes == 1

            with torch.no_grad():
                for param in model.parameters():
                    param.add_(1.5)
            sync.sync(2)
            _assert_bit_identical(model, fake.state)
            assert server.weight_version() == 2
        finally:
            sync.close()
            server.close()
        paths = [path for path, _ in fake.calls]
        updates = [body for path, body in fake.calls if path == "/update_weights_from_distributed"]
    assert paths.count("/init_weights_update_group") == 1
    assert [body for path, body in fake.calls if path == "/pause_generation"] == [{"mode": "retract"}] * 2
    assert all(u["load_format"] == "flattened_bucket" and "weight_version" not in u for u in updates)
    first_sync = paths[paths.index("/pause_generation"):paths.index("/continue_generation") + 1]
    assert first_sync[:2] == ["/pause_generation", "/begin_weight_update"]
    assert first_sync[-4:] == ["/update_weight_version", "/model_info", "/flush_cache", "/continue_generation"]
    assert first_sync[-5] == "/end_weight_update"


def test_update_outside_a_session_fails_with_sglangs_message() -> None:
    with FakeSglangServer({"w": torch.zeros(2)}) as fake:
        server = SglangHttpServer(fake.url, timeout=TIMEOUT, backend="gloo")
        with pytest.raises(ServerError) as caught:
            server.update_weights([TensorSpec("w", "float32", (2,))])
        server.close()
    error = caught.value
    assert (error.endpoint, error.status) == ("/update_weights_from_distributed", 400)
    assert OUTSIDE_SESSION in str(error) and fake.url in str(error)


def test_a_400_from_the_server_names_server_endpoint_and_body() -> None:
    torch.manual_seed(1)
    model = _Tiny()
    with FakeSglangServer(_zeros_like(model)) as fake:
        sync, server, _ = _sync_weights(fake, model, chunk_bytes=10**6)
        try:
            sync.connect()
            fake.fail_next("/end_weight_update", 400, "finalize exploded")
            with pytest.raises(WeightSyncError) as caught:
                sync.sync(1)
        finally:
            sync.close()
            server.close()
    text = str(caught.value)
    assert fake.url in text and "/end_weight_update" in text and "HTTP 400" in text and "finalize exploded" in text
    assert fake.weight_version == "default" and sync.versions[server.url] is None


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"server_info": {"enable_paged_experts": True}}, "--enable-paged-experts"),
        ({"server_info": {"weight_cache_mode": "daemon"}}, "--weight-cache-mode daemon"),
        ({"dp_size": 2}, "dp_size=2"),
        ({"model_type": "deepseek_v41"}, "SGLANG_OPT_DEEPGEMM_HC_PRENORM=0"),
    ],
)
def test_servers_sglang_cannot_update_are_refused_at_construction(kwargs: dict, needle: str) -> None:
    with FakeSglangServer({"w": torch.zeros(2)}, **kwargs) as fake:
        with pytest.raises(UnsupportedServer) as caught:
            SglangHttpServer(fake.url, timeout=TIMEOUT, backend="gloo")
    assert needle in str(caught.value) and fake.url in str(caught.value)


def test_an_env_gated_refusal_can_be_waived_by_name() -> None:
    with FakeSglangServer({"w": torch.zeros(2)}, model_type="deepseek_v41") as fake:
        server = SglangHttpServer(fake.url, timeout=TIMEOUT, backend="gloo", waived_refusals=("mhc_splits",))
        assert server.world_size() == 1
        server.close()


def test_an_update_the_server_refuses_fails_the_sync_with_the_servers_reason() -> None:
    torch.manual_seed(2)
    model = _Tiny()
    with FakeSglangServer(_zeros_like(model)) as fake:
        sync, server, _ = _sync_weights(fake, model, chunk_bytes=10**6, timeout=2.0)
        try:
            sync.connect()
            fake.fail_next("/update_weights_from_distributed", 400, "Failed to receive weights: no room")
            with pytest.raises(WeightSyncError) as caught:
                sync.sync(1)
        finally:
            sync.close()
            server.close()
    text = str(caught.value)
    assert "/update_weights_from_distributed" in text and "HTTP 400" in text and "no room" in text
    assert fake.weight_version == "default"


def test_a_mismatched_payload_is_refused_before_sending_and_a_restarted_server_reconnects() -> None:
    torch.manual_seed(3)
    model = _Tiny()
    with FakeSglangServer(_zeros_like(model)) as fake:
        sync, server, transport = _sync_weights(fake, model)
        sync.connect()
        bad = WeightChunk((TensorSpec("norm", "float32", (7,)),), (torch.zeros(8),))
        with pytest.raises(TensorMismatch, match="'norm': announced float32 \\(7,\\), payload is float32 \\(8,\\)"):
            transport.broadcast(bad, TIMEOUT)
        sync.sync(1)
        port = int(fake.url.rsplit(":", 1)[1])
    with FakeSglangServer(_zeros_like(model), port=port) as restarted:  # same URL, fresh weights and group
        try:
            sync.server_restarted(server.url)
            sync.connect()
            sync.sync(2)
            _assert_bit_identical(model, restarted.state)
            assert restarted.weight_version == "2"
        finally:
            sync.close()
            server.close()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="nccl needs two GPUs (NCCL refuses two ranks on one GPU)")
def test_the_nccl_flavour_is_bit_identical_across_two_gpus() -> None:
    torch.manual_seed(4)
    model = _Tiny()
    with FakeSglangServer(_zeros_like(model), device="cuda:1") as fake:
        server = SglangHttpServer(fake.url, timeout=TIMEOUT, backend="nccl")
        init = TransferInit(master_address="127.0.0.1", master_port=_free_port(), rank_offset=1, world_size=0)
        target = SyncTarget(server=server, transport=C10dBucketTransport("nccl", device="cuda:0"), init=init)
        sync = SyncWeights([target], ModelWeightSource(model), timeout=TIMEOUT, chunk_bytes=200)
        try:
            sync.connect()
            sync.sync(1)
            _assert_bit_identical(model, fake.state)
            assert server.weight_version() == 1
        finally:
            sync.close()
            server.close()
