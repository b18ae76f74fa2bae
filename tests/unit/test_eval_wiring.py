"""The env-GRPO held-out evaluator as wired: eval split, eval.seed for the problems AND the sampling."""

from __future__ import annotations

from application.ports.environment import Problem
from infrastructure import wiring
from infrastructure.config_loader import parse_run_config
from tests.unit.test_config_checks import CATALOG


class _Env:
    @staticmethod
    def problems(split: str, count: int, seed: int, **kwargs) -> list[Problem]:
        return [Problem(prompt=f"{split}-{seed}-{i}") for i in range(count)]


def test_evaluation_samples_with_the_eval_seed_so_before_and_after_share_a_random_stream() -> None:
    config = parse_run_config({"eval": {"num_problems": 3, "seed": 77}, "training": {"rollout_temperature": 0.7}}, CATALOG)
    evaluator = wiring.evaluator(config, _Env, pool=None)
    assert evaluator.count == 3
    assert evaluator.sampling.seed == 77 and evaluator.sampling.temperature == 0.7
    assert wiring.sampling(config).seed is None  # training rollouts stay unseeded
