"""run_episode: token-in/token-out episodes with the real SmolLM2 template and a fake engine."""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from adapters.chat_tokenizer import HfChatTokenizer
from adapters.environments.base import BaseEnvironment
from adapters.environments.react_math import ReactMath
from application.ports.environment import Message, Problem, StepResult
from application.ports.generation import Completion, SamplingParams
from application.run_episode import run_episode
from infrastructure.model_assets import resolve_model_path
from tests.fakes.fake_generation import FakeGenerationServer, fake_logprob

PROBLEM = Problem(prompt="State the final answer to the following arithmetic problem: 3 + 4 - 2 =", answer="5")
PARAMS = SamplingParams(max_tokens=64, temperature=0.7)


@pytest.fixture(scope="module")
def tokenizer() -> HfChatTokenizer:
    return HfChatTokenizer(resolve_model_path("smollm2-135m-instruct"))


def _server(tokenizer: HfChatTokenizer, *replies: str) -> FakeGenerationServer:
    return FakeGenerationServer(tokenizer.encode, tokenizer.eos_token_ids[0], list(replies))


class ScriptedEnv(BaseEnvironment):
    """Test environment: returns the scripted step results in order and records its life."""

    name = "scripted"
    max_turns = 4
    script: ClassVar[list[Any]] = []
    closed: ClassVar[list[bool]] = []

    def __init__(self, problem: Problem, **kwargs: Any) -> None:
        super().__init__(problem, **kwargs)
        self._results = list(type(self).script)

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        return [Problem(prompt=f"p{seed}-{i}") for i in range(count)]

    def reset(self) -> list[Message]:
        return [Message(role="user", content=self.problem.prompt)]

    def step(self, action: str) -> StepResult:
        result = self._results.pop(0)
        if isinstance(result, Exception):
            raise result
        return result

    def close(self) -> None:
        type(self).closed.append(True)


@pytest.fixture
def scripted():
    ScriptedEnv.closed.clear()
    yield ScriptedEnv
    ScriptedEnv.script = []


def _tool(text: str) -> StepResult:
    return StepResult(observation=(Message(role="tool", content=text),))


def test_multi_turn_calculator_episode_is_exact_token_concatenation(tokenizer):
    server = _server(tokenizer, "I will use <calc>3 + 4 - 2</calc>", "Answer: 5")
    episode = run_episode(ReactMath, PROBLEM, {}, server, tokenizer, PARAMS, max_turns=None, weight_version=7)

    assert episode.scores == {"environment": 1.0} and episode.finish_reason == "stop"
    assert episode.num_turns == 2 and episode.weight_version == 7
    sampled, inserted, answer = episode.segments
    assert sampled.sampled and not inserted.sampled and answer.sampled
    assert episode.completion_mask == [1] * len(sampled.token_ids) + [0] * len(inserted.token_ids) + [1] * len(answer.token_ids)
    for segment in (sampled, answer):  # each log-prob still belongs to its own token
        assert list(segment.logprobs) == [fake_logprob(t, i) for i, t in enumerate(segment.token_ids)]
    assert episode.behaviour_logprobs[len(sampled.token_ids) : -len(answer.token_ids)] == [0.0] * len(inserted.token_ids)

    conversation = [
        *ReactMath(PROBLEM).reset(),
        Message(role="assistant", content="I will use <calc>3 + 4 - 2</calc>"),
        Message(role="tool", content="3 + 4 - 2 = 5"),
        Message(role="assistant", content="Answer: 5"),
    ]
    whole = list(episode.prompt_token_ids) + episode.completion_token_ids
    assert whole + tokenizer.encode("\n") == tokenizer.encode(tokenizer.render(conversation, add_generation_prompt=False))
    assert server.prompts[1] == tuple(tokenizer.prompt_ids(conversation[:-1]))  # what the engine saw on turn 2


def test_step_exception_scores_zero_with_the_reason_and_closes(tokenizer, scripted):
    scripted.script = [_tool("ok"), RuntimeError("sandbox died")]
    episode = run_episode(scripted, Problem(prompt="q"), {}, _server(tokenizer, "a", "b"), tokenizer, PARAMS, None, 0)
    assert episode.scores == {"environment": 0.0} and episode.finish_reason == "error"
    assert "RuntimeError: sandbox died" in episode.metadata["error"]
    assert episode.num_turns == 2 and scripted.closed == [True]


@pytest.mark.parametrize(
    ("result", "message"),
    [
        (StepResult(done=True, score=1.5), "[0, 1]"),
        (StepResult(done=True), "without a score"),
        (StepResult(done=False), "no observation"),
        ("not a result", "not a StepResult"),
    ],
)
def test_invalid_step_results_score_zero(tokenizer, scripted, result, message):
    scripted.script = [result]
    episode = run_episode(scripted, Problem(prompt="q"), {}, _server(tokenizer, "a"), tokenizer, PARAMS, None, 0)
    assert episode.scores == {"environment": 0.0} and episode.finish_reason == "error"
    assert message in episode.metadata["error"]


def test_generation_errors_propagate_but_the_environment_is_closed(tokenizer, scripted):
    def broken(_prompt):
        raise TimeoutError("fake://generation did not answer within 5 s")

    server = FakeGenerationServer(tokenizer.encode, tokenizer.eos_token_ids[0], broken)
    with pytest.raises(TimeoutError):
        run_episode(scripted, Problem(prompt="q"), {}, server, tokenizer, PARAMS, None, 0)
    assert scripted.closed == [True]


def test_runner_max_turns_overrides_the_environment_and_the_last_turn_is_scored(tokenizer):
    server = _server(tokenizer, "<calc>3 + 4 - 2</calc> is 5")
    episode = run_episode(ReactMath, PROBLEM, {}, server, tokenizer, PARAMS, max_turns=1, weight_version=0)
    assert episode.num_turns == 1 and episode.scores == {"environment": 1.0} and episode.finish_reason == "stop"


