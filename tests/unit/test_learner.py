"""TorchPolicy on a tiny random Llama: masks, gradients, a learning step, truncation, log-probs."""

from __future__ import annotations

import logging

import attrs
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from adapters.learner.batching import collate, plan_rows
from adapters.learner.grpo_loss import grpo_loss
from adapters.learner.logprobs import completion_logprobs
from adapters.learner.policy import TorchPolicy
from domain.config.grpo import GRPOConfig
from domain.episodes import Episode, RowTokens, Segment
from domain.grpo_loss import LossSettings, TokenRow
from domain.grpo_loss import grpo_loss as reference_loss

VOCAB = 96


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> str:
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-llama")
    LlamaForCausalLM(config).save_pretrained(path)
    return str(path)


def _policy(model_dir: str, **grpo) -> TorchPolicy:
    fields = {"learning_rate": 1e-3, "per_device_train_batch_size": 2, **grpo}
    return TorchPolicy(model_dir, GRPOConfig(**fields), max_train_row_tokens=64)


def _episode(seed: int, prompt_len: int = 5, parts: tuple[tuple[str, int], ...] = (("s", 4), ("e", 3), ("s", 3))) -> Episode:
    """Random tokens; parts are ("s", n) engine-sampled or ("e", n) environment-inserted runs."""
    g = torch.Generator().manual_seed(seed)
    draw = lambda n: torch.randint(0, VOCAB, (n,), generator=g).tolist()  # noqa: E731
    segments = [
        Segment.from_engine(draw(n), (-2.0 - torch.rand(n, generator=g)).tolist()) if kind == "s"
        else Segment.from_environment(draw(n))
        for kind, n in parts
    ]
    return Episode(prompt_token_ids=draw(prompt_len), segments=segments)


def _on_policy(policy: TorchPolicy, template: Episode) -> Episode:
    """The episode with its sampled tokens' behaviour log-probs replaced by the policy's own (ratio 1)."""
    own = policy.sequence_logprobs(list(template.prompt_token_ids) + template.completion_token_ids)
    own = own[len(template.prompt_token_ids) - 1 :]
    segments, at = [], 0
    for s in template.segments:
        n = len(s.token_ids)
        segments.append(Segment.from_engine(s.token_ids, own[at : at + n]) if s.sampled else s)
        at += n
    return Episode(prompt_token_ids=template.prompt_token_ids, segments=segments)


def _params(policy: TorchPolicy) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in policy.model.named_parameters()}


def _naive_logprobs(model: torch.nn.Module, prompt: list[int], completion: list[int], temperature: float) -> list[float]:
    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1] / temperature  # (C, V)
    return torch.log_softmax(logits.double(), -1).gather(1, torch.tensor(completion)[:, None]).squeeze(1).tolist()


def test_environment_tokens_are_masked_out_of_loss_and_gradients(model_dir) -> None:
    model = LlamaForCausalLM.from_pretrained(model_dir).train()
    episodes = [_episode(1), _episode(2, parts=(("e", 2), ("s", 5), ("e", 2), ("s", 1)))]
    batch = collate(plan_rows(episodes, [1.0, -0.7], 64).rows)
    settings = LossSettings(loss_type="bnpo", beta=0.0)

    def loss_and_grads(old: torch.Tensor, which: torch.Tensor | None) -> tuple[float, list[torch.Tensor]]:
        model.zero_grad()
        logps = completion_logprobs(model, batch, 1.0, which=which)
        loss, _ = grpo_loss(logps, old, batch.advantages, batch.loss_mask, settings)
        loss.backward()
        return float(loss.detach()), [p.grad.clone() for p in model.parameters()]

    env = batch.token_mask & ~batch.loss_mask.bool()
    assert env.any()
    scrambled = torch.where(env, torch.full_like(batch.old_logprobs, -0.01), batch.old_logprobs)
    base_loss, base_grads = loss_and_grads(batch.old_logprobs, None)
    # Environment tokens get other behaviour log-probs and their own policy log-probs are computed too:
    loss, grads = loss_and_grads(scrambled, batch.token_mask)
    assert loss == pytest.approx(base_loss, rel=1e-6)
    for a, b in zip(base_grads, grads):
        torch.testing.assert_close(a, b)
    # ...while moving a sampled token's behaviour log-prob does change the loss.
    sampled = batch.loss_mask.bool()
    moved = torch.where(sampled, batch.old_logprobs - 0.05, batch.old_logprobs)
    assert loss_and_grads(moved, None)[0] != pytest.approx(base_loss, rel=1e-6)


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_step_loss_counts_only_sampled_tokens_as_the_reference_does(model_dir, loss_type) -> None:
    policy = _policy(model_dir, loss_type=loss_type, per_device_train_batch_size=2, max_completion_length=16)
    templates = [_episode(80), _episode(81, parts=(("e", 3), ("s", 2), ("e", 4), ("s", 5))), _episode(82)]
    episodes = [_on_policy(policy, e) for e in templates]
    advantages = [1.0, -0.5, 0.25]
    metrics = policy.train_step(episodes, advantages)
    rows = [TokenRow(logprobs=e.behaviour_logprobs, old_logprobs=e.behaviour_logprobs, mask=e.completion_mask,
                     advantage=a) for e, a in zip(episodes, advantages)]
    settings = LossSettings(loss_type=loss_type, max_completion_length=16)
    total = sum(e.num_sampled_tokens for e in episodes)
    expected = sum(reference_loss(rows[i : i + 2], settings, num_items_in_batch=total, accumulation_steps=2).loss
                   for i in (0, 2))  # two micro-batches of per_device_train_batch_size=2
    assert metrics["loss"] == pytest.approx(expected, rel=1e-4)
    assert metrics["tokens"] == total


