"""Single-process path of the weight gather: order, names, dtypes, chunking, memory, LoRA, refusals.

Multi-rank layouts (FSDP2, TP, EP, LoRA on top) are proven in
tests/integration/test_gather_torchrun.py; here the oracle is the plain model itself.
"""

from __future__ import annotations

import copy

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import LlamaConfig, LlamaForCausalLM, MixtralConfig, MixtralForCausalLM

from adapters.weights.experts import gather_expert_state_dict
from adapters.weights.gather import ModelWeightSource, gather_and_send_weights, iter_full_weights
from adapters.weights.layout import ContextParallelUnsupported, refuse_context_parallel
from adapters.weights.lora import server_name
from domain.packing import bucket_boundaries


def llama(layers: int = 2, tied: bool = True, vocab: int = 96, dtype: torch.dtype = torch.float32):
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=layers,
        num_attention_heads=2, num_key_value_heads=1, head_dim=32, tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(config).to(dtype)


def lora(model, autocast: bool = True, **overrides):
    torch.manual_seed(1)
    options = dict(r=4, lora_alpha=6, init_lora_weights=False, target_modules=["q_proj", "v_proj"])
    options.update(overrides)
    return get_peft_model(model, LoraConfig(**options), autocast_adapter_dtype=autocast)


def test_plain_model_yields_named_parameters_in_order_once_per_tie_cast_out_of_place():
    model = llama(tied=True)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    got = list(iter_full_weights(model, dtype="bfloat16"))
    assert [n for n, _ in got] == list(before)  # tied lm_head appears once (as embed_tokens)
    assert "lm_head.weight" not in dict(got)
    for (name, tensor), want in zip(got, before.values(), strict=True):
        assert tensor.dtype == torch.bfloat16 and torch.equal(tensor, want.to(torch.bfloat16)), name
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())


def test_chunks_follow_the_packing_rule_and_carry_their_tensors():
    model = llama(tied=False)
    chunks = list(ModelWeightSource(model, dtype=torch.float32).chunks(20_000))
    specs = [s for c in chunks for s in c.specs]
    expected = [len(r) for r in bucket_boundaries(specs, 20_000)]
    assert [len(c.specs) for c in chunks] == expected and len(chunks) > 2
    params = dict(model.named_parameters())
    for chunk in chunks:
        for spec, tensor in zip(chunk.specs, chunk.payload, strict=True):
            assert spec.shape == tuple(tensor.shape) and spec.dtype == "float32"
            assert torch.equal(tensor, params[spec.name])


def test_gather_and_send_returns_the_bytes_sent():
    model = llama()
    sent = []
    total = gather_and_send_weights(model, sent.append, chunk_bytes=50_000)
    assert total == sum(p.numel() * 4 for p in model.parameters())
    assert total == sum(s.nbytes for c in sent for s in c.specs)


def test_peak_extra_memory_is_one_chunk_plus_the_largest_tensor():
    model = llama(layers=8, vocab=256)
    largest = max(p.numel() for p in model.parameters()) * 2  # bf16
    chunk_bytes = 40_000
    dropping = ModelWeightSource(model, dtype=torch.bfloat16)  # every tensor is a fresh copy
    total = gather_and_send_weights(model, lambda chunk: None, chunk_bytes=chunk_bytes, source=dropping)
    assert dropping.memory.peak <= chunk_bytes + largest
    assert total > 4 * dropping.memory.peak  # far from a whole state dict
    kept = []
    hoarding = ModelWeightSource(model, dtype=torch.bfloat16)
    gather_and_send_weights(model, kept.append, chunk_bytes=chunk_bytes, source=hoarding)
    assert hoarding.memory.peak == total  # the measure sees what a consumer holds on to


def test_same_dtype_tensors_alias_the_parameters_and_cost_nothing():
    model = llama()
    source = ModelWeightSource(model, dtype=torch.float32)
    gather_and_send_weights(model, lambda chunk: None, chunk_bytes=10_000, source=source)
    assert source.memory.peak == 0


