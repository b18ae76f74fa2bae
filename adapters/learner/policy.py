"""`TorchPolicy`: the env-GRPO learner, one optimizer step per batch of episodes.

It loads a Hugging Face causal LM from a local folder (`model.train()`), keeps AdamW with
transformers' default linear schedule (`adapters.learner.optim`), and, only when beta > 0, a
frozen reference copy for the k3 KL term. `train_step` cuts episodes to `max_train_row_tokens`
(counting truncated and dropped rows), splits them into micro-batches of
`per_device_train_batch_size`, runs one forward/backward per micro-batch and then one clipped
optimizer step. The micro-batches play TRL's gradient-accumulation steps: grpo/bnpo/dr_grpo
divide each micro-batch's loss by their number; dapo divides by the sampled-token count of the
whole step. Log-probs are taken at the rollout temperature (logits / temperature, as TRL does)
and compared with the engine's behaviour log-probs (see `domain.grpo_loss` for that departure).

A `StepShare` spreads the micro-batches over training ranks (default `WholeStep`: this rank runs
them all; `adapters.learner.sharded.Fsdp2Share`: FSDP2 data parallelism). Every rank plans the
whole step, so the normalisers (dapo's token count, the number of micro-batches) are global. A
micro-batch with no sampled token (and a rank's padding step) runs forward and backward with a
zero loss, so every parameter's collectives still run and the update is unchanged.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from transformers import AutoModelForCausalLM

from adapters.learner.batching import MicroBatch, RowPlan, collate, plan_rows, split
from adapters.learner.grpo_loss import grpo_loss
from adapters.learner.logprobs import TokenScorer, check_plain_lm_head, completion_logprobs
from adapters.learner.optim import build_optimizer, build_schedule
from domain.config.grpo import GRPOConfig
from domain.episodes import Episode
from domain.grpo_loss import LossSettings

log = logging.getLogger(__name__)
_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
_WEIGHTED = ("kl", "ratio_mean", "clip_low", "clip_high", "clip_region")


class StepShare(Protocol):
    """How one step's micro-batches are spread over the training ranks."""

    def wrap(self, scorer: TokenScorer) -> nn.Module:
        """The module the policy is scored through (FSDP2 shards the model in place here)."""
        ...

    def my_micro_batches(self, count: int) -> list[int | None]:
        """This rank's indices among the step's `count` micro-batches; None = a padding step."""
        ...

    def total(self, values: Sequence[float]) -> list[float]:
        """Each metric total summed over the ranks."""
        ...


class WholeStep:
    """`StepShare` of a single rank: every micro-batch, nothing to sum."""

    def wrap(self, scorer: TokenScorer) -> nn.Module:
        return scorer

    def my_micro_batches(self, count: int) -> list[int | None]:
        return list(range(count))

    def total(self, values: Sequence[float]) -> list[float]:
        return list(values)


def _scalar(value: torch.Tensor) -> float:
    """A float of a tensor or DTensor (FSDP2's grad norm is a DTensor: `full_tensor` is a collective)."""
    return float(value.full_tensor() if isinstance(value, DTensor) else value)


def _load(path: Path, dtype: str) -> nn.Module:
    if dtype not in _DTYPES:
        raise ValueError(f"model dtype {dtype!r} is not one of {sorted(_DTYPES)}")
    model = AutoModelForCausalLM.from_pretrained(path, dtype=_DTYPES[dtype])
    check_plain_lm_head(model)
    return model


