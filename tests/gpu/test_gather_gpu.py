"""Issue 4 on a GPU: single-rank FSDP2 + LoRA fold in bf16 on CUDA equals PEFT's merge_and_unload.

The multi-rank proofs run on CPU/gloo (tests/integration/test_gather_torchrun.py); this is the
same gather over a real NCCL default group of one rank, with CUDA DTensors and bf16 weights.
"""

from __future__ import annotations

import copy
import socket

import pytest
import torch
import torch.distributed as dist
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM

from adapters.weights.gather import ModelWeightSource, gather_and_send_weights, iter_full_weights

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")]


@pytest.fixture(scope="module")
def nccl_world_of_one():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def lora_llama_bf16() -> torch.nn.Module:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16).cuda()
    torch.manual_seed(1)
    lora = LoraConfig(
        r=4, lora_alpha=6, init_lora_weights=False, target_modules=["q_proj", "v_proj", "gate_proj"],
        modules_to_save=["lm_head"],
    )
    return get_peft_model(model, lora)


def test_fsdp2_lora_fold_in_bf16_on_cuda_matches_merge_and_unload(nccl_world_of_one):
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = lora_llama_bf16()
    oracle = [(n, p.detach().clone()) for n, p in copy.deepcopy(model).merge_and_unload().named_parameters()]
    mesh = init_device_mesh("cuda", (1,))
    for layer in model.get_base_model().model.layers:
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    got = list(iter_full_weights(model, dtype="bfloat16"))
    assert [n for n, _ in got] == [n for n, _ in oracle]
    for (name, tensor), (_, want) in zip(got, oracle, strict=True):
        assert tensor.is_cuda and tensor.dtype == torch.bfloat16, name
        assert torch.equal(tensor, want.to(torch.bfloat16)), (name, (tensor.float() - want.float()).abs().max())
    sent = []
    total = gather_and_send_weights(model, sent.append, chunk_bytes=16_384, source=ModelWeightSource(model, dtype="bfloat16"))
    assert total == sum(s.nbytes for c in sent for s in c.specs) and len(sent) > 1
