"""`McpConnection`: a blocking MCP client (mcp 2.x `mcp.Client`) with a timeout on every call.

The `mcp` environment steps synchronously, while the MCP client is async: each connection owns
one background thread running an event loop, which holds the `mcp.Client` session open (stdio
subprocess or streamable HTTP); calls are submitted to that loop and waited for with a timeout.
A server that is dead, never starts or hangs therefore costs at most the timeout and surfaces as
`McpUnavailable` (at connect) or `McpCallError` (per call), never as a hang.

Targets: a URL (`http://127.0.0.1:8765/mcp`) is streamable HTTP; anything else is a command line
(split with shlex) started as a stdio server. `shared_connection(target)` keeps one connection per
target per process (episodes share it; MCP multiplexes concurrent requests) and replaces a
connection whose session has ended.
"""

from __future__ import annotations

import asyncio
import atexit
import shlex
import threading
from collections.abc import Mapping
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path
from typing import Any

import attrs
from mcp import Client, StdioServerParameters

REPO_ROOT = Path(__file__).resolve().parents[2]


class McpUnavailable(RuntimeError):
    """The MCP server could not be reached or did not start in time."""


class McpCallError(RuntimeError):
    """One MCP request failed (timeout, dead server, protocol error); the message names the server."""


@attrs.frozen
class ToolSpec:
    name: str
    description: str
    parameters: Mapping[str, Any]  # the tool's JSON schema for its arguments


def server_parameters(target: str) -> StdioServerParameters | str:
    """A URL for streamable HTTP, else the stdio launch of the command line `target`."""
    if target.startswith(("http://", "https://")):
        return target
    argv = shlex.split(target)
    if not argv:
        raise ValueError("mcp_server is empty; give a command line (stdio) or an http(s) URL")
    return StdioServerParameters(command=argv[0], args=argv[1:], cwd=str(REPO_ROOT))


class McpConnection:
    def __init__(self, target: str, call_timeout_s: float, connect_timeout_s: float) -> None:
        self.target = target
        self._call_timeout = call_timeout_s
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name=f"mcp:{target[:40]}", daemon=True)
        self._thread.start()
        self._holder: asyncio.Task | None = None
        self._client: Client | None = None
        self._ended = threading.Event()
        self._tools: tuple[ToolSpec, ...] | None = None
        ready = asyncio.run_coroutine_threadsafe(self._open(server_parameters(target)), self._loop)
        try:
            ready.result(timeout=connect_timeout_s)
        except FutureTimeout:
            self.close()
            raise McpUnavailable(f"MCP server {target!r} did not start within {connect_timeout_s:g} s") from None
        except Exception as exc:
            self.close()
            raise McpUnavailable(f"MCP server {target!r} cannot be reached: {type(exc).__name__}: {str(exc)[:300]}") from exc

    @property
    def alive(self) -> bool:
        return not self._ended.is_set()

    def list_tools(self) -> tuple[ToolSpec, ...]:
        if self._tools is None:
            result = self._call(self._list_tools(), "list_tools")
            self._tools = tuple(result)
        return self._tools

    def call_tool(self, name: str, arguments: Mapping[str, Any]) -> tuple[bool, str]:
        """(is_error, text) of one tool call; `McpCallError` when the server does not answer."""
        return self._call(self._call_tool(name, dict(arguments)), f"tool {name!r}")

    def close(self) -> None:
        if self._loop.is_closed():
            return
        if self._holder is not None and not self._ended.is_set():
            self._loop.call_soon_threadsafe(self._holder.cancel)  # also stops a server still starting
            self._ended.wait(timeout=5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5.0)
        if not self._thread.is_alive():
            self._loop.close()

    def _call(self, coroutine, what: str):
        if not self.alive:
            coroutine.close()
            raise McpCallError(f"MCP server {self.target!r} is gone (its session ended); {what} was not sent")
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, self._call_timeout), self._loop)
        try:
            return future.result(timeout=self._call_timeout + 1.0)
        except (FutureTimeout, asyncio.TimeoutError, TimeoutError):
            future.cancel()
            raise McpCallError(f"MCP server {self.target!r}: {what} got no answer within {self._call_timeout:g} s") from None
        except Exception as exc:
            raise McpCallError(f"MCP server {self.target!r}: {what} failed: {type(exc).__name__}: {str(exc)[:300]}") from exc

    async def _open(self, parameters) -> None:
        started: asyncio.Future = self._loop.create_future()
        self._holder = self._loop.create_task(self._hold(parameters, started))
        await started

    async def _hold(self, parameters, started: asyncio.Future) -> None:
        try:
            async with Client(parameters, read_timeout_seconds=self._call_timeout) as client:
                self._client = client
                started.set_result(None)
                await asyncio.Event().wait()  # until close() cancels this task
        except BaseException as exc:  # the session ended: mark dead, report to a waiting opener
            if not started.done():
                started.set_exception(_root_cause(exc))
        finally:
            self._ended.set()

    async def _list_tools(self) -> list[ToolSpec]:
        assert self._client is not None
        listing = await self._client.list_tools()
        return [ToolSpec(t.name, t.description or "", dict(t.input_schema or {})) for t in listing.tools]

    async def _call_tool(self, name: str, arguments: dict[str, Any]) -> tuple[bool, str]:
        assert self._client is not None
        result = await self._client.call_tool(name, arguments)
        texts = [getattr(block, "text", None) or f"[{getattr(block, 'type', 'content')}]" for block in result.content]
        return bool(result.is_error), "\n".join(texts)


def _root_cause(exc: BaseException) -> Exception:
    """The first leaf of an exception group (anyio wraps transport errors), as an Exception."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc if isinstance(exc, Exception) else RuntimeError(repr(exc))


_connections: dict[tuple[str, float], McpConnection] = {}
_lock = threading.Lock()


def shared_connection(target: str, call_timeout_s: float, connect_timeout_s: float) -> McpConnection:
    """The process-wide connection to `target`, (re)opened when missing or ended."""
    with _lock:
        connection = _connections.get((target, call_timeout_s))
        if connection is None or not connection.alive:
            if connection is not None:
                connection.close()
            connection = McpConnection(target, call_timeout_s, connect_timeout_s)
            _connections[(target, call_timeout_s)] = connection
        return connection


@atexit.register
def close_all() -> None:
    with _lock:
        for connection in _connections.values():
            connection.close()
        _connections.clear()
