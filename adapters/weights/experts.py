"""Fused 3D expert tensors (transformers 5.x MoE) to the per-expert names vLLM's loader takes.

transformers 5.17 keeps a MoE layer's experts as two fused parameters (its checkpoint
conversion mapping merges the per-expert checkpoint tensors at load time):
    <layer>.mlp.experts.gate_up_proj  [E, 2*I, H]   = cat(gate_e, up_e) along dim 1, per expert
    <layer>.mlp.experts.down_proj     [E, H, I]
We send what the original checkpoint holds, the names every vLLM version's expert loader
(`FusedMoE` / `RoutedExperts` expert mapping) and SGLang accept:
    qwen2_moe, qwen3_moe: <layer>.mlp.experts.{e}.gate_proj.weight [I, H], .up_proj.weight [I, H],
                          .down_proj.weight [H, I]
    mixtral:              <layer>.block_sparse_moe.experts.{e}.w1.weight (gate), .w3.weight (up),
                          .w2.weight (down); the whole `.mlp.` block is `.block_sparse_moe.` in
                          the checkpoint (router: `.block_sparse_moe.gate.weight`)
(vLLM 0.32 also accepts the fused 3D names, but older servers and SGLang do not.)
Any other architecture with fused experts is refused: a wrong name or a transposed layout would
load garbage silently. `gather_expert_state_dict` works for replicated, DTensor-sharded (EP over
a mesh) and declared hand-sliced (`shards.declare_expert_shard`) experts alike.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import attrs
import torch
from torch import nn

from adapters.weights.fetch import ParamFetch, plan_fetch


@attrs.frozen
class ExpertNaming:
    gate: str
    up: str
    down: str
    renames: tuple[tuple[str, str], ...] = ()  # regex renames applied to every name of the model


EXPERT_NAMING: dict[str, ExpertNaming] = {
    "qwen2_moe": ExpertNaming(gate="gate_proj", up="up_proj", down="down_proj"),
    "qwen3_moe": ExpertNaming(gate="gate_proj", up="up_proj", down="down_proj"),
    "mixtral": ExpertNaming(gate="w1", up="w3", down="w2", renames=((r"\.mlp\.", ".block_sparse_moe."),)),
}
FUSED_PARAMS = ("gate_up_proj", "down_proj")


def is_fused_experts(module: nn.Module) -> bool:
    params = module._parameters
    return all(name in params and params[name] is not None and params[name].dim() == 3 for name in FUSED_PARAMS)


def naming_for(model_type: str | None, where: str) -> ExpertNaming:
    if model_type not in EXPERT_NAMING:
        raise ValueError(
            f"{where}: fused experts of model_type {model_type!r} have no known checkpoint naming; "
            f"supported: {sorted(EXPERT_NAMING)}"
        )
    return EXPERT_NAMING[model_type]


def plan_experts(experts: nn.Module, where: str, *, is_sender: bool) -> tuple[ParamFetch, ParamFetch]:
    extra = sorted(set(n for n, p in experts._parameters.items() if p is not None) - set(FUSED_PARAMS))
    if extra:
        raise ValueError(f"{where}: unsupported expert parameters {extra} (only {list(FUSED_PARAMS)})")
    gate_up = plan_fetch(experts, "gate_up_proj", f"{where}.gate_up_proj", is_sender=is_sender)
    down = plan_fetch(experts, "down_proj", f"{where}.down_proj", is_sender=is_sender)
    if gate_up.shape[0] != down.shape[0] or gate_up.shape[1] % 2:
        raise ValueError(f"{where}: inconsistent fused expert shapes {list(gate_up.shape)} / {list(down.shape)}")
    return gate_up, down


def expert_shapes(
    prefix: str, gate_up: tuple[int, ...], naming: ExpertNaming
) -> list[tuple[str, tuple[int, ...]]]:
    """Per-expert names and shapes in send order (expert by expert: gate, up, down)."""
    num_experts, two_i, hidden = gate_up
    inter = two_i // 2
    out = []
    for e in range(num_experts):
        out.append((f"{prefix}.{e}.{naming.gate}.weight", (inter, hidden)))
        out.append((f"{prefix}.{e}.{naming.up}.weight", (inter, hidden)))
        out.append((f"{prefix}.{e}.{naming.down}.weight", (hidden, inter)))
    return out


def split_experts(gate_up: torch.Tensor, down: torch.Tensor) -> Iterator[torch.Tensor]:
    """Views of the full fused tensors, in the order of `expert_shapes`."""
    inter = gate_up.shape[1] // 2
    for e in range(gate_up.shape[0]):
        yield gate_up[e, :inter]
        yield gate_up[e, inter:]
        yield down[e]


def gather_expert_state_dict(
    experts: nn.Module, prefix: str, *, model_type: str | None, is_sender: bool
) -> list[tuple[str, torch.Tensor | None]]:
    """Every rank calls this for each MoE layer; the sender gets the full per-expert tensors.

    Names are under `prefix` as given; the model-wide renames (`apply_renames`, e.g. Mixtral's
    `.mlp.` -> `.block_sparse_moe.`) are the caller's. `ModelWeightSource` plans and gathers the
    same way, with the failure agreement between the two steps.
    """
    naming = naming_for(model_type, prefix)
    gate_up, down = plan_experts(experts, prefix, is_sender=is_sender)
    full_gate_up, full_down = gate_up.run(is_sender), down.run(is_sender)
    names = [name for name, _ in expert_shapes(prefix, gate_up.shape, naming)]
    if full_gate_up is None or full_down is None:
        return [(name, None) for name in names]
    return list(zip(names, split_experts(full_gate_up, full_down), strict=True))


def apply_renames(name: str, naming: ExpertNaming | None) -> str:
    for pattern, repl in naming.renames if naming else ():
        name = re.sub(pattern, repl, name)
    return name
