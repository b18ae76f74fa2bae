"""The thinking budget: the forced-close rule (against a reference of vLLM's), the split of a turn,
the marker resolution, the request field, the embedded server's argv/env and the config refusals."""

from __future__ import annotations

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.chat_tokenizer import HfChatTokenizer
from adapters.vllm.http_server import VllmHttpServer
from application.ports.environment import Message, Problem, StepResult
from application.ports.generation import Completion, SamplingParams
from application.run_episode import run_episode
from domain.config import RunConfig
from domain.thinking_budget import (
    ReasoningMarkers,
    forced_close_positions,
    opening_tag,
    resolve_markers,
    sampled_reasoning_tokens,
    split_forced_closes,
)
from domain.episodes import Segment
from infrastructure.bootstrap import embedded_server
from infrastructure.config_loader import ConfigError, parse_run_config
from infrastructure.model_assets import resolve_model_path
from infrastructure.reasoning_tokens import reasoning_markers
from tests.unit.test_config_checks import CATALOG

START, END = 1, 2
MARKERS = ReasoningMarkers(start_id=START, end_id=END)


# ---- the rule -------------------------------------------------------------------------------

# (context, sampled, budget, forced positions): the cases vLLM 0.32's V1 ThinkingBudgetStateHolder
# was driven through on CPU (see the module docstring of domain/thinking_budget.py), as it behaved.
VLLM_CASES = [
    ([7, 8], [START, 5, 5, 5, END, 5], 3, [4]),  # start sampled: 3 reasoning tokens, then forced
    ([7, START], [5, 5, 5, END, 5], 3, [3]),  # template opened reasoning in the prompt
    ([7, START, 4, 4], [5, END, 5], 3, [1]),  # prompt-side reasoning counts against the budget
    ([7, START, 4, 4, 4, 4], [END, 5], 3, [0]),  # already over budget: the first token is forced
    ([7, 8], [START, 5, END, 6, START, 5, 5, 5, END, 5], 3, [8]),  # natural close, then a fresh budget
    ([7, 8], [START, END, 5], 0, [1]),  # budget 0: the close right after the start
    ([START, 4, END, 7], [5, 5, 5, 5, 5], 3, []),  # reasoning closed in the prompt: nothing to force
    ([7], [START, 5, END, 5], 3, []),  # a close before the budget is the policy's own
]


@pytest.mark.parametrize(("context", "sampled", "budget", "forced"), VLLM_CASES)
def test_forced_closes_are_where_vllm_forced_them(context, sampled, budget, forced) -> None:
    assert forced_close_positions(context, sampled, budget, MARKERS) == forced


def _engine_reference(
    context: list[int], wanted: list[int], budget: int, markers: ReasoningMarkers = MARKERS
) -> tuple[list[int], list[int]]:
    """What vLLM emits for a policy that wants `wanted`: at every step it finds the last start and
    the last end in prompt + output so far (as `_init_state_entry` / the V2 kernel do) and forces END
    once `budget` tokens follow an open start. Returns (emitted ids, forced positions)."""
    out: list[int] = []
    forced: list[int] = []
    for want in wanted:
        history = context + out
        last_start = max((i for i, t in enumerate(history) if t == markers.start_id), default=-1)
        last_end = max((i for i, t in enumerate(history) if t == markers.end_id), default=-1)
        if last_start > last_end and len(history) - last_start - 1 >= budget:
            forced.append(len(out))
            out.append(markers.end_id)
        else:
            out.append(want)
    return out, forced


tokens = st.lists(st.sampled_from([START, END, 5, 6, 7]), max_size=40)


@settings(max_examples=300, deadline=None)
@given(context=tokens, wanted=tokens, budget=st.integers(min_value=0, max_value=6))
def test_the_rule_finds_exactly_the_closes_a_budgeted_engine_forces(context, wanted, budget) -> None:
    emitted, forced = _engine_reference(context, wanted, budget)
    assert forced_close_positions(context, emitted, budget, MARKERS) == forced


@settings(max_examples=300, deadline=None)
@given(context=tokens, wanted=tokens, budget=st.integers(min_value=0, max_value=6))
def test_the_split_keeps_every_token_and_masks_only_the_forced_closes(context, wanted, budget) -> None:
    emitted, forced = _engine_reference(context, wanted, budget)
    logprobs = [-(i + 1) / 10 for i in range(len(emitted))]
    segments = split_forced_closes(context, emitted, logprobs, budget, MARKERS)
    assert [t for s in segments for t in s.token_ids] == emitted
    mask = [int(s.sampled) for s in segments for _ in s.token_ids]
    assert [i for i, m in enumerate(mask) if not m] == forced
    kept = [lp for s in segments if s.sampled for lp in s.logprobs]
    assert kept == [lp for i, lp in enumerate(logprobs) if i not in forced]
    assert all(s.token_ids for s in segments) or segments == [Segment.from_engine([], [])]


