"""A fake SGLang 0.5.23 server: its HTTP contract on 127.0.0.1, its weight-update group, its rules.

A real HTTP server (stdlib `ThreadingHTTPServer`, one thread per request, so the blocking
`/init_weights_update_group` and `/update_weights_from_distributed` run while the trainer joins
the collective) with SGLang's routes and bodies (`entrypoints/http_server.py`,
`managers/io_struct.py`). Its single worker (tp_rank 0) forms the group exactly as SGLang does
(`utils/common.py::init_custom_process_group`: torch's tcp rendezvous, `PrefixStore(group_name)`,
`_new_process_group_helper`) and receives `load_format: "flattened_bucket"` the way
`FlattenedTensorBucket.empty` does (negative dims and misaligned offsets refused before the
broadcast), then "loads" by name into its state dict (unknown name or shape -> the loader's failure).

Rules kept from SGLang: `dp_size == 1` is asserted by init/update (HTTP 500, as an assertion in a
FastAPI handler is); update/end outside `begin_weight_update` -> 400 with SGLang's message; a second
begin -> 400; `/flush_cache` -> 400 (plain text) while requests run, where `in_place` pause keeps
them running and `retract` re-queues them; a weight version carried by an update moves at once.
Departures: one worker only, receiving on `device` (CPU for gloo, a second GPU for nccl;
`tp_size` may be reported larger, but init then fails); only the flattened bucket data plane;
`/generate` is a deterministic stand-in (no model). The worker's group is registered in this
process's torch group registry, so one fake per group name at a time.
`fail_next(endpoint, status, message)` makes the next call to that route fail without effect.
"""

from __future__ import annotations

import json
import threading
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import Backend, PrefixStore, _new_process_group_helper, _world, rendezvous

OUTSIDE_SESSION = "update_weights_from_distributed must run between begin_weight_update() and end_weight_update()"
DP_ASSERT = "data-parallel replicas are not supported for update weights from distributed"
PAUSE_MODES = ("abort", "retract", "in_place")


