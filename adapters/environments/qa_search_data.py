"""The questions of `qa_search`, generated from the offline data with unambiguous short answers.

Question types:
- `capital`: "What is the capital of Kenya?" -> the capital (every official capital is
  accepted, e.g. Pretoria, Bloemfontein or Cape Town);
- `country`: "Nairobi is the capital of which country?" -> the country (skipped when the
  capital's name contains the country's, e.g. Mexico City);
- `article`: the opening of a Wikipedia summary with its title hidden as `___` -> the title
  (only titles without a parenthesis or comma that occur in the opening, so the answer is the
  exact title and the clue does not give it away).
Answers to all three are in the search corpus (the country articles name their capitals).
"""

from __future__ import annotations

import functools
import re

import attrs

from adapters.search.geography import countries
from adapters.search.wiki_corpus import wiki_summaries

QUESTION_TYPES = ("capital", "country", "article")
CLUE_CHARS = 300
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


@attrs.frozen
class Question:
    kind: str
    prompt: str
    answer: str
    aliases: tuple[str, ...] = ()


def questions(kind: str) -> tuple[Question, ...]:
    builders = {"capital": _capital_questions, "country": _country_questions, "article": _article_questions}
    if kind not in builders:
        raise ValueError(f"qa_search: unknown question type {kind!r} (known: {', '.join(QUESTION_TYPES)})")
    return builders[kind]()


@functools.cache
def _capital_questions() -> tuple[Question, ...]:
    return tuple(
        Question("capital", f"What is the capital of {c.name}?", c.capitals[0], c.capitals[1:]) for c in countries()
    )


@functools.cache
def _country_questions() -> tuple[Question, ...]:
    rows = []
    for country in countries():
        capital = country.capitals[0]
        if country.name.lower() in capital.lower() or capital.lower() in country.name.lower():
            continue
        rows.append(Question("country", f"{capital} is the capital of which country?", country.name))
    return tuple(rows)


@functools.cache
def _article_questions() -> tuple[Question, ...]:
    rows = []
    for document in wiki_summaries():
        clue = _masked_opening(document.title, document.text)
        if clue is not None:
            prompt = f'Which Wikipedia article begins like this (its title is hidden as ___)?\n"{clue}"'
            rows.append(Question("article", prompt, document.title))
    return tuple(rows)


def _masked_opening(title: str, text: str) -> str | None:
    if any(c in title for c in "(),") or len(title) < 3:
        return None
    opening = ""
    for sentence in _SENTENCE_END.split(text):
        if opening and len(opening) + len(sentence) > CLUE_CHARS:
            break
        opening = f"{opening} {sentence}".strip()
    pattern = re.compile(re.escape(title), re.IGNORECASE)
    if not pattern.search(opening) or len(opening) > 2 * CLUE_CHARS:
        return None
    masked = pattern.sub("___", opening)
    return masked if len(masked.replace("___", "").split()) >= 6 else None
