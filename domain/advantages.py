"""Group-relative advantages, as TRL's GRPOTrainer computes them.

`A_i = r_i - mean(group)`; unless `scale_rewards == "none"`, divide by `std + 1e-4`, the std
taken over the group (`"group"`) or over the whole batch (`"batch"`). TRL uses torch's
unbiased std (Bessel's correction), so we do too; a group of one has std NaN in torch, which
TRL would propagate; we refuse groups smaller than 2 instead (num_generations >= 2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal

ScaleRewards = Literal["group", "batch", "none"]
STD_EPSILON = 1e-4


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs)


def _unbiased_std(xs: Sequence[float]) -> float:
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def group_advantages(rewards: Sequence[float], group_size: int, scale_rewards: ScaleRewards) -> list[float]:
    """Advantages for a flat batch laid out group after group (`group_size` rewards each)."""
    if group_size < 2:
        raise ValueError(f"group_size must be >= 2, got {group_size}")
    if len(rewards) % group_size:
        raise ValueError(f"{len(rewards)} rewards do not split into groups of {group_size}")
    if scale_rewards not in ("group", "batch", "none"):
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    batch_std = _unbiased_std(rewards) if scale_rewards == "batch" else 1.0
    out: list[float] = []
    for start in range(0, len(rewards), group_size):
        group = rewards[start : start + group_size]
        mean = _mean(group)
        if scale_rewards == "group":
            scale = _unbiased_std(group) + STD_EPSILON
        elif scale_rewards == "batch":
            scale = batch_std + STD_EPSILON
        else:
            scale = 1.0
        out.extend((r - mean) / scale for r in group)
    return out
