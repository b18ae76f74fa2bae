"""Episodes -> training rows -> right-padded (B, T) micro-batch tensors.

A row is prompt + completion token ids exactly as the engine saw and produced them (nothing is
re-tokenised), with the completion's loss mask (1 on engine-sampled tokens, 0 on tokens the
environment inserted) and behaviour log-probs. A token-in/token-out episode is one row; a
per-turn episode (`carry_reasoning: false`, `Episode.rows()`) is one row per turn, each with
that turn's prompt and the episode's advantage. Per-row losses (grpo's per-sequence mean) then
weigh such an episode once per turn. Rows longer than `max_row_tokens` keep their
prompt and lose completion tokens from the right; a row whose prompt alone leaves no room for
one completion token is dropped. Both are counted, never silent. With GRPOConfig's
`mask_truncated_completions`, an episode the engine cut off (`finish_reason == "length"`) keeps its
rows but contributes no loss token, as TRL zeroes the mask of completions that did not end in EOS.

Layout departs from TRL on purpose: TRL left-pads prompts and right-pads completions, which
shifts the position ids of short prompts; we right-pad the whole row so every row starts at
position 0, as it did in the engine. Causal attention never lets a real token see the padding
that follows it, so no attention mask is needed (and SDPA keeps its causal fast path).
"""

from __future__ import annotations

from collections.abc import Sequence

import attrs
import torch

from domain.episodes import Episode, RowTokens


@attrs.frozen
class TrainRow:
    """One episode (or one turn of a per-turn episode) cut to the row budget."""

    prompt_ids: tuple[int, ...]
    completion_ids: tuple[int, ...]
    loss_mask: tuple[int, ...]  # per completion token
    old_logprobs: tuple[float, ...]  # per completion token; 0.0 where loss_mask is 0
    advantage: float

    @property
    def num_loss_tokens(self) -> int:
        return sum(self.loss_mask)


@attrs.frozen
class RowPlan:
    rows: tuple[TrainRow, ...]
    truncated_rows: int
    dropped_rows: int
    masked_rows: int = 0  # rows of engine-truncated episodes masked out by mask_truncated_completions


@attrs.frozen
class MicroBatch:
    input_ids: torch.Tensor  # (B, L) prompt + completion, right-padded with 0
    completion_ids: torch.Tensor  # (B, T) completion tokens, right-padded with 0
    completion_start: torch.Tensor  # (B,) index in input_ids of each row's first completion token
    loss_mask: torch.Tensor  # (B, T) float, 1 on sampled tokens of real rows
    token_mask: torch.Tensor  # (B, T) bool, True on every real completion token (sampled or inserted)
    old_logprobs: torch.Tensor  # (B, T) float32 behaviour log-probs
    advantages: torch.Tensor  # (B,) float32

    def to(self, device: torch.device) -> "MicroBatch":
        return MicroBatch(**{f.name: getattr(self, f.name).to(device) for f in attrs.fields(MicroBatch)})


def _row(tokens: RowTokens, advantage: float, max_row_tokens: int, masked: bool) -> tuple[TrainRow | None, bool]:
    prompt = tokens.prompt_token_ids
    room = max_row_tokens - len(prompt)
    if room < 1:
        return None, False
    completion = tokens.completion_token_ids
    truncated = len(completion) > room
    keep = min(len(completion), room)
    row = TrainRow(
        prompt_ids=tuple(prompt),
        completion_ids=tuple(completion[:keep]),
        loss_mask=(0,) * keep if masked else tuple(tokens.completion_mask[:keep]),
        old_logprobs=tuple(tokens.behaviour_logprobs[:keep]),
        advantage=float(advantage),
    )
    return row, truncated


def plan_rows(episodes: Sequence[Episode], advantages: Sequence[float], max_row_tokens: int,
              mask_truncated_completions: bool = False) -> RowPlan:
    """Cut every episode's rows to `max_row_tokens`, counting truncated, dropped and masked rows."""
    if len(episodes) != len(advantages):
        raise ValueError(f"train_step got {len(episodes)} episodes but {len(advantages)} advantages")
    if max_row_tokens < 2:
        raise ValueError(f"max_train_row_tokens must be >= 2, got {max_row_tokens}")
    rows: list[TrainRow] = []
    truncated = dropped = masked_rows = 0
    for episode, advantage in zip(episodes, advantages):
        if not episode.completion_token_ids:
            raise ValueError("an episode with no completion tokens cannot be trained on")
        masked = mask_truncated_completions and episode.finish_reason == "length"
        for tokens in episode.rows():
            if not tokens.completion_token_ids:  # a turn the engine ended at once has nothing to train on
                continue
            row, was_truncated = _row(tokens, advantage, max_row_tokens, masked)
            if row is None:
                dropped += 1
                continue
            truncated += int(was_truncated)
            masked_rows += int(masked)
            rows.append(row)
    return RowPlan(rows=tuple(rows), truncated_rows=truncated, dropped_rows=dropped, masked_rows=masked_rows)


def split(rows: Sequence[TrainRow], size: int) -> list[Sequence[TrainRow]]:
    """Consecutive micro-batches of `size` rows (the last may be smaller); order is kept."""
    if size < 1:
        raise ValueError(f"per_device_train_batch_size must be >= 1, got {size}")
    return [rows[i : i + size] for i in range(0, len(rows), size)]


def collate(rows: Sequence[TrainRow]) -> MicroBatch:
    """Right-pad a micro-batch to its own longest row and longest completion."""
    width = max(len(r.prompt_ids) + len(r.completion_ids) for r in rows)
    comp_width = max(len(r.completion_ids) for r in rows)
    input_ids = torch.zeros((len(rows), width), dtype=torch.long)
    completion_ids = torch.zeros((len(rows), comp_width), dtype=torch.long)
    loss_mask = torch.zeros((len(rows), comp_width), dtype=torch.float32)
    token_mask = torch.zeros((len(rows), comp_width), dtype=torch.bool)
    old = torch.zeros((len(rows), comp_width), dtype=torch.float32)
    for i, r in enumerate(rows):
        n = len(r.completion_ids)
        input_ids[i, : len(r.prompt_ids) + n] = torch.tensor(r.prompt_ids + r.completion_ids)
        completion_ids[i, :n] = torch.tensor(r.completion_ids)
        loss_mask[i, :n] = torch.tensor(r.loss_mask, dtype=torch.float32)
        token_mask[i, :n] = True
        old[i, :n] = torch.tensor(r.old_logprobs, dtype=torch.float32)
    return MicroBatch(
        input_ids=input_ids,
        completion_ids=completion_ids,
        completion_start=torch.tensor([len(r.prompt_ids) for r in rows], dtype=torch.long),
        loss_mask=loss_mask,
        token_mask=token_mask,
        old_logprobs=old,
        advantages=torch.tensor([r.advantage for r in rows], dtype=torch.float32),
    )