def test_a_turn_without_a_forced_close_stays_one_engine_segment() -> None:
    assert split_forced_closes([7], [START, 5, END, 9], [-1.0, -0.5, -0.25, -0.1], 3, MARKERS) == [
        Segment.from_engine([START, 5, END, 9], [-1.0, -0.5, -0.25, -0.1])
    ]
    assert split_forced_closes([7], [], [], 3, MARKERS) == [Segment.from_engine([], [])]


def test_a_forced_close_is_cut_out_as_a_masked_segment() -> None:
    segments = split_forced_closes([7, START], [5, 5, END, 9], [-0.1, -0.2, 0.0, -0.3], 2, MARKERS)
    assert segments == [
        Segment.from_engine([5, 5], [-0.1, -0.2]),
        Segment.from_environment([END]),
        Segment.from_engine([9], [-0.3]),
    ]


def test_reasoning_tokens_are_the_sampled_ones_between_the_markers() -> None:
    segments = [Segment.from_engine([5, 5], [-1, -1]), Segment.from_environment([END]), Segment.from_engine([9, START, 4, END, 9], [-1] * 5)]
    assert sampled_reasoning_tokens([7, START], segments, MARKERS) == 3  # two before the forced close, one after the second start
    assert sampled_reasoning_tokens([7], [Segment.from_engine([5, 5], [-1, -1])], MARKERS) == 0


# ---- resolving the markers ------------------------------------------------------------------

VOCAB = {"<think>": [10], "</think>": [11], "<|channel>": [12], "<channel|>": [13], "</thought>": [3, 4]}


def _encode(text: str) -> list[int]:
    return VOCAB.get(text, [99, 98])


def test_markers_resolve_to_single_tokens_and_the_start_is_the_opening_tag_by_default() -> None:
    assert opening_tag("</think>") == "<think>" and opening_tag("<channel|>") is None
    assert resolve_markers(_encode, "</think>") == ReasoningMarkers(start_id=10, end_id=11)
    assert resolve_markers(_encode, "<channel|>", "<|channel>") == ReasoningMarkers(start_id=12, end_id=13)


def test_a_marker_that_is_not_one_token_is_an_error_naming_it() -> None:
    with pytest.raises(ValueError, match=r"'rollout_reasoning_end_token' '</thought>' is not one token .*\[3, 4\]"):
        resolve_markers(_encode, "</thought>", "<think>")
    with pytest.raises(ValueError, match=r"'rollout_reasoning_start_token' \(derived from the end token\) '<x>'"):
        resolve_markers(lambda t: [11] if t == "</x>" else [1, 2], "</x>")
    with pytest.raises(ValueError, match="not a closing tag"):
        resolve_markers(_encode, "<channel|>")
    with pytest.raises(ValueError, match="must differ"):
        resolve_markers(lambda t: [5], "</think>")


def _training(**fields: Any) -> RunConfig:
    return parse_run_config({"training": {"rollout_server_url": "http://h:1", **fields}}, CATALOG)


def test_the_tokenizer_resolves_markers_at_construction_or_names_the_bad_string() -> None:
    model = resolve_model_path("smollm2-135m-instruct")
    tokenizer = HfChatTokenizer(model)
    config = _training(rollout_max_thinking_tokens=8, rollout_reasoning_end_token="<|im_end|>", rollout_reasoning_start_token="<|im_start|>")
    assert reasoning_markers(config.training, model) == ReasoningMarkers(
        start_id=tokenizer.encode("<|im_start|>")[0], end_id=tokenizer.eos_token_ids[0]
    )
    assert reasoning_markers(_training(rollout_max_thinking_tokens=8).training, model) is None
    with pytest.raises(ConfigError) as caught:
        reasoning_markers(_training(rollout_max_thinking_tokens=8, rollout_reasoning_end_token="</think>").training, model)
    [line] = caught.value.problems
    assert "'rollout_reasoning_end_token' '</think>' is not one token" in line and line.endswith("@ $.training")


# ---- the runner: forced closes leave the loss -----------------------------------------------


class OneTurnEnv:
    name, requires_answer, max_turns = "one_turn", False, 1

    def __init__(self, problem: Problem, max_turns: int) -> None:
        self.problem = problem

    def reset(self) -> list[Message]:
        return [Message(role="user", content=self.problem.prompt)]

    def step(self, action: str) -> StepResult:
        return StepResult(done=True, score=1.0)

    def close(self) -> None:
        pass


