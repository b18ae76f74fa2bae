"""`FakeGenerationServer`: a working in-memory GenerationServer that "samples" scripted text.

Each `generate` call asks a reply rule for the text of the next turn (a fixed script, or a
function of the prompt ids), turns it into token ids with the real tokenizer, appends the
end-of-turn token (as an engine stopping on it does), cuts at `max_tokens` (finish "length"),
and gives every token a deterministic log-prob that depends on its id and position, so tests
can check log-probs stay aligned with their tokens. Every prompt it received is recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

from application.ports.generation import Completion, SamplingParams

ReplyRule = Callable[[Sequence[int]], str]


def fake_logprob(token_id: int, position: int) -> float:
    """The log-prob the fake reports for `token_id` at `position` of its completion."""
    return -((token_id * 31 + position * 7) % 997 + 1) / 1000.0


class FakeGenerationServer:
    def __init__(
        self,
        encode: Callable[[str], list[int]],
        end_of_turn_id: int,
        replies: Iterable[str] | ReplyRule,
        url: str = "fake://generation",
        weight_version: int = 0,
    ) -> None:
        self._encode = encode
        self._end = end_of_turn_id
        self._rule: ReplyRule = replies if callable(replies) else _script(list(replies))
        self._url = url
        self.weight_version = weight_version
        self.prompts: list[tuple[int, ...]] = []
        self.params: list[SamplingParams] = []

    @property
    def url(self) -> str:
        return self._url

    def generate(self, prompt_token_ids: Sequence[int], params: SamplingParams, n: int = 1) -> list[Completion]:
        self.prompts.append(tuple(prompt_token_ids))
        self.params.append(params)
        return [self._complete(prompt_token_ids, params) for _ in range(n)]

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        return [None] + [fake_logprob(t, i) for i, t in enumerate(token_ids[1:], start=1)]

    def _complete(self, prompt: Sequence[int], params: SamplingParams) -> Completion:
        ids = self._encode(self._rule(prompt)) + [self._end]
        finish = "stop"
        if len(ids) > params.max_tokens:
            ids, finish = ids[: params.max_tokens], "length"
        return Completion(
            token_ids=ids,
            logprobs=[fake_logprob(t, i) for i, t in enumerate(ids)],
            finish_reason=finish,
            weight_version=self.weight_version,
        )


def _script(replies: list[str]) -> ReplyRule:
    remaining = list(replies)

    def next_reply(_prompt: Sequence[int]) -> str:
        if not remaining:
            raise AssertionError(f"the fake server's script of {len(replies)} replies is used up")
        return remaining.pop(0)

    return next_reply
