"""The `math_verify` verifier: math-verify judges a completion's final answer against the reference.

math-verify runs with `parsing_timeout=None` and `timeout_seconds=None`: its timeouts use
SIGALRM, which raises outside the main thread (TRL and our evaluator score from worker
threads). Time is bounded by input size instead: only the final answer (`domain.verifiers`,
at most `MAX_ANSWER_CHARS`) is parsed, and the reference is cut to the same length. When the
answer region yields nothing parseable, the last `MAX_ANSWER_CHARS` of the completion are tried.
A reference that math-verify cannot parse (a word, a name) is compared by exact match.
"""

from __future__ import annotations

import logging

import math_verify

from domain.verifiers import MAX_ANSWER_CHARS, exact_match_score, final_answer, scored_text

# math-verify logs a warning on every call whose timeout is off; we bound the input instead.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def _parse(text: str) -> list:
    return math_verify.parse(text[-MAX_ANSWER_CHARS:], parsing_timeout=None)


def math_verify_score(completion: str, answer: str) -> float:
    """1.0 when math-verify finds the completion's answer equal to `answer`, else 0.0."""
    if answer is None:
        raise ValueError("math_verify needs the dataset row's 'answer'; this row has none")
    gold = _parse(str(answer))
    if not gold:
        return exact_match_score(completion, str(answer))
    predicted = _parse(final_answer(completion)) or _parse(scored_text(completion))
    if not predicted:
        return 0.0
    return 1.0 if math_verify.verify(gold, predicted, timeout_seconds=None) else 0.0
