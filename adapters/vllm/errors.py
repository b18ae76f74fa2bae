"""The one error type the vLLM adapters raise: it names the server, the endpoint and what came back."""

from __future__ import annotations


class ServerError(RuntimeError):
    """A call to a generation server failed (HTTP error status, bad body, timeout, no connection)."""

    def __init__(self, url: str, endpoint: str, status: int | None, detail: str) -> None:
        self.url = url
        self.endpoint = endpoint
        self.status = status
        self.detail = detail
        status_text = f"HTTP {status}" if status is not None else "no response"
        super().__init__(f"{url} {endpoint}: {status_text}: {detail}")


class ServerStartError(RuntimeError):
    """The local server process exited or never became healthy; the message carries its log tail."""
