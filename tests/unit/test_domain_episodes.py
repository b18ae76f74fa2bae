"""Episodes: completion masks and behaviour log-probs aligned token by token."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.episodes import Episode, Segment

TOKENS = st.lists(st.integers(0, 50_000), min_size=0, max_size=8)


@st.composite
def segments(draw):
    tokens = draw(TOKENS)
    if draw(st.booleans()):
        logprobs = draw(st.lists(st.floats(-20.0, 0.0), min_size=len(tokens), max_size=len(tokens)))
        return Segment.from_engine(tokens, logprobs)
    return Segment.from_environment(tokens)


@given(prompt=TOKENS, parts=st.lists(segments(), max_size=6))
def test_mask_and_logprobs_align_with_completion_tokens(prompt, parts):
    episode = Episode(prompt_token_ids=prompt, segments=parts)
    ids, mask, logprobs = episode.completion_token_ids, episode.completion_mask, episode.behaviour_logprobs
    assert len(ids) == len(mask) == len(logprobs)
    position = 0
    for segment in parts:
        for k, token in enumerate(segment.token_ids):
            assert ids[position] == token
            assert mask[position] == int(segment.sampled)
            assert logprobs[position] == (segment.logprobs[k] if segment.sampled else 0.0)
            position += 1
    assert episode.num_sampled_tokens == sum(mask)
    assert episode.total_tokens == len(prompt) + len(ids)


def test_a_two_turn_episode():
    episode = Episode(
        prompt_token_ids=[1, 2],
        segments=[Segment.from_engine([3, 4], [-0.1, -0.2]), Segment.from_environment([5, 6, 7]), Segment.from_engine([8], [-0.3])],
    )
    assert episode.completion_token_ids == [3, 4, 5, 6, 7, 8]
    assert episode.completion_mask == [1, 1, 0, 0, 0, 1]
    assert episode.behaviour_logprobs == [-0.1, -0.2, 0.0, 0.0, 0.0, -0.3]


def test_sampled_segment_needs_one_logprob_per_token():
    with pytest.raises(ValueError, match="one log-prob per token"):
        Segment.from_engine([1, 2], [-0.5])


def test_environment_segment_carries_no_logprobs():
    with pytest.raises(ValueError, match="no log-probs"):
        Segment(token_ids=[1], sampled=False, logprobs=[-0.5])
