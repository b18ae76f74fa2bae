"""The env-GRPO loop against fakes: order of rollouts, training and syncs; versions and staleness."""

from __future__ import annotations

import itertools

import pytest

from application.evaluate import HeldOutEvaluator
from application.ports.environment import Problem
from application.ports.generation import SamplingParams
from application.run_env_grpo import EnvGRPOLoop, LoopSettings
from domain.rewards import DEFAULT_REWARD_TERMS, RewardTerm
from tests.fakes.fake_training import FakeLearner, FakePublisher, FakeRolloutPool, RecordingSink


def _problems():
    for i in itertools.count():
        yield Problem(prompt=f"p{i}", answer=str(i))


def _loop(pool, learner, publisher, sink, *, prefetch=False, sync_every=1, steps=4, terms=DEFAULT_REWARD_TERMS, evaluator=None, evaluate_before=True):
    settings = LoopSettings(
        max_steps=steps, prompts_per_step=2, num_generations=4, scale_rewards="group",
        sync_weights_every_n_steps=sync_every, enable_prefetch=prefetch,
        sampling=SamplingParams(max_tokens=8), max_turns=None, reward_terms=terms, rollout_timeout=5.0,
        evaluate_before=evaluate_before,
    )
    return EnvGRPOLoop(settings=settings, problems=_problems(), pool=pool, learner=learner, publisher=publisher,
                       evaluator=evaluator, metrics=sink, progress=sink)


def test_synchronous_loop_trains_on_fresh_samples_and_syncs_every_step():
    pool, learner, publisher, sink = FakeRolloutPool(lambda p, g, v: float(g % 2)), FakeLearner(), FakePublisher(), RecordingSink()
    summary = _loop(pool, learner, publisher, sink).run()
    assert publisher.versions == [0, 1, 2, 3, 4]
    assert [r.weight_version for r in pool.requests] == [0, 1, 2, 3]
    assert all(row["staleness_max"] == 0 for _, row in sink.rows)
    assert summary.final_version == 4 and len(learner.batches) == 4
    # 2 problems x 4 generations, advantages are group-relative: +/- within each group
    episodes, advantages = learner.batches[0]
    assert len(episodes) == 8
    assert advantages[0] < 0 < advantages[1]
    assert sum(advantages) == pytest.approx(0.0, abs=1e-9)


def test_prefetch_overlaps_rollouts_with_training_so_samples_are_one_version_stale():
    pool, learner, publisher, sink = FakeRolloutPool(lambda p, g, v: float(g % 2)), FakeLearner(), FakePublisher(), RecordingSink()
    _loop(pool, learner, publisher, sink, prefetch=True).run()
    # step k+1's rollouts are submitted before step k trains and syncs
    assert [r.weight_version for r in pool.requests] == [0, 0, 1, 2]
    assert [row["staleness_max"] for _, row in sink.rows] == [0, 1, 1, 1]


def test_sync_every_n_steps_and_always_after_the_last_step():
    pool, learner, publisher, sink = FakeRolloutPool(lambda p, g, v: float(g % 2)), FakeLearner(), FakePublisher(), RecordingSink()
    _loop(pool, learner, publisher, sink, sync_every=3, steps=5).run()
    assert publisher.versions == [0, 3, 5]
    assert [row["weight_version"] for _, row in sink.rows] == [0, 0, 3, 3, 5]


def test_reward_terms_price_scores_and_groups_without_signal_are_counted():
    pool, learner, publisher, sink = FakeRolloutPool(lambda p, g, v: 1.0 if p.prompt == "p0" else float(g == 0)), FakeLearner(), FakePublisher(), RecordingSink()
    _loop(pool, learner, publisher, sink, steps=1, terms=(RewardTerm(source="environment", weight=2.0, exponent=2.0),)).run()
    row = sink.rows[0][1]
    assert row["groups_without_signal"] == 1.0
    assert row["reward_mean"] == pytest.approx((4 * 2.0 + 2.0) / 8)


def test_held_out_reward_before_and_after_in_batches():
    pool = FakeRolloutPool(lambda p, g, v: 1.0 if v >= 2 else 0.0)
    evaluator = HeldOutEvaluator(pool=pool, problems=[Problem(prompt=f"e{i}") for i in range(5)],
                                 sampling=SamplingParams(max_tokens=8), batch_size=2,
                                 reward_terms=DEFAULT_REWARD_TERMS, max_turns=None, timeout=5.0)
    sink = RecordingSink()
    summary = _loop(pool, FakeLearner(), FakePublisher(), sink, steps=2, evaluator=evaluator).run()
    assert (summary.reward_before, summary.reward_after, summary.eval_count) == (0.0, 1.0, 5)
    eval_sizes = [len(r.problems) for r in pool.requests if r.num_generations == 1]
    assert eval_sizes == [2, 2, 1, 2, 2, 1]
    assert sink.summaries and sink.summaries[0]["reward_after"] == 1.0


def test_before_training_evaluation_can_be_skipped():
    pool = FakeRolloutPool(lambda p, g, v: 1.0)
    evaluator = HeldOutEvaluator(pool=pool, problems=[Problem(prompt="e")], sampling=SamplingParams(max_tokens=8),
                                 batch_size=4, reward_terms=DEFAULT_REWARD_TERMS, max_turns=None, timeout=5.0)
    summary = _loop(pool, FakeLearner(), FakePublisher(), RecordingSink(), steps=1, evaluator=evaluator,
                    evaluate_before=False).run()
    assert summary.reward_before is None and summary.reward_after == 1.0