class FakeSglangServer:
    def __init__(
        self, state: dict[str, torch.Tensor], *, tp_size: int = 1, dp_size: int = 1, model_type: str = "llama",
        architectures: tuple[str, ...] = ("LlamaForCausalLM",), server_info: dict[str, Any] | None = None,
        group_timeout_s: float = 30.0, port: int = 0, device: str = "cpu",
    ) -> None:
        self.state = {name: tensor.clone() for name, tensor in state.items()}
        self.tp_size, self.dp_size = tp_size, dp_size
        self.model_type, self.architectures = model_type, list(architectures)
        self.extra_server_info = dict(server_info or {})
        self.weight_version = "default"
        self.device = torch.device(device)  # where the worker receives (a CUDA device for nccl)
        self.session: dict[str, Any] | None = None
        self.paused: str | None = None
        self.running_requests = 0  # requests the scheduler is running (tests set it)
        self.calls: list[tuple[str, Any]] = []
        self.flushes = 0
        self._groups: dict[str, dist.ProcessGroup] = {}
        self._faults: dict[str, tuple[int, str]] = {}
        self._timeout = timedelta(seconds=group_timeout_s)
        self._lock = threading.Lock()
        self._http = ThreadingHTTPServer(("127.0.0.1", port), _handler(self))
        self._http.daemon_threads = True
        self._http.allow_reuse_address = True
        self._thread = threading.Thread(
            target=self._http.serve_forever, kwargs={"poll_interval": 0.05}, name="fake-sglang", daemon=True
        )

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_address[1]}"

    def __enter__(self) -> FakeSglangServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()
        for name in list(self._groups):
            self._destroy(name)

    def fail_next(self, endpoint: str, status: int = 500, message: str = "injected failure") -> None:
        self._faults[endpoint] = (status, message)

    # ---- routes: each returns (status, body); body is JSON-able or a str (plain text) -----------

    def route(self, method: str, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        self.calls.append((path, body))
        if path in self._faults:
            status, message = self._faults.pop(path)
            return status, {"success": False, "message": message}
        handler = _ROUTES.get((method, path)) or _ROUTES.get(("ANY", path))
        if handler is None:
            return 404, {"detail": "Not Found"}
        return handler(self, body)

    def server_info(self, _body: dict) -> tuple[int, Any]:
        info = {"tp_size": self.tp_size, "pp_size": 1, "dp_size": self.dp_size, "weight_cache_mode": "off",
                "enable_paged_experts": False, "quantization": None, "version": "0.5.23-fake"}
        return 200, {**info, **self.extra_server_info}

    def model_info(self, _body: dict) -> tuple[int, Any]:
        return 200, {"model_path": "fake", "weight_version": self.weight_version,
                     "model_type": self.model_type, "architectures": self.architectures}

    def init_group(self, body: dict) -> tuple[int, Any]:
        if self.dp_size != 1:
            return 500, {"detail": f"AssertionError: {DP_ASSERT}"}
        if self.tp_size != 1:
            return 400, {"success": False, "message": "the fake server has one worker; tp_size must be 1"}
        name = body.get("group_name", "weight_update_group")
        try:
            self._groups[name] = _sglang_group(
                body.get("backend", "nccl"), f"tcp://{body['master_address']}:{body['master_port']}",
                body["world_size"], body["rank_offset"], name, self._timeout,
            )
        except Exception as error:  # SGLang turns every failure into success=false
            return 400, {"success": False, "message": f"Failed to initialize custom process group: {error}."}
        return 200, {"success": True, "message": "Succeeded to initialize custom process group."}

    def destroy_group(self, body: dict) -> tuple[int, Any]:
        name = body.get("group_name", "weight_update_group")
        if name not in self._groups:
            return 400, {"success": False, "message": "The group to be destroyed does not exist."}
        self._destroy(name)
        return 200, {"success": True, "message": "Succeeded to destroy custom process group."}

    def begin(self, body: dict) -> tuple[int, Any]:
        if self.session is not None:
            return 400, {"success": False, "message": "a weight-update session is already open; call end_weight_update() first"}
        self.session = {"selector": body.get("selector", "all"), "loaded": False}
        return 200, {"success": True, "message": "Success"}

    def end(self, _body: dict) -> tuple[int, Any]:
        if self.session is None:
            return 400, {"success": False, "message": "no weight-update session is open; call begin_weight_update() first"}
        self.session = None
        return 200, {"success": True, "message": "Success"}

    def update(self, body: dict) -> tuple[int, Any]:
        if self.dp_size != 1:
            return 500, {"detail": f"AssertionError: {DP_ASSERT}"}
        if self.session is None:
            return 400, {"success": False, "message": OUTSIDE_SESSION}
        try:
            weights = self._receive(body)
        except Exception as error:
            return 400, {"success": False, "message": f"Failed to receive weights: {error}"}
        failure = self._load(weights)
        if failure:
            return 400, {"success": False, "message": failure}
        self.session["loaded"] = True
        if body.get("weight_version") is not None:
            self.weight_version = body["weight_version"]
        if body.get("flush_cache", True) and not self._flush():
            return 400, {"success": False, "message": "Weights were updated, but the cache was not flushed because "
                         "requests are still running or queued. Retract or finish them, then call /flush_cache."}
        return 200, {"success": True, "message": "Succeeded to update parameter online."}

    def update_version(self, body: dict) -> tuple[int, Any]:
        if body.get("abort_all_requests", True):
            self.running_requests = 0
        self.weight_version = body["new_version"]
        return 200, {"success": True, "message": f"Weight version updated to {body['new_version']}",
                     "new_version": body["new_version"]}

    def pause(self, body: dict) -> tuple[int, Any]:
        mode = body.get("mode", "abort")
        if mode not in PAUSE_MODES:
            return 422, {"detail": f"mode must be one of {PAUSE_MODES}, got {mode!r}"}
        self.paused = mode
        if mode == "abort":
            self.running_requests = 0
        return 200, {"message": "Generation paused successfully.", "status": "ok"}

    def resume(self, _body: dict) -> tuple[int, Any]:
        self.paused = None
        return 200, {"message": "Generation continued successfully.", "status": "ok"}

    def flush_cache(self, _body: dict) -> tuple[int, Any]:
        if self._flush():
            return 200, "Cache flushed.\nPlease check backend logs for more details.\n"
        return 400, "Flush cache failed.\n"

    def generate(self, body: dict) -> tuple[int, Any]:
        ids, params = list(body["input_ids"]), dict(body.get("sampling_params") or {})
        n, count = int(params.get("n", 1)), int(params.get("max_new_tokens", 16))
        outputs = [self._output(ids, count, k, body) for k in range(n)]
        return 200, outputs[0] if n == 1 else outputs

    # ---- internals --------------------------------------------------------------------------------

    def _output(self, ids: list[int], count: int, k: int, body: dict) -> dict[str, Any]:
        tokens = [(sum(ids) + 7 * k + i) % 1000 for i in range(count)]
        meta: dict[str, Any] = {"id": f"fake-{k}", "finish_reason": {"type": "length", "length": count},
                                "prompt_tokens": len(ids), "weight_version": self.weight_version}
        if body.get("return_logprob"):
            meta["output_token_logprobs"] = [(-0.5 - 0.01 * i, t, None) for i, t in enumerate(tokens)]
            if body.get("logprob_start_len") == 0:
                meta["input_token_logprobs"] = [(None if i == 0 else -1.0 - 0.1 * i, t, None) for i, t in enumerate(ids)]
        return {"text": "", "output_ids": tokens, "meta_info": meta}

    def _flush(self) -> bool:
        running = self.running_requests and self.paused != "retract"
        if not running:
            self.flushes += 1
        return not running

    def _receive(self, body: dict) -> list[tuple[str, torch.Tensor]]:
        name = body.get("group_name", "weight_update_group")
        if name not in self._groups:
            raise AssertionError(f"Group {name} not in {list(self._groups)}. Please call `init_weights_update_group` first.")
        if body.get("load_format") != "flattened_bucket":
            raise ValueError(f"the fake server receives load_format 'flattened_bucket' only, got {body.get('load_format')!r}")
        bucket, metadata = _empty_bucket(body["names"], body["dtypes"], body["shapes"], self.device)
        dist.broadcast(bucket, src=0, group=self._groups[name])
        return [(n, bucket[start:end].view(dtype).reshape(shape)) for n, dtype, shape, start, end in metadata]

    def _load(self, weights: list[tuple[str, torch.Tensor]]) -> str | None:
        with self._lock:
            for name, tensor in weights:
                if name not in self.state or self.state[name].shape != tensor.shape:
                    got = tuple(self.state[name].shape) if name in self.state else "missing"
                    return (f"Failed to update parameter online: {name!r} {tuple(tensor.shape)} vs model {got}. "
                            "The full weights of the ModelRunner are partially updated. Please discard the whole weights.")
                self.state[name].copy_(tensor)
        return None

    def _destroy(self, name: str) -> None:
        group = self._groups.pop(name)
        dist.destroy_process_group(group)


def _sglang_group(backend: str, init_method: str, world_size: int, rank_offset: int, group_name: str,
                  timeout: timedelta) -> dist.ProcessGroup:
    """SGLang's `init_custom_process_group` for worker tp_rank 0 (rank = rank_offset + tp_rank)."""
    store, rank, world_size = next(rendezvous(init_method, rank_offset, world_size, timeout=timeout))
    store.set_timeout(timeout)
    store = PrefixStore(group_name, store)
    group, _ = _new_process_group_helper(
        world_size, rank, [], Backend(backend), store, group_name=group_name, backend_options=None, timeout=timeout,
    )
    _world.pg_group_ranks[group] = {i: i for i in range(world_size)}
    return group


def _empty_bucket(
    names: list[str], dtypes: list[str], shapes: list[list[int]], device: torch.device | str = "cpu"
) -> tuple[torch.Tensor, list[tuple]]:
    """`FlattenedTensorBucket.empty`: offsets from metadata, refusing negative dims and misalignment."""
    metadata, offset = [], 0
    for name, dtype_name, shape in zip(names, dtypes, shapes, strict=True):
        dtype, size = getattr(torch, dtype_name), torch.Size(shape)
        if any(dim < 0 for dim in size):
            raise ValueError(f"Negative dimension in received tensor {name}: {size}")
        if offset % dtype.itemsize:
            raise ValueError(f"Unaligned received tensor {name}: byte offset {offset}, dtype {dtype}")
        metadata.append((name, dtype, size, offset, offset + size.numel() * dtype.itemsize))
        offset += size.numel() * dtype.itemsize
    if not metadata:
        raise ValueError("Cannot create empty tensor bucket")
    return torch.empty(offset, dtype=torch.uint8, device=device), metadata


_ROUTES = {
    ("GET", "/server_info"): FakeSglangServer.server_info,
    ("GET", "/get_server_info"): FakeSglangServer.server_info,
    ("GET", "/model_info"): FakeSglangServer.model_info,
    ("GET", "/get_model_info"): FakeSglangServer.model_info,
    ("POST", "/init_weights_update_group"): FakeSglangServer.init_group,
    ("POST", "/destroy_weights_update_group"): FakeSglangServer.destroy_group,
    ("POST", "/begin_weight_update"): FakeSglangServer.begin,
    ("POST", "/end_weight_update"): FakeSglangServer.end,
    ("POST", "/update_weights_from_distributed"): FakeSglangServer.update,
    ("POST", "/update_weight_version"): FakeSglangServer.update_version,
    ("POST", "/pause_generation"): FakeSglangServer.pause,
    ("POST", "/continue_generation"): FakeSglangServer.resume,
    ("ANY", "/flush_cache"): FakeSglangServer.flush_cache,
    ("POST", "/generate"): FakeSglangServer.generate,
}


def _handler(server: FakeSglangServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            self._serve("GET")

        def do_POST(self) -> None:  # noqa: N802
            self._serve("POST")

        def _serve(self, method: str) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            path = self.path.split("?", 1)[0]
            status, body = server.route(method, path, json.loads(raw) if raw else {})
            payload = body.encode() if isinstance(body, str) else json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain" if isinstance(body, str) else "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: object) -> None:
            pass

    return Handler
