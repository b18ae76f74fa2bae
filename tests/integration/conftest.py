"""Integration fixtures: ONE real vLLM CPU server (SmolLM2-135M, gloo weight transfer) per session.

The server runs from `.venv-vllm` (the `rlsetup_vllm_gloo` plugin must be installed there:
`.venv-vllm/bin/pip install -e docker/vllm_gloo_engine`). Environment knobs:
- `RLSETUP_TEST_VLLM_URL`: use an already running server (started with the gloo backend and
  `VLLM_SERVER_DEV_MODE=1`) instead of starting one; handy when iterating.
- `RLSETUP_TEST_VLLM_PORT`: the port to start on (default: a free port).
- `RLSETUP_VLLM_PYTHON`: the server interpreter (default `<repo>/.venv-vllm/bin/python`).
Tests that need it are skipped, not failed, when the server env is absent.

A SECOND server, also once per session and only when a test asks for it (`reasoning_vllm`):
SmolLM2 with `<think>`/`</think>` added (`thinking_model.py`), `--reasoning-parser deepseek_r1`,
`VLLM_USE_V2_MODEL_RUNNER=0`, and NO weight-transfer backend. It serves the thinking-budget tests
and the tests of what a server without the backend answers (the sync check, `connect()`).
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

from adapters.vllm.http_server import VllmHttpServer
from adapters.vllm.server_process import VllmServerProcess
from infrastructure.model_assets import resolve_model_path
from tests.integration.thinking_model import build_thinking_model

REPO_ROOT = Path(__file__).resolve().parents[2]
MODEL_ALIAS = "smollm2-135m-instruct"


@attrs.frozen
class RunningServer:
    url: str
    model_path: Path
    startup_seconds: float | None


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def vllm_python() -> Path:
    python = Path(os.environ.get("RLSETUP_VLLM_PYTHON", REPO_ROOT / ".venv-vllm" / "bin" / "python"))
    if not python.is_file():
        pytest.skip(f"no vLLM server environment at {python}")
    return python


@pytest.fixture(scope="session")
def port_factory():
    """A function returning a currently free TCP port on 127.0.0.1."""
    return free_port


@pytest.fixture(scope="session")
def vllm_python_path() -> Path:
    return vllm_python()


@pytest.fixture(scope="session")
def vllm_model_path() -> Path:
    return resolve_model_path(MODEL_ALIAS)


@pytest.fixture(scope="session")
def running_vllm(tmp_path_factory: pytest.TempPathFactory, vllm_model_path: Path) -> Iterator[RunningServer]:
    external = os.environ.get("RLSETUP_TEST_VLLM_URL")
    if external:
        yield RunningServer(external.rstrip("/"), vllm_model_path, None)
        return
    port = int(os.environ.get("RLSETUP_TEST_VLLM_PORT") or free_port())
    process = VllmServerProcess(
        python=vllm_python(), model_path=vllm_model_path, port=port, cpu_threads="0-1",
        kv_cache_gib=1.0, max_model_len=1024, startup_timeout_s=600,
        log_path=tmp_path_factory.mktemp("vllm") / "server.log", weight_transfer_backend="gloo",
    )
    with process:
        yield RunningServer(process.url, vllm_model_path, process.startup_seconds)


@pytest.fixture(scope="session")
def vllm_server(running_vllm: RunningServer) -> Iterator[VllmHttpServer]:
    server = VllmHttpServer(running_vllm.url, timeout=120.0, transfer_timeout=300.0)
    yield server
    server.close()


REASONING_PARSER = "deepseek_r1"  # vLLM 0.32's `<think>`/`</think>` parser (reasoning/deepseek_r1_reasoning_parser.py)


@pytest.fixture(scope="session")
def thinking_model(tmp_path_factory: pytest.TempPathFactory, vllm_model_path: Path) -> Path:
    return build_thinking_model(vllm_model_path, tmp_path_factory.mktemp("thinking") / "model")


@pytest.fixture(scope="session")
def reasoning_vllm(tmp_path_factory: pytest.TempPathFactory, thinking_model: Path) -> Iterator[RunningServer]:
    """The second server: a reasoning parser, the V1 runner, no weight-transfer backend."""
    process = VllmServerProcess(
        python=vllm_python(), model_path=thinking_model, port=free_port(), cpu_threads="0-1", kv_cache_gib=1,
        max_model_len=512, startup_timeout_s=600, weight_transfer_backend=None,
        log_path=tmp_path_factory.mktemp("vllm-reasoning") / "server.log",
        reasoning_parser=REASONING_PARSER, extra_env={"VLLM_USE_V2_MODEL_RUNNER": "0"},
    )
    with process:
        print(f"\n[server] reasoning, no backend: healthy after {process.startup_seconds:.0f}s")
        yield RunningServer(process.url, thinking_model, process.startup_seconds)
