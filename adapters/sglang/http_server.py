"""`SglangHttpServer`: one SGLang 0.5.23 server over HTTP, as a `GenerationServer` and a `WeightSyncServer`.

Generation is token-in/token-out through `POST /generate {input_ids, sampling_params, return_logprob}`:
the sampled ids are `output_ids`, their log-probs `meta_info.output_token_logprobs = [(logprob, id,
text|None), ...]` (SGLang's are of the temperature-scaled distribution unless the server sets
`SGLANG_RETURN_ORIGINAL_LOGPROB=1`), `meta_info.finish_reason = {"type": "stop"|"length"|"abort"}`.
`n > 1` is SGLang's parallel sampling (`sampling_params.n`, answered as a list).

Weight sync maps the port onto SGLang's routes (the same handshake as vLLM, other names):
    world_size            GET /server_info (tp_size; dp_size and pp_size must be 1) + GET /model_info,
                          refusing servers SGLang's loaders cannot update (`adapters.sglang.refusals`)
    init_weight_transfer  POST /init_weights_update_group {master_address, master_port, rank_offset,
                          world_size, group_name, backend}
    pause                 POST /pause_generation {mode}
    start_weight_update   POST /begin_weight_update {selector: "all"}
    update_weights        POST /update_weights_from_distributed {names, dtypes, shapes, group_name,
                          load_format: "flattened_bucket", flush_cache: false, ...}
    finish_weight_update  POST /end_weight_update {} -> POST /update_weight_version {new_version,
                          abort_all_requests: false}
    reset_prefix_cache    POST /flush_cache (plain-text answer; 400 while requests run: retried)
    resume                POST /continue_generation {}
    weight_version        GET /model_info -> weight_version ("default" before any update = None)

Departures from SGLang's defaults, on purpose:
- pause mode `retract` (not vLLM's `keep` equivalent `in_place`): in_place leaves running requests
  holding KV, and SGLang's `/flush_cache` then refuses; retract re-queues them, so the cache is
  flushed and their KV is recomputed under the new weights after `/continue_generation`.
- `weight_version` is not carried by the update calls (SGLang would move it at the first chunk);
  it moves only after `/end_weight_update` succeeded, through `/update_weight_version`.
- `flush_cache: false` per chunk; the sync flushes once, after the version moved.
- Tensors travel in `adapters.sglang.bucket_layout` order (by descending itemsize), the order the
  transport sends their bytes in, so SGLang's misaligned-offset refusal never triggers.
The two calls that block inside the collective (`init`, `update`) use `transfer_timeout`, every
other call `timeout`. Every failure is the vLLM adapter's `ServerError` (server, endpoint, status,
body; the request and its checks are `adapters.http_json`'s, shared with the vLLM adapter); a server
that cannot take updates raises `UnsupportedServer` at construction.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from typing import Any

import httpx

from adapters.http_json import SNIPPET, json_body, parse_weight_version, send, timeouts
from adapters.sglang.bucket_layout import flattened_layout
from adapters.sglang.refusals import refuse, server_facts, update_refusals
from adapters.sglang.wire import BACKENDS, DEFAULT_GROUP_NAME, LOAD_FORMAT
from adapters.vllm.errors import ServerError
from application.ports.generation import Completion, SamplingParams
from application.ports.weight_sync import TransferInit
from domain.tensors import TensorSpec

PAUSE_MODES = ("retract", "in_place", "abort")


class SglangHttpServer:
    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        *,
        backend: str = "nccl",
        group_name: str = DEFAULT_GROUP_NAME,
        pause_mode: str = "retract",
        connect_timeout: float = 5.0,
        transfer_timeout: float | None = None,
        flush_retries: int = 10,
        flush_interval_s: float = 0.2,
        waived_refusals: Collection[str] = (),
        check_on_init: bool = True,
    ) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"SGLang weight-transfer backend must be one of {BACKENDS}, got {backend!r}")
        if pause_mode not in PAUSE_MODES:
            raise ValueError(f"SGLang pause mode must be one of {PAUSE_MODES}, got {pause_mode!r}")
        self._url = url.rstrip("/")
        self._backend, self._group_name, self._pause_mode = backend, group_name, pause_mode
        self._timeout, self._transfer_timeout = timeouts(timeout, connect_timeout, transfer_timeout)
        self._flush_retries, self._flush_interval_s = flush_retries, flush_interval_s
        self._waived = frozenset(waived_refusals)
        self._client = httpx.Client(base_url=self._url, timeout=self._timeout)
        if check_on_init:
            self.check_updatable()

    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._client.close()

    # ---- GenerationServer -------------------------------------------------------------------

    def generate(self, prompt_token_ids: Sequence[int], params: SamplingParams, n: int = 1) -> list[Completion]:
        sampling: dict[str, Any] = {
            "max_new_tokens": params.max_tokens, "temperature": params.temperature, "top_p": params.top_p, "n": n,
        }
        if params.stop:
            sampling["stop"] = list(params.stop)
        if params.seed is not None:
            sampling["sampling_seed"] = params.seed
        body = {"input_ids": list(prompt_token_ids), "sampling_params": sampling, "return_logprob": True}
        answer = self._request("POST", "/generate", json=body)
        outputs = answer if isinstance(answer, list) else [answer]
        if len(outputs) != n:
            raise ServerError(self._url, "/generate", 200, f"expected {n} outputs, got {str(answer)[:SNIPPET]}")
        return [self._completion(output) for output in outputs]

    def _completion(self, output: Any) -> Completion:
        meta = output.get("meta_info") if isinstance(output, dict) else None
        entries = (meta or {}).get("output_token_logprobs")
        if not isinstance(entries, list):
            raise ServerError(self._url, "/generate", 200, f"no meta_info.output_token_logprobs: {str(output)[:SNIPPET]}")
        token_ids = tuple(int(entry[1]) for entry in entries)
        if output.get("output_ids") is not None and tuple(output["output_ids"]) != token_ids:
            raise ServerError(self._url, "/generate", 200, "output_ids disagree with the logprob entries' token ids")
        if any(entry[0] is None for entry in entries):
            raise ServerError(self._url, "/generate", 200, f"a sampled token has no logprob: {entries[:20]}")
        finish = meta.get("finish_reason")
        return Completion(
            token_ids=token_ids,
            logprobs=tuple(float(entry[0]) for entry in entries),
            finish_reason=str(finish.get("type") if isinstance(finish, dict) else finish),
            text=output.get("text") or "",
            weight_version=parse_weight_version(self._url, "/generate", meta.get("weight_version")),
        )

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        ids = list(token_ids)
        body = {
            "input_ids": ids, "sampling_params": {"max_new_tokens": 1, "temperature": 1.0},
            "return_logprob": True, "logprob_start_len": 0,
        }
        answer = self._request("POST", "/generate", json=body)
        entries = (answer.get("meta_info") or {}).get("input_token_logprobs") if isinstance(answer, dict) else None
        if not isinstance(entries, list) or len(entries) != len(ids):
            detail = f"input_token_logprobs missing or wrong length: {str(entries)[:SNIPPET]}"
            raise ServerError(self._url, "/generate", 200, detail)
        result: list[float | None] = [None]
        for position, (token, entry) in enumerate(zip(ids[1:], entries[1:]), start=1):
            if entry[0] is None or int(entry[1]) != token:
                detail = f"no prompt logprob for token {token} at position {position}: {entry}"
                raise ServerError(self._url, "/generate", 200, detail)
            result.append(float(entry[0]))
        return result

    # ---- WeightSyncServer -------------------------------------------------------------------

    def check_updatable(self) -> int:
        """Refuse a server SGLang cannot update online (`UnsupportedServer`); its TP size otherwise."""
        server_info = self._get_info(("/server_info", "/get_server_info"))
        model_info = self._get_info(("/model_info", "/get_model_info"))
        try:
            facts = server_facts(server_info, model_info)
        except (TypeError, ValueError) as error:
            raise ServerError(self._url, "/server_info", 200, str(error)) from error
        refuse(self._url, update_refusals(facts, self._waived))
        return facts.tp_size

    def world_size(self) -> int:
        """The server's ranks in the weight-update group: one per TP rank (re-checked every connect)."""
        return self.check_updatable()

    def init_weight_transfer(self, init: TransferInit, rank_offset: int) -> None:
        body = {
            "master_address": init.master_address, "master_port": init.master_port, "rank_offset": rank_offset,
            "world_size": init.world_size, "group_name": self._group_name, "backend": self._backend,
        }
        self._control("/init_weights_update_group", body, self._transfer_timeout)

    def pause(self) -> None:
        self._request("POST", "/pause_generation", json={"mode": self._pause_mode})

    def start_weight_update(self) -> None:
        self._control("/begin_weight_update", {"selector": "all"})

    def update_weights(self, specs: Sequence[TensorSpec]) -> None:
        if not specs:
            raise ValueError(f"{self._url} /update_weights_from_distributed: refusing an update with no tensors")
        wire = flattened_layout(specs).specs
        body = {
            "names": [spec.name for spec in wire],
            "dtypes": [spec.dtype for spec in wire],
            "shapes": [list(spec.shape) for spec in wire],
            "group_name": self._group_name,
            "load_format": LOAD_FORMAT,
            "flush_cache": False,
            "abort_all_requests": False,
            "selector": "all",
        }
        self._control("/update_weights_from_distributed", body, self._transfer_timeout)

    def finish_weight_update(self, weight_version: int) -> None:
        self._control("/end_weight_update", {})
        body = {"new_version": str(weight_version), "abort_all_requests": False}
        self._control("/update_weight_version", body)

    def reset_prefix_cache(self) -> None:
        for attempt in range(self._flush_retries + 1):
            try:
                self._request("POST", "/flush_cache", expect_json=False)
                return
            except ServerError as error:
                if error.status != 400 or attempt == self._flush_retries:
                    raise
            time.sleep(self._flush_interval_s)

    def resume(self) -> None:
        self._request("POST", "/continue_generation", json={})

    def weight_version(self) -> int | None:
        info = self._get_info(("/model_info", "/get_model_info"))
        if "weight_version" not in info:
            raise ServerError(self._url, "/model_info", 200, f"response lacks 'weight_version': {str(info)[:SNIPPET]}")
        return parse_weight_version(self._url, "/model_info", info["weight_version"])

    # ---- transport --------------------------------------------------------------------------

    def _control(self, endpoint: str, body: dict[str, Any], timeout: httpx.Timeout | None = None) -> None:
        """A control route answering `{"success": bool, "message": str}` (400 when not successful)."""
        answer = self._request("POST", endpoint, json=body, timeout=timeout)
        if not isinstance(answer, dict) or answer.get("success") is not True:
            raise ServerError(self._url, endpoint, 200, f"success is not true: {str(answer)[:SNIPPET]}")

    def _get_info(self, endpoints: tuple[str, str]) -> dict[str, Any]:
        """GET the current route, falling back to its deprecated spelling on 404 (older servers)."""
        try:
            answer = self._request("GET", endpoints[0])
        except ServerError as error:
            if error.status != 404:
                raise
            answer = self._request("GET", endpoints[1])
        if not isinstance(answer, dict):
            raise ServerError(self._url, endpoints[0], 200, f"not a JSON object: {str(answer)[:SNIPPET]}")
        return answer

    def _request(
        self, method: str, endpoint: str, timeout: httpx.Timeout | None = None, expect_json: bool = True, **kwargs: Any
    ) -> Any:
        response = send(self._client, self._url, method, endpoint, timeout or self._timeout, **kwargs)
        return json_body(self._url, endpoint, response) if expect_json else response.text
