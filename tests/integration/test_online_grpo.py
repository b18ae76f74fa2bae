"""Online GRPO on the real vLLM CPU server: TRL's GRPOTrainer generates there and we sync after every step.

After each step (and before the first) the trainer's weights are published through our weight
sync (SyncWeights -> VllmHttpServer + GlooTransport, ModelWeightSource on TRL's own model), then:
- every tensor our gather sent equals the parameter TRL's model holds (bit for bit);
- the server's prompt log-probs on a probe equal the trainer model's within 1e-3 (fp32);
- the server's log-probs moved from the initial ones (the sync changed what it serves).
The reward is a user function (length of the completion), so every group has signal and the
weights really move. The session's server gets its original weights back at the end.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

from adapters.transport.gloo_transport import GlooTransport
from adapters.trl.generation import ServerGeneration
from adapters.trl.metrics_callback import MetricsCallback
from adapters.trl.rewards import trl_reward_funcs
from adapters.trl.trainer import TrlTrainer, build_grpo_trainer
from adapters.verifiers.registry import completion_text, reward_source
from adapters.weights.gather import ModelWeightSource
from application.ports.generation import SamplingParams
from application.ports.weight_sync import TransferInit, WeightChunk
from application.run_online_grpo import OnlineGRPORun, SyncPublisher
from application.sync_report import SyncTarget
from application.sync_weights import SyncWeights
from domain.config.grpo import GRPOConfig
from domain.rewards import RewardTerm
from tests.fakes.fake_training import RecordingSink

pytestmark = [pytest.mark.integration, pytest.mark.timeout(1200)]

PROBE = "Question: what is 3 + 4? Answer: 3 + 4 = 7. Question: what is 2 + 2? Answer: 4."
MAX_TOKENS = 24


def length_score(prompts: Sequence[Any], completions: Sequence[Any], **_: Any) -> list[float]:
    """A user reward function: the completion's share of the length budget, in [0, 1]."""
    return [min(len(completion_text(c)) / (4 * MAX_TOKENS), 1.0) for c in completions]


class RecordingTransport:
    """GlooTransport that keeps a copy of what the last sync broadcast, by tensor name."""

    def __init__(self) -> None:
        self.inner = GlooTransport()
        self.sent: dict[str, torch.Tensor] = {}

    def open(self, init: TransferInit, timeout: float, abort: threading.Event | None = None) -> None:
        self.inner.open(init, timeout, abort)

    def broadcast(self, chunk: WeightChunk, timeout: float) -> None:
        self.inner.broadcast(chunk, timeout)
        self.sent.update({spec.name: t.detach().clone() for spec, t in zip(chunk.specs, chunk.payload)})

    def close(self) -> None:
        self.inner.close()


class PublishEachStep(TrainerCallback):
    """Sync after every optimizer step and check the server against TRL's model right away."""

    def __init__(self, check) -> None:
        self._check = check

    def on_step_end(self, args, state, control, **kwargs):
        self._check(int(state.global_step))
        return control


@torch.no_grad()
def trainer_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    was_training = model.training
    model.eval()
    logits = model(torch.tensor([ids])).logits[0, :-1].float()
    model.train(was_training)
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


def test_online_grpo_steps_sync_trl_model_to_the_server(vllm_server, running_vllm, tmp_path):
    from datasets import Dataset

    path = running_vllm.model_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    initial = {k: v.clone() for k, v in model.state_dict().items()}
    transport = RecordingTransport()
    init = TransferInit(master_address="127.0.0.1", master_port=_free_port(), rank_offset=1, world_size=0)
    sync = SyncWeights([SyncTarget(vllm_server, transport, init)], ModelWeightSource(model, dtype="float32"),
                       timeout=300.0, chunk_bytes=256 * 1024**2)
    generation = ServerGeneration(
        server=vllm_server, sampling=SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0), publisher=SyncPublisher(sync)
    )
    probe = tokenizer(PROBE)["input_ids"]
    served: dict[int, torch.Tensor] = {}

    def check(version: int) -> None:
        generation.publish(version)
        params = model.state_dict()
        assert transport.sent, "the sync sent nothing"
        for name, tensor in transport.sent.items():
            assert torch.equal(tensor, params[name]), f"{name}: sent tensor differs from TRL's parameter"
        server_lp = torch.tensor(vllm_server.prompt_logprobs(probe)[1:], dtype=torch.float32)
        diff = (server_lp - trainer_logprobs(model, probe)).abs().max().item()
        assert diff < 1e-3, f"version {version}: server vs trainer log-probs differ by {diff}"
        served[version] = server_lp

    terms = (RewardTerm("tests.integration.test_online_grpo:length_score"),)
    funcs, weights = trl_reward_funcs(terms, {t.source: reward_source(t.source, format_regex=".") for t in terms})
    data = Dataset.from_list(
        [{"prompt": [{"role": "user", "content": f"Count from {i} to {i + 9}."}], "answer": ""} for i in range(8)]
    )
    grpo = GRPOConfig(num_generations=4, per_device_train_batch_size=4, max_steps=3, max_completion_length=MAX_TOKENS,
                      learning_rate=3e-5, use_vllm=True, output_dir=str(tmp_path))
    sink = RecordingSink()
    sync.connect()
    try:
        check(0)
        trainer = build_grpo_trainer(
            model=model, tokenizer=tokenizer, grpo=grpo, reward_funcs=funcs, reward_weights=weights, train_dataset=data,
            generation=generation,
            callbacks=[PublishEachStep(check), MetricsCallback(sink, sink, 4, lambda: generation.last_report)],
        )
        assert trainer.model is model
        summary = OnlineGRPORun(trainer=TrlTrainer(trainer), publisher=generation, evaluator=None,
                                evaluate_before=False, metrics=sink, progress=sink).run()
        assert summary.steps == 3
        assert sorted(served) == [0, 1, 2, 3]
        moved = (served[3] - served[0]).abs().max().item()
        assert moved > 1e-3, f"three steps changed the served log-probs by only {moved}"
        assert [step for step, _ in sink.rows] == [1, 2, 3]
        assert all(row["sync_seconds"] > 0 for _, row in sink.rows)
    finally:
        model.load_state_dict(initial)
        generation.publish(1000)  # give the session's server its original weights back
        sync.close()


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
