"""Reward sources of online GRPO, by the name a `rewards:` term gives as `source:`.

- Built-ins score one completion against its row's `answer` column: `math_verify`
  (`math_answer`), `exact_match` and `format` (`domain.verifiers`; `format` takes its regex from
  `dataset.format_regex`).
- Any other name of the form `package.module:function` is a user reward function, imported
  once, with TRL's signature `fn(prompts, completions, **kwargs) -> list[float]` (kwargs: the
  dataset's other columns, such as `answer`, plus whatever TRL passes).
Every source returns one score per completion, each checked to lie in [0, 1]
(`domain.rewards.check_score`): a `None`, a NaN or an out-of-range value raises, naming the source
and the completion's index. Completions may be plain strings or TRL's conversational form (a list
of `{"role", "content"}` messages); built-ins read the assistant text.
"""

from __future__ import annotations

import importlib
import math
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import attrs

from adapters.verifiers.math_answer import math_verify_score
from domain.rewards import ScoreOutOfRange, check_score
from domain.verifiers import compile_format, exact_match_score, format_score

BUILTIN_SOURCES = ("math_verify", "exact_match", "format")
ScoreFn = Callable[..., Sequence[float | None]]


class RewardSourceError(ValueError):
    """A reward source name that cannot be resolved, or a source that broke its contract."""


@attrs.frozen
class RewardSource:
    """A TRL-style reward function whose every score is validated in [0, 1]."""

    name: str
    fn: ScoreFn = attrs.field(eq=False)

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], **kwargs: Any) -> list[float]:
        scores = list(self.fn(prompts=prompts, completions=completions, **kwargs))
        if len(scores) != len(completions):
            raise RewardSourceError(
                f"reward source {self.name!r} returned {len(scores)} scores for {len(completions)} completions"
            )
        for index, score in enumerate(scores):
            if score is None or (isinstance(score, float) and math.isnan(score)):
                raise ScoreOutOfRange(
                    f"reward source {self.name!r} gave no score ({score!r}) for completion {index}; "
                    "scores must lie in [0, 1]"
                )
            try:
                check_score(self.name, score)
            except ScoreOutOfRange as error:
                raise ScoreOutOfRange(f"{error} (completion {index})") from None
        return [float(score) for score in scores]


def completion_text(completion: Any) -> str:
    """The assistant text of a TRL completion: a string, one message, or a list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        return str(completion.get("content") or "")
    if isinstance(completion, Sequence):
        parts = [str(m.get("content") or "") for m in completion if isinstance(m, Mapping) and m.get("role") == "assistant"]
        return "\n".join(parts)
    raise RewardSourceError(f"cannot read a completion of type {type(completion).__name__}: {completion!r:.80}")


def _per_row(name: str, score_one: Callable[[str, str], float]) -> ScoreFn:
    def score(prompts: Sequence[Any], completions: Sequence[Any], answer: Sequence[str] | None = None, **_: Any):
        if answer is None:
            raise RewardSourceError(f"reward source {name!r} needs an 'answer' column in the dataset; none was passed")
        if len(answer) != len(completions):
            raise RewardSourceError(f"reward source {name!r}: {len(answer)} answers for {len(completions)} completions")
        return [score_one(completion_text(c), a) for c, a in zip(completions, answer)]

    score.__name__ = name
    return score


def _format_fn(regex: str) -> ScoreFn:
    pattern = compile_format(regex)

    def score(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
        return [format_score(completion_text(c), pattern) for c in completions]

    return score


def load_user_function(spec: str) -> ScoreFn:
    """Import `package.module:function`; errors name the spec and what failed."""
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr or not re.fullmatch(r"[\w.]+", attr):
        raise RewardSourceError(
            f"unknown reward source {spec!r}: give a built-in ({', '.join(BUILTIN_SOURCES)}) "
            "or a function as 'package.module:function'"
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - any import failure is the user's module
        raise RewardSourceError(f"cannot import module {module_name!r} of reward source {spec!r}: "
                                f"{type(error).__name__}: {error}") from None
    target: Any = module
    for part in attr.split("."):
        target = getattr(target, part, None)
    if not callable(target):
        raise RewardSourceError(f"reward source {spec!r}: {module_name!r} has no callable {attr!r}")
    return target


def reward_source(name: str, *, format_regex: str) -> RewardSource:
    """The validated source for a `rewards:` term's `source:` name."""
    if name == "math_verify":
        return RewardSource(name, _per_row(name, math_verify_score))
    if name == "exact_match":
        return RewardSource(name, _per_row(name, exact_match_score))
    if name == "format":
        return RewardSource(name, _format_fn(format_regex))
    return RewardSource(name, load_user_function(name))


def reward_source_problem(name: str) -> str | None:
    """For config checks: None when `name` resolves, else one line saying why not."""
    if name in BUILTIN_SOURCES:
        return None
    try:
        load_user_function(name)
    except RewardSourceError as error:
        return str(error)
    return None
