"""A run's reasoning markers and effort length term, resolved with the policy's tokenizer.

`rollout_reasoning_end_token` (and its start, given or derived: `</think>` -> `<think>`) must
each be one token of the policy's tokenizer, encoded as the chat tokenizer encodes text (no
special tokens added). The container resolves them once on the trainer, before the rollout
pool and the loop are built; a string that is not one token is a `ConfigError` naming it
(`... @ $.training`). Without a thinking budget there is nothing to resolve (None).
"""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from domain.config import AsyncTrainingConfig
from domain.effort_length import EffortLength, effort_level
from domain.thinking_budget import ReasoningMarkers, resolve_markers
from infrastructure.config_loader import ConfigError


def reasoning_markers(training: AsyncTrainingConfig, model_path: Path) -> ReasoningMarkers | None:
    if training.rollout_reasoning_end_token is None or training.rollout_max_thinking_tokens is None:
        return None
    tokenizer = AutoTokenizer.from_pretrained(str(model_path), clean_up_tokenization_spaces=False)

    def encode(text: str) -> list[int]:
        return list(tokenizer(text, add_special_tokens=False)["input_ids"])

    try:
        return resolve_markers(encode, training.rollout_reasoning_end_token, training.rollout_reasoning_start_token)
    except ValueError as exc:
        raise ConfigError([f"{exc} @ $.training"]) from None


def effort_length(training: AsyncTrainingConfig, markers: ReasoningMarkers | None) -> EffortLength | None:
    """The effort length term, or None while both of its weights are 0 (config checks ensure the rest)."""
    if training.effort_length_penalty_k0 == 0 and training.effort_length_floor_weight == 0:
        return None
    if markers is None or training.rollout_max_thinking_tokens is None:
        raise ConfigError([
            "the effort length terms need 'rollout_max_thinking_tokens' and 'rollout_reasoning_end_token' @ $.training"
        ])
    return EffortLength(
        max_thinking_tokens=training.rollout_max_thinking_tokens,
        effort=effort_level(training.rollout_chat_template_kwargs),
        penalty_k0=training.effort_length_penalty_k0,
        floor_weight=training.effort_length_floor_weight,
        markers=markers,
    )
