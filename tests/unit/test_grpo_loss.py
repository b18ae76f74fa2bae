"""The torch GRPO loss equals the plain-Python reference (domain.grpo_loss) on random batches."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.learner.grpo_loss import grpo_loss as torch_grpo_loss
from domain.grpo_loss import LOSS_TYPES, LossSettings, TokenRow, grpo_loss, token_loss

logprob = st.floats(min_value=-6.0, max_value=0.0)
drift = st.floats(min_value=-0.6, max_value=0.6)


@st.composite
def batches(draw):
    """(rows, settings, num_items_in_batch, accumulation_steps) with rows padded to one width."""
    size = draw(st.integers(1, 4))
    width = draw(st.integers(1, 6))
    beta = draw(st.sampled_from([0.0, 0.04, 0.7]))
    rows = []
    for _ in range(size):
        lps = draw(st.lists(logprob, min_size=width, max_size=width))
        rows.append(TokenRow(
            logprobs=lps,
            old_logprobs=[lp + draw(drift) for lp in lps],
            mask=draw(st.lists(st.integers(0, 1), min_size=width, max_size=width)),
            advantage=draw(st.floats(min_value=-2.0, max_value=2.0)),
            ref_logprobs=[lp + draw(drift) for lp in lps] if beta else None,
        ))
    loss_settings = LossSettings(
        loss_type=draw(st.sampled_from(LOSS_TYPES)),
        epsilon_low=draw(st.floats(min_value=0.05, max_value=0.4)),
        epsilon_high=draw(st.floats(min_value=0.05, max_value=0.5)),
        beta=beta,
        max_completion_length=draw(st.integers(width, 64)),
        use_bias_correction_kl=draw(st.booleans()),
    )
    num_items = draw(st.one_of(st.none(), st.integers(0, 40)))
    return rows, loss_settings, num_items, draw(st.integers(1, 3))


def _tensors(rows: list[TokenRow], dtype: torch.dtype) -> dict[str, torch.Tensor | None]:
    return {
        "logprobs": torch.tensor([r.logprobs for r in rows], dtype=dtype),
        "old_logprobs": torch.tensor([r.old_logprobs for r in rows], dtype=dtype),
        "advantages": torch.tensor([r.advantage for r in rows], dtype=dtype),
        "mask": torch.tensor([r.mask for r in rows], dtype=dtype),
        "ref_logprobs": torch.tensor([r.ref_logprobs for r in rows], dtype=dtype) if rows[0].ref_logprobs else None,
    }


@settings(max_examples=300, deadline=None)
@given(batches())
def test_torch_loss_and_metrics_equal_the_reference(batch) -> None:
    rows, loss_settings, num_items, accumulation = batch
    expected = grpo_loss(rows, loss_settings, num_items_in_batch=num_items, accumulation_steps=accumulation)
    loss, metrics = torch_grpo_loss(**_tensors(rows, torch.float64), settings=loss_settings,
                                    num_items_in_batch=num_items, accumulation_steps=accumulation)
    assert float(loss) == pytest.approx(expected.loss, rel=1e-9, abs=1e-12)
    assert metrics["kl"] == pytest.approx(expected.kl_mean, rel=1e-9, abs=1e-12)
    assert metrics["ratio_mean"] == pytest.approx(expected.ratio_mean, rel=1e-9, abs=1e-12)
    assert metrics["clip_low"] == pytest.approx(expected.clip_low)
    assert metrics["clip_high"] == pytest.approx(expected.clip_high)
    assert metrics["clip_region"] == pytest.approx(expected.clip_region)


@settings(max_examples=50, deadline=None)
@given(batches())
def test_float32_loss_stays_close_to_the_reference(batch) -> None:
    rows, loss_settings, num_items, accumulation = batch
    expected = grpo_loss(rows, loss_settings, num_items_in_batch=num_items, accumulation_steps=accumulation)
    loss, _ = torch_grpo_loss(**_tensors(rows, torch.float32), settings=loss_settings,
                              num_items_in_batch=num_items, accumulation_steps=accumulation)
    assert float(loss) == pytest.approx(expected.loss, rel=1e-5, abs=1e-6)


def test_on_policy_token_loss_is_minus_the_advantage() -> None:
    plain = LossSettings(loss_type="grpo")
    assert token_loss(-1.3, -1.3, 0.7, plain) == pytest.approx(-0.7)
    assert token_loss(-1.3, -1.3, -0.4, plain) == pytest.approx(0.4)


def test_clipping_caps_a_positive_advantage_above_one_plus_epsilon_high() -> None:
    s = LossSettings(loss_type="grpo", epsilon_low=0.2, epsilon_high=0.28)
    # ratio e^0.5 ~ 1.65 with A > 0 is clipped to 1.28; with A < 0 the unclipped ratio is kept (min).
    assert token_loss(0.0, -0.5, 1.0, s) == pytest.approx(-1.28)
    assert token_loss(0.0, -0.5, -1.0, s) == pytest.approx(math.exp(0.5))
    # ratio e^-0.5 ~ 0.61 with A < 0 is clipped to 0.8.
    assert token_loss(-0.5, 0.0, -1.0, s) == pytest.approx(0.8)


def test_kl_term_is_k3_times_beta_weighted_by_the_ratio_when_bias_corrected() -> None:
    delta = -0.3 - (-1.0)  # ref - logp
    k3 = math.exp(delta) - delta - 1
    plain = LossSettings(loss_type="bnpo", beta=0.5, use_bias_correction_kl=False)
    corrected = LossSettings(loss_type="bnpo", beta=0.5)
    assert token_loss(-1.0, -1.2, 0.0, plain, ref_logprob=-0.3) == pytest.approx(0.5 * k3)
    assert token_loss(-1.0, -1.2, 0.0, corrected, ref_logprob=-0.3) == pytest.approx(0.5 * k3 * math.exp(0.2))


def test_aggregations_differ_as_trl_defines_them() -> None:
    rows = [
        TokenRow(logprobs=[0.0, 0.0, 0.0], old_logprobs=[0.0] * 3, mask=[1, 1, 1], advantage=1.0),
        TokenRow(logprobs=[0.0, 0.0, 0.0], old_logprobs=[0.0] * 3, mask=[1, 0, 0], advantage=-2.0),
    ]
    # per-token losses: row 0 -> -1 on three tokens, row 1 -> +2 on one token.
    assert grpo_loss(rows, LossSettings(loss_type="grpo")).loss == pytest.approx((-1 + 2) / 2)
    assert grpo_loss(rows, LossSettings(loss_type="bnpo")).loss == pytest.approx((-3 + 2) / 4)
    assert grpo_loss(rows, LossSettings(loss_type="dr_grpo", max_completion_length=10)).loss == pytest.approx(-1 / 20)
    assert grpo_loss(rows, LossSettings(loss_type="dapo"), num_items_in_batch=8).loss == pytest.approx(-1 / 8)
    assert grpo_loss(rows, LossSettings(loss_type="grpo"), accumulation_steps=2).loss == pytest.approx(0.25)


def test_bad_inputs_are_refused_with_names() -> None:
    with pytest.raises(ValueError, match="loss_type 'ppo'"):
        LossSettings(loss_type="ppo")
    with pytest.raises(ValueError, match="equal lengths"):
        TokenRow(logprobs=[0.0], old_logprobs=[0.0, 1.0], mask=[1], advantage=0.0)
    with pytest.raises(ValueError, match="reference log-probs"):
        grpo_loss([TokenRow(logprobs=[0.0], old_logprobs=[0.0], mask=[1], advantage=1.0)], LossSettings(beta=0.1))
    with pytest.raises(ValueError, match="ref_logprobs"):
        torch_grpo_loss(torch.zeros(1, 1), torch.zeros(1, 1), torch.zeros(1), torch.ones(1, 1), LossSettings(beta=0.1))
