"""Reward terms: weight x score ** exponent, score validation, the default term list."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.rewards import DEFAULT_REWARD_TERMS, RewardTerm, ScoreOutOfRange, total_reward

SCORES = st.floats(0.0, 1.0, allow_nan=False)
WEIGHTS = st.floats(-10.0, 10.0, allow_nan=False)
EXPONENTS = st.floats(0.05, 8.0, allow_nan=False)


@given(score=SCORES, weight=WEIGHTS, exponent=EXPONENTS)
def test_a_term_prices_weight_times_score_to_the_exponent(score, weight, exponent):
    term = RewardTerm(source="env", weight=weight, exponent=exponent)
    assert term.price(score) == pytest.approx(weight * math.pow(score, exponent))


@given(scores=st.lists(SCORES, min_size=1, max_size=5), weights=st.lists(WEIGHTS, min_size=5, max_size=5))
def test_total_is_the_sum_of_priced_terms(scores, weights):
    terms = [RewardTerm(source=f"s{i}", weight=weights[i], exponent=1.0 + i) for i in range(len(scores))]
    by_source = {f"s{i}": s for i, s in enumerate(scores)}
    expected = sum(w * s ** (1.0 + i) for i, (s, w) in enumerate(zip(scores, weights)))
    assert total_reward(terms, by_source) == pytest.approx(expected)


def test_default_term_list_is_the_environment_score_unchanged():
    assert DEFAULT_REWARD_TERMS == (RewardTerm(source="environment", weight=1.0, exponent=1.0),)
    assert total_reward(DEFAULT_REWARD_TERMS, {"environment": 0.25}) == 0.25


@pytest.mark.parametrize("score", [-0.01, 1.01, float("nan"), float("inf"), "0.5", None])
def test_a_score_outside_zero_one_raises_naming_the_source(score):
    with pytest.raises(ScoreOutOfRange, match="'judge'"):
        RewardTerm(source="judge").price(score)


def test_a_missing_source_raises_naming_it():
    with pytest.raises(KeyError, match="'format'"):
        total_reward([RewardTerm(source="format")], {"environment": 1.0})


@pytest.mark.parametrize(
    "kwargs",
    [{"source": ""}, {"source": "e", "weight": float("inf")}, {"source": "e", "exponent": 0.0},
     {"source": "e", "exponent": -1.0}, {"source": "e", "exponent": float("nan")}],
)
def test_invalid_terms_are_refused(kwargs):
    with pytest.raises(ValueError):
        RewardTerm(**kwargs)
