"""`DatasetConfig`: the prompts and reference answers of online GRPO (RLVR), and how they are asked.

Rows are `prompt` (chat messages, or plain text when `conversational` is false) plus `answer`,
the reference the verifiers score against. Sources:
- `reasoning_gym`: `reasoning_gym.create_dataset(task, size=, seed=, **task_config)`. A question
  belongs to the eval split iff a hash of its text falls in the `eval_fraction` bucket, so train
  and held-out problems never overlap, whatever the seeds.
- `jsonl`: a local file of `{"question": ..., "answer": ...}` lines (`path`), split the same way.
The held-out count and seed are the run's `eval:` section (shared with env GRPO).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from domain.config.rules import one_of, positive

DATASET_SOURCES = ("reasoning_gym", "jsonl")
DEFAULT_PROMPT_TEMPLATE = "{question}\nThink briefly, then end your reply with a line of the form: Answer: <answer>"
DEFAULT_FORMAT_REGEX = r"(?im)^\s*answer:\s*\S+"


def _fraction(_i: object, a: attrs.Attribute, v: float) -> None:
    if not 0 < v < 1:
        raise ValueError(f"'{a.name}' must be in (0, 1): {v!r}")


def _regex(_i: object, a: attrs.Attribute, v: str) -> None:
    try:
        re.compile(v)
    except re.error as error:
        raise ValueError(f"'{a.name}' is not a valid regular expression ({error}): {v!r}") from None


def _template(_i: object, a: attrs.Attribute, v: str) -> None:
    if "{question}" not in v:
        raise ValueError(f"'{a.name}' must contain the placeholder {{question}}: {v!r}")


@attrs.frozen(kw_only=True)
class DatasetConfig:
    source: str = attrs.field(default="reasoning_gym", validator=one_of(DATASET_SOURCES))
    # reasoning_gym: the generator and its own knobs (e.g. chain_sum's min_digits, max_terms).
    task: str = "chain_sum"
    task_config: dict[str, Any] = attrs.field(factory=dict)
    # jsonl: the file of {"question", "answer"} rows.
    path: str | None = None
    train_size: int = attrs.field(default=512, validator=positive)
    seed: int = 0
    eval_fraction: float = attrs.field(default=0.1, validator=_fraction)
    # How a question is asked: the user message (or plain-text prompt), and an optional system message.
    prompt_template: str = attrs.field(default=DEFAULT_PROMPT_TEMPLATE, validator=_template)
    system_prompt: str | None = None
    conversational: bool = True
    # The `format` reward source scores 1 when this regex is found in a completion (re.search).
    format_regex: str = attrs.field(default=DEFAULT_FORMAT_REGEX, validator=_regex)

    def __attrs_post_init__(self) -> None:
        if self.source == "jsonl" and not self.path:
            raise ValueError("dataset source 'jsonl' needs 'path' (a file of {\"question\", \"answer\"} lines)")
