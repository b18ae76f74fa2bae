"""Weight shapes of decoder-only models from their HF config, and deterministic payloads for them.

Used by the NCCL weight-sync tests and benches on both ends of the wire (trainer and receiver
double), so both can build the same bytes without shipping any checkpoint:
- `llama_specs(config)`: name/dtype/shape of every weight a Llama/Qwen2-style `*ForCausalLM`
  holds, in module order (what the gather sends); `lm_head.weight` only when embeddings are not
  tied; q/k/v biases when `attention_bias` (Qwen2) is set.
- `SMOLLM2_135M`: the fields of SmolLM2-135M-Instruct's config.json those shapes need (the bench
  reads the real config.json when it is at hand; a CPU test can compare both against the
  checkpoint's safetensors header). `QWEN2_1_5B_LIKE`: a random ~1.54B-parameter model.
- `expected_weights`: CPU-generated normal values (small models; same bytes on every machine);
  `hashed_weights`: integer-hash values built on the device, fast enough for billions of
  parameters, identical wherever integer arithmetic is (it always is).
"""

from __future__ import annotations

import math

import torch

SMOLLM2_135M = {
    "hidden_size": 576, "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
    "head_dim": 64, "intermediate_size": 1536, "vocab_size": 49152, "tie_word_embeddings": True,
    "attention_bias": False,
}
# Qwen2-1.5B's layout (GQA 12/2 heads, attention biases, tied embeddings): 1,543,714,304 params.
QWEN2_1_5B_LIKE = {
    "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12, "num_key_value_heads": 2,
    "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True, "attention_bias": True,
}
MASK31 = 2**31 - 1


def llama_specs(config: dict, dtype: str = "bfloat16", layers: int | None = None) -> list[dict]:
    """name/dtype/shape of a Llama-family model's weights, in module order."""
    h, mlp, vocab = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    heads, kv_heads = config["num_attention_heads"], config.get("num_key_value_heads", config["num_attention_heads"])
    head_dim = config.get("head_dim") or h // heads
    q, kv = heads * head_dim, kv_heads * head_dim
    bias = bool(config.get("attention_bias", False))
    shapes: list[tuple[str, list[int]]] = [("model.embed_tokens.weight", [vocab, h])]
    for i in range(config["num_hidden_layers"] if layers is None else layers):
        p = f"model.layers.{i}"
        shapes += [(f"{p}.self_attn.q_proj.weight", [q, h])] + ([(f"{p}.self_attn.q_proj.bias", [q])] if bias else [])
        shapes += [(f"{p}.self_attn.k_proj.weight", [kv, h])] + ([(f"{p}.self_attn.k_proj.bias", [kv])] if bias else [])
        shapes += [(f"{p}.self_attn.v_proj.weight", [kv, h])] + ([(f"{p}.self_attn.v_proj.bias", [kv])] if bias else [])
        shapes += [
            (f"{p}.self_attn.o_proj.weight", [h, q]), (f"{p}.mlp.gate_proj.weight", [mlp, h]),
            (f"{p}.mlp.up_proj.weight", [mlp, h]), (f"{p}.mlp.down_proj.weight", [h, mlp]),
            (f"{p}.input_layernorm.weight", [h]), (f"{p}.post_attention_layernorm.weight", [h]),
        ]
    shapes.append(("model.norm.weight", [h]))
    if not config.get("tie_word_embeddings", False):
        shapes.append(("lm_head.weight", [vocab, h]))
    return [{"name": n, "dtype": dtype, "shape": s} for n, s in shapes]


def smollm2_specs(layers: int = SMOLLM2_135M["num_hidden_layers"]) -> list[dict]:
    """SmolLM2-135M's weights in bf16 (134.5M params at 30 layers); fewer layers for quick tests."""
    return llama_specs(SMOLLM2_135M, layers=layers)


def spec_bytes(spec: dict) -> int:
    return math.prod(spec["shape"]) * getattr(torch, spec["dtype"]).itemsize


def parameter_count(specs: list[dict]) -> int:
    return sum(math.prod(s["shape"]) for s in specs)


def expected_weights(seed: int, specs: list[dict], device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """Deterministic normal tensors for `specs`, drawn on the CPU (same bytes in every process)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for spec in specs:
        dtype = getattr(torch, spec["dtype"])
        data = torch.randn(spec["shape"], generator=generator, dtype=torch.float32).to(dtype)
        out.append(data.to(device))
    return out


def hashed_tensor(seed: int, index: int, spec: dict, device: str | torch.device) -> torch.Tensor:
    """Values in [-0.5, 0.5) from an integer hash of (seed, tensor index, element index).

    Every intermediate stays below 2**63 (31-bit state times constants below 2**31), so there is
    no overflow and the bytes are the same on any device.
    """
    salt = (seed * 1_000_003 + index * 7_919) & MASK31
    x = torch.arange(math.prod(spec["shape"]), dtype=torch.int64, device=device)
    x = (x * 1_103_515_245 + 12_345 + salt) & MASK31
    x = ((x ^ (x >> 13)) * 1_664_525 + 1_013_904_223) & MASK31
    x = ((x ^ (x >> 16)) * 22_695_477 + 1) & MASK31
    values = (x & 0xFFFFFF).to(torch.float32) / float(1 << 24) - 0.5
    return values.to(getattr(torch, spec["dtype"])).view(spec["shape"])


def hashed_weights(seed: int, specs: list[dict], device: str | torch.device) -> list[torch.Tensor]:
    return [hashed_tensor(seed, i, spec, device) for i, spec in enumerate(specs)]


def make_weights(fill: str, seed: int, specs: list[dict], device: str | torch.device) -> list[torch.Tensor]:
    """`fill` is "randn" (`expected_weights`) or "hash" (`hashed_weights`)."""
    if fill == "randn":
        return expected_weights(seed, specs, device)
    if fill == "hash":
        return hashed_weights(seed, specs, device)
    raise ValueError(f"unknown weight fill {fill!r}; expected 'randn' or 'hash'")


def raw_pattern(nbytes: int, device: str | torch.device) -> torch.Tensor:
    """The bytes of the raw baseline broadcast: i % 251 (a prime, so no power-of-two period)."""
    return (torch.arange(nbytes, device=device) % 251).to(torch.uint8)
