"""Per-step statistics of a batch of episodes: reward, lengths, staleness, turns."""

from __future__ import annotations

import math
from collections.abc import Sequence

from domain.episodes import Episode


def _mean(xs: Sequence[float]) -> float:
    return sum(xs) / len(xs) if xs else 0.0


def _std(xs: Sequence[float]) -> float:
    if len(xs) < 2:
        return 0.0
    m = _mean(xs)
    return math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def step_statistics(
    episodes: Sequence[Episode], rewards: Sequence[float], group_size: int, policy_version: int
) -> dict[str, float]:
    """`policy_version` is the version being trained; staleness = it minus the sample's version."""
    groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
    staleness = [policy_version - e.weight_version for e in episodes]
    return {
        "reward_mean": _mean(rewards),
        "reward_std": _std(rewards),
        "groups_without_signal": float(sum(1 for g in groups if max(g) == min(g))),
        "completion_tokens_mean": _mean([e.num_sampled_tokens for e in episodes]),
        "turns_mean": _mean([e.num_turns for e in episodes]),
        "truncated_episodes": float(sum(1 for e in episodes if e.finish_reason == "length")),
        "staleness_mean": _mean(staleness),
        "staleness_max": float(max(staleness, default=0)),
        "episodes": float(len(episodes)),
    }
