"""`VllmHttpServer`: one vLLM server over HTTP, as a `GenerationServer` and a `WeightSyncServer`.

Generation is token-in/token-out through `POST /v1/completions`: `prompt` is the token-id list,
`return_token_ids` gives the exact engine token ids, `logprobs: 0` the log-prob of each sampled
token (processed, i.e. after temperature, given the server's `--logprobs-mode
processed_logprobs`), `return_tokens_as_token_ids` keeps the logprob entries keyed by id.
`prompt_logprobs` asks for `max_tokens=1, prompt_logprobs=0` at temperature 1.
`thinking_token_budget` (vLLM's completions field, sent only when set) caps each reasoning
section engine-side: the server must run a `--reasoning-parser` (else it answers 400, "reasoning_config
is not configured") and, as the seed pins it, `VLLM_USE_V2_MODEL_RUNNER=0`; a close it forces comes
back with log-prob 0.0 (`domain/thinking_budget.py` has the rule). `reasoning_markers` is not sent.

Weight sync drives vLLM's RL routes (only mounted with `VLLM_SERVER_DEV_MODE=1`): `/get_world_size`,
`/init_weight_transfer_engine {"init_info"}`, `/pause?mode=keep`, `/start_weight_update`,
`/update_weights {"update_info"}`, `/finish_weight_update {"weight_version": str}`,
`/reset_prefix_cache?reset_running_requests=true` (see `reset_prefix_cache`), `/resume`,
`/weight_info`. The two calls that block server-side inside the collective (`init`, `update`)
use `transfer_timeout`; every other call `timeout`. One `httpx.Client` is shared (it is
thread-safe), so the sync thread and rollout threads can use one instance. Every failure is a
`ServerError` naming the server URL, the endpoint, the HTTP status and a body snippet (the request
and its checks are `adapters.http_json`'s, shared with the SGLang adapter).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import httpx

from adapters.http_json import SNIPPET, json_body, parse_weight_version, send, timeouts
from adapters.vllm.errors import ServerError
from application.ports.generation import Completion, SamplingParams
from application.ports.weight_sync import TransferInit
from domain.tensors import TensorSpec

RESET_RUNNING_REQUESTS = {"reset_running_requests": "true"}  # FastAPI's bool query: "true"


class VllmHttpServer:
    def __init__(
        self,
        url: str,
        timeout: float = 60.0,
        connect_timeout: float = 5.0,
        transfer_timeout: float | None = None,
        reset_cache_retries: int = 10,
        reset_cache_interval_s: float = 0.2,
    ) -> None:
        self._url = url.rstrip("/")
        self._timeout, self._transfer_timeout = timeouts(timeout, connect_timeout, transfer_timeout)
        self._reset_retries = reset_cache_retries
        self._reset_interval_s = reset_cache_interval_s
        self._client = httpx.Client(base_url=self._url, timeout=self._timeout)

    @property
    def url(self) -> str:
        return self._url

    def close(self) -> None:
        self._client.close()

    # ---- GenerationServer -------------------------------------------------------------------

    def generate(self, prompt_token_ids: Sequence[int], params: SamplingParams, n: int = 1) -> list[Completion]:
        body: dict[str, Any] = {
            "prompt": list(prompt_token_ids),
            "n": n,
            "max_tokens": params.max_tokens,
            "temperature": params.temperature,
            "top_p": params.top_p,
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
        }
        if params.stop:
            body["stop"] = list(params.stop)
        if params.seed is not None:
            body["seed"] = params.seed
        if params.thinking_token_budget is not None:
            body["thinking_token_budget"] = params.thinking_token_budget
        endpoint = "/v1/completions"
        choices = self._request("POST", endpoint, json=body).get("choices")
        if not isinstance(choices, list) or len(choices) != n:
            raise ServerError(self._url, endpoint, 200, f"expected {n} choices, got {str(choices)[:SNIPPET]}")
        return [self._completion(choice, endpoint) for choice in sorted(choices, key=lambda c: c.get("index", 0))]

    def _completion(self, choice: dict[str, Any], endpoint: str) -> Completion:
        token_ids = choice.get("token_ids")
        logprobs = (choice.get("logprobs") or {}).get("token_logprobs")
        if token_ids is None or logprobs is None or len(token_ids) != len(logprobs):
            raise ServerError(
                self._url, endpoint, 200,
                f"choice lacks matching token_ids/logprobs (is it a vLLM server?): {str(choice)[:SNIPPET]}",
            )
        if any(value is None for value in logprobs):
            raise ServerError(self._url, endpoint, 200, f"a sampled token has no logprob: {logprobs[:20]}")
        return Completion(
            token_ids=tuple(int(t) for t in token_ids),
            logprobs=tuple(float(v) for v in logprobs),
            finish_reason=str(choice.get("finish_reason")),
            text=choice.get("text") or "",
        )

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        ids = list(token_ids)
        body = {"prompt": ids, "max_tokens": 1, "temperature": 1.0, "prompt_logprobs": 0, "n": 1}
        endpoint = "/v1/completions"
        choices = self._request("POST", endpoint, json=body).get("choices") or [{}]
        entries = choices[0].get("prompt_logprobs")
        if not isinstance(entries, list) or len(entries) != len(ids):
            raise ServerError(self._url, endpoint, 200, f"prompt_logprobs missing or wrong length: {str(entries)[:SNIPPET]}")
        result: list[float | None] = [None]
        for position, (token, entry) in enumerate(zip(ids[1:], entries[1:]), start=1):
            found = (entry or {}).get(str(token))
            if found is None:
                raise ServerError(self._url, endpoint, 200, f"no prompt logprob for token {token} at position {position}")
            result.append(float(found["logprob"]))
        return result

    # ---- WeightSyncServer -------------------------------------------------------------------

    def world_size(self) -> int:
        return int(self._field("GET", "/get_world_size", "world_size"))

    def init_weight_transfer(self, init: TransferInit, rank_offset: int) -> None:
        init_info = dict(init.as_init_info(), rank_offset=rank_offset)
        self._request("POST", "/init_weight_transfer_engine", json={"init_info": init_info}, timeout=self._transfer_timeout)

    def pause(self) -> None:
        self._request("POST", "/pause", params={"mode": "keep"})

    def start_weight_update(self) -> None:
        self._request("POST", "/start_weight_update")

    def update_weights(self, specs: Sequence[TensorSpec]) -> None:
        if not specs:
            # vLLM (0.33) and our gloo engine read an all-empty update_info as "reuse the previous
            # metadata" and would wait for bytes the transport never sends for an empty chunk.
            raise ValueError(f"{self._url} /update_weights: refusing an update with no tensors")
        update_info = {
            "names": [spec.name for spec in specs],
            "dtype_names": [spec.dtype for spec in specs],
            "shapes": [list(spec.shape) for spec in specs],
        }
        self._request("POST", "/update_weights", json={"update_info": update_info}, timeout=self._transfer_timeout)

    def finish_weight_update(self, weight_version: int) -> None:
        self._request("POST", "/finish_weight_update", json={"weight_version": str(weight_version)})

    def reset_prefix_cache(self) -> None:
        """Drop every cached KV block after a weight update, kept (paused) requests' blocks included.

        Matches vLLM 0.32 `Scheduler.reset_prefix_cache(reset_running_requests, reset_connector)`
        (`v1/core/sched/scheduler.py`; dev route `POST /reset_prefix_cache`, query
        `reset_running_requests`, `reset_external`). Without `reset_running_requests` the block
        pool refuses (`success: false`) while any request holds a block; requests kept by
        `/pause?mode=keep` hold theirs (unless the pause itself cleared the cache) and nothing
        frees them before `/resume`, so retrying cannot help. With `reset_running_requests=true`
        the scheduler first preempts every running request (`_preempt_request(...,
        drop_stale_output=True)`: blocks freed, back to the front of the waiting queue with
        `num_computed_tokens = 0`), then resets: the kept requests recompute their KV under the
        new weights after `/resume` (as SGLang's `retract` pause does). vLLM 0.32's keep pause
        already runs this same reset (`EngineCore._finish_pause` -> `_reset_caches(
        reset_running_requests=True)`) because `clear_cache` defaults to true, although the route
        documents that flag as deprecated and ignored for keep; measured on the real server
        (tests/integration/test_thinking_budget_vllm.py): after our pause a plain reset answers
        true, with `clear_cache=false` it answers false and only `reset_running_requests=true`
        frees the kept blocks. We reset explicitly so neither that default nor its documented
        future change decides whether stale KV survives a weight update. Blocks still held after the preemption (a remote KV
        transfer) make vLLM raise instead: HTTP 500, a `ServerError`. `success: false` is still
        retried briefly (a server that ignores the query parameter)."""
        for attempt in range(self._reset_retries + 1):
            answer = self._field("POST", "/reset_prefix_cache", "success", params=RESET_RUNNING_REQUESTS)
            if answer is True:
                return
            if attempt < self._reset_retries:
                time.sleep(self._reset_interval_s)
        raise ServerError(
            self._url, "/reset_prefix_cache", 200,
            f"success=false after {self._reset_retries + 1} tries with reset_running_requests=true "
            "(KV blocks still held: an older vLLM that ignores reset_running_requests?)",
        )

    def resume(self) -> None:
        self._request("POST", "/resume")

    def weight_version(self) -> int | None:
        return parse_weight_version(self._url, "/weight_info", self._field("GET", "/weight_info", "weight_version"))

    # ---- transport --------------------------------------------------------------------------

    def _field(self, method: str, endpoint: str, key: str, **kwargs: Any) -> Any:
        body = self._request(method, endpoint, **kwargs)
        if key not in body:
            raise ServerError(self._url, endpoint, 200, f"response lacks {key!r}: {str(body)[:SNIPPET]}")
        return body[key]

    def _request(self, method: str, endpoint: str, timeout: httpx.Timeout | None = None, **kwargs: Any) -> dict:
        response = send(self._client, self._url, method, endpoint, timeout or self._timeout, **kwargs)
        body = json_body(self._url, endpoint, response)
        if not isinstance(body, dict):
            raise ServerError(self._url, endpoint, response.status_code, f"not a JSON object: {response.text[:SNIPPET]}")
        return body
