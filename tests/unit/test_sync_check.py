"""`check --sync` pieces with fakes: the sync-then-verify run, the table, the verifier, and the
backend preflight against a small local HTTP server that answers `/server_info` like vLLM."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import attrs
import pytest

from adapters.vllm.errors import ServerError
from adapters.vllm.sync_verifier import PromptLogprobVerifier, logprob_tolerance, max_abs_diff
from application.ports.weight_sync import TransferInit
from application.sync_report import SyncTarget
from application.sync_weights import SyncWeights
from domain.config import RunConfig
from domain.tensors import TensorSpec
from infrastructure.sync_check import SyncCheckError, check_sync, render_table, require_transfer_backend, run_sync_check
from tests.fakes.fake_sync import FakeSyncServer, FakeTransport, FakeWeightSource
from tests.fakes.fake_sync_verifier import FakeProbedServer, FakeTrainerLogprobs

SPECS = tuple(TensorSpec(f"model.layers.{i}.w", "float32", (8, 8)) for i in range(4))
PROBE = list(range(10, 30))


def build(servers: list[FakeSyncServer]):
    init = TransferInit(master_address="127.0.0.1", master_port=51216, rank_offset=1, world_size=0)
    targets = [SyncTarget(s, FakeTransport(s), init) for s in servers]
    sync = SyncWeights(targets, FakeWeightSource(SPECS), timeout=2.0, chunk_bytes=600)
    trainer = FakeTrainerLogprobs()
    probed = [FakeProbedServer(s, trainer) for s in servers]
    return sync, targets, probed, PromptLogprobVerifier(probed, trainer, PROBE, tolerance=1e-3)


def test_one_sync_then_every_server_verified():
    servers = [FakeSyncServer(f"http://s{i}:8000", SPECS, workers=2) for i in range(2)]
    sync, targets, _, verifier = build(servers)
    rows = run_sync_check(sync, targets, verifier)
    assert [r.url for r in rows] == [s.url for s in servers]
    for row, server in zip(rows, servers):
        assert row.verdict == "ok" and row.world_size == 2 and server.version == 1
        assert row.bytes == sum(s.nbytes for s in SPECS) and row.seconds > 0 and row.gbps > 0
        assert row.verification.max_logprob_diff == 0.0 and row.verification.probe_tokens == len(PROBE) - 1
    assert all(t.transport.closed == 1 for t in targets)  # type: ignore[attr-defined]
    table = render_table(rows)
    assert table.splitlines()[0].split()[:4] == ["server", "world", "sync", "s"]
    assert all(s.url in table for s in servers) and "MISMATCH" not in table


def test_the_version_moves_past_what_the_server_reports():
    server = FakeSyncServer("http://s:8000", SPECS)
    server.version = 41
    sync, targets, _, verifier = build([server])
    [row] = run_sync_check(sync, targets, verifier)
    assert server.version == 42 and row.verification.reported_version == 42 and row.verdict == "ok"


def test_corrupted_server_is_a_mismatch_naming_it():
    servers = [FakeSyncServer(f"http://s{i}:8000", SPECS) for i in range(2)]
    sync, targets, probed, verifier = build(servers)
    probed[1].corrupt(0.01)
    rows = run_sync_check(sync, targets, verifier)
    assert [r.verdict for r in rows] == ["ok", "MISMATCH"]
    assert rows[1].verification.max_logprob_diff == pytest.approx(0.01)
    assert "http://s1:8000: prompt log-probs" in rows[1].verification.describe()
    assert "MISMATCH" in render_table(rows)


def test_a_server_that_cannot_be_asked_fails_with_its_error():
    server = FakeSyncServer("http://s:8000", SPECS)
    sync, targets, probed, verifier = build([server])
    probed[0].fail_with = ServerError(server.url, "/v1/completions", 503, "overloaded")
    [row] = run_sync_check(sync, targets, verifier)
    assert row.verdict == "MISMATCH"
    assert "http://s:8000 /v1/completions: HTTP 503" in row.verification.describe()


def test_max_abs_diff_fails_on_missing_or_nan():
    assert max_abs_diff([-1.0, -2.0], [-1.0, -2.5]) == 0.5
    assert max_abs_diff([None, -2.0], [-1.0, -2.0]) == float("inf")
    assert max_abs_diff([float("nan")], [-1.0]) == float("inf")
    with pytest.raises(ValueError):
        max_abs_diff([-1.0], [-1.0, -2.0])


def test_tolerance_by_dtype():
    assert logprob_tolerance("float32") == 1e-3
    assert logprob_tolerance("float32") < logprob_tolerance("float16") < logprob_tolerance("bfloat16")
    with pytest.raises(ValueError, match="'int8'"):
        logprob_tolerance("int8")


# ---- the backend preflight against a local HTTP server ---------------------------------------

@attrs.define
class InfoServer:
    url: str
    answer: dict


@pytest.fixture
def info_server() -> Iterator[InfoServer]:
    state = InfoServer("", {"vllm_config": {"weight_transfer_config": None}})

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            if not self.path.startswith("/server_info"):
                self.send_error(404)
                return
            body = json.dumps(state.answer).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield state
    httpd.shutdown()
    httpd.server_close()


def test_preflight_refuses_a_server_without_backend(info_server: InfoServer):
    with pytest.raises(SyncCheckError) as caught:
        require_transfer_backend([info_server.url], "gloo", timeout=5)
    assert info_server.url in str(caught.value) and "/server_info" in str(caught.value)
    assert "without a weight-transfer backend" in str(caught.value)


def test_preflight_refuses_another_backend_and_passes_the_right_one(info_server: InfoServer):
    info_server.answer = {"vllm_config": {"weight_transfer_config": {"backend": "nccl"}}}
    with pytest.raises(SyncCheckError, match="backend is 'nccl' but the config opens 'gloo'"):
        require_transfer_backend([info_server.url], "gloo", timeout=5)
    require_transfer_backend([info_server.url], "nccl", timeout=5)


def test_preflight_names_missing_dev_mode(info_server: InfoServer):
    with pytest.raises(ServerError, match="VLLM_SERVER_DEV_MODE=1"):
        require_transfer_backend([info_server.url + "/nothing"], "gloo", timeout=5)


def test_check_command_fails_clearly_against_a_server_without_backend(info_server: InfoServer, tmp_path: Path, capsys):
    config = RunConfig()
    config = attrs.evolve(
        config,
        training=attrs.evolve(config.training, rollout_server_url=info_server.url),
        grpo=attrs.evolve(config.grpo, output_dir=str(tmp_path)),
    )
    assert check_sync(config) == 1
    err = capsys.readouterr().err
    assert "sync check FAILED" in err and info_server.url in err and "/init_weight_transfer_engine" in err
