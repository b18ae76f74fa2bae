"""`SglangHttpServer` against the fake SGLang HTTP server (no collective): generation, the cache
flush under each pause mode, route fallbacks and the errors it raises."""

from __future__ import annotations

import socket

import pytest
import torch

from adapters.sglang.http_server import SglangHttpServer
from adapters.vllm.errors import ServerError
from application.ports.generation import SamplingParams
from tests.fakes.fake_sglang_server import FakeSglangServer


@pytest.fixture
def fake():
    with FakeSglangServer({"w": torch.zeros(2)}) as server:
        yield server


@pytest.fixture
def client(fake: FakeSglangServer):
    server = SglangHttpServer(fake.url, timeout=5.0, backend="gloo", flush_retries=2, flush_interval_s=0.01)
    yield server
    server.close()


def test_generate_returns_engine_token_ids_logprobs_and_version(fake: FakeSglangServer, client: SglangHttpServer) -> None:
    params = SamplingParams(max_tokens=4, temperature=0.7, top_p=0.9, stop=("\n",), seed=3)
    [one] = client.generate([5, 6], params)
    assert one.token_ids == (11, 12, 13, 14) and one.logprobs == pytest.approx((-0.5, -0.51, -0.52, -0.53))
    assert one.finish_reason == "length" and one.weight_version is None
    _, body = fake.calls[-1]
    assert body["sampling_params"] == {"max_new_tokens": 4, "temperature": 0.7, "top_p": 0.9, "n": 1,
                                       "stop": ["\n"], "sampling_seed": 3}
    assert body["input_ids"] == [5, 6] and body["return_logprob"] is True
    fake.weight_version = "7"
    many = client.generate([5, 6], SamplingParams(max_tokens=2), n=3)
    assert [c.token_ids for c in many] == [(11, 12), (18, 19), (25, 26)] and {c.weight_version for c in many} == {7}


def test_prompt_logprobs_start_with_none(client: SglangHttpServer) -> None:
    assert client.prompt_logprobs([4, 8, 9]) == [None, pytest.approx(-1.1), pytest.approx(-1.2)]


def test_flush_succeeds_after_a_retract_pause_and_fails_clearly_in_place(fake: FakeSglangServer, client: SglangHttpServer) -> None:
    fake.running_requests = 2
    client.pause()
    assert fake.paused == "retract"
    client.reset_prefix_cache()
    assert fake.flushes == 1
    in_place = SglangHttpServer(fake.url, timeout=5.0, pause_mode="in_place", flush_retries=2, flush_interval_s=0.01)
    in_place.pause()
    with pytest.raises(ServerError) as caught:
        in_place.reset_prefix_cache()
    in_place.close()
    assert (caught.value.endpoint, caught.value.status) == ("/flush_cache", 400)
    assert "Flush cache failed" in str(caught.value)
    assert [path for path, _ in fake.calls].count("/flush_cache") == 1 + 3  # retried twice


def test_finish_moves_the_version_only_after_end(fake: FakeSglangServer, client: SglangHttpServer) -> None:
    with pytest.raises(ServerError, match="no weight-update session is open"):
        client.finish_weight_update(3)
    assert client.weight_version() is None
    client.start_weight_update()
    client.finish_weight_update(3)
    assert client.weight_version() == 3
    assert fake.calls[-2][1] == {"new_version": "3", "abort_all_requests": False}


def test_world_size_is_the_tp_size_and_old_servers_use_the_deprecated_route(fake: FakeSglangServer, client: SglangHttpServer) -> None:
    fake.tp_size = 4
    fake.fail_next("/server_info", 404)
    assert client.world_size() == 4
    assert [path for path, _ in fake.calls][-3:] == ["/server_info", "/get_server_info", "/model_info"]


def test_a_non_integer_version_and_a_dead_server_name_the_endpoint(fake: FakeSglangServer, client: SglangHttpServer) -> None:
    fake.weight_version = "v2-final"
    with pytest.raises(ServerError, match=r"/model_info: HTTP 200: weight_version 'v2-final' is not an integer"):
        client.weight_version()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    with pytest.raises(ServerError, match=rf"{dead_url} /server_info: no response: ConnectError"):
        SglangHttpServer(dead_url, timeout=1.0)


def test_bad_arguments_are_refused_before_any_call(client: SglangHttpServer) -> None:
    with pytest.raises(ValueError, match="backend must be one of"):
        SglangHttpServer("http://x", backend="mpi", check_on_init=False)
    with pytest.raises(ValueError, match="pause mode must be one of"):
        SglangHttpServer("http://x", pause_mode="keep", check_on_init=False)
    with pytest.raises(ValueError, match="refusing an update with no tensors"):
        client.update_weights([])
