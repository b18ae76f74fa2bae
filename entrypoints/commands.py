"""The `rlsetup` commands: each loads the config, then hands it to one use of the bootstrap.

`infrastructure.bootstrap` (the composition root, which imports torch and the adapters) is
imported inside the commands that need it, so `check` and `envs` stay fast and light.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from domain.config import RunConfig
from entrypoints.envs_table import render_envs_table
from infrastructure.config_loader import ConfigError, load_run_config
from infrastructure.environment_catalog import RegistryCatalog


def check(args: argparse.Namespace) -> int:
    config = load_run_config(args.config)
    if config.training.rollout_max_thinking_tokens is not None:  # the markers need the policy's tokenizer
        from infrastructure.model_assets import resolve_model_path
        from infrastructure.reasoning_tokens import reasoning_markers

        try:
            reasoning_markers(config.training, resolve_model_path(config.model.name_or_path))
        except ConfigError as exc:
            raise ConfigError(exc.problems, source=str(args.config)) from None
    print(f"ok {args.config}: {summary(config)}")
    if not args.sync:
        return 0
    from infrastructure.bootstrap import check_sync

    return check_sync(config)


def envs(_args: argparse.Namespace) -> int:
    print(render_envs_table(RegistryCatalog().environment_info()))
    return 0


def train(args: argparse.Namespace) -> int:
    config = load_run_config(args.config)
    from infrastructure.bootstrap import run_training

    return run_training(config, Path(args.config))


def serve(args: argparse.Namespace) -> int:
    config = load_run_config(args.config)
    from infrastructure.bootstrap import serve as serve_model

    return serve_model(config)


def summary(config: RunConfig) -> str:
    rewards = " + ".join(f"{t.weight:g}*{t.source}^{t.exponent:g}" for t in config.rewards)
    if config.job == "online_grpo":
        g = config.grpo
        data = f"dataset {config.dataset.source}:{config.dataset.task}"
        servers = g.external_server_url or f"embedded at {config.server.host}:{config.server.port}"
    else:
        env = config.environment
        data = f"environment {env.environment_cls or env.environment_type}"
        urls = config.training.server_urls
        servers = ", ".join(urls) if urls else f"embedded at {config.server.host}:{config.server.port}"
    return (
        f"job {config.job}, model {config.model.name_or_path}, {data}, rewards {rewards}, "
        f"servers {servers}, max_steps {config.grpo.max_steps}"
    )
