"""The online job's data: disjoint train/eval splits, prompts as TRL expects them, held-out evaluation."""

from __future__ import annotations

import json

import pytest

from adapters.trl.dataset import held_out_rows, in_eval_split, questions, render_prompt, train_dataset
from adapters.trl.metrics_callback import step_metrics
from adapters.verifiers.registry import reward_source
from application.ports.generation import SamplingParams
from application.ports.weight_publisher import PublishReport
from application.run_online_grpo import HeldOutRow, OnlineHeldOut
from domain.config.dataset import DatasetConfig
from domain.rewards import RewardTerm
from tests.fakes.fake_generation import FakeGenerationServer

SMALL = {"min_digits": 1, "max_digits": 2, "min_terms": 2, "max_terms": 3}


def test_reasoning_gym_splits_never_share_a_question():
    config = DatasetConfig(task="chain_sum", task_config=SMALL, eval_fraction=0.2)
    train = questions(config, "train", 200, seed=0)
    held = questions(config, "eval", 40, seed=1)
    assert len(train) == 200 and len(held) == 40
    assert not {r["question"] for r in train} & {r["question"] for r in held}
    assert all(in_eval_split(r["question"], 0.2) for r in held)
    assert questions(config, "train", 5, seed=0) == train[:5]  # reproducible


def test_jsonl_source_reads_rows_and_says_when_too_few(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text("\n".join(json.dumps({"question": f"q{i}?", "answer": str(i)}) for i in range(30)) + "\n")
    config = DatasetConfig(source="jsonl", path=str(path), eval_fraction=0.3)
    train = questions(config, "train", 10, seed=0)
    assert all(r["question"].startswith("q") for r in train)
    with pytest.raises(ValueError, match="gave only .* train rows"):
        questions(config, "train", 30, seed=0)
    path.write_text('{"question": "x"}\n')
    with pytest.raises(ValueError, match=r"rows.jsonl:1"):
        questions(config, "train", 1, seed=0)


def test_prompts_are_chat_messages_or_text():
    chat = DatasetConfig(system_prompt="be brief", prompt_template="Q: {question}")
    assert render_prompt(chat, "1+1") == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "Q: 1+1"}]
    text = DatasetConfig(conversational=False, prompt_template="Q: {question}")
    assert render_prompt(text, "1+1") == "Q: 1+1"
    data = train_dataset(DatasetConfig(task_config=SMALL, train_size=6))
    assert data.column_names == ["prompt", "answer"] and len(data) == 6


def test_held_out_reward_is_the_priced_mean_over_server_samples():
    from transformers import AutoTokenizer

    from infrastructure.model_assets import resolve_model_path

    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))
    config = DatasetConfig(task_config=SMALL)
    rows = held_out_rows(config, tokenizer, 4, seed=3)
    text = tokenizer.decode(rows[0].prompt_ids)
    assert text.endswith("<|im_start|>assistant\n") and rows[0].answer in {r["answer"] for r in questions(config, "eval", 4, 3)}
    answers = {r.prompt_ids: r.answer for r in rows}
    server = FakeGenerationServer(
        encode=lambda s: tokenizer(s, add_special_tokens=False)["input_ids"],
        end_of_turn_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        replies=lambda ids: f"Answer: {answers[tuple(ids)]}" if ids == rows[0].prompt_ids else "Answer: nope",
    )
    terms = (RewardTerm("exact_match", weight=3.0), RewardTerm("format", weight=1.0))
    evaluator = OnlineHeldOut(
        server=server, rows=rows, sampling=SamplingParams(max_tokens=16, seed=7),
        decode=lambda ids: tokenizer.decode(ids, skip_special_tokens=True), terms=terms,
        sources={t.source: reward_source(t.source, format_regex=config.format_regex) for t in terms}, concurrency=2,
    )
    # one row right (3 + 1), three wrong but well formatted (0 + 1)
    assert evaluator.mean_reward() == pytest.approx((4 + 1 + 1 + 1) / 4)
    assert sorted(server.prompts) == sorted(r.prompt_ids for r in rows)
    assert all(p.seed == 7 for p in server.params)


def test_held_out_refuses_no_rows():
    with pytest.raises(ValueError, match="at least one row"):
        OnlineHeldOut(server=None, rows=[], sampling=SamplingParams(max_tokens=1), decode=str, terms=(), sources={})
    assert HeldOutRow(prompt="p", prompt_ids=[1, 2]).prompt_ids == (1, 2)


def test_step_metrics_use_env_grpo_names_next_to_trl_ones():
    logs = {"loss": 0.1, "reward": 0.75, "reward_std": 0.2, "completions/mean_length": 10.0, "step_time": 2.0,
            "rewards/format/mean": 0.5, "note": "text"}
    metrics = step_metrics(logs, batch_completions=8, sync=PublishReport(version=3, seconds=0.5, bytes_sent=10**9))
    assert metrics["reward_mean"] == 0.75 and metrics["completion_tokens_mean"] == 10.0
    assert metrics["tokens_per_second"] == pytest.approx(10.0 * 8 / 2.0)
    assert metrics["sync_seconds"] == 0.5 and metrics["sync_gbps"] == pytest.approx(2.0) and metrics["weight_version"] == 3
    assert metrics["kl"] == 0.0 and "note" not in metrics and metrics["rewards/format/mean"] == 0.5
