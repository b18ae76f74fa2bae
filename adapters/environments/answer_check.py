"""Score a free-text final answer against a reference answer: math-verify, then the last number.

The answer is looked for after the last "answer" in the text (the prompts ask for
`Answer: <number>`), else in the whole text; only the last `MAX_ANSWER_CHARS` characters are read,
which bounds math-verify's time (its own signal-based timeouts are switched off because they
raise outside the main thread). When math-verify extracts nothing, the last number in that text
is compared numerically. The score is 1.0 or 0.0.
"""

from __future__ import annotations

import logging
import re
from fractions import Fraction

import math_verify

MAX_ANSWER_CHARS = 300
_NUMBER = re.compile(r"-?\d+(?:[.,]\d+)*")
_ANSWER_WORD = re.compile(r"answer", re.IGNORECASE)

# math-verify warns on every call that its timeouts are off; we bound the input instead.
logging.getLogger("math_verify").setLevel(logging.ERROR)


def score_answer(text: str, reference: str) -> float:
    """1.0 when `text` states `reference` as its answer, else 0.0; never raises on odd text."""
    candidate = _answer_region(text)
    if not candidate.strip():
        return 0.0
    gold = math_verify.parse(reference, parsing_timeout=None)
    predicted = math_verify.parse(candidate, parsing_timeout=None)
    if predicted and gold:
        return 1.0 if math_verify.verify(gold, predicted, timeout_seconds=None) else 0.0
    return 1.0 if _same_number(_last_number(candidate), reference) else 0.0


def _answer_region(text: str) -> str:
    matches = list(_ANSWER_WORD.finditer(text))
    region = text[matches[-1].end() :] if matches else text
    if not _NUMBER.search(region):
        region = text
    return region[-MAX_ANSWER_CHARS:]


def _last_number(text: str) -> str | None:
    found = _NUMBER.findall(text)
    return found[-1] if found else None


def _same_number(candidate: str | None, reference: str) -> bool:
    if candidate is None:
        return False
    a, b = _to_fraction(candidate), _to_fraction(reference.strip())
    return a is not None and a == b


def _to_fraction(text: str) -> Fraction | None:
    try:
        return Fraction(text.replace(",", ""))
    except (ValueError, ZeroDivisionError):
        return None
