"""Engine-side thinking budgets against a REAL vLLM CPU server (0.32, `--reasoning-parser deepseek_r1`).

The model is SmolLM2-135M-Instruct with `<think>`/`</think>` added as single tokens and a template
that opens `<think>` in the generation prompt (`thinking_model.py`). It runs on the session's
second server (`reasoning_vllm` in conftest.py: `--reasoning-parser deepseek_r1`,
`VLLM_USE_V2_MODEL_RUNNER=0` as the seed pins it); the refusal without a parser uses the shared
first server. Checked:
- the budget forces `</think>` exactly where `domain/thinking_budget.py` says (reasoning already
  in the prompt counted too), the engine reports log-prob 0.0 for it, and the policy's own
  log-prob for that token is far below it;
- `run_episode` turns each forced close into a masked one-token segment, the rest of each turn
  keeps the engine's ids and log-probs (two turns, the second opening reasoning again);
- without a budget (or with no section open) nothing is forced; a server without a reasoning
  parser refuses the field, and our error names the endpoint and the server's answer;
- `/reset_prefix_cache?reset_running_requests=true` succeeds while `/pause?mode=keep` holds an
  in-flight request, and the request finishes after `/resume` with log-probs matching a rescoring
  (see that test for what vLLM 0.32's pause itself already resets).
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest

from adapters.chat_tokenizer import HfChatTokenizer
from adapters.vllm.errors import ServerError
from adapters.vllm.http_server import VllmHttpServer
from application.ports.environment import Message, Problem, StepResult
from application.ports.generation import Completion, SamplingParams
from application.run_episode import run_episode
from domain.episodes import Segment
from domain.thinking_budget import ReasoningMarkers, forced_close_positions, resolve_markers, sampled_reasoning_tokens
from tests.integration.thinking_model import TEMPLATE_KWARGS, THINK_END

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1500)]

SEED = 0  # with these prompts SmolLM2 writes past every budget below before it stops
STORY = "Write a long story about a cat who learns to fly."
JOKE = "Tell me a one-line joke about cats."
REASONING_TEXT = " The cat looked up at the sky and wondered"  # >= 6 tokens of reasoning put in the prompt


@pytest.fixture(scope="module")
def reasoning_server(reasoning_vllm) -> Iterator[VllmHttpServer]:  # conftest's RunningServer
    server = VllmHttpServer(reasoning_vllm.url, timeout=300.0)
    yield server
    server.close()


@pytest.fixture(scope="module")
def tokenizer(thinking_model: Path) -> HfChatTokenizer:
    return HfChatTokenizer(thinking_model, TEMPLATE_KWARGS)


@pytest.fixture(scope="module")
def markers(tokenizer: HfChatTokenizer) -> ReasoningMarkers:
    return resolve_markers(tokenizer.encode, THINK_END)


def _opening(tokenizer: HfChatTokenizer, text: str) -> list[int]:
    """The chat prompt for `text`; it ends with `<think>`, so it opens a reasoning section."""
    return tokenizer.prompt_ids([Message(role="user", content=text)])


def _one(
    server: VllmHttpServer, prompt: Sequence[int], max_tokens: int, budget: int | None, temperature: float = 1.0
) -> Completion:
    params = SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=SEED, thinking_token_budget=budget)
    return server.generate(prompt, params)[0]


@pytest.mark.parametrize(
    ("in_prompt", "budget", "forced_at", "temperature"),
    [(0, 0, 0, 1.0), (0, 4, 4, 1.0), (0, 9, 9, 1.0), (3, 4, 1, 1.0), (6, 4, 0, 1.0), (3, 4, 1, 0.6)],
    ids=["budget0", "budget4", "budget9", "3-in-prompt-budget4", "6-in-prompt-budget4", "3-in-prompt-budget4-T0.6"],
)
def test_budget_forces_the_end_token_where_the_rule_says(
    reasoning_server: VllmHttpServer, tokenizer: HfChatTokenizer, markers: ReasoningMarkers,
    in_prompt: int, budget: int, forced_at: int, temperature: float,
) -> None:
    prompt = _opening(tokenizer, STORY) + tokenizer.encode(REASONING_TEXT)[:in_prompt]
    completion = _one(reasoning_server, prompt, forced_at + 4, budget, temperature)
    ids, logprobs = completion.token_ids, completion.logprobs
    assert len(ids) > forced_at, f"the model stopped before the budget ran out: {completion}"
    assert markers.end_id not in ids[:forced_at] and ids[forced_at] == markers.end_id, ids
    assert logprobs[forced_at] == 0.0  # the engine's own report for the forced token: exactly 0.0
    assert all(value < 0.0 for value in logprobs[:forced_at]), logprobs  # the reasoning before it was sampled
    assert forced_close_positions(prompt, ids, budget, markers) == [forced_at]
    policy = reasoning_server.prompt_logprobs([*prompt, *ids[: forced_at + 1]])[-1]
    assert policy is not None and policy < -1.0, f"the policy itself gives the forced close {policy}"


def test_run_episode_masks_each_forced_close_and_keeps_the_engine_logprobs(
    reasoning_server: VllmHttpServer, tokenizer: HfChatTokenizer, markers: ReasoningMarkers
) -> None:
    budget = 4
    server = _Recorded(reasoning_server)
    params = SamplingParams(
        max_tokens=64, temperature=1.0, seed=SEED, thinking_token_budget=budget, reasoning_markers=markers
    )
    episode = run_episode(_AskTwice, Problem(prompt=JOKE), {}, server, tokenizer, params, None, weight_version=0)
    assert (episode.finish_reason, episode.num_turns, len(server.completions)) == ("stop", 2, 2), episode.metadata
    between = episode.segments[3]  # the environment's continuation between the two turns
    assert not between.sampled and between.token_ids[-1] == markers.start_id  # turn 2 opens reasoning again
    expected: list[Segment] = []
    for turn, completion in enumerate(server.completions):
        ids, logprobs = completion.token_ids, completion.logprobs
        assert ids[budget] == markers.end_id and logprobs[budget] == 0.0, completion
        expected += [Segment.from_engine(ids[:budget], logprobs[:budget]), Segment.from_environment([markers.end_id])]
        if len(ids) > budget + 1:
            expected.append(Segment.from_engine(ids[budget + 1 :], logprobs[budget + 1 :]))
        if turn == 0:
            expected.append(between)
    assert list(episode.segments) == expected
    assert sampled_reasoning_tokens(episode.prompt_token_ids, episode.segments, markers) == 2 * budget
    forced = [i for i, token in enumerate(episode.completion_token_ids) if token == markers.end_id]
    assert len(forced) == 2 and all(episode.completion_mask[i] == 0 for i in forced)


def test_without_a_budget_or_an_open_section_nothing_is_forced(
    reasoning_server: VllmHttpServer, tokenizer: HfChatTokenizer, thinking_model: Path, markers: ReasoningMarkers
) -> None:
    prompt = _opening(tokenizer, STORY)
    budgeted = _one(reasoning_server, prompt, 8, budget=4)
    free = _one(reasoning_server, prompt, 8, budget=None)
    assert budgeted.token_ids[4] == markers.end_id
    assert free.token_ids[:4] == budgeted.token_ids[:4] and free.token_ids[4] != markers.end_id, free
    assert all(value < 0.0 for value in free.logprobs), free.logprobs
    plain_template = HfChatTokenizer(thinking_model)  # no enable_thinking: the prompt opens no section
    plain = plain_template.prompt_ids([Message(role="user", content=STORY)])
    assert plain[-1] != markers.start_id
    closed = _one(reasoning_server, plain, 12, budget=0)  # a budget, but no reasoning section is open
    assert len(closed.token_ids) > 1 and markers.end_id not in closed.token_ids, closed
    assert forced_close_positions(plain, closed.token_ids, 0, markers) == []


@pytest.mark.parametrize("clear_cache", [None, False], ids=["our-pause", "pause-clear_cache-false"])
def test_reset_with_running_requests_while_a_request_is_kept_by_pause(
    reasoning_server: VllmHttpServer, tokenizer: HfChatTokenizer, clear_cache: bool | None
) -> None:
    """A kept request survives pause, reset and resume, and finishes on recomputed KV.

    vLLM 0.32's `/pause` defaults `clear_cache` to true and, although its route calls that
    ignored for `keep`, runs it (`EngineCore._finish_pause` -> `_reset_caches`, which preempts
    the kept requests): after our `pause()` a plain reset already succeeds. With
    `clear_cache=false` the kept request holds its blocks: a plain reset is refused and
    `reset_running_requests=true` (our `reset_prefix_cache`) is what frees them.
    """
    prompt = tokenizer.encode("Once upon a time")  # plain text: SmolLM2 keeps writing to max_tokens
    params = SamplingParams(max_tokens=480, temperature=1.0, seed=1)
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        generation = pool.submit(reasoning_server.generate, prompt, params)
        _wait_running(reasoning_server.url, generation)
        time.sleep(0.3)  # let it decode a little: the kept request then has output tokens too
        _pause(reasoning_server, clear_cache)
        try:
            plain = httpx.post(f"{reasoning_server.url}/reset_prefix_cache", timeout=30.0).json()
            assert plain == {"success": clear_cache is None}, plain
            reasoning_server.reset_prefix_cache()  # with reset_running_requests=true: success, or a ServerError
            time.sleep(2.0)
            assert not generation.done()  # kept, not aborted
        finally:
            reasoning_server.resume()
        completion = generation.result(timeout=600)[0]
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    assert (completion.finish_reason, len(completion.token_ids)) == ("length", 480), completion.finish_reason
    rescored = reasoning_server.prompt_logprobs([*prompt, *completion.token_ids])[len(prompt) :]
    assert max(abs(a - b) for a, b in zip(rescored, completion.logprobs)) < 1e-3  # KV recomputed correctly


def _pause(server: VllmHttpServer, clear_cache: bool | None) -> None:
    """Our client's `/pause?mode=keep`, or the raw route with an explicit `clear_cache`."""
    if clear_cache is None:
        server.pause()
        return
    query = {"mode": "keep", "clear_cache": str(clear_cache).lower()}
    response = httpx.post(f"{server.url}/pause", params=query, timeout=60.0)
    assert response.status_code == 200, response.text