class TorchPolicy:
    """The trainable policy (and optional frozen reference) on one device."""

    def __init__(self, model_path: str | Path, grpo: GRPOConfig, *, dtype: str = "float32",
                 max_train_row_tokens: int = 2048, temperature: float | None = None,
                 num_threads: int | None = None, autocast_bf16: bool = False,
                 use_bias_correction_kl: bool = True, device: str = "cpu",
                 share: StepShare | None = None) -> None:
        if num_threads is not None:
            torch.set_num_threads(num_threads)
        torch.manual_seed(grpo.seed)
        self._grpo = grpo
        self._device = torch.device(device)
        self._temperature = grpo.temperature if temperature is None else temperature
        self._max_row_tokens = max_train_row_tokens
        self._autocast = autocast_bf16
        self._settings = LossSettings(loss_type=grpo.loss_type, epsilon_low=grpo.epsilon,
                                      epsilon_high=grpo.epsilon_upper, beta=grpo.beta,
                                      max_completion_length=grpo.max_completion_length,
                                      use_bias_correction_kl=use_bias_correction_kl)
        self._share = share or WholeStep()
        self._model = _load(Path(model_path), dtype).to(self._device).train()
        self._scorer = self._share.wrap(TokenScorer(self._model))  # before the optimizer sees the parameters
        self._ref: nn.Module | None = None
        if grpo.beta != 0.0:
            self._ref = _load(Path(model_path), dtype).to(self._device).eval().requires_grad_(False)
        self._optimizer = build_optimizer(self._model, grpo)
        self._schedule = build_schedule(self._optimizer, grpo.max_steps)
        self._steps = 0

    @property
    def model(self) -> nn.Module:
        """The trained nn.Module (for the weight gatherer)."""
        return self._model

    @property
    def reference_model(self) -> nn.Module | None:
        """The frozen reference model, present only when beta > 0."""
        return self._ref

    @property
    def steps(self) -> int:
        """Optimizer steps taken so far."""
        return self._steps

    def _precision(self) -> contextlib.AbstractContextManager:
        if self._autocast:
            return torch.autocast(self._device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def train_step(self, episodes: Sequence[Episode], advantages: Sequence[float]) -> dict[str, float]:
        """One optimizer step on these episodes; returns the step's metrics."""
        started = time.perf_counter()
        plan = plan_rows(episodes, advantages, self._max_row_tokens, self._grpo.mask_truncated_completions)
        self._warn_cut_rows(plan)
        num_items = sum(r.num_loss_tokens for r in plan.rows)
        base = {"rows": float(len(plan.rows)), "truncated_rows": float(plan.truncated_rows),
                "dropped_rows": float(plan.dropped_rows), "masked_truncated_rows": float(plan.masked_rows),
                "tokens": float(num_items),
                "lr": self._schedule.get_last_lr()[0]}
        if num_items == 0:
            log.warning("train_step: no sampled token left in %d episodes; no optimizer step", len(episodes))
            return {**base, "optimizer_step": 0.0, "step_seconds": time.perf_counter() - started}
        self._optimizer.zero_grad(set_to_none=True)
        chunks = split(plan.rows, self._grpo.per_device_train_batch_size)
        totals = dict.fromkeys((*_WEIGHTED, "loss", "abs_diff"), 0.0)
        for index in self._share.my_micro_batches(len(chunks)):
            batch = collate(chunks[index] if index is not None else chunks[0][:1]).to(self._device)
            if index is None or not bool(batch.loss_mask.any()):
                self._idle_micro_step(batch)
            else:
                self._micro_step(batch, num_items, len(chunks), totals)
        totals = dict(zip(totals, self._share.total(list(totals.values()))))
        grad_norm = _scalar(torch.nn.utils.clip_grad_norm_(self._model.parameters(), self._grpo.max_grad_norm))
        self._optimizer.step()
        self._schedule.step()
        self._steps += 1
        metrics = {key: totals[key] / num_items for key in _WEIGHTED}
        return {**base, **metrics, "loss": totals["loss"], "grad_norm": float(grad_norm),
                "logprob_abs_diff": totals["abs_diff"] / num_items, "optimizer_step": 1.0,
                "step_seconds": time.perf_counter() - started}

    def _micro_step(self, batch: MicroBatch, num_items: int, accumulation: int, totals: dict[str, float]) -> None:
        ref = None
        with self._precision():
            logps = completion_logprobs(self._scorer, batch, self._temperature)  # (B, T)
            if self._ref is not None:
                with torch.no_grad():
                    ref = completion_logprobs(self._ref, batch, self._temperature)  # (B, T)
        loss, metrics = grpo_loss(logps, batch.old_logprobs, batch.advantages, batch.loss_mask, self._settings,
                                  ref_logprobs=ref, num_items_in_batch=num_items, accumulation_steps=accumulation)
        loss.backward()
        tokens = float(batch.loss_mask.sum())
        for key in _WEIGHTED:
            totals[key] += metrics[key] * tokens
        totals["loss"] += float(loss.detach())
        totals["abs_diff"] += float(((logps.detach() - batch.old_logprobs).abs() * batch.loss_mask).sum())

    def _idle_micro_step(self, batch: MicroBatch) -> None:
        """Forward and backward with a zero loss through every parameter (no sampled token to learn from)."""
        with self._precision():
            logps = completion_logprobs(self._scorer, batch, self._temperature, which=batch.token_mask)  # (B, T)
        (logps.sum() * 0.0).backward()

    def _warn_cut_rows(self, plan: RowPlan) -> None:
        if plan.truncated_rows or plan.dropped_rows:
            log.warning("train_step: %d rows truncated (completion cut from the right) and %d dropped "
                        "(prompt alone fills max_train_row_tokens=%d)",
                        plan.truncated_rows, plan.dropped_rows, self._max_row_tokens)

    @torch.no_grad()
    def sequence_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """Log-prob of token_ids[i] given token_ids[:i], for i >= 1, at temperature 1 (len - 1 floats).

        Aligns with `GenerationServer.prompt_logprobs(token_ids)[1:]`, for the sync parity check.
        """
        if len(token_ids) < 2:
            raise ValueError(f"sequence_logprobs needs at least 2 tokens, got {len(token_ids)}")
        ids = torch.tensor([list(token_ids)], dtype=torch.long, device=self._device)  # (1, n)
        cols = torch.arange(len(token_ids) - 1, device=self._device)  # (n-1,)
        positions = torch.stack([torch.zeros_like(cols), cols], dim=1)  # (n-1, 2)
        was_training = self._model.training
        self._model.eval()
        try:
            values = self._scorer(ids, positions, ids[0, 1:], 1.0)
        finally:
            self._model.train(was_training)
        return values.tolist()
