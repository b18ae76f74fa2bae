"""A TRL `TrainerCallback` that writes each logged step to our metrics sink and progress bar.

Rows carry every numeric value TRL logged (`loss`, `reward`, `rewards/<term>/mean`,
`completions/mean_length`, `kl`, `grad_norm`, `step_time`, ...) plus env GRPO's names for the
shared ones, so the JSONL lines of both jobs read alike: `reward_mean`, `reward_std`,
`completion_tokens_mean`, `kl`, `tokens_per_second` (completion tokens of the step over its
time), and from the weight sync `sync_seconds`, `sync_gbps`, `weight_version`. TRL's closing log
(`train_runtime`, ...) is not a step and is left out (the run summary follows it).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from transformers import TrainerCallback

from application.ports.training import MetricsSink, Progress
from application.ports.weight_publisher import PublishReport

RENAMED = {"reward": "reward_mean", "reward_std": "reward_std", "completions/mean_length": "completion_tokens_mean"}


def step_metrics(logs: Mapping[str, Any], batch_completions: int, sync: PublishReport | None) -> dict[str, float]:
    metrics = {k: float(v) for k, v in logs.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    for trl_name, ours in RENAMED.items():
        if trl_name in metrics:
            metrics[ours] = metrics[trl_name]
    metrics.setdefault("kl", 0.0)
    step_time = metrics.get("step_time")
    if step_time and "completion_tokens_mean" in metrics:
        metrics["tokens_per_second"] = metrics["completion_tokens_mean"] * batch_completions / step_time
    if sync is not None:
        metrics.update(sync_seconds=sync.seconds, sync_gbps=sync.gbps, weight_version=float(sync.version))
    return {k: v for k, v in metrics.items() if math.isfinite(v)}


class MetricsCallback(TrainerCallback):
    def __init__(
        self,
        sink: MetricsSink,
        progress: Progress,
        batch_completions: int,
        last_sync: Callable[[], PublishReport | None],
    ) -> None:
        self._sink, self._progress = sink, progress
        self._batch_completions = batch_completions
        self._last_sync = last_sync

    def on_log(self, args: Any, state: Any, control: Any, logs: Mapping[str, Any] | None = None, **kwargs: Any):
        if not logs or "train_runtime" in logs:
            return control
        metrics = step_metrics(logs, self._batch_completions, self._last_sync())
        self._sink.record(int(state.global_step), metrics)
        self._progress.update(int(state.global_step), metrics)
        return control
