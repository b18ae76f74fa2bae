"""The `search` tool of `qa_search` and open-book `exam_qa`: `<search>query</search>` -> top hits.

The result lists up to `top_k` documents as `[i] Title: snippet`, each snippet cut to
`snippet_chars`. An empty query, a call of another tool or a query with no hits gives a tool
message that says so and shows the right usage. The backend is looked up per call from the
process-wide cache (`adapters.search.backends`), so the index is built once per process, on the
first search. `search_kwargs` and `search_tool_from` are the kwargs that configure the tool and the
tool they configure, shared by the environments that offer it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from adapters.environments.base import KwargSpec
from adapters.environments.search_turns import ToolCall
from adapters.search.backends import check_backend_name, search_backend

TOOL_NAME = "search"
USAGE = "<search>capital of France</search>"


def check_positive_int(env_name: str, key: str, value: object, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= limit:
        raise ValueError(f"environment {env_name!r}: {key} must be an int in [1, {limit}], got {value!r}")
    return value


def search_kwargs(backend_description: str) -> dict[str, KwargSpec]:
    """The kwargs that configure the tool, in the order `rlsetup envs` lists them."""
    return {
        "search_backend": KwargSpec("bm25", backend_description),
        "top_k": KwargSpec(3, "how many results one search returns (1-20)"),
        "snippet_chars": KwargSpec(300, "how many characters of each result are shown (20-4000)"),
    }


def search_tool_from(env_name: str, options: Mapping[str, Any]) -> Callable[[ToolCall], str]:
    """The tool `options` configure (see `search_kwargs`); a bad value raises, naming `env_name` and the key."""
    top_k = check_positive_int(env_name, "top_k", options["top_k"], 20)
    snippet_chars = max(20, check_positive_int(env_name, "snippet_chars", options["snippet_chars"], 4000))
    return make_search_tool(options["search_backend"], top_k, snippet_chars)


def make_search_tool(backend_name: str, top_k: int, snippet_chars: int) -> Callable[[ToolCall], str]:
    """A `run_tool` for `ToolEpisode` that answers `<search>` calls from `backend_name`."""
    check_backend_name(backend_name)

    def run(call: ToolCall) -> str:
        if call.name.lower() != TOOL_NAME:
            return f"error: unknown tool {call.name[:40]!r}; the only tool is {TOOL_NAME}, used as {USAGE}"
        query = " ".join(call.argument.split())
        if not query:
            return f"search error: empty query; write the words to look for, as in {USAGE}"
        hits = search_backend(backend_name).search(query, top_k)
        if not hits:
            return f"search: no results for {query[:100]!r}; try other words"
        lines = [f"[{i}] {hit.title}: {_snippet(hit.text, snippet_chars)}" for i, hit in enumerate(hits, 1)]
        return "\n".join(lines)

    return run


def _snippet(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 3].rstrip() + "..."
