"""Search backends by name (`search_backend` environment kwarg), each built once per process.

A backend is anything with `search(query, k) -> list[SearchHit]`. Built-in: `bm25` (BM25 over
the offline Wikipedia summaries). A new backend is a new builder in `BACKENDS`; the environments
never branch on the name. Building is guarded by a lock, so concurrent episodes in one process
share one index instead of building several.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Protocol

from adapters.search.bm25_index import Bm25Index, SearchHit
from adapters.search.wiki_corpus import wiki_summaries


class SearchBackend(Protocol):
    def search(self, query: str, k: int) -> list[SearchHit]: ...


class UnknownSearchBackend(ValueError):
    """A `search_backend` name that no builder answers to."""


BACKENDS: dict[str, Callable[[], SearchBackend]] = {
    "bm25": lambda: Bm25Index(wiki_summaries()),
}

_built: dict[str, SearchBackend] = {}
_lock = threading.Lock()


def check_backend_name(name: object) -> str:
    if not isinstance(name, str) or name not in BACKENDS:
        raise UnknownSearchBackend(f"unknown search_backend {name!r} (known: {', '.join(sorted(BACKENDS))})")
    return name


def search_backend(name: str) -> SearchBackend:
    """The process-wide backend called `name`, built on first use."""
    check_backend_name(name)
    with _lock:
        if name not in _built:
            _built[name] = BACKENDS[name]()
        return _built[name]
