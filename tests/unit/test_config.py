"""Config loading: YAML -> strict structuring -> one `... @ $.path` line per problem.

Cross-field checks (environment, rewards, job) are in test_config_checks.py; these tests use a
fake environment catalog so they exercise only the parsing.
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from domain.config import RunConfig
from domain.config.server import RolloutServerConfig
from domain.rewards import RewardTerm
from infrastructure.config_loader import ConfigError, load_run_config, parse_run_config

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


class OpenCatalog:
    """A catalog in which every environment name exists and takes any kwargs."""

    def registered_names(self) -> tuple[str, ...]:
        return ("react_math",)

    def get_environment_class(self, name: str) -> type:
        return dict

    def load_environment_cls(self, path: str) -> type:
        return dict

    def environment_info(self) -> list[object]:
        return []


def problems_of(data: dict) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_run_config(data, OpenCatalog())
    return info.value.problems


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", ["env_grpo_cpu.yaml", "env_grpo_gpu.yaml"])
def test_examples_load(name: str) -> None:
    config = load_run_config(EXAMPLES / name, OpenCatalog())
    assert config.job == "env_grpo"
    assert config.environment.environment_type == "react_math"
    assert config.rewards == (RewardTerm(source="environment", weight=1.0, exponent=1.0),)


def test_cpu_example_uses_the_embedded_server_and_gpu_example_a_url() -> None:
    cpu = load_run_config(EXAMPLES / "env_grpo_cpu.yaml", OpenCatalog())
    gpu = load_run_config(EXAMPLES / "env_grpo_gpu.yaml", OpenCatalog())
    assert cpu.training.server_urls == () and cpu.server.weight_transfer_backend == "gloo"
    assert gpu.training.server_urls == ("http://localhost:8000",)


def test_empty_sections_give_the_defaults() -> None:
    assert parse_run_config({"grpo": {}, "training": {}}, OpenCatalog()) == RunConfig()


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"jbo": "env_grpo"}, "extra fields found (jbo) @ $ (did you mean 'job'?)"),
        ({"grpo": {"num_generation": 8}}, "extra fields found (num_generation) @ $.grpo (did you mean 'num_generations'?)"),
        ({"training": {"rollout_temprature": 0.7}}, "extra fields found (rollout_temprature) @ $.training (did you mean 'rollout_temperature'?)"),
        ({"environment": {"environment_kwarg": {}}}, "extra fields found (environment_kwarg) @ $.environment (did you mean 'environment_kwargs'?)"),
        ({"rewards": [{"source": "environment"}, {"source": "environment", "wieght": 2}]}, "extra fields found (wieght) @ $.rewards[1] (did you mean 'weight'?)"),
        ({"training": {"rollout_server_configs": [{"url": "http://a:1", "grup_port": 5}]}}, "extra fields found (grup_port) @ $.training.rollout_server_configs[0] (did you mean 'group_port'?)"),
        ({"server": {"xyz": 1}}, "extra fields found (xyz) @ $.server"),
    ],
)
def test_a_misspelled_key_is_refused_at_every_depth(data: dict, line: str) -> None:
    assert problems_of(data) == [line]


SECTIONS = {
    "$": ({}, lambda d, k: d.update({k: 1}), RunConfig),
    "$.model": ({"model": {}}, lambda d, k: d["model"].update({k: 1}), None),
    "$.grpo": ({"grpo": {}}, lambda d, k: d["grpo"].update({k: 1}), None),
    "$.training": ({"training": {}}, lambda d, k: d["training"].update({k: 1}), None),
    "$.environment": ({"environment": {}}, lambda d, k: d["environment"].update({k: 1}), None),
    "$.rewards[0]": ({"rewards": [{"source": "environment"}]}, lambda d, k: d["rewards"][0].update({k: 1}), RewardTerm),
    "$.training.rollout_server_configs[0]": (
        {"training": {"rollout_server_configs": [{"url": "http://a:1"}]}},
        lambda d, k: d["training"]["rollout_server_configs"][0].update({k: 1}),
        RolloutServerConfig,
    ),
}
ALL_FIELD_NAMES = {
    a.name for cls in (RunConfig, RewardTerm, RolloutServerConfig) for a in attrs.fields(cls)
} | {a.name for section in attrs.fields(RunConfig) if attrs.has(section.type) for a in attrs.fields(section.type)}


@settings(max_examples=60, deadline=None)
@given(
    path=st.sampled_from(sorted(SECTIONS)),
    key=st.from_regex(r"[a-z][a-z0-9_]{0,24}", fullmatch=True).filter(lambda k: k not in ALL_FIELD_NAMES),
)
def test_any_unknown_key_in_any_section_is_refused_with_its_path(path: str, key: str) -> None:
    base, add, _cls = SECTIONS[path]
    data = yaml.safe_load(yaml.safe_dump(base))  # a deep copy
    add(data, key)
    [line] = problems_of(data)
    assert line.startswith(f"extra fields found ({key}) @ {path}")


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"grpo": {"learning_rate": "fast"}}, "'learning_rate' must be a number, got str: 'fast' @ $.grpo"),
        ({"grpo": {"num_generations": True}}, "'num_generations' must be an integer, got bool: True @ $.grpo"),
        ({"grpo": {"max_steps": 2.5}}, "'max_steps' must be an integer, got float: 2.5 @ $.grpo"),
        ({"grpo": {"use_vllm": "yes please"}}, "'use_vllm' must be true or false, got str: 'yes please' @ $.grpo"),
        ({"model": {"name_or_path": 7}}, "'name_or_path' must be a string, got int: 7 @ $.model"),
        ({"training": {"rollout_temperature": "hot"}}, "'rollout_temperature' must be a number, got str: 'hot' @ $.training"),
        ({"training": 5}, "'training' must be a mapping, got int: 5 @ $"),
        ({"rewards": "environment"}, "'rewards' must be a list, got str: 'environment' @ $"),
        ({"rewards": [3]}, "must be a mapping, got int: 3 @ $.rewards[0]"),
        ({"environment": {"environment_kwargs": ["task"]}}, "'environment_kwargs' must be a mapping, got list: ['task'] @ $.environment"),
        ({"environment": {"environment_kwargs": {1: "x"}}}, "'environment_kwargs' must be a mapping with string keys, got int: 1 @ $.environment"),
    ],
)
def test_a_wrong_type_names_key_value_and_expected_type(data: dict, line: str) -> None:
    assert problems_of(data) == [line]


def test_ints_are_accepted_where_floats_are_expected() -> None:
    config = parse_run_config({"grpo": {"learning_rate": 1, "epsilon_high": 1}}, OpenCatalog())
    assert config.grpo.learning_rate == 1.0 and isinstance(config.grpo.learning_rate, float)
    assert config.grpo.epsilon_high == 1.0


def test_optional_fields_take_null() -> None:
    config = parse_run_config({"training": {"rollout_temperature": None}, "grpo": {"epsilon_high": None}}, OpenCatalog())
    assert config.training.rollout_temperature is None and config.grpo.epsilon_high is None


@pytest.mark.parametrize(
    ("data", "line"),
    [
        ({"training": {"rollout_max_tokens": -1}}, "'rollout_max_tokens' must be > 0: -1 @ $.training"),
        ({"grpo": {"num_generations": 1}}, "'num_generations' must be >= 2: 1 @ $.grpo"),
        ({"grpo": {"top_p": 1.5}}, "'top_p' must be in (0, 1]: 1.5 @ $.grpo"),
        ({"grpo": {"loss_type": "ppo"}}, "'loss_type' must be one of ['bnpo', 'dapo', 'dr_grpo', 'grpo']: 'ppo' @ $.grpo"),
        ({"job": "sft"}, "'job' must be one of ['env_grpo', 'online_grpo']: 'sft' @ $"),
        ({"rewards": [{"source": "environment", "exponent": 0}]}, "'exponent' must be > 0: 0.0 @ $.rewards[0]"),
    ],
)
def test_an_out_of_range_value_is_refused(data: dict, line: str) -> None:
    assert problems_of(data) == [line]


def test_url_and_server_configs_are_exclusive() -> None:
    data = {"training": {"rollout_server_url": "http://a:8000", "rollout_server_configs": [{"url": "http://b:8000"}]}}
    assert problems_of(data) == ["'rollout_server_url' and 'rollout_server_configs' are exclusive: give one @ $.training"]


def test_every_problem_gets_its_own_line() -> None:
    data = {"grpo": {"beta": -1.0}, "training": {"prompts_per_step": "four"}, "eval": {"sed": 1}}
    assert sorted(problems_of(data)) == sorted(
        [
            "'beta' must be >= 0: -1.0 @ $.grpo",
            "'prompts_per_step' must be an integer, got str: 'four' @ $.training",
            "extra fields found (sed) @ $.eval (did you mean 'seed'?)",
        ]
    )


def test_a_missing_file_is_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_run_config(path, OpenCatalog())
    assert info.value.lines() == [f"{path}: config file not found"]


def test_invalid_yaml_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "job: env_grpo\ngrpo:\n  beta: [0.0\n  epsilon: 0.2\n")
    with pytest.raises(ConfigError) as info:
        load_run_config(path, OpenCatalog())
    [line] = info.value.lines()
    assert line.startswith(f"{path}: invalid YAML at line 4")


@pytest.mark.parametrize(("text", "found"), [("- job\n", "found list: ['job']"), ("", "found an empty document"), ("42\n", "found int: 42")])
def test_a_top_level_that_is_not_a_mapping_is_one_line(tmp_path: Path, text: str, found: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        load_run_config(path, OpenCatalog())
    [line] = info.value.lines()
    assert line.startswith(f"{path}: the top level must be a mapping") and line.endswith(found)


def test_a_key_written_twice_is_refused_with_its_line(tmp_path: Path) -> None:
    path = write(tmp_path, "grpo:\n  beta: 0.0\n  beta: 0.1\n")
    with pytest.raises(ConfigError) as info:
        load_run_config(path, OpenCatalog())
    assert info.value.lines() == [f"{path}: invalid YAML at line 3, column 3: duplicate key 'beta'"]


def test_exponent_floats_without_a_dot_are_numbers(tmp_path: Path) -> None:
    path = write(tmp_path, "grpo:\n  learning_rate: 1e-5\n  max_grad_norm: 2E+0\n")
    config = load_run_config(path, OpenCatalog())
    assert config.grpo.learning_rate == 1e-5 and config.grpo.max_grad_norm == 2.0


def test_file_problems_are_prefixed_with_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "training:\n  rollout_temprature: 0.7\n")
    with pytest.raises(ConfigError) as info:
        load_run_config(path, OpenCatalog())
    assert str(info.value) == f"{path}: extra fields found (rollout_temprature) @ $.training (did you mean 'rollout_temperature'?)"
