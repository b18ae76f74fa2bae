"""The embedded vLLM server's environment: RL routes, CPU knobs, and malloc that keeps freed pages."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.vllm.server_process import RELOAD_FRIENDLY_MALLOC, VllmServerProcess


def server(tmp_path: Path, **kwargs) -> VllmServerProcess:
    return VllmServerProcess(python="python", model_path=tmp_path, port=1, log_path=tmp_path / "log", **kwargs)


def test_the_server_keeps_freed_pages_unless_the_caller_sets_malloc_itself(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for key in RELOAD_FRIENDLY_MALLOC:
        monkeypatch.delenv(key, raising=False)
    env = server(tmp_path).environment()
    assert env["MALLOC_MMAP_MAX_"] == "0" and int(env["MALLOC_TRIM_THRESHOLD_"]) >= 1 << 32
    assert env["VLLM_SERVER_DEV_MODE"] == "1"
    monkeypatch.setenv("MALLOC_MMAP_MAX_", "65536")
    assert server(tmp_path).environment()["MALLOC_MMAP_MAX_"] == "65536"


def test_glibc_defaults_on_request(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for key in RELOAD_FRIENDLY_MALLOC:
        monkeypatch.delenv(key, raising=False)
    env = server(tmp_path, malloc={}).environment()
    assert not set(RELOAD_FRIENDLY_MALLOC) & set(env)