def test_zero_advantages_give_no_policy_gradient_when_beta_is_zero(model_dir) -> None:
    episodes = [_episode(s) for s in range(4)]
    still = _policy(model_dir)
    before = _params(still)
    metrics = still.train_step(episodes, [0.0] * 4)
    assert metrics["grad_norm"] == 0.0
    for name, param in still.model.named_parameters():
        torch.testing.assert_close(param, before[name], rtol=0, atol=0, msg=name)
    moving = _policy(model_dir)
    assert moving.train_step(episodes, [1.0, -1.0, 0.5, -0.5])["grad_norm"] > 0.0


@pytest.mark.parametrize("loss_type", ["grpo", "bnpo", "dr_grpo", "dapo"])
def test_one_step_raises_the_logprob_of_the_advantaged_sequence(model_dir, loss_type) -> None:
    policy = _policy(model_dir, loss_type=loss_type, learning_rate=3e-3)
    good, bad = _on_policy(policy, _episode(10)), _on_policy(policy, _episode(11))
    score = lambda e: sum(  # noqa: E731
        lp for lp, m in zip(policy.sequence_logprobs(list(e.prompt_token_ids) + e.completion_token_ids)
                            [len(e.prompt_token_ids) - 1 :], e.completion_mask) if m)
    good_before, bad_before = score(good), score(bad)
    metrics = policy.train_step([good, bad], [1.0, -1.0])
    assert metrics["optimizer_step"] == 1.0 and policy.steps == 1
    assert score(good) > good_before + 1e-3
    assert score(bad) < bad_before - 1e-3


def test_long_rows_are_truncated_or_dropped_and_counted(model_dir, caplog) -> None:
    policy = TorchPolicy(model_dir, GRPOConfig(per_device_train_batch_size=2), max_train_row_tokens=12)
    fits = _episode(20)  # 5 + 10 tokens: cut to 5 + 7 = s4, e3
    too_long_prompt = _episode(21, prompt_len=12)
    short = _episode(22, prompt_len=3, parts=(("s", 2), ("e", 1), ("s", 2)))
    with caplog.at_level(logging.WARNING, logger="adapters.learner.policy"):
        metrics = policy.train_step([fits, too_long_prompt, short], [1.0, 1.0, -1.0])
    assert metrics["truncated_rows"] == 1.0 and metrics["dropped_rows"] == 1.0 and metrics["rows"] == 2.0
    assert metrics["tokens"] == 4 + 4  # sampled tokens kept: 4 of the cut row, 2 + 2 of the short one
    assert "1 rows truncated" in caplog.text and "1 dropped" in caplog.text


def test_mask_truncated_completions_masks_engine_cut_episodes_only_when_asked(model_dir) -> None:
    cut = attrs.evolve(_episode(90), finish_reason="length")
    done = _episode(91)
    for flag, tokens in ((False, 14), (True, 7)):
        policy = _policy(model_dir, mask_truncated_completions=flag)
        metrics = policy.train_step([cut, done], [1.0, -1.0])
        assert metrics["tokens"] == tokens and metrics["masked_truncated_rows"] == float(flag)
        assert metrics["rows"] == 2.0


