"""Engine-side thinking budgets (vLLM's `thinking_token_budget`) and the closes they force.

What vLLM 0.32 does (the V1 model runner, `v1/sample/thinking_budget_state.py`; the rule below
was checked by driving its `ThinkingBudgetStateHolder` on CPU, including every case listed here):
- `thinking_token_budget: N` is a field of the `/v1/completions` request (-1 means unset). The
  server refuses it (400) unless it runs with a reasoning config, i.e. `--reasoning-parser`
  (`v1/engine/input_processor.py`); the parser names the reasoning start and end strings
  (`config/reasoning.py`; the forced end is the parser's own end unless `--reasoning-config`
  sets another `reasoning_end_str`, which we never do).
- It counts the tokens after the last reasoning start in prompt + output. A start in the prompt
  counts too (templates that open `<think>` in the generation prompt), with the reasoning tokens
  already after it. When the count reaches N (or already exceeds it from the prompt) the end
  token's logit is set to 1e9, after penalties and before temperature, so the next token is the
  end token whatever the policy would have sampled. Each new start opens a fresh budget.
- With `--logprobs-mode processed_logprobs` (ours) the log-prob the engine reports for that token
  is 0.0 exactly (log-softmax of a 1e9 logit). It was not sampled from the policy.

So the rule is exact: an end token that comes when >= N reasoning tokens follow the last start
was forced (at that count the engine leaves no other choice); one before that was sampled.
`split_forced_closes` cuts each forced end token out of an engine segment as an environment
segment (masked, no behaviour log-prob), so the policy-gradient loss never sees it. The tokens
stay in the sequence: the policy is still conditioned on them.

Only single-token markers are handled: `rollout_reasoning_end_token` must be one token, and so
must its start (`rollout_reasoning_start_token`, by default the end's opening tag: `</think>`
gives `<think>`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import attrs

from domain.episodes import Segment


@attrs.frozen
class ReasoningMarkers:
    """The token ids that open and close a reasoning section (e.g. `<think>`, `</think>`)."""

    start_id: int
    end_id: int

    def __attrs_post_init__(self) -> None:
        if self.start_id == self.end_id:
            raise ValueError(f"the reasoning start and end tokens must differ: both are id {self.start_id}")


def opening_tag(end_token: str) -> str | None:
    """`</name>` -> `<name>`; None when the end token is not a closing tag."""
    if end_token.startswith("</") and end_token.endswith(">") and len(end_token) > 3:
        return "<" + end_token[2:]
    return None


def resolve_markers(encode: Callable[[str], Sequence[int]], end_token: str, start_token: str | None = None) -> ReasoningMarkers:
    """Both markers as single token ids; a ValueError naming the key and the string otherwise."""
    start = start_token if start_token is not None else opening_tag(end_token)
    if start is None:
        raise ValueError(
            f"'rollout_reasoning_end_token' {end_token!r} is not a closing tag </name>: "
            "give 'rollout_reasoning_start_token' too"
        )
    start_name = "'rollout_reasoning_start_token'" + ("" if start_token is not None else " (derived from the end token)")
    end_id = _single_token(encode, end_token, "'rollout_reasoning_end_token'")
    return ReasoningMarkers(start_id=_single_token(encode, start, start_name), end_id=end_id)


def _single_token(encode: Callable[[str], Sequence[int]], text: str, name: str) -> int:
    ids = list(encode(text))
    if len(ids) != 1:
        raise ValueError(f"{name} {text!r} is not one token of the policy's tokenizer (it encodes to {ids})")
    return int(ids[0])


def reasoning_count(token_ids: Iterable[int], markers: ReasoningMarkers, count: int | None = None) -> int | None:
    """Tokens since the last open reasoning start after `token_ids`; None when no section is open.

    `count` is the state before `token_ids` (None: outside reasoning).
    """
    for token in token_ids:
        count = _advance(count, token, markers)
    return count


def _advance(count: int | None, token: int, markers: ReasoningMarkers) -> int | None:
    if token == markers.start_id:
        return 0
    if token == markers.end_id:
        return None
    return None if count is None else count + 1


def forced_close_positions(
    context_ids: Sequence[int], token_ids: Sequence[int], budget: int, markers: ReasoningMarkers
) -> list[int]:
    """Positions in `token_ids` (sampled after `context_ids`) of end tokens the budget forced."""
    count = reasoning_count(context_ids, markers)
    forced = []
    for position, token in enumerate(token_ids):
        if token == markers.end_id and count is not None and count >= budget:
            forced.append(position)
        count = _advance(count, token, markers)
    return forced


def split_forced_closes(
    context_ids: Sequence[int],
    token_ids: Sequence[int],
    logprobs: Sequence[float],
    budget: int,
    markers: ReasoningMarkers,
) -> list[Segment]:
    """The engine's turn as segments: sampled runs, and each forced close as a masked segment.

    Concatenated, the segments' ids are `token_ids` unchanged; a turn without a forced close is
    the one engine segment it always was.
    """
    if len(token_ids) != len(logprobs):
        raise ValueError(f"{len(token_ids)} tokens but {len(logprobs)} log-probs")
    segments: list[Segment] = []
    begin = 0
    for position in forced_close_positions(context_ids, token_ids, budget, markers):
        if position > begin:
            segments.append(Segment.from_engine(token_ids[begin:position], logprobs[begin:position]))
        segments.append(Segment.from_environment([token_ids[position]]))
        begin = position + 1
    if begin < len(token_ids) or not segments:
        segments.append(Segment.from_engine(token_ids[begin:], logprobs[begin:]))
    return segments


def sampled_reasoning_tokens(prompt_ids: Sequence[int], segments: Sequence[Segment], markers: ReasoningMarkers) -> int:
    """Sampled tokens inside reasoning sections (markers excluded), a section opened in the prompt included."""
    count = reasoning_count(prompt_ids, markers)
    total = 0
    for segment in segments:
        for token in segment.token_ids:
            inside = count is not None and token != markers.start_id and token != markers.end_id
            total += int(inside and segment.sampled)
            count = _advance(count, token, markers)
    return total
