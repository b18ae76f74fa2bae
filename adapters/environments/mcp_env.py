"""`mcp`: questions answered with tools served by an MCP server (mcp 2.x client).

`mcp_server` names the server: an http(s) URL (streamable HTTP) or a command line (stdio);
None starts our bundled server (`mcp_tools_server`: calculator, unit conversion, dates, country
facts) with this interpreter. The connection is shared per process (`mcp_client`); the tools are
discovered with list_tools and listed in the opening message with their JSON argument schemas.
The model calls one with `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`; the result,
or any error (malformed JSON, unknown tool, bad arguments, a server that is dead or does not
answer within `call_timeout_s`), is a `tool` message. A turn without a tool call is the final
answer (`Answer: ...`), scored 1 or 0 (`mcp_problems.score_answer`).
The built-in problems (`tasks`) need the bundled server's tools; with another server, train on
your own dataset (prompt + answer). Only reset() fails on an unreachable server, naming it.
"""

from __future__ import annotations

import sys
from typing import Any

from adapters.environments.base import BaseEnvironment, KwargSpec, check_split
from adapters.environments.mcp_client import McpCallError, ToolSpec, shared_connection
from adapters.environments.mcp_problems import TASKS, generate, score_answer
from adapters.environments.registry import register
from adapters.environments.search_splits import check_kinds, draw
from adapters.environments.search_turns import ToolCall, ToolCallError, ToolEpisode, opening, parse_json_call, tool_env_kwargs
from application.ports.environment import Message, Problem, StepResult

CALL_TAG = "tool_call"
USAGE = '<tool_call>{"name": "calculator", "arguments": {"expression": "2 + 2"}}</tool_call>'
BUNDLED_SERVER = f"{sys.executable} -m adapters.environments.mcp_tools_server"


@register
class McpEnvironment(BaseEnvironment):
    """Questions solved with tools from an MCP server (bundled: calculator, units, dates, countries)."""

    name = "mcp"
    requires_answer = True
    max_turns = 4
    kwargs = {
        "mcp_server": KwargSpec(None, "MCP server: a command line (stdio) or an http(s) URL (None: the bundled tools server)"),
        "tasks": KwargSpec(list(TASKS), "built-in problem kinds: " + ", ".join(TASKS)),
        "call_timeout_s": KwargSpec(10.0, "seconds one MCP request (list_tools, call_tool) may take"),
        "connect_timeout_s": KwargSpec(60.0, "seconds the MCP server may take to start and answer the handshake"),
        **tool_env_kwargs("problems"),
    }

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        target = self.options["mcp_server"]
        if target is not None and (not isinstance(target, str) or not target.strip()):
            raise ValueError(f"mcp: mcp_server must be a command line or an http(s) URL, got {target!r}")
        self._target = BUNDLED_SERVER if target is None else target
        self._timeouts = (_seconds("call_timeout_s", self.options["call_timeout_s"]),
                          _seconds("connect_timeout_s", self.options["connect_timeout_s"]))
        self._tools: tuple[ToolSpec, ...] = ()
        self._episode = ToolEpisode(self.max_turns, self.options["carry_reasoning"], self._score, self._run_tool)

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        check_split(cls.name, split)
        options = cls.resolve_kwargs(kwargs)
        tasks = check_kinds(cls.name, "tasks", options["tasks"], TASKS)
        groups = {task: generate(task) for task in tasks}
        rows = draw(cls.name, groups, lambda row: row[0], split, count, seed, options["eval_fraction"])
        task_of = {row: task for task, universe in groups.items() for row in universe}
        return [Problem(prompt=q, answer=a, metadata={"task": task_of[(q, a)], "split": split}) for q, a in rows]

    def reset(self) -> list[Message]:
        self._tools = self._connection().list_tools()  # McpUnavailable / McpCallError name the server
        return self._episode.open(opening(self.options["system_prompt"], f"{self.problem.prompt}\n\n{_tool_instructions(self._tools)}"))

    def step(self, action: str) -> StepResult:
        return self._episode.step(action)

    def context(self) -> tuple[Message, ...]:
        """The conversation as the model should see it before its next turn (see carry_reasoning)."""
        return self._episode.context()

    def _connection(self):
        return shared_connection(self._target, *self._timeouts)

    def _score(self, answer: str) -> float:
        return score_answer(answer, str(self.problem.answer))

    def _run_tool(self, call: ToolCall) -> str:
        if call.name != CALL_TAG:
            return f"error: unknown tag <{call.name[:40]}>; call a tool as {USAGE}"
        try:
            name, arguments = parse_json_call(call.argument)
        except ToolCallError as exc:
            return f"error: {exc}; call a tool as {USAGE}"
        known = [tool.name for tool in self._tools]
        if name not in known:
            return f"error: unknown tool {name[:40]!r}; the tools are: {', '.join(known)}"
        try:
            is_error, text = self._connection().call_tool(name, arguments)
        except McpCallError as exc:
            return f"error: {exc}"
        return f"error: {text}" if is_error else text


def _tool_instructions(tools: tuple[ToolSpec, ...]) -> str:
    lines = [f"You can call these tools, one per turn, as {USAGE}:"]
    for tool in tools:
        properties = tool.parameters.get("properties", {}) if isinstance(tool.parameters, dict) else {}
        arguments = ", ".join(f"{name}: {spec.get('type', 'any')}" for name, spec in properties.items())
        lines.append(f"- {tool.name}({arguments}): {' '.join(tool.description.split())}")
    lines.append("When you know the result, reply with: Answer: <answer>")
    return "\n".join(lines)


def _seconds(key: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise ValueError(f"mcp: {key} must be a number of seconds in (0, 3600], got {value!r}")
    return float(value)
