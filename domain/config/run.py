"""The whole run: which job, and its sections."""

from __future__ import annotations

import attrs

from domain.config.dataset import DatasetConfig
from domain.config.environment import EnvironmentConfig
from domain.config.grpo import GRPOConfig
from domain.config.model import ModelConfig
from domain.config.rules import one_of
from domain.config.server import ServerConfig
from domain.config.training import AsyncTrainingConfig
from domain.rewards import DEFAULT_REWARD_TERMS, RewardTerm

JOBS = ("env_grpo", "online_grpo")


@attrs.frozen(kw_only=True)
class EvalConfig:
    num_problems: int = 64
    seed: int = 1234
    before_training: bool = True


@attrs.frozen(kw_only=True)
class RunConfig:
    job: str = attrs.field(default="env_grpo", validator=one_of(JOBS))
    model: ModelConfig = ModelConfig()
    grpo: GRPOConfig = GRPOConfig()
    training: AsyncTrainingConfig = AsyncTrainingConfig()
    environment: EnvironmentConfig = EnvironmentConfig()
    dataset: DatasetConfig = DatasetConfig()  # online_grpo's prompts and answers
    rewards: tuple[RewardTerm, ...] = DEFAULT_REWARD_TERMS
    server: ServerConfig = ServerConfig()
    eval: EvalConfig = EvalConfig()
