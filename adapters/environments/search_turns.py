"""Turn handling shared by the tool-using QA environments (`qa_search`, `exam_qa`, `mcp`).

- Reasoning: text inside `<think>...</think>` is the turn's reasoning (an unclosed `<think>` runs
  to the end of the turn; a `</think>` without an opening tag closes reasoning that the chat
  template opened in the generation prompt). Tool calls and final answers are read from the
  visible text only, so a tool call the model merely thinks about is never executed.
- Tool calls: `<name>argument</name>` (as in `react_math`), or a JSON call
  `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` (Hermes/Qwen style, used by `mcp`).
  Only the first `MAX_ACTION_CHARS` visible characters are searched, so huge actions stay cheap.
- Final answers: the first line after the last `Answer:` (or `answer is`), else the last
  non-empty line.
- `carry_reasoning`: `Conversation` records the episode as the model should see it before its
  next turn: opening messages, every assistant turn and every observation. With
  `carry_reasoning=True` assistant turns are kept verbatim (what token-in/token-out already does:
  the sampled tokens stay in the prompt); with `False` their reasoning is removed, and the runner
  re-renders `env.context()` instead of concatenating tokens. Every non-final `StepResult` also
  carries the turn's reasoning in `metadata["reasoning"]`.
- Shared by the environments: `tool_env_kwargs` (the kwargs they all end with) and `opening` (the
  optional system message, then the user's).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from adapters.environments.base import KwargSpec
from application.ports.environment import Message, StepResult

MAX_ACTION_CHARS = 20_000
MAX_ANSWER_CHARS = 200
MAX_ARGUMENT_CHARS = 1_000
MAX_TOOL_RESULT_CHARS = 4_000
_TAG_CALL = re.compile(r"<([A-Za-z_][A-Za-z0-9_]{0,30})>(.{0,%d}?)</\1\s*>" % MAX_ARGUMENT_CHARS, re.DOTALL)
_OPEN_TAG = re.compile(r"<([A-Za-z_][A-Za-z0-9_]{0,30})>")
_MAX_OPEN_TAGS = 50
_THINK_BLOCK = re.compile(r"<think>(.*?)(?:</think>|\Z)", re.DOTALL)
_ANSWER = re.compile(r"\banswer\s*(?:is\b\s*[:：]?|[:：])", re.IGNORECASE)


@attrs.frozen
class ToolCall:
    name: str
    argument: str  # the raw text between the tags (a JSON document for <tool_call>)
    oversized: bool = False  # the argument is longer than MAX_ARGUMENT_CHARS (and cut there)


class ToolCallError(ValueError):
    """A tool call that cannot be read; the message is shown to the model."""


def split_reasoning(text: str) -> tuple[str, str]:
    """(reasoning, visible text) of one assistant turn."""
    reasoning: list[str] = []
    head, sep, tail = text.partition("</think>")
    if sep and "<think>" not in head:
        reasoning.append(head.strip())
        text = tail
    parts = _THINK_BLOCK.split(text)
    visible = "".join(parts[0::2])
    reasoning.extend(p.strip() for p in parts[1::2])
    return "\n".join(r for r in reasoning if r), visible.strip()


def find_tool_call(visible: str) -> ToolCall | None:
    """The first `<name>argument</name>` call in the visible text, if any (`oversized` when too long)."""
    region = visible[:MAX_ACTION_CHARS]
    match = _TAG_CALL.search(region)
    if match is not None:
        return ToolCall(name=match.group(1), argument=match.group(2))
    for index, opening in enumerate(_OPEN_TAG.finditer(region)):
        if index >= _MAX_OPEN_TAGS:
            break
        if region.find(f"</{opening.group(1)}", opening.end()) != -1:
            argument = region[opening.end() : opening.end() + MAX_ARGUMENT_CHARS]
            return ToolCall(name=opening.group(1), argument=argument, oversized=True)
    return None


def parse_json_call(argument: str) -> tuple[str, dict[str, Any]]:
    """(tool name, arguments) of a `<tool_call>` body; `ToolCallError` says what is wrong."""
    try:
        payload = json.loads(argument)
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"the tool call is not valid JSON ({exc.msg} at character {exc.pos})") from None
    if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
        raise ToolCallError('a tool call must be a JSON object {"name": "...", "arguments": {...}}')
    arguments = payload.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            pass
    if not isinstance(arguments, dict):
        raise ToolCallError(f"the arguments of {payload['name'][:40]!r} must be a JSON object, got {type(arguments).__name__}")
    return payload["name"], arguments


def final_answer(visible: str) -> str:
    """The stated final answer: after the last `Answer:`, else the last non-empty line."""
    matches = list(_ANSWER.finditer(visible[-MAX_ACTION_CHARS:]))
    region = visible[-MAX_ACTION_CHARS:][matches[-1].end() :] if matches else visible[-MAX_ACTION_CHARS:]
    lines = [line.strip() for line in region.strip().splitlines() if line.strip()]
    if not lines:
        return ""
    return (lines[0] if matches else lines[-1])[:MAX_ANSWER_CHARS]


def tool_env_kwargs(rows: str) -> dict[str, KwargSpec]:
    """eval_fraction (a share of the `rows` drawn), carry_reasoning, system_prompt: in `rlsetup envs` order."""
    return {
        "eval_fraction": KwargSpec(0.1, f"share of the {rows} reserved for the eval split, in (0, 1)"),
        "carry_reasoning": KwargSpec(True, "keep a turn's <think> reasoning in the next turn's context"),
        "system_prompt": KwargSpec(None, "an optional system message"),
    }


def opening(system_prompt: object, user: str) -> list[Message]:
    """An episode's opening messages: a system message when `system_prompt` is set, then the user's."""
    message = Message(role="user", content=user)
    return [Message(role="system", content=str(system_prompt)), message] if system_prompt else [message]


class Conversation:
    """The episode as the model should see it before its next turn (see `carry_reasoning`)."""

    def __init__(self, carry_reasoning: bool) -> None:
        if not isinstance(carry_reasoning, bool):
            raise ValueError(f"carry_reasoning must be true or false, got {carry_reasoning!r}")
        self.carry_reasoning = carry_reasoning
        self._messages: list[Message] = []

    def open(self, messages: Iterable[Message]) -> list[Message]:
        self._messages = list(messages)
        return list(self._messages)

    def add_turn(self, action: str, visible: str) -> None:
        self._messages.append(Message(role="assistant", content=action if self.carry_reasoning else visible))

    def add(self, observation: Iterable[Message]) -> None:
        self._messages.extend(observation)

    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)


class ToolEpisode:
    """One episode's turn loop: tool calls get tool messages, a turn without one is scored.

    `run_tool(call)` returns the tool message text (None = the environment has no tools: every
    turn is the final answer); it should turn its own failures into text, and any exception that
    escapes still becomes a tool error message. `score(answer)` maps the final answer to [0, 1].
    On the last allowed turn the text is scored even if it calls a tool.
    """

    def __init__(
        self,
        max_turns: int,
        carry_reasoning: bool,
        score: Callable[[str], float],
        run_tool: Callable[[ToolCall], str] | None,
    ) -> None:
        self._max_turns = max_turns
        self._score = score
        self._run_tool = run_tool
        self._conversation = Conversation(carry_reasoning)
        self._turn = 0
        self._tool_calls = 0

    def open(self, messages: Iterable[Message]) -> list[Message]:
        self._turn = self._tool_calls = 0
        return self._conversation.open(messages)

    def context(self) -> tuple[Message, ...]:
        return self._conversation.messages()

    def step(self, action: str) -> StepResult:
        self._turn += 1
        text = action if isinstance(action, str) else str(action)
        reasoning, visible = split_reasoning(text)
        self._conversation.add_turn(text, visible)
        call = find_tool_call(visible) if self._run_tool is not None else None
        if call is None or self._turn >= self._max_turns:
            answer = final_answer(visible)
            metadata = {"turns": self._turn, "tool_calls": self._tool_calls, "answer": answer, "tool_call_pending": call is not None}
            return StepResult(done=True, score=float(self._score(answer)), metadata=metadata)
        self._tool_calls += 1
        observation = (Message(role="tool", content=self._tool_message(call)),)
        self._conversation.add(observation)
        return StepResult(observation=observation, metadata={"reasoning": reasoning, "tool": call.name[:40]})

    def _tool_message(self, call: ToolCall) -> str:
        assert self._run_tool is not None
        if call.oversized:
            return f"error: the call of {call.name[:40]!r} is longer than {MAX_ARGUMENT_CHARS} characters; send a shorter one"
        try:
            content = self._run_tool(call)
        except Exception as exc:  # a tool fault is the model's observation, never the run's crash
            content = f"error: tool {call.name[:40]!r} failed: {type(exc).__name__}: {str(exc)[:300]}"
        if len(content) > MAX_TOOL_RESULT_CHARS:
            content = content[:MAX_TOOL_RESULT_CHARS] + f"\n[tool output cut at {MAX_TOOL_RESULT_CHARS} characters]"
        return content
