"""The real CPU weight sync: transformers trainer -> gloo -> vLLM CPU server (SmolLM2-135M, fp32).

Drives vLLM's official RL routes through `VllmHttpServer` and the bytes through `GlooTransport`,
with the server-side `rlsetup_vllm_gloo` plugin, then checks the server computes the trainer's
log-probs on the new weights. The server is shared by the session: the test restores the
original weights (a second sync) before it ends. Timings are printed (run with `-s`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch

from adapters.transport.gloo_transport import GlooTransport
from adapters.transport.packed_tensors import spec_of
from adapters.vllm.errors import ServerError
from adapters.vllm.http_server import VllmHttpServer
from application.ports.generation import SamplingParams
from application.ports.weight_sync import TransferInit, WeightChunk
from domain.tensors import TensorSpec

pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

PROBE = "The capital of France is Paris. Two plus two equals four, and the sky is blue."
CHUNK_BYTES = 200 * 1024**2  # -> 3 HTTP chunks for the 538 MB model
BUFFER_BYTES = 64 * 1024**2  # -> several broadcasts per chunk


def _load_trainer_model(path: Path) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model.eval()


def _probe_ids(path: Path) -> list[int]:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)(PROBE)["input_ids"]


@torch.no_grad()
def _trainer_logprobs(model: torch.nn.Module, ids: list[int]) -> torch.Tensor:
    logits = model(torch.tensor([ids])).logits[0, :-1].float()  # (T-1, V)
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]  # (T-1,)


def _server_logprobs(server: VllmHttpServer, ids: list[int]) -> torch.Tensor:
    values = server.prompt_logprobs(ids)
    assert values[0] is None and len(values) == len(ids)
    return torch.tensor(values[1:], dtype=torch.float32)


def _chunks(model: torch.nn.Module) -> list[WeightChunk]:
    chunks, current, size = [], [], 0
    for name, param in model.named_parameters():  # tied lm_head is not listed: vLLM skips it too
        current.append((name, param.detach()))
        size += param.numel() * param.element_size()
        if size >= CHUNK_BYTES:
            chunks.append(current)
            current, size = [], 0
    chunks.append(current)
    return [WeightChunk(tuple(spec_of(n, t) for n, t in part), tuple(t for _, t in part)) for part in chunks if part]


def _in_parallel(server_call: Callable[[], None], trainer_call: Callable[[], None]) -> None:
    pool = ThreadPoolExecutor(max_workers=1)
    try:
        future = pool.submit(server_call)
        trainer_call()
        future.result(timeout=300)
    finally:
        pool.shutdown(wait=False)  # a failed trainer side must not wait out the server call


def _sync(server: VllmHttpServer, transport: GlooTransport, chunks: list[WeightChunk], version: int) -> float:
    started = time.monotonic()
    server.pause()
    try:
        server.start_weight_update()
        for chunk in chunks:
            _in_parallel(lambda c=chunk: server.update_weights(c.specs), lambda c=chunk: transport.broadcast(c, 300))
        server.finish_weight_update(version)
        server.reset_prefix_cache()
    finally:
        server.resume()
    return time.monotonic() - started


@pytest.fixture(scope="module")
def transport(vllm_server: VllmHttpServer, port_factory) -> GlooTransport:
    world = vllm_server.world_size()
    init = TransferInit(
        master_address="127.0.0.1", master_port=port_factory(), rank_offset=1, world_size=world + 1,
        packed=True, packed_buffer_size_bytes=BUFFER_BYTES,
    )
    gloo = GlooTransport()
    started = time.monotonic()
    _in_parallel(lambda: vllm_server.init_weight_transfer(init, rank_offset=1), lambda: gloo.open(init, timeout=120))
    print(f"\n[sync] rendezvous (world_size={world + 1}) in {time.monotonic() - started:.2f}s")
    yield gloo
    gloo.close()


def test_generation_returns_engine_token_ids_and_logprobs(vllm_server: VllmHttpServer, running_vllm) -> None:
    if running_vllm.startup_seconds is not None:
        print(f"\n[server] startup to healthy: {running_vllm.startup_seconds:.1f}s")
    prompt = _probe_ids(running_vllm.model_path)[:8]
    params = SamplingParams(max_tokens=12, temperature=1.0, seed=7)
    first = vllm_server.generate(prompt, params, n=3)
    assert len(first) == 3
    for completion in first:
        assert 0 < len(completion.token_ids) == len(completion.logprobs) <= 12
        assert all(isinstance(t, int) for t in completion.token_ids)
        assert all(lp <= 0.0 for lp in completion.logprobs)
        assert completion.finish_reason in {"length", "stop"}
    # token-in/token-out: the sampled ids fed back as a prompt get the same log-probs at T=1
    sample = first[0]
    rescored = vllm_server.prompt_logprobs(prompt + list(sample.token_ids))[len(prompt):]
    assert max(abs(a - b) for a, b in zip(rescored, sample.logprobs)) < 1e-3
    greedy = SamplingParams(max_tokens=6, temperature=0.0)
    assert vllm_server.generate(prompt, greedy)[0].token_ids == vllm_server.generate(prompt, greedy)[0].token_ids


def test_sync_makes_server_logprobs_match_the_trainer(
    vllm_server: VllmHttpServer, transport: GlooTransport, running_vllm
) -> None:
    model = _load_trainer_model(running_vllm.model_path)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = _probe_ids(running_vllm.model_path)
    original = {name: p.detach().clone() for name, p in model.named_parameters()}
    original_lp = _trainer_logprobs(model, ids)
    assert (_server_logprobs(vllm_server, ids) - original_lp).abs().max() < 1e-3

    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():  # in place: lm_head stays tied to embed_tokens
            param.add_(torch.randn(param.shape, generator=gen) * 0.2 * param.std())
    assert model.lm_head.weight is model.model.embed_tokens.weight
    perturbed_lp = _trainer_logprobs(model, ids)
    before = (_server_logprobs(vllm_server, ids) - perturbed_lp).abs().max().item()
    assert before > 0.05, "the perturbation is too small to tell a sync from no sync"

    chunks = _chunks(model)
    assert len(chunks) > 1
    total = sum(s.nbytes for c in chunks for s in c.specs)
    version = (vllm_server.weight_version() or 0) + 1
    seconds = _sync(vllm_server, transport, chunks, version)
    after = (_server_logprobs(vllm_server, ids) - perturbed_lp).abs().max().item()
    print(
        f"\n[sync] {total / 1e6:.0f} MB in {len(chunks)} chunks: {seconds:.2f}s "
        f"({total / seconds / 1e9:.2f} GB/s); logprob max|diff| before {before:.4f}, after {after:.2e}"
    )
    assert after < 1e-3
    assert vllm_server.weight_version() == version

    with torch.no_grad():  # restore the shared server's original weights
        for name, param in model.named_parameters():
            param.copy_(original[name])
    _sync(vllm_server, transport, _chunks(model), version + 1)
    assert (_server_logprobs(vllm_server, ids) - original_lp).abs().max() < 1e-3
    assert vllm_server.weight_version() == version + 1


def test_bad_init_info_is_a_server_error_naming_server_and_endpoint(vllm_server: VllmHttpServer, port_factory) -> None:
    bad = TransferInit(master_address="127.0.0.1", master_port=port_factory(), rank_offset=5, world_size=2)
    with pytest.raises(ServerError) as caught:
        vllm_server.init_weight_transfer(bad, rank_offset=5)
    message = str(caught.value)
    assert vllm_server.url in message and "/init_weight_transfer_engine" in message


def test_update_before_start_is_refused_and_server_keeps_serving(vllm_server: VllmHttpServer) -> None:
    with pytest.raises(ServerError, match="/update_weights"):
        vllm_server.update_weights([TensorSpec("model.norm.weight", "float32", (576,))])
    assert vllm_server.generate([1, 2, 3], SamplingParams(max_tokens=2, temperature=0.0))