RUNNER_MARKERS = ReasoningMarkers(start_id=49000, end_id=49001)  # SmolLM2's ids 1, 2 are its chat markers


class BudgetedEngine:
    """Answers with what a budgeted vLLM emits for a policy that wants to reason forever."""

    url = "fake://budgeted"

    def __init__(self, eos: int) -> None:
        self.params: list[SamplingParams] = []
        self._eos = eos

    def generate(self, prompt_token_ids, params: SamplingParams, n: int = 1) -> list[Completion]:
        self.params.append(params)
        wanted = [RUNNER_MARKERS.start_id] + [5] * 6
        emitted, forced = _engine_reference(list(prompt_token_ids), wanted, params.thinking_token_budget, RUNNER_MARKERS)
        ids = emitted[: forced[0] + 1] + [9, self._eos]
        logprobs = [0.0 if i in forced else -0.5 for i in range(len(ids))]
        return [Completion(token_ids=ids, logprobs=logprobs, finish_reason="stop")]

    def prompt_logprobs(self, token_ids):
        raise AssertionError("not used")


def test_run_episode_masks_the_close_the_budget_forced() -> None:
    tokenizer = HfChatTokenizer(resolve_model_path("smollm2-135m-instruct"))
    engine = BudgetedEngine(tokenizer.eos_token_ids[0])
    params = SamplingParams(max_tokens=32, thinking_token_budget=3, reasoning_markers=RUNNER_MARKERS)
    episode = run_episode(OneTurnEnv, Problem(prompt="think"), {}, engine, tokenizer, params, None, 0)
    assert engine.params[0].thinking_token_budget == 3
    start, end = RUNNER_MARKERS.start_id, RUNNER_MARKERS.end_id
    assert episode.completion_token_ids == [start, 5, 5, 5, end, 9, tokenizer.eos_token_ids[0]]
    assert episode.completion_mask == [1, 1, 1, 1, 0, 1, 1]
    assert episode.behaviour_logprobs == [-0.5, -0.5, -0.5, -0.5, 0.0, -0.5, -0.5]
    unmarked = run_episode(OneTurnEnv, Problem(prompt="think"), {}, engine, tokenizer,
                           SamplingParams(max_tokens=32, thinking_token_budget=3), None, 0)
    assert unmarked.completion_mask == [1] * 7  # without markers nothing is recognised


# ---- the vLLM request -----------------------------------------------------------------------


