"""`carry_reasoning: false`: each turn's prompt is re-rendered without earlier reasoning, one row per turn.

The runner is driven by the real SmolLM2 chat template and the fake engine (it records every
prompt it was sent), with real environments (qa_search, native_coding, swe) where they are cheap.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest

from adapters.chat_tokenizer import HfChatTokenizer
from adapters.environments.base import BaseEnvironment, KwargSpec
from adapters.environments.coding_episode import CodingTurns
from adapters.environments.qa_search import QaSearch
from adapters.learner.batching import plan_rows
from application.ports.environment import Message, Problem, StepResult
from application.ports.generation import SamplingParams
from application.run_episode import run_episode
from domain.episodes import Episode, RowTokens, Segment
from infrastructure.config_loader import ConfigError, parse_run_config
from infrastructure.model_assets import resolve_model_path
from tests.fakes.fake_generation import FakeGenerationServer, fake_logprob

PARAMS = SamplingParams(max_tokens=64, temperature=0.7)
CAPITAL = Problem(prompt="What is the capital of Kenya?", answer="Nairobi", metadata={"aliases": ()})
SECRET = "SECRET-PLAN-42"
SEARCH_TURN = f"<think>{SECRET} Kenya is in East Africa.</think><search>Kenya capital</search>"


@pytest.fixture(scope="module")
def tokenizer() -> HfChatTokenizer:
    return HfChatTokenizer(resolve_model_path("smollm2-135m-instruct"))


def _server(tokenizer: HfChatTokenizer, *replies: str) -> FakeGenerationServer:
    return FakeGenerationServer(tokenizer.encode, tokenizer.eos_token_ids[0], list(replies))


# ---- the runner: what the engine sees ---------------------------------------------------------


def test_dropped_reasoning_never_reaches_the_engine_and_each_turn_is_its_own_row(tokenizer):
    server = _server(tokenizer, SEARCH_TURN, "Answer: Nairobi")
    episode = run_episode(QaSearch, CAPITAL, {"carry_reasoning": False}, server, tokenizer, PARAMS, None, 3)

    assert episode.finish_reason == "stop" and episode.scores == {"environment": 1.0} and episode.num_turns == 2
    assert SECRET in tokenizer.decode(episode.turns[0].completion_token_ids)  # it was sampled...
    assert SECRET not in tokenizer.decode(server.prompts[1])  # ...and never shown again
    env = QaSearch(CAPITAL, carry_reasoning=False)
    env.reset()
    env.step(SEARCH_TURN)
    assert server.prompts[1] == tuple(tokenizer.prompt_ids(env.context()))  # the context, rendered

    assert len(episode.turns) == 2 and episode.rows() == episode.turns
    for turn, prompt in zip(episode.turns, server.prompts):
        assert turn.prompt_token_ids == prompt  # each row's prompt is exactly what the engine saw
        (segment,) = turn.segments
        assert segment.sampled and list(segment.logprobs) == [fake_logprob(t, i) for i, t in enumerate(segment.token_ids)]
    assert episode.prompt_token_ids == server.prompts[0]
    assert episode.segments == tuple(s for turn in episode.turns for s in turn.segments)
    assert episode.num_sampled_tokens == sum(len(t.completion_token_ids) for t in episode.turns)


def test_carried_reasoning_stays_token_in_token_out(tokenizer):
    server = _server(tokenizer, SEARCH_TURN, "Answer: Nairobi")
    episode = run_episode(QaSearch, CAPITAL, {}, server, tokenizer, PARAMS, None, 0)  # carry_reasoning defaults to true

    assert episode.turns == () and SECRET in tokenizer.decode(server.prompts[1])
    first, inserted, _answer = episode.segments
    assert server.prompts[1] == episode.prompt_token_ids + first.token_ids + inserted.token_ids
    (row,) = episode.rows()
    assert row == RowTokens(episode.prompt_token_ids, episode.segments)


def test_coding_environments_drop_reasoning_by_default(tokenizer):
    from adapters.environments.native_coding import NativeCoding
    from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

    try:
        Sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox: {exc}")
    [problem] = NativeCoding.problems("train", 1, seed=0)
    broken = f"<think>{SECRET}</think>```python\ndef broken(:\n```"  # a syntax error: feedback, no sandbox run
    server = _server(tokenizer, broken, "```python\ndef still_broken(:\n```")
    episode = run_episode(NativeCoding, problem, {}, server, tokenizer, PARAMS, None, 0)

    assert episode.num_turns == 2 and len(episode.turns) == 2 and episode.scores == {"environment": 0.0}
    assert SECRET not in tokenizer.decode(server.prompts[1])
    assert "def broken(:" in tokenizer.decode(server.prompts[1])  # the visible answer is still there


def test_token_budget_caps_each_turn_row_not_the_whole_episode(tokenizer):
    free = _server(tokenizer, SEARCH_TURN, "Answer: Nairobi")
    run_episode(QaSearch, CAPITAL, {"carry_reasoning": False}, free, tokenizer, PARAMS, None, 0)
    budget = len(free.prompts[1]) + 8  # room for the short answer on turn 2, not for the whole history

    server = _server(tokenizer, SEARCH_TURN, "Answer: Nairobi")
    episode = run_episode(QaSearch, CAPITAL, {"carry_reasoning": False}, server, tokenizer, PARAMS, None, 0, token_budget=budget)
    assert episode.finish_reason == "stop" and episode.scores == {"environment": 1.0}
    assert server.params[1].max_tokens == 8 and episode.total_tokens <= budget
    assert sum(len(t.prompt_token_ids) + len(t.completion_token_ids) for t in episode.turns) > budget

    carried = run_episode(QaSearch, CAPITAL, {}, _server(tokenizer, SEARCH_TURN), tokenizer, PARAMS, None, 0, token_budget=budget)
    assert carried.finish_reason == "budget"  # the carried reasoning makes the same history too long

    tight = _server(tokenizer, SEARCH_TURN)
    episode = run_episode(QaSearch, CAPITAL, {"carry_reasoning": False}, tight, tokenizer, PARAMS, None, 0, token_budget=budget - 8)
    assert episode.finish_reason == "budget" and "next turn's prompt" in episode.metadata["reason"] and len(tight.prompts) == 1


class ContextlessEnv(BaseEnvironment):
    """Declares carry_reasoning but cannot say what the model should see: refused when false."""

    name = "contextless"
    max_turns = 2
    kwargs = {"carry_reasoning": KwargSpec(True, "keep reasoning")}
    closed: ClassVar[list[bool]] = []

    @classmethod
    def problems(cls, split: str, count: int, seed: int, **kwargs: Any) -> list[Problem]:
        return [Problem(prompt="q")] * count

    def reset(self) -> list[Message]:
        return [Message(role="user", content="q")]

    def step(self, action: str) -> StepResult:
        return StepResult(done=True, score=1.0)

    def close(self) -> None:
        type(self).closed.append(True)


def test_false_without_a_context_method_is_a_clear_error_and_the_environment_is_closed(tokenizer):
    ContextlessEnv.closed.clear()
    with pytest.raises(ValueError, match="'contextless' sets carry_reasoning false but has no context"):
        run_episode(ContextlessEnv, Problem(prompt="q"), {"carry_reasoning": False}, _server(tokenizer, "a"), tokenizer, PARAMS, None, 0)
    assert ContextlessEnv.closed == [True]
    episode = run_episode(ContextlessEnv, Problem(prompt="q"), {}, _server(tokenizer, "a"), tokenizer, PARAMS, None, 0)
    assert episode.turns == () and episode.scores == {"environment": 1.0}


# ---- coding environments' context ------------------------------------------------------------


@pytest.mark.parametrize("carry", [True, False])
def test_coding_turns_record_what_the_next_turn_sees(carry):
    turns = CodingTurns(max_turns=3, carry_reasoning=carry)
    opening = [Message(role="user", content="write f")]
    assert turns.open(opening) == opening
    action = f"<think>{SECRET}</think>```python\ndef f(): pass\n```"
    assert not turns.next(action)
    result = turns.feedback("1/2 tests passed", passed=1)
    assert result.metadata == {"turns": 1, "passed": 1}
    visible = "```python\ndef f(): pass\n```"
    assert turns.context() == (opening[0], Message(role="assistant", content=action if carry else visible), *result.observation)


def test_swe_tool_results_join_the_context():
    from adapters.environments.swe import Swe
    from adapters.sandbox.sandbox import Sandbox, SandboxUnavailable

    try:
        Sandbox()
    except SandboxUnavailable as exc:
        pytest.skip(f"no sandbox: {exc}")
    [problem] = Swe.problems("train", 1, seed=0)
    env = Swe(problem)
    try:
        opening = env.reset()
        result = env.step(f"<think>{SECRET}</think><tool>read notes.txt</tool>")
        assert not result.done and result.metadata["tool"] == "read"
        assert env.context() == (*opening, Message(role="assistant", content="<tool>read notes.txt</tool>"), *result.observation)
    finally:
        env.close()


# ---- training rows -----------------------------------------------------------------------------


def _per_turn_episode(finish: str = "stop") -> Episode:
    first = RowTokens([1, 2, 3], [Segment.from_engine([10, 11], [-0.1, -0.2])])
    # the second turn holds a masked token inside it (as a forced close would be)
    second = RowTokens([1, 2, 3, 4, 5], [Segment.from_engine([20], [-0.3]), Segment.from_environment([21]), Segment.from_engine([22], [-0.4])])
    return Episode.from_turns([first, second], num_turns=2, finish_reason=finish)


def test_a_per_turn_episode_gives_one_row_per_turn_with_the_episode_advantage():
    plan = plan_rows([_per_turn_episode()], [0.75], max_row_tokens=64)
    first, second = plan.rows
    assert (first.prompt_ids, first.completion_ids, first.loss_mask, first.old_logprobs) == ((1, 2, 3), (10, 11), (1, 1), (-0.1, -0.2))
    assert (second.prompt_ids, second.completion_ids) == ((1, 2, 3, 4, 5), (20, 21, 22))
    assert second.loss_mask == (1, 0, 1) and second.old_logprobs == (-0.3, 0.0, -0.4)
    assert first.advantage == second.advantage == 0.75
    assert (plan.truncated_rows, plan.dropped_rows, plan.masked_rows) == (0, 0, 0)


def test_per_turn_rows_are_cut_dropped_and_masked_one_by_one():
    plan = plan_rows([_per_turn_episode()], [1.0], max_row_tokens=5)  # turn 2's prompt alone fills the row
    (row,) = plan.rows
    assert row.completion_ids == (10, 11) and plan.dropped_rows == 1 and plan.truncated_rows == 0
    plan = plan_rows([_per_turn_episode()], [1.0], max_row_tokens=7)
    assert [r.completion_ids for r in plan.rows] == [(10, 11), (20, 21)] and plan.truncated_rows == 1
    masked = plan_rows([_per_turn_episode("length")], [1.0], max_row_tokens=64, mask_truncated_completions=True)
    assert masked.masked_rows == 2 and all(set(r.loss_mask) == {0} for r in masked.rows)


def test_a_token_in_token_out_episode_is_still_one_row_of_the_whole_episode():
    episode = Episode(prompt_token_ids=[1, 2], segments=[Segment.from_engine([3], [-0.5]), Segment.from_environment([4]), Segment.from_engine([5], [-0.6])])
    (row,) = plan_rows([episode], [0.5], max_row_tokens=64).rows
    assert (row.prompt_ids, row.completion_ids, row.loss_mask, row.old_logprobs, row.advantage) == (
        (1, 2), (3, 4, 5), (1, 0, 1), (-0.5, 0.0, -0.6), 0.5
    )  # fmt: skip


def test_per_turn_episodes_must_be_consistent():
    first = RowTokens([1], [Segment.from_engine([2], [-0.1])])
    with pytest.raises(ValueError, match="first turn's prompt"):
        Episode(prompt_token_ids=[9], segments=first.segments, turns=[first])
    with pytest.raises(ValueError, match="turns' segments"):
        Episode(prompt_token_ids=[1], segments=[], turns=[first])
    with pytest.raises(ValueError, match="at least one turn"):
        Episode.from_turns([])


# ---- config ------------------------------------------------------------------------------------


def test_config_accepts_false_and_refuses_the_key_under_sglang():
    env = {"environment_type": "qa_search", "environment_kwargs": {"carry_reasoning": False}}
    assert parse_run_config({"environment": env}).environment.environment_kwargs == {"carry_reasoning": False}
    with pytest.raises(ConfigError) as info:
        parse_run_config({"training": {"rollout_backend": "sglang"}, "environment": env})
    assert "'carry_reasoning' is refused under 'rollout_backend: sglang' @ $.environment.environment_kwargs" in info.value.problems
