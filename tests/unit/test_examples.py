"""Every example YAML under examples/ loads as a valid run config and names a registered environment.

Also: every registered environment has its own example (examples/envs/<name>.yaml, or the CPU
template for react_math), and each file under examples/envs/ trains the environment it is named for.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.environments.registry import registered_names
from infrastructure.config_loader import load_run_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
YAMLS = sorted([*EXAMPLES.rglob("*.yaml"), *EXAMPLES.rglob("*.yml")])
ENV_EXAMPLES = sorted((EXAMPLES / "envs").glob("*.yaml"))


def _id(path: Path) -> str:
    return str(path.relative_to(EXAMPLES))


def test_the_examples_are_found():
    assert len(YAMLS) >= 3 + len(ENV_EXAMPLES) and ENV_EXAMPLES


@pytest.mark.parametrize("path", YAMLS, ids=_id)
def test_example_loads_and_names_a_registered_environment(path: Path):
    config = load_run_config(path)
    assert config.environment.environment_cls is None, f"{_id(path)}: examples use registered names"
    assert config.environment.environment_type in registered_names(), _id(path)


@pytest.mark.parametrize("path", ENV_EXAMPLES, ids=_id)
def test_env_example_is_named_for_its_environment_and_runs_a_few_cpu_steps(path: Path):
    config = load_run_config(path)
    assert config.job == "env_grpo"
    assert config.environment.environment_type == path.stem
    assert config.grpo.output_dir == f"runs/{path.stem}"
    assert config.training.rollout_server_url is None and not config.training.rollout_server_configs
    assert config.server.weight_transfer_backend == "gloo" and config.model.dtype == "float32"
    assert config.grpo.max_steps <= 5
    assert [term.source for term in config.rewards] == ["environment"]


def test_every_registered_environment_has_an_example():
    covered = {load_run_config(path).environment.environment_type for path in YAMLS if path.parent.name == "envs"}
    covered.add(load_run_config(EXAMPLES / "env_grpo_cpu.yaml").environment.environment_type)
    assert set(registered_names()) <= covered, sorted(set(registered_names()) - covered)
