"""Port: a generation server, token-in/token-out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs

from domain.thinking_budget import ReasoningMarkers


@attrs.frozen(kw_only=True)
class SamplingParams:
    """What one generation request asks of the engine, and how the runner reads its answer.

    `thinking_token_budget` is the engine's own field (vLLM: forces the reasoning end token after
    that many reasoning tokens; None = unset). `reasoning_markers` is not sent: it tells the
    episode runner which tokens open and close reasoning, so it can mask the closes the budget
    forced (`domain/thinking_budget.py`); None = leave every sampled token in the loss.
    """

    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    thinking_token_budget: int | None = attrs.field(default=None)
    reasoning_markers: ReasoningMarkers | None = None

    @thinking_token_budget.validator
    def _budget(self, _attribute: attrs.Attribute, value: int | None) -> None:
        if value is not None and value < 0:
            raise ValueError(f"thinking_token_budget must be >= 0 or None: {value}")


@attrs.frozen(kw_only=True)
class Completion:
    """What the engine sampled: exact token ids and their (processed) log-probs."""

    token_ids: tuple[int, ...] = attrs.field(converter=tuple)
    logprobs: tuple[float, ...] = attrs.field(converter=tuple)
    finish_reason: str
    text: str = ""
    weight_version: int | None = None


class GenerationServer(Protocol):
    """Samples continuations of token-id prompts. Every call is bounded by a timeout."""

    @property
    def url(self) -> str: ...

    def generate(self, prompt_token_ids: Sequence[int], params: SamplingParams, n: int = 1) -> list[Completion]: ...

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        """Log-prob of each token given its prefix (first is None), at temperature 1."""
        ...
