"""A fake vLLM 0.32 server: the HTTP routes of the weight-sync handshake on 127.0.0.1, and its rules.

A real HTTP server (stdlib `ThreadingHTTPServer`, one thread per request, so the blocking
`/init_weight_transfer_engine` runs while the trainer joins the collective). Routes and answers are
vLLM's (`entrypoints/rl/online/api_router.py`, `entrypoints/serve/dev/cache/api_router.py`):
`GET /get_world_size`, `POST /init_weight_transfer_engine {"init_info"}`, `POST /pause?mode=`,
`POST /reset_prefix_cache?reset_running_requests=&reset_external=`, `POST /resume`,
`GET /weight_info`; any other path is a 404 `{"detail": "Not Found"}`.

`init` picks what the init route does:
- "join": its single worker joins the trainer's gloo group as rank `rank_offset`, the way the gloo
  engine plugin does (`TCPStore` client + `ProcessGroupGloo`), then answers 200;
- "unconfigured": a server started without `--weight-transfer-config`: HTTP 500 with vLLM's error
  body around the worker's `RuntimeError` (`gpu_worker.py::_check_weight_transfer_engine`);
- "unmounted": a server started without `VLLM_SERVER_DEV_MODE=1`: the route is a 404;
- "drop": the connection closes without an answer.

KV rules (`v1/core/sched/scheduler.py::reset_prefix_cache`, `v1/core/block_pool.py`): each of
`running_requests` holds KV blocks; `/pause?mode=keep` keeps them holding their blocks (the route's
contract: `clear_cache` is ignored for keep), `abort` finishes them; `/reset_prefix_cache` answers
`success: false` while any block is held, unless `reset_running_requests=true`, which first preempts
every running request (blocks freed, re-queued as `waiting_requests`); a fake built with
`reset_running_requests=False` is an older vLLM whose route ignores that query. `calls` records
every request as (method, path, query, JSON body or None).
"""

from __future__ import annotations

import json
import socket
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

import torch.distributed as dist

INIT_MODES = ("join", "unconfigured", "unmounted", "drop")
UNCONFIGURED = (
    "Weight transfer not configured. Please set weight_transfer_config to enable weight transfer."
)


class FakeVllmServer:
    def __init__(
        self, *, init: str = "join", workers: int = 1, group_timeout_s: float = 30.0, reset_running_requests: bool = True
    ) -> None:
        if init not in INIT_MODES:
            raise ValueError(f"init must be one of {INIT_MODES}, got {init!r}")
        if init == "join" and workers != 1:
            raise ValueError("the joining fake has one worker")
        self.init, self.workers = init, workers
        self.takes_reset_running_requests = reset_running_requests
        self.running_requests = 0
        self.waiting_requests = 0
        self.paused: str | None = None
        self.prefix_cache_resets = 0
        self.calls: list[tuple[str, str, dict[str, str], Any]] = []
        self.group: dist.ProcessGroupGloo | None = None
        self._timeout = timedelta(seconds=group_timeout_s)
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self._http.daemon_threads = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-vllm", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> FakeVllmServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._http.shutdown()
        self._http.server_close()
        self._thread.join(5)
        if self.group is not None:
            self.group.shutdown()
            self.group = None

    def handle(self, method: str, path: str, query: dict[str, str], body: Any) -> tuple[int, Any] | None:
        """(status, JSON answer) of one request; None drops the connection."""
        with self._lock:
            self.calls.append((method, path, query, body))
        route = {
            ("GET", "/get_world_size"): lambda: (200, {"world_size": self.workers}),
            ("POST", "/init_weight_transfer_engine"): lambda: self._init(body),
            ("POST", "/pause"): lambda: self._pause(query.get("mode", "abort")),
            ("POST", "/reset_prefix_cache"): lambda: self._reset(
                self.takes_reset_running_requests and query.get("reset_running_requests") == "true"
            ),
            ("POST", "/resume"): self._resume,
            ("GET", "/weight_info"): lambda: (200, {"weight_version": "default"}),
        }.get((method, path))
        return route() if route is not None else (404, {"detail": "Not Found"})

    def _init(self, body: Any) -> tuple[int, Any] | None:
        if self.init == "drop":
            return None
        if self.init == "unmounted":
            return 404, {"detail": "Not Found"}
        if self.init == "unconfigured":
            error = {"message": UNCONFIGURED, "type": "InternalServerError", "param": None, "code": 500}
            return 500, {"error": error}
        info = body["init_info"]
        store = dist.TCPStore(
            info["master_address"], info["master_port"], info["world_size"], is_master=False, timeout=self._timeout
        )
        self.group = dist.ProcessGroupGloo(store, info["rank_offset"], info["world_size"], self._timeout)
        return 200, {"message": "Weight transfer initialized"}

    def _pause(self, mode: str) -> tuple[int, Any]:
        if mode not in ("abort", "wait", "keep"):
            return 422, {"detail": f"invalid pause mode {mode!r}"}
        if mode == "abort":
            self.running_requests = 0
        self.paused = mode
        return 200, {"status": "paused"}

    def _reset(self, reset_running_requests: bool) -> tuple[int, Any]:
        if reset_running_requests:  # preempt: blocks freed, requests back to the waiting queue
            self.waiting_requests += self.running_requests
            self.running_requests = 0
        if self.running_requests:
            return 200, {"success": False}
        self.prefix_cache_resets += 1
        return 200, {"success": True}

    def _resume(self) -> tuple[int, Any]:
        self.paused = None
        self.running_requests += self.waiting_requests
        self.waiting_requests = 0
        return 200, {"status": "resumed"}


def _handler(fake: FakeVllmServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            query = {key: values[-1] for key, values in parse_qs(parts.query).items()}
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            answer = fake.handle(method, parts.path, query, body)
            if answer is None:
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
                return
            status, content = answer
            data = json.dumps(content).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    return Handler
