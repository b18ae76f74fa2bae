"""Run one multi-turn episode token-in/token-out: environment <-> generation server.

The episode's token ids grow as
`prompt | sampled turn 1 | environment tokens | sampled turn 2 | ...`: each sampled segment is
exactly what the engine returned (ids and behaviour log-probs, trained on); each environment
segment is the chat template's continuation (tool results plus the next assistant header,
masked). The conversation is never re-tokenised, so the next prompt is the concatenation.

A turn the engine ended without the end-of-turn token (a stop string) is closed by the
environment segment with `tokenizer.eos_token_ids[0]` (masked), so the template's rendering and
the token ids stay aligned.

`carry_reasoning: false` (the environment's resolved kwarg, `env.options`): concatenating ids would
keep every turn's `<think>` reasoning in the next prompt, so instead each later turn's prompt is
`tokenizer.prompt_ids(env.context())`, the conversation as the environment says the model should
see it (reasoning dropped). The episode is then per-turn (`Episode.from_turns`): each turn's
prompt and segments, trained as one row per turn; `token_budget` caps each turn's prompt plus
completion. An environment that sets it false without a `context()` method is refused (ValueError).

With a thinking budget and reasoning markers in `SamplingParams`, a reasoning end token the
engine forced (the budget ran out) becomes a masked one-token segment inside the turn: it was not
sampled from the policy (`domain/thinking_budget.py`).

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

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from application.ports.environment import EnvironmentClass, EpisodeEnvironment, Message, Problem, StepResult
from application.ports.generation import Completion, GenerationServer, SamplingParams
from application.ports.tokenizer import ChatTokenizer
from domain.episodes import Episode, RowTokens, Segment
from domain.rewards import ScoreOutOfRange, check_score
from domain.thinking_budget import split_forced_closes

SCORE_SOURCE = "environment"


@attrs.define
class _Progress:
    """What the episode has accumulated so far (mutable, private to one run).

    `prompt_ids + segments` is always what the engine sees next (the whole history, or in a
    per-turn episode the current turn's re-rendered prompt); `total` counts those tokens.
    """

    prompt_ids: list[int]
    messages: list[Message]
    segments: list[Segment] = attrs.field(factory=list)
    total: int = 0
    turns: int = 0
    turn_finish_reasons: list[str] = attrs.field(factory=list)
    context: Callable[[], Sequence[Message]] | None = None  # set when the environment drops reasoning
    finished_turns: list[RowTokens] = attrs.field(factory=list)  # per-turn episodes only

    def start_turn(self, prompt_ids: list[int]) -> None:
        """Per-turn episodes: set the finished turn aside and continue from a freshly rendered prompt."""
        self.finished_turns.append(RowTokens(self.prompt_ids, self.segments))
        self.prompt_ids, self.segments, self.total = list(prompt_ids), [], len(prompt_ids)

    def episode(self, **fields: Any) -> Episode:
        turns = [*self.finished_turns, *([RowTokens(self.prompt_ids, self.segments)] if self.segments else [])]
        if self.context is None or not turns:
            return Episode(prompt_token_ids=self.prompt_ids, segments=self.segments, **fields)
        return Episode.from_turns(turns, **fields)


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

    `token_budget` caps prompt plus completion tokens, of each turn's row in a per-turn episode
    (None: only `params.max_tokens` per turn).
    """
    limit = env_cls.max_turns if max_turns is None else max_turns
    if limit < 1:
        raise ValueError(f"max_turns must be >= 1, got {limit}")
    if "max_turns" in kwargs:
        raise ValueError("environment_kwargs may not set 'max_turns'; use the environment config's max_turns")
    env = env_cls(problem, max_turns=limit, **dict(kwargs))
    try:
        context = _context_when_reasoning_is_dropped(env, env_cls.name)
        opening = list(env.reset())
        progress = _Progress(prompt_ids=tokenizer.prompt_ids(opening), messages=opening, context=context)
        progress.total = len(progress.prompt_ids)
        finish, score, notes = _loop(env, progress, server, tokenizer, params, limit, token_budget)
    finally:
        close_error = _close(env)
    metadata = {"turn_finish_reasons": tuple(progress.turn_finish_reasons), "environment": env_cls.name, **notes}
    if close_error:
        metadata["close_error"] = close_error
    return progress.episode(
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
        if progress.context is not None:
            if not _start_rendered_turn(progress, tokenizer, result, budget):
                return "budget", 0.0, {"reason": f"the next turn's prompt does not fit in token_budget={budget}"}
            continue
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
    progress.segments.extend(_engine_segments(ids, completion, params))
    progress.total += len(completion.token_ids)
    progress.turns += 1
    progress.turn_finish_reasons.append(completion.finish_reason)
    return completion


def _engine_segments(context: list[int], completion: Completion, params: SamplingParams) -> list[Segment]:
    """The turn as sampled segments, less the reasoning closes the thinking budget forced (masked)."""
    if params.thinking_token_budget is None or params.reasoning_markers is None:
        return [Segment.from_engine(completion.token_ids, completion.logprobs)]
    return split_forced_closes(
        context, completion.token_ids, completion.logprobs, params.thinking_token_budget, params.reasoning_markers
    )


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


def _context_when_reasoning_is_dropped(env: EpisodeEnvironment, name: str) -> Callable[[], Sequence[Message]] | None:
    """`env.context` when the environment's resolved `carry_reasoning` is False, else None (token-in/token-out)."""
    options = getattr(env, "options", None)
    if not isinstance(options, Mapping) or options.get("carry_reasoning", True) is not False:
        return None
    context = getattr(env, "context", None)
    if not callable(context):
        raise ValueError(
            f"environment {name!r} sets carry_reasoning false but has no context() method to render each turn's prompt from"
        )
    return context


def _start_rendered_turn(progress: _Progress, tokenizer: ChatTokenizer, result: StepResult, budget: int | None) -> bool:
    """Per-turn episodes: the next prompt is the environment's context, rendered; False if it leaves no room."""
    assert progress.context is not None
    progress.messages.extend(result.observation)
    prompt = tokenizer.prompt_ids(list(progress.context()))
    if budget is not None and len(prompt) >= budget:
        return False
    progress.start_turn(prompt)
    return True


def _close(env: EpisodeEnvironment) -> str | None:
    try:
        env.close()
    except Exception as exc:  # reported in the episode's metadata; the episode itself stands
        return f"{type(exc).__name__}: {exc}"
    return None
