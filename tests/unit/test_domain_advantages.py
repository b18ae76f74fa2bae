"""Group advantages against torch, computed exactly as TRL's GRPOTrainer does it."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from domain.advantages import STD_EPSILON, group_advantages


def trl_advantages(rewards: list[float], group: int, scale: str) -> list[float]:
    r = torch.tensor(rewards, dtype=torch.float64)
    mean = r.view(-1, group).mean(dim=1).repeat_interleave(group, dim=0)
    advantages = r - mean
    if scale == "group":
        std = r.view(-1, group).std(dim=1).repeat_interleave(group, dim=0)
    elif scale == "batch":
        std = r.std().expand_as(r)
    else:
        return advantages.tolist()
    return (advantages / (std + STD_EPSILON)).tolist()


@st.composite
def batches(draw):
    group = draw(st.integers(2, 6))
    groups = draw(st.integers(1, 5))
    values = st.floats(-5.0, 5.0, allow_nan=False, allow_infinity=False)
    return draw(st.lists(values, min_size=group * groups, max_size=group * groups)), group


@pytest.mark.parametrize("scale", ["group", "batch", "none"])
@given(batch=batches())
def test_matches_trl_torch_computation(scale, batch):
    rewards, group = batch
    ours = group_advantages(rewards, group, scale)
    assert ours == pytest.approx(trl_advantages(rewards, group, scale), rel=1e-9, abs=1e-9)


def test_constant_group_gives_zero_advantage_not_nan():
    assert group_advantages([1.0, 1.0, 0.0, 1.0], 2, "group") == pytest.approx([0.0, 0.0, -0.5 / (0.5**0.5 + 1e-4), 0.5 / (0.5**0.5 + 1e-4)])


@pytest.mark.parametrize(
    ("rewards", "group", "scale", "match"),
    [([1.0], 1, "group", "group_size"), ([1.0, 2.0, 3.0], 2, "group", "split"), ([1.0, 2.0], 2, "batchy", "scale_rewards")],
)
def test_bad_inputs_raise(rewards, group, scale, match):
    with pytest.raises(ValueError, match=match):
        group_advantages(rewards, group, scale)
