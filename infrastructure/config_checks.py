"""Cross-field checks on a structured `RunConfig`; each failure is one `... @ $.path` line.

Run after structuring (types and ranges are already right). They check what one section cannot
see alone: the environment exists (registered name, or an importable `BaseEnvironment`
subclass given as `environment_cls`) and accepts its `environment_kwargs`; every reward source
is known for the job; `job: online_grpo` is TRL's server mode (`grpo.use_vllm: true`,
`grpo.vllm_mode: server`); `carry_reasoning` (true or false; false is served by per-turn rows, see
application/run_episode.py) is refused under `rollout_backend: sglang` (the seed says so). There is
no context-parallel key, so a CP request cannot even be written down.
`rollout_max_thinking_tokens` (vLLM's engine-side budget) is refused under sglang and, for the
embedded server, without `server.reasoning_parser`; the reasoning tokens and the effort length
terms are refused where they would do nothing or cannot work (`_thinking_budget_problems`).
"""

from __future__ import annotations

import difflib

import attrs
from collections.abc import Iterable, Mapping

from domain.config import AsyncTrainingConfig, RunConfig
from domain.effort_length import effort_level
from domain.thinking_budget import opening_tag
from infrastructure.environment_catalog import EnvironmentCatalog, RegistryCatalog

# The one place that lists the reward sources each job knows (the lead adds the online verifiers).
# Online GRPO scores completions with verifiers of the row's `answer` (adapters/verifiers), or a
# user function given as `package.module:function`.
REWARD_SOURCES: Mapping[str, tuple[str, ...]] = {
    "env_grpo": ("environment",),
    "online_grpo": ("math_verify", "exact_match", "format"),
}


def semantic_problems(config: RunConfig, catalog: EnvironmentCatalog | None = None) -> list[str]:
    catalog = catalog if catalog is not None else RegistryCatalog()
    return [
        *_job_problems(config),
        *_reward_problems(config),
        *_backend_problems(config),
        *_thinking_budget_problems(config),
        *_environment_problems(config, catalog),
        *_unused_by_job(config),
    ]


# Fields a job never reads. A value other than the default would do nothing, so it is refused.
_ENV_GRPO_IGNORES = {
    "grpo": ("gradient_accumulation_steps", "logging_steps", "use_vllm", "vllm_mode", "vllm_server_base_url",
             "vllm_server_host", "vllm_server_port", "vllm_server_timeout"),
}
_ONLINE_GRPO_READS_TRAINING = ("weight_sync_timeout", "eval_rollout_batch_size", "verify_sync_every_n_syncs")


def _unused_by_job(config: RunConfig) -> list[str]:
    defaults = RunConfig()
    if config.job == "env_grpo":
        unused = {section: fields for section, fields in _ENV_GRPO_IGNORES.items()}
        why = "env GRPO takes one optimizer step per batch and logs every step; TRL's server fields are for online_grpo"
        if config.dataset != defaults.dataset:
            return [f"section 'dataset' is only read by job 'online_grpo' @ $.dataset"]
    else:
        names = [a.name for a in attrs.fields(type(config.training))]
        unused = {"training": tuple(n for n in names if n not in _ONLINE_GRPO_READS_TRAINING)}
        why = f"online GRPO reads only {', '.join(_ONLINE_GRPO_READS_TRAINING)} of this section"
        if config.environment != defaults.environment:
            return [f"section 'environment' is only read by job 'env_grpo' @ $.environment"]
    return [
        f"'{field}' does nothing for job {config.job!r} ({why}); remove it @ $.{section}"
        for section, fields in unused.items()
        for field in fields
        if getattr(getattr(config, section), field) != getattr(getattr(defaults, section), field)
    ]


def _job_problems(config: RunConfig) -> list[str]:
    if config.job != "online_grpo":
        return []
    problems = []
    if not config.grpo.use_vllm:
        problems.append("job 'online_grpo' needs 'use_vllm: true' (TRL's vLLM server mode) @ $.grpo")
    if config.grpo.vllm_mode != "server":
        problems.append(f"job 'online_grpo' needs 'vllm_mode: server', got {config.grpo.vllm_mode!r} @ $.grpo")
    return problems


def _reward_problems(config: RunConfig) -> list[str]:
    known = REWARD_SOURCES[config.job]
    if not config.rewards:
        return ["'rewards' must list at least one term, e.g. [{source: environment}] @ $"]
    problems = []
    for i, term in enumerate(config.rewards):
        if term.source in known:
            continue
        if config.job == "online_grpo" and ":" in term.source:
            from adapters.verifiers.registry import reward_source_problem

            problem = reward_source_problem(term.source)
            if problem:
                problems.append(f"{problem} @ $.rewards[{i}]")
            continue
        problems.append(
            f"unknown reward source {term.source!r} for job {config.job!r} (known: {', '.join(known)})"
            f" @ $.rewards[{i}]{_did_you_mean(term.source, known)}"
        )
    return problems


def _backend_problems(config: RunConfig) -> list[str]:
    kwargs = config.environment.environment_kwargs
    # `carry_reasoning: false` itself is served by the rollout loop (application/run_episode.py):
    # each turn's prompt is re-rendered from the environment's context and trained as its own row.
    if config.training.rollout_backend == "sglang" and "carry_reasoning" in kwargs:
        return ["'carry_reasoning' is refused under 'rollout_backend: sglang' @ $.environment.environment_kwargs"]
    return []


