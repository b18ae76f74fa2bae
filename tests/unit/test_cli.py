"""The `rlsetup` CLI in-process (check, envs, train/serve delegation) and once as a subprocess.

train/serve/check --sync hand the loaded config to `infrastructure.bootstrap`; here a fake
bootstrap module (records what it was given, can raise the model-not-found error) stands in.
"""

from __future__ import annotations

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from entrypoints.cli import main
from infrastructure.model_assets import ModelNotFound

ROOT = Path(__file__).resolve().parents[2]
CPU_EXAMPLE = ROOT / "examples" / "env_grpo_cpu.yaml"
BAD = "grpo:\n  learning_rate: fast\ntraining:\n  rollout_temprature: 0.7\n"  # two problems


@pytest.fixture
def bad_config(tmp_path: Path) -> Path:
    path = tmp_path / "bad.yaml"
    path.write_text(BAD)
    return path


class FakeBootstrap(types.ModuleType):
    """Stands in for infrastructure.bootstrap: records calls, returns `code` or raises `error`."""

    def __init__(self, code: int = 0, error: Exception | None = None) -> None:
        super().__init__("infrastructure.bootstrap")
        self.calls: list[tuple[str, object]] = []
        self._code, self._error = code, error

    def _answer(self, name: str, *args: object) -> int:
        self.calls.append((name, args))
        if self._error is not None:
            raise self._error
        return self._code

    def run_training(self, config: object, config_path: Path) -> int:
        return self._answer("run_training", config, config_path)

    def serve(self, config: object) -> int:
        return self._answer("serve", config)

    def check_sync(self, config: object) -> int:
        return self._answer("check_sync", config)


def install(monkeypatch: pytest.MonkeyPatch, fake: FakeBootstrap) -> FakeBootstrap:
    monkeypatch.setitem(sys.modules, "infrastructure.bootstrap", fake)
    return fake


@pytest.mark.parametrize("example", [CPU_EXAMPLE, ROOT / "examples" / "env_grpo_gpu.yaml"])
def test_check_an_example_prints_one_summary_line(example: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(example)]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    [line] = out.splitlines()
    assert line.startswith(f"ok {example}: job env_grpo, model smollm2-135m-instruct, environment react_math")


def test_check_a_bad_config_prints_one_line_per_problem(bad_config: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(bad_config)]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.splitlines() == [
        f"{bad_config}: 'learning_rate' must be a number, got str: 'fast' @ $.grpo",
        f"{bad_config}: extra fields found (rollout_temprature) @ $.training (did you mean 'rollout_temperature'?)",
    ]


def test_check_a_missing_file_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    missing = tmp_path / "missing.yaml"
    assert main(["check", str(missing)]) == 2
    assert capsys.readouterr().err.splitlines() == [f"{missing}: config file not found"]


def test_envs_lists_react_math_with_its_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["envs"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["name", "requires_answer", "max_turns", "summary"]
    [row] = [line for line in lines if line.startswith("react_math ")]
    assert row.split()[1:3] == ["True", "3"]
    assert any(line.strip().startswith("task = 'chain_sum'") for line in lines)


@pytest.mark.parametrize(("argv", "call"), [(["train"], "run_training"), (["serve"], "serve"), (["check", "--sync"], "check_sync")])
def test_commands_hand_the_loaded_config_to_the_bootstrap(monkeypatch: pytest.MonkeyPatch, argv: list[str], call: str) -> None:
    fake = install(monkeypatch, FakeBootstrap(code=0))
    assert main([*argv, str(CPU_EXAMPLE)]) == 0
    [(name, args)] = fake.calls
    assert name == call and args[0].grpo.max_steps == 14
    if call == "run_training":
        assert args[1] == CPU_EXAMPLE


def test_the_bootstrap_exit_code_is_returned(monkeypatch: pytest.MonkeyPatch) -> None:
    install(monkeypatch, FakeBootstrap(code=3))
    assert main(["train", str(CPU_EXAMPLE)]) == 3


def test_a_model_that_is_not_on_disk_is_one_line(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    install(monkeypatch, FakeBootstrap(error=ModelNotFound("model.name_or_path '/nowhere' is not a local model folder")))
    assert main(["train", str(CPU_EXAMPLE)]) == 2
    assert capsys.readouterr().err.splitlines() == ["rlsetup train: model.name_or_path '/nowhere' is not a local model folder"]


def test_a_bad_config_never_reaches_the_bootstrap(monkeypatch: pytest.MonkeyPatch, bad_config: Path) -> None:
    fake = install(monkeypatch, FakeBootstrap())
    assert main(["serve", str(bad_config)]) == 2
    assert fake.calls == []


def test_usage_errors_exit_2_and_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 2
    assert main(["tarin", "x.yaml"]) == 2
    assert main(["--help"]) == 0
    assert "check" in capsys.readouterr().out


def test_python_dash_m_check_of_a_bad_file_exits_2_without_traceback(bad_config: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-m", "entrypoints.cli", "check", str(bad_config)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 2 and all(line.startswith(f"{bad_config}: ") for line in lines)


def test_check_a_reasoning_marker_that_is_not_one_token_names_the_file_and_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "think.yaml"
    config.write_text(
        "job: env_grpo\ntraining:\n  rollout_max_thinking_tokens: 64\n  rollout_reasoning_end_token: '</think>'\n"
        "server:\n  reasoning_parser: deepseek_r1\n"
    )
    assert main(["check", str(config)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].startswith(f"{config}: 'rollout_reasoning_end_token' '</think>' is not one token")
    assert err[0].endswith("@ $.training")
