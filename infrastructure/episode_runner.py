"""The episode runner each Ray rollout worker builds once: server clients, tokenizer, environment.

`EpisodeRunnerSpec` is plain, picklable data; `build_episode_runner(spec, worker_index)` runs in
the worker process and names the concrete adapters (this is composition, so it lives here).
Episodes are spread over the servers round-robin by their global index.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import attrs

from adapters.chat_tokenizer import HfChatTokenizer
from adapters.environments.registry import resolve_environment_class
from adapters.sglang.http_server import SglangHttpServer
from adapters.vllm.http_server import VllmHttpServer
from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.run_episode import run_episode
from domain.config import EnvironmentConfig
from domain.episodes import Episode
from domain.thinking_budget import ReasoningMarkers


GENERATION_SERVERS = {"vllm": VllmHttpServer, "sglang": SglangHttpServer}


@attrs.frozen(kw_only=True)
class EpisodeRunnerSpec:
    rollout_backend: str
    server_urls: tuple[str, ...]
    request_timeout: float
    model_path: str
    chat_template_kwargs: Mapping[str, Any]
    environment: EnvironmentConfig
    token_budget: int
    # the run's resolved reasoning markers: forced reasoning closes are masked (domain/thinking_budget)
    reasoning_markers: ReasoningMarkers | None = None


def environment_class(config: EnvironmentConfig):
    """The environment class a config names: `environment_cls` wins over `environment_type`."""
    return resolve_environment_class(config.environment_type, config.environment_cls)


def build_episode_runner(spec: EpisodeRunnerSpec, worker_index: int) -> Callable[..., Episode]:
    server_cls = GENERATION_SERVERS[spec.rollout_backend]
    servers = [server_cls(url, timeout=spec.request_timeout) for url in spec.server_urls]
    tokenizer = HfChatTokenizer(spec.model_path, chat_template_kwargs=dict(spec.chat_template_kwargs))
    env_cls = environment_class(spec.environment)
    kwargs = dict(spec.environment.environment_kwargs)

    def run(problem: Problem, sampling: SamplingParams, version: int, max_turns: int | None, index: int) -> Episode:
        server = servers[index % len(servers)]
        if spec.reasoning_markers is not None:
            sampling = attrs.evolve(sampling, reasoning_markers=spec.reasoning_markers)
        return run_episode(env_cls, problem, kwargs, server, tokenizer, sampling, max_turns, version, spec.token_budget)

    return run
