"""The rank protocol of `adapters.learner.sharded` in one process: commands, outcomes, blocks.

A scripted `StepChannel` stands for the other ranks (what they send, what they report); the real
collectives run under torchrun in tests/integration/test_env_grpo_multirank.py.
"""

from __future__ import annotations

import pytest

from adapters.distributed.bounded_wait import ChannelTimeout
from adapters.learner.sharded import (
    Abort, Connect, Fsdp2Share, Lead, LeadSync, Publish, RanksFailed, SaveFull, ScoreProbe, ShardedLearner, Stop,
    TrainStep, follow_steps,
)
from application.ports.weight_publisher import PublishReport
from domain.episodes import Episode, Segment
from infrastructure.env_grpo_ranks import leading

EPISODE = Episode(prompt_token_ids=[1, 2], segments=[Segment.from_engine([3, 4], [-0.5, -0.5])])


class ScriptedChannel:
    """One rank's view: `inbox` is what rank 0 sends; `failures` what other ranks report per exchange."""

    def __init__(self, rank: int, world: int = 2, inbox=(), failures=None, fail_send: bool = False) -> None:
        self.rank, self.world = rank, world
        self.inbox = list(inbox)
        self.failures = dict(failures or {})  # exchange index -> {rank: text}
        self.fail_send = fail_send
        self.sent: list[object] = []
        self.exchanged: list[str | None] = []

    def send(self, message, timeout: float) -> None:
        if self.fail_send:
            raise ChannelTimeout("send: no answer from every rank within 1 s")
        self.sent.append(message)

    def receive(self, timeout: float):
        if not self.inbox:
            raise ChannelTimeout(f"rank {self.rank} waiting for rank 0's next message: no answer within {timeout:.0f} s")
        return self.inbox.pop(0)

    def exchange(self, text, timeout: float):
        others = self.failures.get(len(self.exchanged), {})
        self.exchanged.append(text)
        return [text if r == self.rank else others.get(r) for r in range(self.world)]


class RecordingPolicy:
    def __init__(self, fail_on: str | None = None) -> None:
        self.calls: list[tuple] = []
        self.fail_on = fail_on
        self.model = object()
        self.steps = 0

    def train_step(self, episodes, advantages):
        self.calls.append(("train", tuple(episodes), tuple(advantages)))
        if self.fail_on == "train":
            raise ValueError("bad batch on this rank")
        return {"loss": 0.5}

    def sequence_logprobs(self, token_ids):
        self.calls.append(("probe", tuple(token_ids)))
        return [-1.0] * (len(token_ids) - 1)


class RecordingSync:
    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def connect(self) -> None:
        self.calls.append(("connect",))

    def publish(self, version: int) -> PublishReport:
        self.calls.append(("publish", version))
        return PublishReport(version=version, seconds=0.1, bytes_sent=10)

    def close(self) -> None:
        self.calls.append(("close",))


class OneDimMesh:
    """The two questions `Fsdp2Share` asks a device mesh about the micro-batches."""

    def __init__(self, rank: int, world: int) -> None:
        self._rank, self._world = rank, world

    def get_local_rank(self) -> int:
        return self._rank

    def size(self) -> int:
        return self._world


def _follow(channel, policy=None, sync=None, saved=None):
    saved = saved if saved is not None else []
    return follow_steps(channel, policy or RecordingPolicy(), sync or RecordingSync(), lambda: saved.append(True),
                        idle_timeout=5.0, step_timeout=5.0)


def test_a_follower_mirrors_every_command_and_agrees_after_each_until_stop() -> None:
    inbox = [Connect(), Publish(0), TrainStep([EPISODE], [1.0]), ScoreProbe([1, 2, 3]), SaveFull(), Stop()]
    channel, policy, sync, saved = ScriptedChannel(1, inbox=inbox), RecordingPolicy(), RecordingSync(), []
    assert _follow(channel, policy, sync, saved) == 5
    assert sync.calls == [("connect",), ("publish", 0)]
    assert policy.calls == [("train", (EPISODE,), (1.0,)), ("probe", (1, 2, 3))]
    assert saved == [True]
    assert channel.exchanged == [None] * 5  # one outcome per command, all fine


def test_a_failing_follower_reports_its_error_and_every_rank_raises_naming_it() -> None:
    channel = ScriptedChannel(1, inbox=[TrainStep([EPISODE], [1.0]), Stop()])
    with pytest.raises(RanksFailed, match=r"train step failed on 1 of 2 ranks: rank 1: ValueError: bad batch"):
        _follow(channel, RecordingPolicy(fail_on="train"))
    assert channel.exchanged == ["ValueError: bad batch on this rank"]


def test_a_follower_raises_when_rank_zero_failed_its_part_of_a_command() -> None:
    channel = ScriptedChannel(1, inbox=[Publish(3), Stop()], failures={0: {0: "WeightSyncError: server gone"}})
    with pytest.raises(RanksFailed, match=r"weight sync failed on 1 of 2 ranks: rank 0: WeightSyncError: server gone"):
        _follow(channel)


def test_abort_from_rank_zero_stops_a_follower_with_its_reason() -> None:
    channel = ScriptedChannel(1, inbox=[Abort("rank 0: TimeoutError: rollouts did not finish")])
    with pytest.raises(RanksFailed, match=r"rank 1 stops: rank 0 failed \(rank 0: TimeoutError: rollouts"):
        _follow(channel)


