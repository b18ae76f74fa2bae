"""Seeded, disjoint train/eval splits for the data-backed environments (qa_search, exam_qa, mcp).

As in `react_math`: a row belongs to the eval split iff a hash of its question text falls in the
eval bucket (`eval_fraction`), so the two splits never share a question, whatever the seeds.
Within a split, rows are drawn in an order shuffled by a seed derived from (environment, split,
seed); when several kinds of rows are mixed they are interleaved round-robin so every kind shows
up early. `check_kinds` checks the kwarg that picks those kinds.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


def check_fraction(env_name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1:
        raise ValueError(f"environment {env_name!r}: eval_fraction must be a number in (0, 1), got {value!r}")
    return float(value)


def check_kinds(env_name: str, key: str, value: Any, known: Sequence[str]) -> Any:
    """The `key` kwarg listing which kinds of rows to draw: a non-empty list (a bare string is refused)."""
    if isinstance(value, str) or not value:
        raise ValueError(f"{env_name}: {key} must be a non-empty list of {', '.join(known)}, got {value!r}")
    return value


def in_eval_bucket(question: str, fraction: float) -> bool:
    digest = hashlib.sha256(question.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < fraction


def split_rng(env_name: str, split: str, seed: int) -> random.Random:
    digest = hashlib.sha256(f"{env_name}/{split}/{int(seed)}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def draw(
    env_name: str,
    groups: Mapping[str, Sequence[T]],
    question: Callable[[T], str],
    split: str,
    count: int,
    seed: int,
    eval_fraction: object,
) -> list[T]:
    """`count` rows of `split`, round-robin over `groups` (each shuffled), deterministic in `seed`.

    `eval_fraction` is the environment's kwarg, checked here (`check_fraction`)."""
    fraction = check_fraction(env_name, eval_fraction)
    rng = split_rng(env_name, split, seed)
    queues = []
    for name in sorted(groups):
        rows = [row for row in groups[name] if in_eval_bucket(question(row), fraction) == (split == "eval")]
        rng.shuffle(rows)
        queues.append(rows)
    available = sum(len(q) for q in queues)
    if count > available:
        raise ValueError(
            f"environment {env_name!r}: asked for {count} {split} problems, only {available} exist "
            f"for {', '.join(sorted(groups))} (eval_fraction={fraction})"
        )
    drawn: list[T] = []
    position = 0
    while len(drawn) < count:
        for queue in queues:
            if position < len(queue) and len(drawn) < count:
                drawn.append(queue[position])
        position += 1
    return drawn
