"""`training.verify_sync_every_n_syncs` in the online job: the sync the job builds, verified as env GRPO's is.

`online_sync` + `online_publisher` (the job's own composition) run over a fake vLLM control
surface (`FakeSyncServer`, which keeps vLLM's handshake rules) whose transport also loads every
broadcast tensor into a "served" copy of the model; the served copy answers `prompt_logprobs`
with the same forward as the trainer's side, so a faithful sync passes and a corrupting
transport is caught. The probe and tolerance are the real ones (`build_verifier`, float32).
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence

import pytest

torch = pytest.importorskip("torch")

from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from adapters.trl.ranks import TrainingRanks  # noqa: E402
from adapters.trl.sync_verification import ModelLogprobs, RankZeroVerifier  # noqa: E402
from adapters.weights.gather import ModelWeightSource  # noqa: E402
from application.ports.weight_sync import TransferInit, WeightChunk  # noqa: E402
from application.verified_publisher import SyncVerificationError  # noqa: E402
from infrastructure.config_loader import ConfigError, parse_run_config  # noqa: E402
from infrastructure.model_assets import resolve_model_path  # noqa: E402
from infrastructure.online_job import online_publisher, online_sync  # noqa: E402
from tests.fakes.fake_sync import FakeSyncServer, FakeTransport  # noqa: E402
from tests.fakes.fake_sync_verifier import FakeSyncVerifier, FakeTrainerLogprobs  # noqa: E402

URL = "http://127.0.0.1:18000"
ONLINE = {"job": "online_grpo", "grpo": {"use_vllm": True}, "rewards": [{"source": "math_verify"}]}


@pytest.fixture(scope="module")
def model_path():
    return resolve_model_path("smollm2-135m-instruct")


def tiny_model(vocab: int = 49152) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
        num_attention_heads=2, num_key_value_heads=2, head_dim=16, tie_word_embeddings=True,
    )
    return LlamaForCausalLM(config)


class ServingFake:
    """`FakeSyncServer` that also answers prompt log-probs from the weights it was sent."""

    def __init__(self, fake: FakeSyncServer, served: torch.nn.Module) -> None:
        self._fake, self.served = fake, served

    @property
    def url(self) -> str:
        return self._fake.url

    def __getattr__(self, name: str):
        return getattr(self._fake, name)

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        return [None, *ModelLogprobs(self.served).sequence_logprobs(token_ids)]


class LoadingTransport:
    """`FakeTransport` whose broadcasts land in the served model (plus `corruption` on every value)."""

    def __init__(self, server: ServingFake) -> None:
        self._inner = FakeTransport(server._fake)
        self._served = server.served
        self.corruption = 0.0

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        self._inner.open(init, timeout, abort)

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        self._inner.broadcast(chunk, timeout)
        with torch.no_grad():
            for spec, tensor in zip(chunk.specs, chunk.payload, strict=True):
                self._served.get_parameter(spec.name).copy_(tensor + self.corruption)

    def close(self) -> None:
        self._inner.close()


def build(model_path, every: int):
    config = parse_run_config({**ONLINE, "training": {"verify_sync_every_n_syncs": every}})
    model = tiny_model()
    specs = [spec for spec, _ in ModelWeightSource(model, dtype="float32").entries()]
    server = ServingFake(FakeSyncServer(URL, specs), tiny_model())
    with torch.no_grad():  # the server starts from other weights than the trainer's
        for param in server.served.parameters():
            param.add_(0.5)
    transports: list[LoadingTransport] = []

    def transport() -> LoadingTransport:
        transports.append(LoadingTransport(server))
        return transports[-1]

    ranks = TrainingRanks()
    sync, targets = online_sync(config, model, URL, ranks, lambda _url: server, transport)
    sync.connect()
    return online_publisher(config, model_path, sync, model, targets, ranks), model, transports[0]


def nudge(model: torch.nn.Module) -> None:
    with torch.no_grad():
        model.model.norm.weight.mul_(1.1)  # a training step's worth of change


def test_online_grpo_accepts_the_key_and_refuses_a_negative_value() -> None:
    assert parse_run_config({**ONLINE, "training": {"verify_sync_every_n_syncs": 3}}).training.verify_sync_every_n_syncs == 3
    with pytest.raises(ConfigError) as info:
        parse_run_config({**ONLINE, "training": {"verify_sync_every_n_syncs": -1}})
    assert any("verify_sync_every_n_syncs" in line and "$.training" in line for line in info.value.problems)


def test_every_second_publish_is_verified_against_the_trainer_model(model_path) -> None:
    publisher, model, _ = build(model_path, every=2)
    publisher.publish(0)
    assert publisher.last_verification is None  # publish #1: not verified
    nudge(model)
    publisher.publish(1)
    verification = publisher.last_verification
    assert verification is not None and verification.ok and verification.version == 1
    (server,) = verification.servers
    assert server.url == URL and server.reported_version == 1 and server.max_logprob_diff < 1e-5
    assert server.tolerance == 1e-3 and server.probe_tokens > 10  # float32 tolerance, the real probe


def test_a_sync_that_corrupts_the_weights_stops_with_an_error_naming_the_server(model_path) -> None:
    publisher, model, transport = build(model_path, every=1)
    publisher.publish(0)
    transport.corruption = 0.05
    nudge(model)
    with pytest.raises(SyncVerificationError, match=f"{URL}: prompt log-probs .* differ") as info:
        publisher.publish(1)
    assert info.value.verification.failures[0].reported_version == 1  # the handshake itself succeeded


def test_verification_off_lets_the_same_corruption_through(model_path) -> None:
    publisher, model, transport = build(model_path, every=0)
    transport.corruption = 0.05
    for version in range(3):
        nudge(model)
        assert publisher.publish(version).version == version


def test_ranks_other_than_0_run_the_trainer_forward_and_take_rank_0s_verdict() -> None:
    verdict = FakeSyncVerifier([URL])
    verdict.mismatching.add(URL)
    shared = verdict.verify(4)
    trainer = FakeTrainerLogprobs()
    follower = RankZeroVerifier(None, trainer, [5, 6, 7], share=lambda _mine: shared)
    assert follower.verify(4) is shared and not shared.ok
    assert trainer.calls == 1  # joined the (collective under FSDP2) forward
    broken = RankZeroVerifier(None, trainer, [5, 6, 7], share=lambda _mine: "TimeoutError: probe timed out")
    with pytest.raises(RuntimeError, match="rank 0 could not verify weight version 4: TimeoutError"):
        broken.verify(4)


def test_rank_0_shares_its_verdict_and_its_failure() -> None:
    sent: list[object] = []

    def share(value: object) -> object:
        sent.append(value)
        return value

    verifier = FakeSyncVerifier([URL])
    leader = RankZeroVerifier(verifier, FakeTrainerLogprobs(), [1, 2], share)
    assert leader.verify(2).ok and sent[-1].version == 2

    class Raising:
        def verify(self, version: int):
            raise ConnectionError("server gone")

    with pytest.raises(ConnectionError):
        RankZeroVerifier(Raising(), FakeTrainerLogprobs(), [1, 2], share).verify(3)
    assert sent[-1] == "ConnectionError: server gone"


def test_model_logprobs_match_a_plain_forward_and_leave_train_mode() -> None:
    model = tiny_model(vocab=64).train()
    ids = [3, 9, 27, 17, 51]
    values = ModelLogprobs(model).sequence_logprobs(ids)
    assert model.training
    reference = copy.deepcopy(model).eval()
    with torch.no_grad():
        logits = reference(torch.tensor([ids])).logits[0, :-1]
    expected = torch.log_softmax(logits, -1)[torch.arange(4), torch.tensor(ids[1:])]
    assert values == pytest.approx(expected.tolist(), abs=1e-6)