def _thinking_budget_problems(config: RunConfig) -> list[str]:
    """`rollout_max_thinking_tokens`, the reasoning tokens and the effort terms (domain/thinking_budget.py)."""
    t = config.training
    if config.job != "env_grpo":
        return []  # `_unused_by_job` refuses these training keys for online GRPO
    problems = []
    if t.rollout_max_thinking_tokens is not None and t.rollout_backend == "sglang":
        problems.append(
            "'rollout_max_thinking_tokens' is refused under 'rollout_backend: sglang' "
            "(it is vLLM's engine-side thinking_token_budget) @ $.training"
        )
    if not t.server_urls and t.rollout_max_thinking_tokens is not None and config.server.reasoning_parser is None:
        problems.append(
            "'rollout_max_thinking_tokens' needs a reasoning parser on the embedded vLLM server: "
            "set 'server.reasoning_parser' (e.g. qwen3) @ $.training"
        )
    if t.server_urls and config.server.reasoning_parser is not None:
        problems.append(
            "'reasoning_parser' only configures the embedded server; start your server with "
            "--reasoning-parser instead @ $.server"
        )
    return problems + _reasoning_token_problems(t)


def _reasoning_token_problems(t: AsyncTrainingConfig) -> list[str]:
    effort_on = t.effort_length_penalty_k0 > 0 or t.effort_length_floor_weight > 0
    if t.rollout_reasoning_start_token is not None and t.rollout_reasoning_end_token is None:
        return ["'rollout_reasoning_start_token' needs 'rollout_reasoning_end_token' @ $.training"]
    if t.rollout_reasoning_end_token is not None:
        if t.rollout_max_thinking_tokens is None:
            return ["'rollout_reasoning_end_token' needs 'rollout_max_thinking_tokens' (the budget whose "
                    "forced closes it masks) @ $.training"]
        if t.rollout_reasoning_start_token is None and opening_tag(t.rollout_reasoning_end_token) is None:
            return [f"'rollout_reasoning_end_token' {t.rollout_reasoning_end_token!r} is not a closing tag "
                    "</name>: give 'rollout_reasoning_start_token' too @ $.training"]
    if not effort_on:
        return []
    if t.rollout_max_thinking_tokens is None or t.rollout_reasoning_end_token is None:
        return ["the effort length terms need 'rollout_max_thinking_tokens' and 'rollout_reasoning_end_token' "
                "(the budget and the tokens that delimit reasoning) @ $.training"]
    try:
        effort_level(t.rollout_chat_template_kwargs)
    except ValueError as exc:
        return [f"{exc} @ $.training.rollout_chat_template_kwargs"]
    return []


def _environment_problems(config: RunConfig, catalog: EnvironmentCatalog) -> list[str]:
    env = config.environment
    if env.environment_cls is not None:
        cls, problems = _import_environment_cls(env.environment_cls, catalog)
    elif env.environment_type is None:
        return ["give 'environment_type' (a registered name) or 'environment_cls' (module:Class) @ $.environment"]
    else:
        cls, problems = _registered_class(env.environment_type, catalog)
    if cls is None:
        return problems
    return _kwargs_problems(cls, env.environment_kwargs)


def _registered_class(name: str, catalog: EnvironmentCatalog) -> tuple[type | None, list[str]]:
    try:
        names = tuple(catalog.registered_names())
        if name not in names:
            hint = _did_you_mean(name, names)
            listed = ", ".join(sorted(names)) or "none"
            return None, [f"unknown environment_type {name!r} (registered: {listed}) @ $.environment{hint}"]
        return catalog.get_environment_class(name), []
    except Exception as exc:  # noqa: BLE001 - a broken registry must still give one line
        return None, [f"cannot look up environment_type {name!r}: {_describe(exc)} @ $.environment"]


def _import_environment_cls(spec: str, catalog: EnvironmentCatalog) -> tuple[type | None, list[str]]:
    try:
        return catalog.load_environment_cls(spec), []
    except (ValueError, LookupError) as exc:  # the registry's own clear errors name the path
        return None, [f"{exc} @ $.environment.environment_cls"]
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises is one line
        return None, [f"cannot import environment_cls {spec!r}: {_describe(exc)} @ $.environment.environment_cls"]


def _kwargs_problems(cls: type, kwargs: Mapping[str, object]) -> list[str]:
    """The environment's own `resolve_kwargs` judges each key (unknown -> ValueError naming it)."""
    resolve = getattr(cls, "resolve_kwargs", None)
    if resolve is None:
        return []
    problems = []
    for key, value in kwargs.items():
        try:
            resolve({key: value})
        except (ValueError, TypeError) as exc:
            hint = _did_you_mean(key, getattr(cls, "kwargs", {}))
            problems.append(f"{exc} @ $.environment.environment_kwargs{hint}")
    return problems


def _did_you_mean(word: str, choices: Iterable[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def _describe(exc: BaseException) -> str:
    """The message alone for our own clear errors (ValueError, LookupError), else the type too."""
    if isinstance(exc, (ValueError, LookupError)) and not isinstance(exc, UnicodeError):
        return str(exc)
    return f"{type(exc).__name__}: {exc}"
