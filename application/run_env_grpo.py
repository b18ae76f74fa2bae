"""Env GRPO: the async loop that turns environment episodes into policy updates.

One step: take the rollouts of `prompts_per_step` problems x `num_generations` episodes, price
each episode with the reward terms (plus the effort length term, when on; held-out evaluation
reports the reward terms alone), compute group advantages, take one learner step, and every
`sync_weights_every_n_steps` push the new weights to the servers. With prefetch on, the
rollouts of step k+1 are submitted *before* step k trains, so generation overlaps training;
those samples are then one version stale, which the loss's clipping against the engine's
behaviour log-probs accounts for. Every sample records the weight version that generated it,
and the step's metrics report the staleness.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence

import attrs

from application.evaluate import HeldOutEvaluator
from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.ports.training import Learner, MetricsSink, Progress, RolloutPool, RolloutRequest
from application.ports.weight_publisher import WeightPublisher
from domain.advantages import group_advantages
from domain.effort_length import EffortLength
from domain.episodes import Episode
from domain.rewards import RewardTerm, total_reward
from domain.step_stats import step_statistics


@attrs.frozen(kw_only=True)
class LoopSettings:
    max_steps: int
    prompts_per_step: int
    num_generations: int
    scale_rewards: str
    sync_weights_every_n_steps: int
    enable_prefetch: bool
    sampling: SamplingParams
    max_turns: int | None
    reward_terms: tuple[RewardTerm, ...]
    rollout_timeout: float
    evaluate_before: bool = True
    effort_length: EffortLength | None = None  # added to each training episode's reward when set


@attrs.frozen(kw_only=True)
class RunSummary:
    steps: int
    reward_before: float | None
    reward_after: float | None
    eval_count: int
    final_version: int
    seconds: float


class EnvGRPOLoop:
    """Drives rollouts, learning and weight sync; every collaborator is a port."""

    def __init__(
        self,
        *,
        settings: LoopSettings,
        problems: Iterator[Problem],
        pool: RolloutPool,
        learner: Learner,
        publisher: WeightPublisher,
        evaluator: HeldOutEvaluator | None,
        metrics: MetricsSink,
        progress: Progress,
    ) -> None:
        self._s = settings
        self._problems = problems
        self._pool = pool
        self._learner = learner
        self._publisher = publisher
        self._evaluator = evaluator
        self._metrics = metrics
        self._progress = progress
        self._served_version = 0
        self._policy_version = 0

    def run(self) -> RunSummary:
        started = time.monotonic()
        # The server may serve anything (a previous run's weights): publish ours as version 0 first.
        self._publisher.publish(self._served_version)
        before = self._evaluate("before") if self._s.evaluate_before else None
        ticket, submitted_at = self._submit(), time.monotonic()
        for step in range(1, self._s.max_steps + 1):
            groups = ticket.result(timeout=self._s.rollout_timeout)
            rollout_seconds = time.monotonic() - submitted_at
            last = step == self._s.max_steps
            if self._s.enable_prefetch and not last:
                ticket, submitted_at = self._submit(), time.monotonic()
            metrics = dict(self._train(groups))
            metrics["rollout_seconds"] = rollout_seconds
            metrics["tokens_per_second"] = metrics["completion_tokens_mean"] * metrics["episodes"] / max(rollout_seconds, 1e-9)
            metrics.update(self._maybe_sync(step, last))
            if not self._s.enable_prefetch and not last:
                ticket, submitted_at = self._submit(), time.monotonic()
            self._metrics.record(step, metrics)
            self._progress.update(step, metrics)
        after = self._evaluate("after")
        summary = RunSummary(
            steps=self._s.max_steps,
            reward_before=before,
            reward_after=after,
            eval_count=self._evaluator.count if self._evaluator else 0,
            final_version=self._served_version,
            seconds=time.monotonic() - started,
        )
        self._metrics.summary(attrs.asdict(summary))
        return summary

    def _submit(self):
        problems = tuple(next(self._problems) for _ in range(self._s.prompts_per_step))
        return self._pool.submit(
            RolloutRequest(
                problems=problems,
                num_generations=self._s.num_generations,
                sampling=self._s.sampling,
                weight_version=self._served_version,
                max_turns=self._s.max_turns,
            )
        )

    def _train(self, groups: Sequence[Sequence[Episode]]) -> Mapping[str, float]:
        episodes = [episode for group in groups for episode in group]
        rewards = [self._reward(e) for e in episodes]
        advantages = group_advantages(rewards, self._s.num_generations, self._s.scale_rewards)  # type: ignore[arg-type]
        learned = self._learner.train_step(episodes, advantages)
        self._policy_version += 1
        stats = step_statistics(episodes, rewards, self._s.num_generations, self._policy_version - 1)
        return {**stats, **learned, **self._effort_metrics(episodes)}

    def _reward(self, episode: Episode) -> float:
        """The reward terms, plus the effort length term when it is on (domain/effort_length.py)."""
        reward = total_reward(self._s.reward_terms, episode.scores)
        return reward if self._s.effort_length is None else reward + self._s.effort_length.adjustment(episode)

    def _effort_metrics(self, episodes: Sequence[Episode]) -> Mapping[str, float]:
        effort = self._s.effort_length
        if effort is None or not episodes:
            return {}
        lengths = [effort.reasoning_tokens(e) for e in episodes]
        return {
            "reasoning_tokens_mean": sum(lengths) / len(lengths),
            "effort_adjustment_mean": sum(effort.adjustment(e) for e in episodes) / len(episodes),
        }

    def _maybe_sync(self, step: int, last: bool) -> Mapping[str, float]:
        if step % self._s.sync_weights_every_n_steps and not last:
            return {"sync_seconds": 0.0, "weight_version": float(self._served_version)}
        report = self._publisher.publish(self._policy_version)
        self._served_version = self._policy_version
        return {"sync_seconds": report.seconds, "sync_gbps": report.gbps, "weight_version": float(self._served_version)}

    def _evaluate(self, label: str) -> float | None:
        if self._evaluator is None:
            return None
        self._progress.note(f"evaluating held-out reward ({label} training)...")
        return self._evaluator.mean_reward(self._served_version)
