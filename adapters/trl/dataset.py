"""The online job's data: train rows as a `datasets.Dataset` (`prompt` + `answer`) and held-out rows.

Questions come from `dataset.source` (`reasoning_gym` generator or a local `jsonl` file of
`{"question", "answer"}` lines). A question is held out iff the SHA-256 of its text falls below
`eval_fraction`, so no question is ever in both splits; each split reads its own seed stream
(reasoning_gym) and keeps drawing until it has `count` rows or gives up naming the shortfall.
Prompts are chat messages (`[system], user`) when `conversational`, else the user text; TRL
applies the chat template itself, and the held-out rows are tokenized the same way
(`apply_chat_template(..., add_generation_prompt=True)`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from application.run_online_grpo import HeldOutRow
from domain.config.dataset import DatasetConfig

MAX_DRAWS_PER_ROW = 50
_SPLIT_SALT = {"train": 0, "eval": 7919}


def in_eval_split(question: str, eval_fraction: float) -> bool:
    digest = hashlib.sha256(question.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < eval_fraction


def questions(config: DatasetConfig, split: str, count: int, seed: int) -> list[dict[str, str]]:
    """`count` rows `{"question", "answer"}` of `split` ("train" or "eval")."""
    if split not in _SPLIT_SALT:
        raise ValueError(f"unknown split {split!r}; use 'train' or 'eval'")
    rows: list[dict[str, str]] = []
    for row in _candidates(config, split, count, seed):
        if in_eval_split(row["question"], config.eval_fraction) == (split == "eval"):
            rows.append(row)
            if len(rows) == count:
                return rows
    raise ValueError(
        f"dataset {config.source}:{config.task if config.source == 'reasoning_gym' else config.path} gave only "
        f"{len(rows)} {split} rows (asked for {count}); widen task_config, add rows or change eval_fraction"
    )


def _candidates(config: DatasetConfig, split: str, count: int, seed: int) -> Iterator[dict[str, str]]:
    if config.source == "jsonl":
        yield from _jsonl_rows(Path(str(config.path)))
        return
    import reasoning_gym

    draws = max(count, 1) * MAX_DRAWS_PER_ROW
    try:
        data = reasoning_gym.create_dataset(config.task, size=draws, seed=seed * 1_000_003 + _SPLIT_SALT[split],
                                            **config.task_config)
    except Exception as error:  # noqa: BLE001 - name the task and its config
        raise ValueError(f"reasoning_gym task {config.task!r} with task_config {config.task_config}: "
                         f"{type(error).__name__}: {error}") from error
    for index in range(draws):
        item = data[index]
        yield {"question": str(item["question"]), "answer": str(item["answer"])}


def _jsonl_rows(path: Path) -> Iterator[dict[str, str]]:
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                yield {"question": str(row["question"]), "answer": str(row["answer"])}
            except (ValueError, KeyError, TypeError) as error:
                raise ValueError(f"{path}:{number}: not a {{\"question\", \"answer\"}} JSON object ({error})") from None


def render_prompt(config: DatasetConfig, question: str) -> Any:
    user = config.prompt_template.replace("{question}", question)
    if not config.conversational:
        return user if config.system_prompt is None else f"{config.system_prompt}\n{user}"
    messages = [] if config.system_prompt is None else [{"role": "system", "content": config.system_prompt}]
    return [*messages, {"role": "user", "content": user}]


def train_dataset(config: DatasetConfig) -> Any:
    """A `datasets.Dataset` of `prompt` and `answer`, `train_size` rows."""
    from datasets import Dataset

    rows = questions(config, "train", config.train_size, config.seed)
    return Dataset.from_list([{"prompt": render_prompt(config, r["question"]), "answer": r["answer"]} for r in rows])


def prompt_token_ids(tokenizer: Any, prompt: Any) -> list[int]:
    """Token ids of a prompt, as TRL renders it (chat template with the generation prompt)."""
    if isinstance(prompt, str):
        return list(tokenizer(text=prompt)["input_ids"])
    encoded = tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)
    return list(encoded["input_ids"])


def held_out_rows(config: DatasetConfig, tokenizer: Any, count: int, seed: int) -> Sequence[HeldOutRow]:
    rows = questions(config, "eval", count, seed)
    result = []
    for row in rows:
        prompt = render_prompt(config, row["question"])
        result.append(HeldOutRow(prompt=prompt, prompt_ids=prompt_token_ids(tokenizer, prompt), answer=row["answer"]))
    return result
