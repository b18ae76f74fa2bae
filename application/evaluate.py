"""Held-out evaluation: the mean reward of one episode per held-out problem.

Problems come from the environment's eval split (disjoint from training); episodes run through
the same rollout pool in batches of `eval_rollout_batch_size`, one sample each, with the eval
sampling parameters (seeded with `eval.seed` by the composition, so the evaluations before and
after training draw the same random stream). The reward is priced by the same reward terms as
training.
"""

from __future__ import annotations

from collections.abc import Sequence

from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.ports.training import RolloutPool, RolloutRequest
from domain.rewards import RewardTerm, total_reward


class HeldOutEvaluator:
    def __init__(
        self,
        *,
        pool: RolloutPool,
        problems: Sequence[Problem],
        sampling: SamplingParams,
        batch_size: int,
        reward_terms: Sequence[RewardTerm],
        max_turns: int | None,
        timeout: float,
    ) -> None:
        if not problems:
            raise ValueError("held-out evaluation needs at least one problem")
        self._pool = pool
        self._problems = tuple(problems)
        self._sampling = sampling
        self._batch_size = batch_size
        self._terms = tuple(reward_terms)
        self._max_turns = max_turns
        self._timeout = timeout

    @property
    def count(self) -> int:
        return len(self._problems)

    @property
    def sampling(self) -> SamplingParams:
        return self._sampling

    def mean_reward(self, weight_version: int) -> float:
        rewards: list[float] = []
        for start in range(0, len(self._problems), self._batch_size):
            batch = self._problems[start : start + self._batch_size]
            ticket = self._pool.submit(
                RolloutRequest(
                    problems=batch,
                    num_generations=1,
                    sampling=self._sampling,
                    weight_version=weight_version,
                    max_turns=self._max_turns,
                )
            )
            for group in ticket.result(timeout=self._timeout):
                rewards.extend(total_reward(self._terms, e.scores) for e in group)
        return sum(rewards) / len(rewards)
