"""`rlsetup envs`: a plain-text table of the registered environments and their knobs.

One row per environment (name, requires_answer, max_turns, summary), then one indented line
per `environment_kwargs` knob it declares: `name = default  description`. Reads the registry's
metadata (`environment_info()`: objects with name, requires_answer, max_turns, summary and
kwargs of (name, default, description)).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_HEADER = ("name", "requires_answer", "max_turns", "summary")


def render_envs_table(infos: Sequence[Any]) -> str:
    infos = sorted(infos, key=lambda info: info.name)
    rows = [_HEADER, *((i.name, str(i.requires_answer), str(i.max_turns), i.summary) for i in infos)]
    widths = [max(len(row[c]) for row in rows) for c in range(len(_HEADER))]
    lines = [_join(_HEADER, widths)]
    for row, info in zip(rows[1:], infos):
        lines.append(_join(row, widths))
        lines.extend(_knob_lines(info.kwargs))
    if not infos:
        lines.append("(no environments registered)")
    return "\n".join(lines)


def _knob_lines(kwargs: Sequence[Any]) -> list[str]:
    if not kwargs:
        return ["    (no environment_kwargs)"]
    cells = [f"{k.name} = {k.default!r}" for k in kwargs]
    width = max(len(cell) for cell in cells)
    return [f"    {cell.ljust(width)}  {k.description}" for cell, k in zip(cells, kwargs)]


def _join(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join(cell.ljust(w) for cell, w in zip(cells, widths)).rstrip()