def test_environment_that_never_finishes_stops_at_max_turns(tokenizer, scripted):
    scripted.script = [_tool("more")] * 3
    episode = run_episode(scripted, Problem(prompt="q"), {}, _server(tokenizer, "a", "b", "c"), tokenizer, PARAMS, 3, 0)
    assert episode.finish_reason == "max_turns" and episode.num_turns == 3 and episode.scores["environment"] == 0.0


def test_truncated_turn_is_length_and_still_scored_when_final(tokenizer):
    server = _server(tokenizer, "The answer is 5 " + "and more words " * 40)
    params = SamplingParams(max_tokens=10)
    episode = run_episode(ReactMath, PROBLEM, {}, server, tokenizer, params, None, 0)
    assert episode.finish_reason == "length" and episode.scores == {"environment": 1.0}
    assert len(episode.completion_token_ids) == 10 and episode.metadata["turn_finish_reasons"] == ("length",)


def test_truncated_tool_turn_ends_the_episode_with_zero(tokenizer):
    server = _server(tokenizer, "<calc>1+1</calc>" + " filler" * 40)
    episode = run_episode(ReactMath, PROBLEM, {}, server, tokenizer, SamplingParams(max_tokens=12), None, 0)
    assert episode.finish_reason == "length" and episode.scores["environment"] == 0.0 and episode.num_turns == 1


def test_token_budget_caps_the_whole_episode(tokenizer):
    server = _server(tokenizer, "<calc>1+1</calc>", "<calc>2+2</calc>", "Answer: 5")
    prompt_len = len(tokenizer.prompt_ids(ReactMath(PROBLEM).reset()))
    budget = prompt_len + 40
    episode = run_episode(ReactMath, PROBLEM, {}, server, tokenizer, PARAMS, None, 0, token_budget=budget)
    assert episode.total_tokens <= budget
    assert episode.finish_reason in ("budget", "length") and episode.scores["environment"] == 0.0
    assert server.params[-1].max_tokens <= budget - prompt_len


def test_turn_without_end_of_turn_token_is_closed_by_a_masked_token(tokenizer, scripted):
    end = tokenizer.eos_token_ids[0]
    scripted.script = [_tool("r"), StepResult(done=True, score=1.0)]

    server = _server(tokenizer, "abc<", "fin")
    episode = run_episode(scripted, Problem(prompt="q"), {}, _FirstTurnRewritten(server, _without_end_token), tokenizer, PARAMS, None, 0)
    inserted = episode.segments[1]
    assert not inserted.sampled and inserted.token_ids[0] == end
    assert episode.segments[0].token_ids[-1] != end
    history = [Message(role="user", content="q"), Message(role="assistant", content="abc<")]
    whole = list(episode.prompt_token_ids) + [t for s in episode.segments[:2] for t in s.token_ids]
    assert whole == tokenizer.prompt_ids([*history, Message(role="tool", content="r")])


class _FirstTurnRewritten:
    """Wraps a fake engine and rewrites the first completion it returns (stop strings, aborts)."""

    def __init__(self, inner: FakeGenerationServer, rewrite) -> None:
        self._inner, self._rewrite, self._calls = inner, rewrite, 0
        self.url = inner.url

    def generate(self, prompt_token_ids, params, n=1):
        self._calls += 1
        out = self._inner.generate(prompt_token_ids, params, n)
        return out if self._calls > 1 else [self._rewrite(c) for c in out]

    def prompt_logprobs(self, token_ids):
        return self._inner.prompt_logprobs(token_ids)


def _without_end_token(c: Completion) -> Completion:
    return Completion(token_ids=c.token_ids[:-1], logprobs=c.logprobs[:-1], finish_reason="stop")


def _aborted(c: Completion) -> Completion:
    return Completion(token_ids=c.token_ids[:2], logprobs=c.logprobs[:2], finish_reason="abort")


def test_close_errors_are_recorded_not_raised(tokenizer, scripted):
    class BadClose(ScriptedEnv):
        def close(self) -> None:
            raise OSError("temp dir busy")

    BadClose.script = [StepResult(done=True, score=0.5)]
    episode = run_episode(BadClose, Problem(prompt="q"), {}, _server(tokenizer, "a"), tokenizer, PARAMS, None, 0)
    assert episode.scores == {"environment": 0.5} and "temp dir busy" in episode.metadata["close_error"]


def test_environment_kwargs_reach_the_environment(tokenizer):
    server = _server(tokenizer, "Answer: 5")
    run_episode(ReactMath, PROBLEM, {"system_prompt": "Be terse."}, server, tokenizer, PARAMS, None, 0)
    assert "Be terse." in tokenizer.decode(server.prompts[0])
    with pytest.raises(ValueError, match="max_turns"):
        run_episode(ReactMath, PROBLEM, {"max_turns": 2}, _server(tokenizer, "x"), tokenizer, PARAMS, None, 0)
    with pytest.raises(ValueError, match="colour"):
        run_episode(ReactMath, PROBLEM, {"colour": 1}, _server(tokenizer, "x"), tokenizer, PARAMS, None, 0)


def test_aborted_turn_ends_the_episode_without_stepping(tokenizer, scripted):
    scripted.script = [RuntimeError("step must not be called")]

    server = _FirstTurnRewritten(_server(tokenizer, "partial answer"), _aborted)
    episode = run_episode(scripted, Problem(prompt="q"), {}, server, tokenizer, PARAMS, None, 0)
    assert episode.finish_reason == "abort" and episode.scores == {"environment": 0.0}
    assert "error" not in episode.metadata and scripted.closed == [True]
