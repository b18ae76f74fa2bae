"""Ask a vLLM server which weight-transfer backend it was started with (`GET /server_info`).

Read before forming a transfer group: against a server started without
`--weight-transfer-config`, `/init_weight_transfer_engine` fails at once but the trainer's side of
the rendezvous would wait out its whole timeout for workers that never come. TRL makes the same
check (`/server_info?config_format=json` -> `vllm_config.weight_transfer_config is None`).
The route is one of vLLM's dev routes: a 404 means the server lacks `VLLM_SERVER_DEV_MODE=1`,
which the RL routes need as well.
"""

from __future__ import annotations

import httpx

from adapters.vllm.errors import ServerError

ENDPOINT = "/server_info"


def weight_transfer_backend(url: str, timeout: float = 60.0) -> str | None:
    """The backend name (`gloo`, `nccl`, ...) or None when weight transfer is not configured."""
    url = url.rstrip("/")
    try:
        response = httpx.get(f"{url}{ENDPOINT}", params={"config_format": "json"}, timeout=timeout)
    except httpx.HTTPError as error:
        raise ServerError(url, ENDPOINT, None, f"{type(error).__name__}: {error or 'connection failed'}") from error
    if response.status_code == 404:
        raise ServerError(url, ENDPOINT, 404, "not found: start the server with VLLM_SERVER_DEV_MODE=1 (the RL routes need it)")
    if response.status_code >= 400:
        raise ServerError(url, ENDPOINT, response.status_code, response.text[:300])
    try:
        config = response.json()["vllm_config"]
    except (ValueError, KeyError, TypeError):
        raise ServerError(url, ENDPOINT, response.status_code, f"no vllm_config in the answer: {response.text[:300]}") from None
    if not isinstance(config, dict) or "weight_transfer_config" not in config:
        raise ServerError(url, ENDPOINT, response.status_code, "vllm_config lacks weight_transfer_config (vLLM too old?)")
    transfer = config["weight_transfer_config"]
    if transfer is None:
        return None
    return str(transfer.get("backend")) if isinstance(transfer, dict) else str(transfer)