class _CompletionsHandler(BaseHTTPRequestHandler):
    bodies: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).bodies.append(body)
        reply = json.dumps({"choices": [{"index": 0, "token_ids": [4, 2], "logprobs": {"token_logprobs": [-0.1, 0.0]},
                                         "finish_reason": "stop", "text": "x"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *_args: object) -> None:
        pass


@pytest.fixture
def completions_url():
    _CompletionsHandler.bodies = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _CompletionsHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_completions_request_carries_thinking_token_budget_only_when_set(completions_url: str) -> None:
    client = VllmHttpServer(completions_url, timeout=5.0)
    try:
        [one] = client.generate([1, 2], SamplingParams(max_tokens=4, thinking_token_budget=64, reasoning_markers=MARKERS))
        client.generate([1, 2], SamplingParams(max_tokens=4))
    finally:
        client.close()
    assert one.token_ids == (4, 2) and one.logprobs == (-0.1, 0.0)
    budgeted, plain = _CompletionsHandler.bodies
    assert budgeted["thinking_token_budget"] == 64 and "thinking_token_budget" not in plain
    assert not any("marker" in key or "reasoning" in key for key in budgeted)  # markers stay on our side


def test_sampling_params_refuse_a_negative_budget() -> None:
    with pytest.raises(ValueError, match="thinking_token_budget must be >= 0"):
        SamplingParams(max_tokens=4, thinking_token_budget=-1)


# ---- the embedded server --------------------------------------------------------------------


def test_embedded_server_gets_the_reasoning_parser_and_the_v1_runner_with_a_budget(tmp_path: Path) -> None:
    config = parse_run_config({"training": {"rollout_max_thinking_tokens": 32}, "server": {"reasoning_parser": "qwen3"}}, CATALOG)
    server = embedded_server(config, tmp_path, tmp_path)
    argv = server.command()
    assert argv[argv.index("--reasoning-parser") + 1] == "qwen3"
    assert server.environment()["VLLM_USE_V2_MODEL_RUNNER"] == "0"
    plain = embedded_server(parse_run_config({}, CATALOG), tmp_path, tmp_path)
    assert "--reasoning-parser" not in plain.command()
    assert plain.environment().get("VLLM_USE_V2_MODEL_RUNNER") == os.environ.get("VLLM_USE_V2_MODEL_RUNNER")


# ---- config ---------------------------------------------------------------------------------


def _problems(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse_run_config(data, CATALOG)
    return caught.value.problems


def test_the_keys_are_accepted_and_off_by_default() -> None:
    t = _training(rollout_max_thinking_tokens=512, rollout_reasoning_end_token="</think>",
                  effort_length_penalty_k0=0.5, effort_length_floor_weight=0.1,
                  rollout_chat_template_kwargs={"reasoning_effort": "medium"}).training
    assert (t.rollout_max_thinking_tokens, t.rollout_reasoning_end_token) == (512, "</think>")
    assert (t.effort_length_penalty_k0, t.effort_length_floor_weight) == (0.5, 0.1)
    d = RunConfig().training
    assert d.rollout_max_thinking_tokens is None and d.rollout_reasoning_end_token is None
    assert d.effort_length_penalty_k0 == 0.0 == d.effort_length_floor_weight and RunConfig().server.reasoning_parser is None
    embedded = parse_run_config({"training": {"rollout_max_thinking_tokens": 8}, "server": {"reasoning_parser": "qwen3"}}, CATALOG)
    assert embedded.server.reasoning_parser == "qwen3"


URL = {"rollout_server_url": "http://h:1"}


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"training": {**URL, "rollout_backend": "sglang", "rollout_max_thinking_tokens": 8}},
         "'rollout_max_thinking_tokens' is refused under 'rollout_backend: sglang' (it is vLLM's engine-side thinking_token_budget) @ $.training"),
        ({"training": {"rollout_max_thinking_tokens": 8}},
         "'rollout_max_thinking_tokens' needs a reasoning parser on the embedded vLLM server: set 'server.reasoning_parser' (e.g. qwen3) @ $.training"),
        ({"training": URL, "server": {"reasoning_parser": "qwen3"}},
         "'reasoning_parser' only configures the embedded server; start your server with --reasoning-parser instead @ $.server"),
        ({"training": {**URL, "rollout_reasoning_end_token": "</think>"}},
         "'rollout_reasoning_end_token' needs 'rollout_max_thinking_tokens' (the budget whose forced closes it masks) @ $.training"),
        ({"training": {**URL, "rollout_max_thinking_tokens": 8, "rollout_reasoning_start_token": "<think>"}},
         "'rollout_reasoning_start_token' needs 'rollout_reasoning_end_token' @ $.training"),
        ({"training": {**URL, "rollout_max_thinking_tokens": 8, "rollout_reasoning_end_token": "<channel|>"}},
         "'rollout_reasoning_end_token' '<channel|>' is not a closing tag </name>: give 'rollout_reasoning_start_token' too @ $.training"),
        ({"training": {**URL, "effort_length_penalty_k0": 0.5}},
         "the effort length terms need 'rollout_max_thinking_tokens' and 'rollout_reasoning_end_token' (the budget and the tokens that delimit reasoning) @ $.training"),
        ({"training": {**URL, "rollout_max_thinking_tokens": 8, "rollout_reasoning_end_token": "</think>",
                       "effort_length_floor_weight": 0.1, "rollout_chat_template_kwargs": {"reasoning_effort": "max"}}},
         "'reasoning_effort' must be one of ['high', 'low', 'medium'] for the effort length terms: 'max' @ $.training.rollout_chat_template_kwargs"),
        ({"training": {**URL, "effort_length_penalty_k0": -1.0}},
         "'effort_length_penalty_k0' must be finite and >= 0: -1.0 @ $.training"),
        ({"training": {**URL, "rollout_max_thinking_tokens": 0}}, "'rollout_max_thinking_tokens' must be > 0: 0 @ $.training"),
        ({"job": "online_grpo", "grpo": {"use_vllm": True, "vllm_mode": "server"}, "rewards": [{"source": "exact_match"}],
          "environment": {"environment_type": "react_math"}, "training": {"rollout_max_thinking_tokens": 8}},
         None),
    ],
)
def test_each_misuse_is_one_line(data: dict, line: str | None) -> None:
    problems = _problems(data)
    if line is None:  # online GRPO: the generic "does nothing for job" refusal covers the new keys
        assert any(p.startswith("'rollout_max_thinking_tokens' does nothing for job 'online_grpo'") for p in problems)
    else:
        assert problems == [line]
