"""TRL's GRPOTrainer drives online GRPO through our generation backend and publisher (no vLLM, no TRL patch).

A tiny random Llama with the SmolLM2 tokenizer trains for two steps against the in-memory
`FakeGenerationServer`; the fake publisher records which weight versions were published.
"""

from __future__ import annotations

import inspect

import pytest

torch = pytest.importorskip("torch")
trl = pytest.importorskip("trl")

from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM  # noqa: E402

from adapters.trl.generation import ServerGeneration, install_generation  # noqa: E402
from adapters.trl.metrics_callback import MetricsCallback  # noqa: E402
from adapters.trl.rewards import trl_reward_funcs  # noqa: E402
from adapters.trl.trainer import TrlTrainer, build_grpo_trainer  # noqa: E402
from adapters.verifiers.registry import reward_source  # noqa: E402
from application.ports.generation import SamplingParams  # noqa: E402
from application.run_online_grpo import OnlineGRPORun  # noqa: E402
from domain.config.grpo import GRPOConfig  # noqa: E402
from domain.rewards import RewardTerm  # noqa: E402
from infrastructure.model_assets import resolve_model_path  # noqa: E402
from tests.fakes.fake_generation import FakeGenerationServer  # noqa: E402
from tests.fakes.fake_training import FakePublisher, RecordingSink  # noqa: E402


def test_trl_still_calls_the_seam_we_replace():
    source = inspect.getsource(trl.GRPOTrainer)
    assert "self.vllm_generation.sync_weights()" in source
    assert "self.vllm_generation.generate(" in source
    assert "self._last_loaded_step" in source
    params = inspect.signature(trl.generation.vllm_generation.VLLMGeneration.generate).parameters
    assert list(params)[1:5] == ["prompts", "images", "num_generations", "profiler"]


@pytest.fixture(scope="module")
def tokenizer():
    return AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))


def tiny_model(tokenizer) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
    )
    return LlamaForCausalLM(config)


def test_two_trl_steps_generate_through_our_server_and_publish_each_version(tokenizer, tmp_path):
    from datasets import Dataset

    replies = iter(["Answer: 7", "the answer is 3", "Answer: 7", "no idea"] * 10)
    server = FakeGenerationServer(
        encode=lambda text: tokenizer(text, add_special_tokens=False)["input_ids"],
        end_of_turn_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        replies=lambda _prompt: next(replies),
    )
    publisher, sink = FakePublisher(), RecordingSink()
    generation = ServerGeneration(server=server, sampling=SamplingParams(max_tokens=8), publisher=publisher)
    terms = (RewardTerm("exact_match", weight=2.0, exponent=1.0), RewardTerm("format", weight=0.5))
    sources = {t.source: reward_source(t.source, format_regex=r"(?im)^answer:") for t in terms}
    funcs, weights = trl_reward_funcs(terms, sources)
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"3 + {i} = ?"}], "answer": "7"} for i in range(4)])
    grpo = GRPOConfig(
        num_generations=2, per_device_train_batch_size=4, max_steps=2, max_completion_length=8,
        learning_rate=1e-3, use_vllm=True, output_dir=str(tmp_path),
    )
    trainer = build_grpo_trainer(
        model=tiny_model(tokenizer), tokenizer=tokenizer, grpo=grpo, reward_funcs=funcs, reward_weights=weights,
        train_dataset=data, generation=generation,
        callbacks=[MetricsCallback(sink, sink, batch_completions=4, last_sync=lambda: generation.last_report)],
    )
    summary = OnlineGRPORun(
        trainer=TrlTrainer(trainer), publisher=generation, evaluator=None, evaluate_before=False,
        metrics=sink, progress=sink,
    ).run()

    assert publisher.versions == [0, 1, 2]  # initial, before step 2's generation, final
    assert summary.steps == 2 and summary.final_version == 2
    assert len(server.prompts) == 4  # 2 unique prompts per step, n=2 each
    steps = [step for step, _ in sink.rows]
    assert steps == [1, 2]
    row = sink.rows[0][1]
    # The logged reward is our priced term list: 2*exact + 0.5*format; replies alternate right/wrong.
    assert row["rewards/exact_match/mean"] == pytest.approx(0.5)
    assert row["rewards/format/mean"] == pytest.approx(0.5)
    assert row["reward_mean"] == pytest.approx(2.0 * 0.5 + 0.5 * 0.5)
    assert {"loss", "completion_tokens_mean", "sync_seconds", "weight_version"} <= set(row)


def test_install_refuses_a_trainer_already_on_trl_vllm():
    class Stub:
        use_vllm = True
        vllm_importance_sampling_correction = True
        state = None

    generation = ServerGeneration(server=None, sampling=SamplingParams(max_tokens=1), publisher=FakePublisher())
    with pytest.raises(ValueError, match="use_vllm=False"):
        install_generation(Stub(), generation)
