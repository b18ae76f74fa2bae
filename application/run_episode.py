"""Run one multi-turn episode token-in/token-out: environment <-> generation server.

The episode's token ids grow as
`prompt | sampled turn 1 | environment tokens | sampled turn 2 | ...`: each sampled segment is
exactly what the engine returned (ids and behaviour log-probs, trained on); each environment
segment is the chat template's continuation (tool results plus the next assistant header,
masked). The conversation is never re-tokenised, so the next prompt is the concatenation.

A turn the engine ended without the end-of-turn token (a stop string) is closed by the
environment segment with `tokenizer.eos_token_ids[0]` (masked), so the template's rendering and
the token ids stay aligned.

Stops, recorded as `Episode.finish_reason`:
- "stop": the environment said done (its score is the episode's);
- "length": the engine hit max_tokens (the truncated turn is still passed to `step`; if the
  environment does not finish on it, the score is 0);
- "max_turns": the turn limit was reached and the environment had not finished (score 0);
- "budget": the next turn would not fit in `token_budget` (score 0);
- "error": `step` raised or returned an invalid result (score 0, the reason in metadata);
- anything else the engine reported (e.g. "abort"): score 0, the turn is not shown to `step`.
Environment faults never escape the runner; the environment is always closed. Errors of the
generation server (timeouts, HTTP) do escape: they are infrastructure failures, not episodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import attrs

from application.ports.environment import EnvironmentClass, EpisodeEnvironment, Message, Problem, StepResult
from application.ports.generation import Completion, GenerationServer, SamplingParams
from application.ports.tokenizer import ChatTokenizer
from domain.episodes import Episode, Segment
from domain.rewards import ScoreOutOfRange, check_score

SCORE_SOURCE = "environment"


@attrs.define
class _Progress:
    """What the episode has accumulated so far (mutable, private to one run)."""

    prompt_ids: list[int]
    messages: list[Message]
    segments: list[Segment] = attrs.field(factory=list)
    total: int = 0
    turns: int = 0
    turn_finish_reasons: list[str] = attrs.field(factory=list)


def run_episode(
    env_cls: EnvironmentClass,
    problem: Problem,
    kwargs: Mapping[str, Any],
    server: GenerationServer,
    tokenizer: ChatTokenizer,
    params: SamplingParams,
    max_turns: int | None,
    weight_version: int,
    token_budget: int | None = None,
) -> Episode:
    """One episode of `problem`; `max_turns=None` means the environment's own limit.

    `token_budget` caps prompt plus completion tokens (None: only `params.max_tokens` per turn).
    """
    limit = env_cls.max_turns if max_turns is None else max_turns
    if limit < 1:
        raise ValueError(f"max_turns must be >= 1, got {limit}")
    if "max_turns" in kwargs:
        raise ValueError("environment_kwargs may not set 'max_turns'; use the environment config's max_turns")
    env = env_cls(problem, max_turns=limit, **dict(kwargs))
    try:
        opening = list(env.reset())
        progress = _Progress(prompt_ids=tokenizer.prompt_ids(opening), messages=opening)
        progress.total = len(progress.prompt_ids)
        finish, score, notes = _loop(env, progress, server, tokenizer, params, limit, token_budget)
    finally:
        close_error = _close(env)
    metadata = {"turn_finish_reasons": tuple(progress.turn_finish_reasons), "environment": env_cls.name, **notes}
    if close_error:
        metadata["close_error"] = close_error
    return Episode(
        prompt_token_ids=progress.prompt_ids,
        segments=progress.segments,
        scores={SCORE_SOURCE: score},
        weight_version=weight_version,
        num_turns=progress.turns,
        finish_reason=finish,
        metadata=metadata,
    )


def _loop(
    env: EpisodeEnvironment,
    progress: _Progress,
    server: GenerationServer,
    tokenizer: ChatTokenizer,
    params: SamplingParams,
    limit: int,
    budget: int | None,
) -> tuple[str, float, dict[str, Any]]:
    while True:
        room = None if budget is None else budget - progress.total
        if room is not None and room <= 0:
            return "budget", 0.0, {"reason": f"no room for another turn within token_budget={budget}"}
        turn_params = params if room is None or room >= params.max_tokens else attrs.evolve(params, max_tokens=room)
        completion = _sample(server, progress, turn_params)
        if completion.finish_reason not in ("stop", "length"):
            return completion.finish_reason, 0.0, {"reason": f"engine finished the turn with {completion.finish_reason!r}"}
        text = tokenizer.decode(completion.token_ids)
        progress.messages.append(Message(role="assistant", content=text))
        result, error = _step(env, text)
        if error is not None:
            return "error", 0.0, {"error": error}
        if result.done:
            reason = "length" if completion.finish_reason == "length" else "stop"
            return reason, float(result.score), {"environment_metadata": dict(result.metadata)}
        if completion.finish_reason == "length":
            return "length", 0.0, {"reason": f"turn {progress.turns} hit max_tokens={turn_params.max_tokens} unfinished"}
        if progress.turns >= limit:
            return "max_turns", 0.0, {"reason": f"the environment did not finish within max_turns={limit}"}
        inserted = _environment_tokens(tokenizer, progress, completion, result)
        if budget is not None and progress.total + len(inserted) >= budget:
            return "budget", 0.0, {"reason": f"the tool results do not fit in token_budget={budget}"}
        progress.segments.append(Segment.from_environment(inserted))
        progress.total += len(inserted)
        progress.messages.extend(result.observation)


def _sample(server: GenerationServer, progress: _Progress, params: SamplingParams) -> Completion:
    ids = list(progress.prompt_ids) + [t for s in progress.segments for t in s.token_ids]
    completions = server.generate(ids, params, n=1)
    if len(completions) != 1:
        raise RuntimeError(f"generation server {server.url} returned {len(completions)} completions for n=1")
    completion = completions[0]
    progress.segments.append(Segment.from_engine(completion.token_ids, completion.logprobs))
    progress.total += len(completion.token_ids)
    progress.turns += 1
    progress.turn_finish_reasons.append(completion.finish_reason)
    return completion


def _step(env: EpisodeEnvironment, text: str) -> tuple[StepResult | None, str | None]:
    """The environment's answer, or why it has none (an exception or an invalid result)."""
    try:
        result = env.step(text)
    except Exception as exc:  # an environment fault ends the episode, never the run
        return None, f"step raised {type(exc).__name__}: {exc}"
    if not isinstance(result, StepResult):
        return None, f"step returned {type(result).__name__}, not a StepResult"
    if result.done:
        if result.score is None:
            return None, "step returned done=True without a score"
        try:
            check_score(SCORE_SOURCE, result.score)
        except ScoreOutOfRange as exc:
            return None, str(exc)
    elif not result.observation:
        return None, "step returned done=False with no observation for the next turn"
    return result, None


def _environment_tokens(tokenizer: ChatTokenizer, progress: _Progress, completion: Completion, result: StepResult) -> list[int]:
    end_of_turn = tokenizer.eos_token_ids[0]
    closing = [] if completion.token_ids and completion.token_ids[-1] == end_of_turn else [end_of_turn]
    return closing + tokenizer.continuation_ids(progress.messages, result.observation)


def _close(env: EpisodeEnvironment) -> str | None:
    try:
        env.close()
    except Exception as exc:  # reported in the episode's metadata; the episode itself stands
        return f"{type(exc).__name__}: {exc}"
    return None