@pytest.mark.parametrize("loss_type", ["grpo", "dapo"])
def test_a_per_turn_episode_trains_exactly_like_its_turns_as_separate_rows(model_dir, loss_type) -> None:
    """carry_reasoning false: one row per turn, each with the episode's advantage."""
    one, two = _episode(40), _episode(41, prompt_len=9, parts=(("s", 3), ("e", 1), ("s", 2)))
    turns = [RowTokens(e.prompt_token_ids, e.segments) for e in (one, two)]
    per_turn = Episode.from_turns(turns, num_turns=2)
    together, apart = _policy(model_dir, loss_type=loss_type), _policy(model_dir, loss_type=loss_type)
    got = together.train_step([per_turn], [0.8])
    want = apart.train_step([one, two], [0.8, 0.8])
    assert got["rows"] == 2.0 and got["tokens"] == per_turn.num_sampled_tokens == want["tokens"]
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    for (name, a), b in zip(together.model.named_parameters(), apart.model.parameters()):
        torch.testing.assert_close(a, b, msg=name)


def test_nothing_left_to_train_on_skips_the_step_loudly(model_dir, caplog) -> None:
    policy = TorchPolicy(model_dir, GRPOConfig(), max_train_row_tokens=4)
    with caplog.at_level(logging.WARNING, logger="adapters.learner.policy"):
        metrics = policy.train_step([_episode(30)], [1.0])
    assert metrics["optimizer_step"] == 0.0 and metrics["dropped_rows"] == 1.0 and policy.steps == 0
    assert "no sampled token" in caplog.text


def test_completion_logprobs_match_a_naive_per_sequence_forward(model_dir) -> None:
    model = LlamaForCausalLM.from_pretrained(model_dir)
    episodes = [_episode(40), _episode(41, prompt_len=9, parts=(("s", 2),)), _episode(42, prompt_len=2)]
    batch = collate(plan_rows(episodes, [0.0] * 3, 64).rows)
    with torch.no_grad():
        ours = completion_logprobs(model, batch, 0.7, which=batch.token_mask)
    for i, e in enumerate(episodes):
        expected = _naive_logprobs(model, list(e.prompt_token_ids), e.completion_token_ids, 0.7)
        torch.testing.assert_close(ours[i, : len(expected)].double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-5, atol=1e-5)
        assert (ours[i, len(expected) :] == 0).all()


def test_sequence_logprobs_match_a_naive_forward_at_temperature_one(model_dir) -> None:
    policy = _policy(model_dir, temperature=0.5)
    ids = list(range(3, 20))
    expected = _naive_logprobs(policy.model, ids[:1], ids[1:], 1.0)
    assert policy.sequence_logprobs(ids) == pytest.approx(expected, abs=1e-5)
    assert policy.model.training


def test_behaviour_logprobs_equal_to_the_policy_give_ratio_one_and_no_drift(model_dir) -> None:
    policy = _policy(model_dir)
    template = _episode(50)
    on_policy = _on_policy(policy, template)
    metrics = policy.train_step([on_policy, on_policy], [1.0, -1.0])
    assert metrics["ratio_mean"] == pytest.approx(1.0, abs=1e-5)
    assert metrics["logprob_abs_diff"] < 1e-5 and metrics["clip_region"] == 0.0
    stale = policy.train_step([template, template], [1.0, -1.0])  # engine log-probs far from the policy's
    assert stale["logprob_abs_diff"] > 0.5


def test_dapo_normalises_by_the_whole_step_so_micro_batching_does_not_change_the_update(model_dir) -> None:
    episodes = [_episode(60), _episode(61, parts=(("s", 7),)), _episode(62, parts=(("s", 1), ("e", 2), ("s", 2)))]
    updates = []
    for size in (1, 3):
        policy = _policy(model_dir, loss_type="dapo", per_device_train_batch_size=size)
        metrics = policy.train_step(episodes, [1.0, -0.5, 0.3])
        updates.append((metrics["loss"], metrics["grad_norm"]))
    # Adam's first step is ~sign(grad), which amplifies float noise, so compare the loss and gradient norm.
    assert updates[0][0] == pytest.approx(updates[1][0], rel=1e-5)
    assert updates[0][1] == pytest.approx(updates[1][1], rel=1e-5)


def test_reference_model_only_with_beta_and_kl_grows_after_a_step(model_dir) -> None:
    assert _policy(model_dir).reference_model is None
    policy = _policy(model_dir, beta=0.1, learning_rate=1e-2)
    assert policy.reference_model is not None
    episodes = [_episode(70), _episode(71)]
    first = policy.train_step(episodes, [1.0, -1.0])
    assert first["kl"] == pytest.approx(0.0, abs=1e-9)  # policy == reference before any step
    second = policy.train_step(episodes, [1.0, -1.0])
    assert second["kl"] > 1e-6
    assert not any(p.requires_grad for p in policy.reference_model.parameters())


def test_mismatched_advantages_are_refused(model_dir) -> None:
    with pytest.raises(ValueError, match="2 episodes but 1 advantages"):
        _policy(model_dir).train_step([_episode(1), _episode(2)], [1.0])
