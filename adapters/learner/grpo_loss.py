"""GRPO's clipped surrogate loss in torch on padded (B, T) completion tensors.

The same math as `domain.grpo_loss` (which documents it and where we depart from TRL: the old
log-probs are the engine's behaviour log-probs); tests hold the two, and TRL's own
`_compute_loss`, equal on random batches. Metrics are detached floats of the micro-batch.
"""

from __future__ import annotations

import torch

from domain.grpo_loss import LossSettings


def _masked_mean(values: torch.Tensor, mask: torch.Tensor) -> float:
    return float((values * mask).sum() / mask.sum().clamp(min=1.0))


def _aggregate(per_token_loss: torch.Tensor, mask: torch.Tensor, settings: LossSettings,
               num_items_in_batch: float | None, accumulation_steps: int) -> torch.Tensor:
    kind = settings.loss_type
    if kind == "grpo":
        loss = ((per_token_loss * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    elif kind == "bnpo":
        loss = (per_token_loss * mask).sum() / mask.sum().clamp(min=1.0)
    elif kind == "dr_grpo":
        loss = (per_token_loss * mask).sum() / (per_token_loss.size(0) * settings.max_completion_length)
    else:  # dapo: normalised by the active tokens of the whole accumulated step
        items = mask.sum() if num_items_in_batch is None else torch.tensor(float(num_items_in_batch))
        return (per_token_loss * mask).sum() / items.clamp(min=1.0)
    return loss / accumulation_steps


def grpo_loss(
    logprobs: torch.Tensor,  # (B, T) current policy log-probs of the completion tokens (with grad)
    old_logprobs: torch.Tensor,  # (B, T) behaviour log-probs from the engine
    advantages: torch.Tensor,  # (B,) one advantage per sequence
    mask: torch.Tensor,  # (B, T) 1 on sampled tokens, 0 on environment tokens and padding
    settings: LossSettings,
    ref_logprobs: torch.Tensor | None = None,  # (B, T) frozen reference log-probs, needed when beta > 0
    num_items_in_batch: float | None = None,  # dapo only: active tokens of the whole step
    accumulation_steps: int = 1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Scalar loss of one micro-batch and its metrics (kl, ratio_mean, clip_low/high/region)."""
    mask = mask.to(logprobs.dtype)
    adv = advantages.to(logprobs.dtype).unsqueeze(1)  # (B, 1)
    ratio = torch.exp(logprobs - old_logprobs)  # (B, T)
    clipped = torch.clamp(ratio, 1 - settings.epsilon_low, 1 + settings.epsilon_high)  # (B, T)
    per_token_loss = -torch.min(ratio * adv, clipped * adv)  # (B, T)
    kl_mean = 0.0
    if settings.beta != 0.0:
        if ref_logprobs is None:
            raise ValueError(f"beta={settings.beta} > 0 needs ref_logprobs")
        delta = ref_logprobs - logprobs  # (B, T)
        per_token_kl = torch.exp(delta) - delta - 1  # (B, T)
        if settings.use_bias_correction_kl:
            per_token_kl = per_token_kl * ratio  # (B, T) TRL 1.16 default; the ratio keeps its gradient
        per_token_loss = per_token_loss + settings.beta * per_token_kl
        kl_mean = _masked_mean(per_token_kl.detach(), mask)
    loss = _aggregate(per_token_loss, mask, settings, num_items_in_batch, accumulation_steps)
    with torch.no_grad():
        low = ((ratio < 1 - settings.epsilon_low) & (adv < 0)).to(mask.dtype)  # (B, T)
        high = ((ratio > 1 + settings.epsilon_high) & (adv > 0)).to(mask.dtype)  # (B, T)
        metrics = {
            "kl": kl_mean,
            "ratio_mean": _masked_mean(ratio, mask),
            "clip_low": _masked_mean(low, mask),
            "clip_high": _masked_mean(high, mask),
            "clip_region": _masked_mean(torch.maximum(low, high), mask),
        }
    return loss, metrics