@pytest.mark.parametrize(
    ("dtype", "autocast"), [(torch.float32, True), (torch.bfloat16, True), (torch.bfloat16, False)]
)  # autocast: peft keeps bf16 adapters in fp32 (W + fp32 delta); without it, the CPU upcast path
def test_lora_is_folded_like_merge_and_unload_under_base_names(dtype, autocast):
    model = lora(llama(tied=False, dtype=dtype), autocast=autocast, modules_to_save=["lm_head"])
    with torch.no_grad():
        model.base_model.model.lm_head.modules_to_save["default"].weight.mul_(1.5)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    oracle = list(copy.deepcopy(model).merge_and_unload().named_parameters())
    got = list(iter_full_weights(model))
    assert [n for n, _ in got] == [n for n, _ in oracle]
    for (name, tensor), (_, want) in zip(got, oracle, strict=True):
        assert tensor.dtype == dtype and torch.equal(tensor, want), name
    assert all(torch.equal(p, before[n]) for n, p in model.named_parameters())  # base never written
    names = dict(got)
    assert not any("lora_" in n or "base_layer" in n or "modules_to_save" in n for n in names)
    base_q = before["base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight"]
    assert not torch.equal(names["model.layers.0.self_attn.q_proj.weight"], base_q)


def test_two_active_adapters_fold_in_order_like_peft():
    model = lora(llama(tied=False))
    torch.manual_seed(2)
    model.add_adapter("second", LoraConfig(r=2, lora_alpha=4, init_lora_weights=False, target_modules=["q_proj"]))
    model.base_model.set_adapter(["default", "second"])
    oracle = dict(copy.deepcopy(model).merge_and_unload().named_parameters())
    for name, tensor in iter_full_weights(model):
        assert torch.equal(tensor, oracle[name]), name


def test_mixtral_experts_are_sent_per_expert_under_checkpoint_names():
    torch.manual_seed(0)
    config = MixtralConfig(
        vocab_size=64, hidden_size=64, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=1, head_dim=32, num_local_experts=3, num_experts_per_tok=2,
    )
    model = MixtralForCausalLM(config)
    got = dict(iter_full_weights(model))
    experts = model.model.layers[0].mlp.experts
    for e in range(3):
        prefix = f"model.layers.0.block_sparse_moe.experts.{e}"
        assert torch.equal(got[f"{prefix}.w1.weight"], experts.gate_up_proj[e, :32])
        assert torch.equal(got[f"{prefix}.w3.weight"], experts.gate_up_proj[e, 32:])
        assert torch.equal(got[f"{prefix}.w2.weight"], experts.down_proj[e])
    assert "model.layers.0.block_sparse_moe.gate.weight" in got
    assert not any(".mlp." in n for n in got)
    direct = gather_expert_state_dict(experts, "model.layers.0.mlp.experts", model_type="mixtral", is_sender=True)
    assert [n for n, _ in direct] == [f"model.layers.0.mlp.experts.{e}.{w}.weight" for e in range(3) for w in ("w1", "w3", "w2")]
    assert all(torch.equal(t, got[n.replace(".mlp.", ".block_sparse_moe.")]) for n, t in direct)


def test_fused_experts_of_an_unknown_architecture_are_refused():
    torch.manual_seed(0)
    config = MixtralConfig(vocab_size=64, hidden_size=64, intermediate_size=32, num_hidden_layers=1,
                           num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_local_experts=2)
    model = MixtralForCausalLM(config)
    with pytest.raises(ValueError, match="model_type 'gpt_oss' have no known checkpoint naming"):
        list(ModelWeightSource(model, model_type="gpt_oss").entries())


def test_dora_is_refused_naming_the_module():
    model = lora(llama(), use_dora=True)
    with pytest.raises(ValueError, match=r"layers\.0\.self_attn\.q_proj.*DoRA"):
        list(iter_full_weights(model))


class _Mesh:
    mesh_dim_names = ("dp", "cp")
    shape = (2, 2)


def test_context_parallel_is_refused_with_the_reason():
    with pytest.raises(ContextParallelUnsupported, match="logits_to_keep"):
        ModelWeightSource(llama(), context_parallel_size=2)
    with pytest.raises(ContextParallelUnsupported, match="'cp' has size 2"):
        refuse_context_parallel(device_mesh=_Mesh())
    refuse_context_parallel(llama(), context_parallel_size=1)


def test_a_failing_send_propagates_unchanged_in_a_single_process():
    def send(chunk):
        raise ConnectionError("server at http://127.0.0.1:1 gone")

    with pytest.raises(ConnectionError, match="127.0.0.1:1"):
        gather_and_send_weights(llama(), send, chunk_bytes=10_000)


@pytest.mark.parametrize(
    ("wrapped", "plain"),
    [
        ("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight", "model.layers.0.self_attn.q_proj.weight"),
        ("_orig_mod.model.norm.weight", "model.norm.weight"),
        ("model.layers.1._checkpoint_wrapped_module.mlp.up_proj.weight", "model.layers.1.mlp.up_proj.weight"),
        ("model.base_layers.weight", "model.base_layers.weight"),
    ],
)
def test_server_names_drop_wrapper_segments_only(wrapped, plain):
    assert server_name(wrapped) == plain
