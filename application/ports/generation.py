"""Port: a generation server, token-in/token-out."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import attrs


@attrs.frozen(kw_only=True)
class SamplingParams:
    max_tokens: int
    temperature: float = 1.0
    top_p: float = 1.0
    stop: tuple[str, ...] = ()
    seed: int | None = None


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
