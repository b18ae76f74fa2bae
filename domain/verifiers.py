"""Pure verifiers for RLVR: find a completion's final answer, exact-match it, check its format.

Each scorer returns a score in [0, 1] for one completion against the dataset row's reference
`answer`; the reward terms (`domain.rewards`) price those scores. Scoring reads at most the last
`MAX_SCORED_CHARS` characters of a completion, so a runaway completion cannot make a regex or a
parser slow (Python's `re` has no timeout).

The final answer is, in this order: the content of the last `<answer>...</answer>`, of the last
`\\boxed{...}`, the rest of the line after the last `Answer:`, else the last non-empty line.
Exact match compares normalised strings: case-folded, whitespace collapsed, surrounding markdown
emphasis, `$` and trailing punctuation stripped, digit-group commas removed (`1,000` == `1000`).
"""

from __future__ import annotations

import re

MAX_SCORED_CHARS = 4000
MAX_ANSWER_CHARS = 300

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_ANSWER_LINE = re.compile(r"answer\s*[:=]\s*([^\n]*)", re.IGNORECASE)
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d{3}\b)")
_WHITESPACE = re.compile(r"\s+")
_STRIP = " \t\n.,;:!*_`$\"'"


def scored_text(completion: str) -> str:
    """The part of a completion that scorers read: its last `MAX_SCORED_CHARS` characters."""
    return completion[-MAX_SCORED_CHARS:]


def final_answer(completion: str) -> str:
    """The completion's final answer (see the module docstring), at most `MAX_ANSWER_CHARS` long."""
    text = scored_text(completion)
    tags = _ANSWER_TAG.findall(text)
    if tags:
        return tags[-1].strip()[:MAX_ANSWER_CHARS]
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed.strip()[:MAX_ANSWER_CHARS]
    lines = _ANSWER_LINE.findall(text)
    if lines:
        return lines[-1].strip()[:MAX_ANSWER_CHARS]
    non_empty = [line for line in text.splitlines() if line.strip()]
    return non_empty[-1].strip()[-MAX_ANSWER_CHARS:] if non_empty else ""


def _last_boxed(text: str) -> str | None:
    """Content of the last `\\boxed{...}`, braces balanced; None when there is none or it is unclosed."""
    start = text.rfind("\\boxed{")
    if start < 0:
        return None
    depth, begin = 0, start + len("\\boxed{")
    for index in range(begin, len(text)):
        char = text[index]
        if char == "{":
            depth += 1
        elif char == "}":
            if depth == 0:
                return text[begin:index]
            depth -= 1
    return None


def normalize_answer(text: str) -> str:
    """Case-fold, collapse whitespace, strip decoration and digit-group commas."""
    text = _WHITESPACE.sub(" ", text).strip(_STRIP)
    text = _DIGIT_COMMA.sub("", text)
    return text.casefold()


def exact_match_score(completion: str, answer: str) -> float:
    """1.0 when the completion's final answer equals `answer` after normalisation, else 0.0."""
    if answer is None:
        raise ValueError("exact_match needs the dataset row's 'answer'; this row has none")
    expected = normalize_answer(str(answer))
    return 1.0 if expected and normalize_answer(final_answer(completion)) == expected else 0.0


def compile_format(pattern: str) -> re.Pattern[str]:
    """The `format` verifier's regex, or a ValueError naming the bad pattern."""
    try:
        return re.compile(pattern)
    except re.error as error:
        raise ValueError(f"format_regex {pattern!r} is not a valid regular expression: {error}") from None


def format_score(completion: str, pattern: re.Pattern[str]) -> float:
    """1.0 when `pattern` is found (re.search) in the scored text of the completion, else 0.0."""
    return 1.0 if pattern.search(scored_text(completion)) else 0.0