def test_a_follower_that_hears_nothing_times_out_instead_of_hanging() -> None:
    with pytest.raises(ChannelTimeout, match="rank 1 waiting for rank 0"):
        _follow(ScriptedChannel(1, inbox=[Connect()]))


def test_the_lead_announces_each_call_before_running_it_and_returns_its_result() -> None:
    channel, policy, sync = ScriptedChannel(0), RecordingPolicy(), RecordingSync()
    lead = Lead(channel, timeout=5.0)
    learner, lead_sync = ShardedLearner(policy, lead), LeadSync(sync, lead)
    lead_sync.connect()
    assert learner.train_step([EPISODE], [0.5]) == {"loss": 0.5}
    assert learner.sequence_logprobs([7, 8, 9]) == [-1.0, -1.0]
    assert lead_sync.publish(1).version == 1
    lead_sync.close()
    assert channel.sent == [Connect(), TrainStep([EPISODE], [0.5]), ScoreProbe([7, 8, 9]), Publish(1)]
    assert sync.calls == [("connect",), ("publish", 1), ("close",)]
    assert channel.exchanged == [None] * 4


def test_the_lead_raises_when_a_follower_failed_the_step() -> None:
    channel = ScriptedChannel(0, world=3, failures={0: {2: "RuntimeError: CUDA out of memory"}})
    learner = ShardedLearner(RecordingPolicy(), Lead(channel, timeout=5.0))
    with pytest.raises(RanksFailed, match=r"train step failed on 1 of 3 ranks: rank 2: RuntimeError: CUDA out of memory"):
        learner.train_step([EPISODE], [1.0])


def test_leading_stops_the_followers_on_success_and_aborts_them_on_a_failure_of_rank_zero_alone() -> None:
    channel = ScriptedChannel(0)
    assert leading(Lead(channel, 5.0), lambda: 42) == 42
    assert channel.sent == [Stop()]

    def fails():
        raise TimeoutError("rollouts did not finish within 30 s")

    channel = ScriptedChannel(0)
    with pytest.raises(TimeoutError):
        leading(Lead(channel, 5.0), fails)
    assert channel.sent == [Abort("rank 0: TimeoutError: rollouts did not finish within 30 s")]


def test_an_agreed_failure_is_not_aborted_again_and_an_unreachable_follower_does_not_hide_the_error() -> None:
    def agreed():
        raise RanksFailed("train step failed on 1 of 2 ranks: rank 1: ValueError: x")

    channel = ScriptedChannel(0)
    with pytest.raises(RanksFailed):
        leading(Lead(channel, 5.0), agreed)
    assert channel.sent == []

    def fails():
        raise KeyError("metrics")

    with pytest.raises(KeyError):
        leading(Lead(ScriptedChannel(0, fail_send=True), 5.0), fails)


@pytest.mark.parametrize("count", [1, 2, 3, 4, 5, 8])
@pytest.mark.parametrize("world", [2, 3, 4])
def test_micro_batches_are_dealt_in_contiguous_equal_blocks_padded_to_the_same_length(count, world) -> None:
    shares = [Fsdp2Share(OneDimMesh(r, world)).my_micro_batches(count) for r in range(world)]
    assert len({len(share) for share in shares}) == 1  # the same number of forwards/backwards on every rank
    assert [i for share in shares for i in share if i is not None] == list(range(count))
    for share in shares:  # padding only after the real ones
        real = [i for i in share if i is not None]
        assert share == real + [None] * (len(share) - len(real))


def test_a_micro_batch_with_no_sampled_token_is_a_zero_step_that_leaves_the_update_unchanged(tmp_path) -> None:
    """What a padding step runs: forward and backward with a zero loss (it used to fail on backward)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from adapters.learner.policy import TorchPolicy
    from domain.config.grpo import GRPOConfig

    torch.manual_seed(0)
    LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                 num_attention_heads=2, num_key_value_heads=2, head_dim=16)).save_pretrained(tmp_path)
    grpo = GRPOConfig(loss_type="dapo", per_device_train_batch_size=2, mask_truncated_completions=True, learning_rate=1e-2)

    def episode(i: int, finish: str) -> Episode:
        return Episode(prompt_token_ids=[1, 2 + i], segments=[Segment.from_engine([3 + i, 4, 5 + i], [-1.0, -2.0, -1.5])],
                       finish_reason=finish)

    kept = [episode(0, "stop"), episode(1, "stop")]
    cut = [episode(2, "length"), episode(3, "length")]  # masked: the second micro-batch has no sampled token
    both, alone = TorchPolicy(tmp_path, grpo, max_train_row_tokens=16), TorchPolicy(tmp_path, grpo, max_train_row_tokens=16)
    metrics = both.train_step(kept + cut, [1.0, -1.0, 1.0, -1.0])
    alone.train_step(kept, [1.0, -1.0])
    assert metrics["optimizer_step"] == 1.0 and metrics["masked_truncated_rows"] == 2.0
    for (name, a), (_, b) in zip(both.model.named_parameters(), alone.model.named_parameters(), strict=True):
        assert torch.equal(a, b), name
