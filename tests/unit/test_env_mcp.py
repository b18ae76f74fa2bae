"""mcp: the bundled tools, problems whose answers need them, and real MCP round trips (stdio, HTTP).

One bundled stdio server is started for the module (shared per process, as in training); the
misbehaving servers (one that hangs, one that dies) are tiny MCPServer scripts written to tmp.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import textwrap
import time

import pytest

from adapters.environments import mcp_tools
from adapters.environments.mcp_client import McpUnavailable
from adapters.environments.mcp_env import McpEnvironment
from adapters.environments.mcp_problems import TASKS, generate, score_answer
from application.ports.environment import Message, Problem

CALC = '<tool_call>{{"name": "calculator", "arguments": {{"expression": "{}"}}}}</tool_call>'


def _problem(prompt: str = "What is 123 * 456?", answer: str = "56088") -> Problem:
    return Problem(prompt=prompt, answer=answer)


def _episode(problem: Problem, actions: list[str], **kwargs):
    env = McpEnvironment(problem, **kwargs)
    opening = env.reset()
    return env, opening, [env.step(a) for a in actions]


# ---- tools and problems (no server) ------------------------------------------------------


def test_tools_compute_and_refuse_with_messages():
    assert mcp_tools.convert_units(10, "km", "mi") == "6.2137 mi"
    assert mcp_tools.convert_units(100, "C", "F") == "212 F"
    assert mcp_tools.day_of_week("2000-01-01") == "Saturday"
    assert mcp_tools.add_days("2000-02-28", 2) == "2000-03-01"
    assert mcp_tools.days_between("2000-01-01", "2001-01-01") == "366"
    assert "Nairobi" in mcp_tools.country_facts("kenya")
    for call, message in [
        (lambda: mcp_tools.convert_units(1, "kg", "km"), "cannot convert"),
        (lambda: mcp_tools.convert_units(1, "parsec", "km"), "unknown unit"),
        (lambda: mcp_tools.day_of_week("01/02/2000"), "YYYY-MM-DD"),
        (lambda: mcp_tools.add_days("2000-01-01", 10**9), "days must be"),
        (lambda: mcp_tools.country_facts("Atlantis"), "Atlantis"),
        (lambda: mcp_tools.calculator("9**9**9"), "exponent"),
    ]:
        with pytest.raises(mcp_tools.ToolInputError, match=message):
            call()


def test_problems_are_seeded_mixed_split_and_answerable():
    train = McpEnvironment.problems("train", 24, seed=2)
    assert train == McpEnvironment.problems("train", 24, seed=2) != McpEnvironment.problems("train", 24, seed=3)
    assert {p.metadata["task"] for p in train} == set(TASKS)
    assert not {p.prompt for p in train} & {p.prompt for p in McpEnvironment.problems("eval", 200, seed=2)}
    for question, answer in generate("arithmetic")[:20]:
        assert mcp_tools.calculator(question.removeprefix("What is ").rstrip("?")) == answer


@pytest.mark.parametrize(
    ("answer", "reference", "score"),
    [("60.35 km", "60.35", 1.0), ("60.36", "60.35", 0.0), ("1,234", "1234", 1.0), ("saturday.", "Saturday", 1.0), ("none", "7", 0.0)],
)
def test_score_answer(answer, reference, score):
    assert score_answer(answer, reference) == score


def test_bad_kwargs_raise_naming_the_offender():
    with pytest.raises(ValueError, match="teleport"):
        McpEnvironment.problems("train", 2, seed=0, tasks=["teleport"])
    with pytest.raises(ValueError, match="call_timeout_s"):
        McpEnvironment(_problem(), call_timeout_s=0)


# ---- the bundled server over stdio -------------------------------------------------------


def test_tools_are_discovered_and_listed_in_the_opening_message():
    _, opening, _ = _episode(_problem(), [])
    text = opening[-1].content
    for name in ("calculator", "convert_units", "day_of_week", "add_days", "days_between", "country_facts"):
        assert f"- {name}(" in text
    assert "<tool_call>" in text and "expression: string" in text


def test_calling_a_tool_then_answering_scores_one_and_a_wrong_answer_zero():
    _, _, (called, answered) = _episode(_problem(), [CALC.format("123 * 456"), "Answer: 56088"])
    assert called.observation == (Message(role="tool", content="56088"),)
    assert answered.done and answered.score == 1.0
    _, _, (wrong,) = _episode(_problem(), ["Answer: 56000"])
    assert wrong.done and wrong.score == 0.0


@pytest.mark.parametrize(
    ("action", "message"),
    [
        ("<tool_call>{not json</tool_call>", "not valid JSON"),
        ('<tool_call>{"name": "rm", "arguments": "-rf /"}</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "rm", "arguments": {}}</tool_call>', "unknown tool 'rm'"),
        ('<tool_call>["calculator"]</tool_call>', "must be a JSON object"),
        ('<tool_call>{"name": "add_days", "arguments": {"date": "2000-01-01"}}</tool_call>', "days"),
        (CALC.format("9**9**9"), "exponent"),
        ("<calc>1+1</calc>", "unknown tag <calc>"),
        ("<tool_call>" + "x" * 5_000 + "</tool_call>", "longer than"),
    ],
)
def test_bad_tool_calls_are_tool_errors(action, message):
    _, _, (result,) = _episode(_problem(), [action])
    assert not result.done and result.observation[0].content.startswith("error:")
    assert message in result.observation[0].content


def test_scripted_correct_policy_throughput():
    problems = McpEnvironment.problems("train", 30, seed=0, tasks=["arithmetic"])
    McpEnvironment(problems[0]).reset()  # the server start is not an episode
    start = time.monotonic()
    scores = []
    for problem in problems:
        expression = problem.prompt.removeprefix("What is ").rstrip("?")
        _, _, results = _episode(problem, [CALC.format(expression), f"Answer: {problem.answer}"])
        scores.append(results[-1].score)
    rate = len(problems) / (time.monotonic() - start)
    print(f"mcp: {rate:.0f} episodes/s (one stdio tool call + answer, scripted correct policy)")
    assert scores == [1.0] * len(problems)


# ---- servers that misbehave --------------------------------------------------------------

BAD_SERVER = textwrap.dedent(
    """
    import os, time
    from mcp.server.mcpserver import MCPServer
    server = MCPServer("bad", log_level="WARNING")

    @server.tool()
    def hang(seconds: float) -> str:
        time.sleep(seconds)
        return "woke"

    @server.tool()
    def die() -> str:
        os._exit(3)

    server.run("stdio")
    """
)


@pytest.fixture
def bad_server(tmp_path) -> str:
    script = tmp_path / "bad_server.py"
    script.write_text(BAD_SERVER)
    return f"{sys.executable} {script}"


def test_a_hanging_tool_is_a_tool_error_after_the_timeout(bad_server):
    env = McpEnvironment(_problem(), mcp_server=bad_server, call_timeout_s=1.0)
    env.reset()
    start = time.monotonic()
    result = env.step('<tool_call>{"name": "hang", "arguments": {"seconds": 30}}</tool_call>')
    assert time.monotonic() - start < 5.0
    assert "no answer within 1 s" in result.observation[0].content and bad_server in result.observation[0].content


def test_a_server_that_dies_gives_tool_errors_not_hangs(bad_server):
    env = McpEnvironment(_problem(), mcp_server=bad_server, call_timeout_s=2.0)
    env.reset()
    start = time.monotonic()
    died = env.step('<tool_call>{"name": "die", "arguments": {}}</tool_call>')
    after = env.step('<tool_call>{"name": "hang", "arguments": {"seconds": 0}}</tool_call>')
    assert time.monotonic() - start < 8.0
    assert died.observation[0].content.startswith("error:") and after.observation[0].content.startswith("error:")


def test_an_unreachable_server_fails_reset_naming_it():
    with pytest.raises(McpUnavailable, match="no_such_mcp_server_h11"):
        McpEnvironment(_problem(), mcp_server="no_such_mcp_server_h11 --stdio").reset()
    with pytest.raises(McpUnavailable, match="127.0.0.1:9"):
        McpEnvironment(_problem(), mcp_server="http://127.0.0.1:9/mcp", connect_timeout_s=5).reset()


# ---- the bundled server over streamable HTTP ---------------------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_streamable_http_round_trip():
    port = _free_port()
    command = [sys.executable, "-m", "adapters.environments.mcp_tools_server", "--http", "--port", str(port)]
    server = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.2)
        url = f"http://127.0.0.1:{port}/mcp"
        _, _, (called, answered) = _episode(_problem(), [CALC.format("123 * 456"), "Answer: 56088"], mcp_server=url)
        assert called.observation[0].content == "56088" and answered.score == 1.0
    finally:
        server.terminate()
        server.wait(timeout=10)
