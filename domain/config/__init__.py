"""The run configuration as frozen attrs classes with validators (parsed from YAML elsewhere)."""

from domain.config.environment import EnvironmentConfig
from domain.config.grpo import GRPOConfig
from domain.config.model import ModelConfig
from domain.config.run import RunConfig
from domain.config.server import ServerConfig, RolloutServerConfig
from domain.config.training import AsyncTrainingConfig

__all__ = [
    "AsyncTrainingConfig",
    "EnvironmentConfig",
    "GRPOConfig",
    "ModelConfig",
    "RolloutServerConfig",
    "RunConfig",
    "ServerConfig",
]
