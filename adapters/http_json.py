"""What the vLLM and SGLang server adapters share on the wire: timeouts, one JSON request, the version.

Module-level functions (each adapter keeps its own `httpx.Client`, URL and routes): `timeouts`
builds the ordinary and the collective-call timeouts, `send` makes one request, `json_body` reads
its JSON, `parse_weight_version` reads a server's weight version. Every failure is a `ServerError`
naming the server URL, the endpoint, the HTTP status (None: no response) and a body snippet.
"""

from __future__ import annotations

from typing import Any

import httpx

from adapters.vllm.errors import ServerError

SNIPPET = 500  # characters of a body quoted in an error
UNSET_VERSION = "default"  # the weight version before any update: vLLM's (v1/engine/core.py), SGLang's `--weight-version`


def timeouts(timeout: float, connect_timeout: float, transfer_timeout: float | None) -> tuple[httpx.Timeout, httpx.Timeout]:
    """(every call's timeout, the timeout of the calls that block inside the collective: `transfer_timeout` or `timeout`)."""
    return httpx.Timeout(timeout, connect=connect_timeout), httpx.Timeout(transfer_timeout or timeout, connect=connect_timeout)


def send(client: httpx.Client, url: str, method: str, endpoint: str, timeout: httpx.Timeout, **kwargs: Any) -> httpx.Response:
    """One request; a timeout, a failed connection or an HTTP status >= 400 raises `ServerError`."""
    try:
        response = client.request(method, endpoint, timeout=timeout, **kwargs)
    except httpx.TimeoutException as error:
        raise ServerError(url, endpoint, None, f"timed out ({type(error).__name__}): {error}") from error
    except httpx.HTTPError as error:
        raise ServerError(url, endpoint, None, f"{type(error).__name__}: {error or 'connection failed'}") from error
    if response.status_code >= 400:
        raise ServerError(url, endpoint, response.status_code, response.text[:SNIPPET] or response.reason_phrase)
    return response


def json_body(url: str, endpoint: str, response: httpx.Response) -> Any:
    """The response's JSON document; a body that is not JSON raises `ServerError`."""
    try:
        return response.json()
    except ValueError:
        raise ServerError(url, endpoint, response.status_code, f"not JSON: {response.text[:SNIPPET]}") from None


def parse_weight_version(url: str, endpoint: str, value: Any) -> int | None:
    """A reported weight version as an int; None before any update (`UNSET_VERSION` or null)."""
    if value is None or value == UNSET_VERSION:
        return None
    try:
        return int(value)
    except (TypeError, ValueError):
        raise ServerError(url, endpoint, 200, f"weight_version {value!r} is not an integer") from None
