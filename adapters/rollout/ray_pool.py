"""`RayRolloutPool`: episodes run on a pool of Ray actors.

`num_rollout_workers` threaded actors each run up to `ceil(max_concurrent_rollouts /
num_rollout_workers)` episodes at once, so at most `max_concurrent_rollouts` episodes are in
flight. Each actor builds its own episode runner once, from a picklable `runner_factory`
(composed in `infrastructure/`, which names the concrete server, tokenizer and environment);
the pool itself knows nothing of vLLM or environments. Episodes are dealt round-robin over
the actors; `result(timeout)` is bounded and names what did not finish.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import ray

from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.ports.training import RolloutRequest
from domain.episodes import Episode

EpisodeRunner = Callable[[Problem, SamplingParams, int, "int | None", int], Episode]
RunnerFactory = Callable[[int], EpisodeRunner]


class RolloutTimeout(TimeoutError):
    """Rollouts did not finish within the configured timeout."""


@ray.remote(num_cpus=0)
class _RolloutWorker:
    def __init__(self, worker_index: int, runner_factory: RunnerFactory) -> None:
        self._run = runner_factory(worker_index)

    def run(self, problem: Problem, sampling: SamplingParams, version: int, max_turns: int | None, index: int) -> Episode:
        return self._run(problem, sampling, version, max_turns, index)


class _RayTicket:
    def __init__(self, refs: list[list[Any]]) -> None:
        self._refs = refs

    def result(self, timeout: float) -> list[list[Episode]]:
        flat = [ref for group in self._refs for ref in group]
        ready, pending = ray.wait(flat, num_returns=len(flat), timeout=timeout)
        if pending:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise RolloutTimeout(
                f"{len(pending)} of {len(flat)} episodes did not finish within {timeout:.0f} s "
                "(rollout_connection_timeout / server too slow?)"
            )
        return [ray.get(group) for group in self._refs]


class RayRolloutPool:
    def __init__(self, *, num_workers: int, max_concurrent: int, runner_factory: RunnerFactory) -> None:
        if not ray.is_initialized():
            ray.init(include_dashboard=False, log_to_driver=True, configure_logging=False, num_cpus=2)
        per_worker = max(1, math.ceil(max_concurrent / num_workers))
        self._workers = [
            _RolloutWorker.options(max_concurrency=per_worker).remote(i, runner_factory) for i in range(num_workers)
        ]
        self._next = 0

    def submit(self, request: RolloutRequest) -> _RayTicket:
        refs: list[list[Any]] = []
        for problem in request.problems:
            group = []
            for _ in range(request.num_generations):
                worker = self._workers[self._next % len(self._workers)]
                group.append(
                    worker.run.remote(problem, request.sampling, request.weight_version, request.max_turns, self._next)
                )
                self._next += 1
            refs.append(group)
        return _RayTicket(refs)

    def close(self) -> None:
        for worker in self._workers:
            ray.kill(worker)
        self._workers = []
        ray.shutdown()
