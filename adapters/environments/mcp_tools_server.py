"""Our bundled MCP server: the tools of `mcp_tools` over stdio (default) or streamable HTTP.

Run it as `python -m adapters.environments.mcp_tools_server` (stdio; what the `mcp`
environment starts when `mcp_server` is not set) or
`python -m adapters.environments.mcp_tools_server --http --port 8765` (streamable HTTP on
127.0.0.1, endpoint `/mcp`). Built on mcp 2.x's `MCPServer` (1.x called it `FastMCP`).
A `ToolInputError` becomes an MCP tool error (`ToolError`) whose text is the message; any other
exception reaches the client as MCPServer's generic "Error executing tool NAME".
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from typing import TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from adapters.environments import mcp_tools

SERVER_NAME = "rlsetup-tools"
F = TypeVar("F", bound=Callable[..., str])


def _model_errors(function: F) -> F:
    """Turn `ToolInputError` into `ToolError`, whose message MCPServer passes to the client."""

    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        try:
            return function(*args, **kwargs)
        except mcp_tools.ToolInputError as exc:
            raise ToolError(str(exc)) from None

    return wrapper  # type: ignore[return-value]


def build_server() -> MCPServer:
    server = MCPServer(SERVER_NAME, log_level="WARNING")

    @server.tool()
    @_model_errors
    def calculator(expression: str) -> str:
        """Evaluate an arithmetic expression with + - * / // % ** and parentheses, e.g. 12 * (3 + 4)."""
        return mcp_tools.calculator(expression)

    @server.tool()
    @_model_errors
    def convert_units(value: float, from_unit: str, to_unit: str) -> str:
        """Convert a quantity between units: m km cm mm mi yd ft in, kg g lb oz, l ml gal, C F K."""
        return mcp_tools.convert_units(value, from_unit, to_unit)

    @server.tool()
    @_model_errors
    def day_of_week(date: str) -> str:
        """The weekday (Monday..Sunday) of a date written YYYY-MM-DD."""
        return mcp_tools.day_of_week(date)

    @server.tool()
    @_model_errors
    def add_days(date: str, days: int) -> str:
        """The date (YYYY-MM-DD) that is `days` days after `date` (negative: before)."""
        return mcp_tools.add_days(date, days)

    @server.tool()
    @_model_errors
    def days_between(start: str, end: str) -> str:
        """The number of days from `start` to `end` (dates written YYYY-MM-DD)."""
        return mcp_tools.days_between(start, end)

    @server.tool()
    @_model_errors
    def country_facts(country: str) -> str:
        """Capital, region and area (km2) of a country, by its English name, e.g. Kenya."""
        return mcp_tools.country_facts(country)

    return server


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="rlsetup's bundled MCP tool server")
    parser.add_argument("--http", action="store_true", help="serve streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args(argv)
    server = build_server()
    if args.http:
        server.run("streamable-http", host=args.host, port=args.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
