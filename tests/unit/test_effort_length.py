"""The effort length term: level, budget, the formula (its docstring example and its shape), and the
loop adding it to the trained reward."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.run_env_grpo import EnvGRPOLoop, LoopSettings
from domain.config import RunConfig
from domain.effort_length import EFFORT_FRACTIONS, EffortLength, effort_level, length_adjustment
from domain.episodes import Episode, Segment
from domain.rewards import DEFAULT_REWARD_TERMS
from domain.thinking_budget import ReasoningMarkers
from infrastructure.reasoning_tokens import effort_length
from tests.fakes.fake_training import FakeLearner, FakePublisher, FakeRolloutPool, RecordingSink

MARKERS = ReasoningMarkers(start_id=1, end_id=2)


def test_the_level_comes_from_the_chat_template_kwargs_and_defaults_to_high() -> None:
    assert effort_level({}) == "high" and effort_level({"reasoning_effort": "low"}) == "low"
    with pytest.raises(ValueError, match=r"'reasoning_effort' must be one of \['high', 'low', 'medium'\].*'max'"):
        effort_level({"reasoning_effort": "max"})
    assert dict(EFFORT_FRACTIONS) == {"low": 0.25, "medium": 0.5, "high": 1.0}


def test_the_docstring_example() -> None:
    term = EffortLength(max_thinking_tokens=1000, effort="medium", penalty_k0=0.5, floor_weight=0.1, markers=MARKERS)
    assert term.budget(turns=1) == 500 and term.budget(turns=3) == 1500
    assert length_adjustment(700, 500, 0.5, 0.1) == pytest.approx(-0.2)
    assert length_adjustment(300, 500, 0.5, 0.1) == pytest.approx(-0.04)
    assert length_adjustment(500, 500, 0.5, 0.1) == 0.0


lengths = st.integers(min_value=0, max_value=10_000)
weights = st.floats(min_value=0.0, max_value=10.0)
budgets = st.floats(min_value=1.0, max_value=5_000.0)


@given(length=lengths, budget=budgets, k0=weights, floor=weights)
def test_the_term_never_rewards_and_is_off_at_zero_weights(length, budget, k0, floor) -> None:
    assert length_adjustment(length, budget, k0, floor) <= 0.0
    assert length_adjustment(length, budget, 0.0, 0.0) == 0.0
    assert length_adjustment(length, budget, k0, floor) >= -floor - k0 * max(0.0, length - budget) / budget - 1e-9


@given(a=lengths, b=lengths, budget=budgets, k0=weights, floor=weights)
def test_it_peaks_at_the_budget(a, b, budget, k0, floor) -> None:
    """Closer to the budget, on the same side, is never priced worse."""
    near, far = sorted((a, b), key=lambda n: abs(n - budget))
    if (near - budget) * (far - budget) >= 0:
        assert length_adjustment(near, budget, k0, floor) >= length_adjustment(far, budget, k0, floor) - 1e-12


@given(excess=st.integers(min_value=1, max_value=500), k0=st.floats(min_value=0.01, max_value=5.0))
def test_lower_levels_pay_more_for_the_same_extra_tokens(excess, k0) -> None:
    prices = [length_adjustment(EFFORT_FRACTIONS[lvl] * 1000 + excess, EFFORT_FRACTIONS[lvl] * 1000, k0, 0.0)
              for lvl in ("low", "medium", "high")]
    assert prices[0] < prices[1] < prices[2] < 0


def test_an_episode_is_priced_by_its_sampled_reasoning() -> None:
    # prompt opens reasoning; 3 sampled reasoning tokens, a forced close (masked), then the answer
    episode = Episode(
        prompt_token_ids=[7, 1],
        segments=[Segment.from_engine([5, 5, 5], [-1.0] * 3), Segment.from_environment([2]), Segment.from_engine([9, 9], [-1.0] * 2)],
        num_turns=1,
    )
    term = EffortLength(max_thinking_tokens=8, effort="low", penalty_k0=1.0, floor_weight=0.5, markers=MARKERS)
    assert term.reasoning_tokens(episode) == 3
    assert term.adjustment(episode) == pytest.approx(-1.0 * (3 - 2) / 2)  # low: budget 8/4 = 2
    high = EffortLength(max_thinking_tokens=8, effort="high", penalty_k0=1.0, floor_weight=0.5, markers=MARKERS)
    assert high.adjustment(episode) == pytest.approx(-0.5 * (8 - 3) / 8)


def test_the_term_is_built_only_when_a_weight_is_on() -> None:
    training = RunConfig().training
    assert effort_length(training, MARKERS) is None
    on = type(training)(rollout_max_thinking_tokens=16, rollout_reasoning_end_token="</think>",
                        effort_length_floor_weight=0.2, rollout_chat_template_kwargs={"reasoning_effort": "medium"})
    assert effort_length(on, MARKERS) == EffortLength(max_thinking_tokens=16, effort="medium", penalty_k0=0.0,
                                                      floor_weight=0.2, markers=MARKERS)


def _problems():
    for i in itertools.count():
        yield Problem(prompt=f"p{i}")


def test_the_loop_adds_the_term_to_the_trained_reward() -> None:
    # the fake pool's episodes: prompt [1, 2, 3], one sampled segment [4, 5]. With start=3 the
    # prompt opens reasoning, so 2 sampled reasoning tokens per episode against a budget of 4.
    term = EffortLength(max_thinking_tokens=4, effort="high", penalty_k0=0.0, floor_weight=0.2,
                        markers=ReasoningMarkers(start_id=3, end_id=9))
    sink = RecordingSink()
    settings = LoopSettings(
        max_steps=1, prompts_per_step=2, num_generations=2, scale_rewards="none", sync_weights_every_n_steps=1,
        enable_prefetch=False, sampling=SamplingParams(max_tokens=8), max_turns=None, reward_terms=DEFAULT_REWARD_TERMS,
        rollout_timeout=5.0, evaluate_before=False, effort_length=term,
    )
    learner = FakeLearner()
    loop = EnvGRPOLoop(settings=settings, problems=_problems(), pool=FakeRolloutPool(lambda p, g, v: float(g)),
                       learner=learner, publisher=FakePublisher(), evaluator=None, metrics=sink, progress=sink)
    loop.run()
    [(_, row)] = sink.rows
    assert row["reasoning_tokens_mean"] == 2 and row["effort_adjustment_mean"] == pytest.approx(-0.1)
    assert row["reward_mean"] == pytest.approx(0.5 - 0.1)  # scores 0 and 1, each less 0.2 * 2/4