def test_a_server_without_reasoning_parser_refuses_the_budget(vllm_server: VllmHttpServer, vllm_model_path: Path) -> None:
    """The session's shared server runs no reasoning parser: the field is refused, named, in one error."""
    prompt = HfChatTokenizer(vllm_model_path).prompt_ids([Message(role="user", content=STORY)])
    with pytest.raises(ServerError) as caught:
        _one(vllm_server, prompt, 4, budget=4)
    message = str(caught.value)
    assert message.startswith(f"{vllm_server.url} /v1/completions: HTTP 400: "), message
    assert "thinking_token_budget is set but reasoning_config is not configured" in message
    assert len(_one(vllm_server, prompt, 4, budget=None).token_ids) == 4  # the same request without the field is served


class _AskTwice:
    """A two-turn environment: any first answer gets a follow-up question, any second one scores 1."""

    name = "ask_twice"
    requires_answer = False
    max_turns = 2

    def __init__(self, problem: Problem, max_turns: int) -> None:
        self._problem, self._answers = problem, 0

    def reset(self) -> list[Message]:
        return [Message(role="user", content=self._problem.prompt)]

    def step(self, action: str) -> StepResult:
        self._answers += 1
        if self._answers == 1:
            return StepResult(observation=(Message(role="user", content="Thanks. Now one more, please."),))
        return StepResult(done=True, score=1.0)

    def close(self) -> None:
        pass

    @classmethod
    def problems(cls, split: str, count: int, seed: int) -> list[Problem]:
        return [Problem(prompt=JOKE)] * count


class _Recorded:
    """The real server, keeping each completion it returned (what the episode is compared with)."""

    def __init__(self, server: VllmHttpServer) -> None:
        self._server = server
        self.completions: list[Completion] = []

    @property
    def url(self) -> str:
        return self._server.url

    def generate(self, prompt_token_ids: Sequence[int], params: SamplingParams, n: int = 1) -> list[Completion]:
        completions = self._server.generate(prompt_token_ids, params, n)
        self.completions.extend(completions)
        return completions

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        return self._server.prompt_logprobs(token_ids)


def _metric(url: str, name: str) -> float:
    text = httpx.get(f"{url}/metrics", timeout=30.0).text
    found = re.search(rf"^vllm:{name}\{{[^}}]*\}} (\S+)$", text, re.MULTILINE)
    if found is None:
        raise AssertionError(f"{url}/metrics has no vllm:{name}")
    return float(found.group(1))


def _wait_running(url: str, generation, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while _metric(url, "num_requests_running") < 1:
        if generation.done() or time.monotonic() > deadline:
            raise AssertionError(f"the long generation never ran at {url} (done: {generation.done()})")
        time.sleep(0.05)
