"""Our learner's loss equals TRL 1.16's own `GRPOTrainer._compute_loss` on the same batch.

A real GRPOTrainer is built offline on a tiny random Llama (the SmolLM2 tokenizer, a 2-row
dataset, no generation); `_compute_loss` is fed a batch in TRL's input layout with equal-length
prompts (so TRL's left padding adds nothing) and environment tokens as TRL's `tool_mask`. Our
side runs the learner's own path (collate -> completion_logprobs -> grpo_loss) on a second copy
of the same weights: loss, gradients and clip/KL metrics must agree.
"""

from __future__ import annotations

import pytest
import torch
from datasets import Dataset
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM
from trl import GRPOConfig as TRLGRPOConfig
from trl import GRPOTrainer

from adapters.learner.batching import TrainRow, collate
from adapters.learner.grpo_loss import grpo_loss
from adapters.learner.logprobs import completion_logprobs
from domain.grpo_loss import LossSettings
from infrastructure.model_assets import resolve_model_path

TEMPERATURE = 0.7
EPS_LOW, EPS_HIGH = 0.2, 0.28
MAX_COMPLETION = 9
ACCUMULATION = 2


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> str:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def _rows(generator: torch.Generator) -> list[TrainRow]:
    """Four rows, prompts of 5 tokens, completions of 9, 6, 4 and 7 with environment tokens inside."""
    masks = [[1, 1, 1, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1], [1, 0, 1, 1], [1, 1, 0, 0, 0, 1, 1]]
    advantages = [1.3, -0.8, 0.4, -1.5]
    rows = []
    for mask, advantage in zip(masks, advantages):
        ids = torch.randint(0, 96, (5 + len(mask),), generator=generator).tolist()
        rows.append(TrainRow(prompt_ids=tuple(ids[:5]), completion_ids=tuple(ids[5:]), loss_mask=tuple(mask),
                             old_logprobs=(0.0,) * len(mask), advantage=advantage))
    return rows


def _trainer(model_dir: str, loss_type: str, beta: float, bias_correction: bool, tmp_path) -> GRPOTrainer:
    args = TRLGRPOConfig(output_dir=str(tmp_path), report_to="none", use_cpu=True, save_strategy="no",
                         per_device_train_batch_size=2, gradient_accumulation_steps=ACCUMULATION, num_generations=2,
                         max_completion_length=MAX_COMPLETION, loss_type=loss_type, beta=beta, epsilon=EPS_LOW,
                         epsilon_high=EPS_HIGH, temperature=TEMPERATURE, bf16=False,
                         use_bias_correction_kl=bias_correction)
    trainer = GRPOTrainer(model=LlamaForCausalLM.from_pretrained(model_dir), args=args,
                          reward_funcs=lambda completions, **_: [0.0] * len(completions),
                          train_dataset=Dataset.from_dict({"prompt": ["a", "b"]}),
                          processing_class=AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct")))
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = ACCUMULATION
    return trainer


@pytest.mark.parametrize(("beta", "bias_correction"), [(0.0, True), (0.3, True), (0.3, False)])
@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_learner_loss_matches_trl_compute_loss(tiny_model_dir, tmp_path, loss_type, beta, bias_correction) -> None:
    generator = torch.Generator().manual_seed(7)
    batch = collate(_rows(generator))
    ours_model = LlamaForCausalLM.from_pretrained(tiny_model_dir).train()
    logps = completion_logprobs(ours_model, batch, TEMPERATURE, which=batch.token_mask)  # every real token
    noise = lambda: 0.5 * torch.randn(logps.shape, generator=generator)  # noqa: E731
    old = (logps.detach() + noise()) * batch.token_mask  # spreads ratios across the clip region
    ref = (logps.detach() + noise()) * batch.token_mask
    num_items = float(batch.loss_mask.sum()) + 7.0  # as if other micro-batches held 7 more tokens

    settings = LossSettings(loss_type=loss_type, epsilon_low=EPS_LOW, epsilon_high=EPS_HIGH, beta=beta,
                            max_completion_length=MAX_COMPLETION, use_bias_correction_kl=bias_correction)
    ours, metrics = grpo_loss(logps, old, batch.advantages, batch.loss_mask, settings, ref_logprobs=ref,
                              num_items_in_batch=num_items, accumulation_steps=ACCUMULATION)
    ours.backward()

    trainer = _trainer(tiny_model_dir, loss_type, beta, bias_correction, tmp_path)
    prompt_len = int(batch.completion_start[0])
    inputs = {
        "prompt_ids": batch.input_ids[:, :prompt_len],
        "prompt_mask": torch.ones((len(batch.advantages), prompt_len), dtype=torch.long),
        "completion_ids": batch.completion_ids,
        "completion_mask": batch.token_mask.long(),
        "tool_mask": batch.loss_mask.long(),
        "advantages": batch.advantages,
        "old_per_token_logps": old,
        "ref_per_token_logps": ref,
        "num_items_in_batch": torch.tensor(num_items),
    }
    theirs = trainer._compute_loss(trainer.model, inputs)
    theirs.backward()

    assert float(ours.detach()) == pytest.approx(float(theirs.detach()), rel=1e-5, abs=1e-7)
    trl_params = dict(trainer.model.named_parameters())
    for name, param in ours_model.named_parameters():
        torch.testing.assert_close(param.grad, trl_params[name].grad, rtol=1e-4, atol=1e-6, msg=name)
    logged = trainer._metrics["train"]
    assert metrics["clip_region"] == pytest.approx(logged["clip_ratio/region_mean"][-1], abs=1e-6)
    assert metrics["clip_low"] == pytest.approx(logged["clip_ratio/low_mean"][-1], abs=1e-6)
    assert metrics["clip_high"] == pytest.approx(logged["clip_ratio/high_mean"][-1], abs=1e-6)
    assert metrics["clip_region"] > 0  # the batch does exercise clipping
    if beta:
        assert metrics["kl"] == pytest.approx(logged["kl"][-1], rel=1e-5)
