"""torchrun worker for tests/integration/test_gather_torchrun.py: tiny models, gloo, real layouts.

    torchrun --standalone --nproc_per_node N gather_worker.py OUT_DIR CASE [CASE ...]

Every rank builds the same seeded model, lays it out (FSDP2, DTensor TP, hand-sliced TP, EP,
LoRA on top), and calls `gather_and_send_weights`. The sender saves what it sent (names, chunk
boundaries, tensors) to OUT_DIR/<case>.pt; every rank writes OUT_DIR/<case>.rank<r>.json with
its outcome and whether its local weights were left untouched. The test process imports this
module for `build_model` and `reference`, the single-process oracle.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn

SERVER_DTYPE = {"fsdp2": "bfloat16", "hsdp_tp": "bfloat16", "ep": "bfloat16"}  # others: float32
LORA_CASES = ("fsdp2_lora", "tp_lora", "plain_lora")


def llama(tied: bool) -> nn.Module:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=2, num_key_value_heads=2, head_dim=32, tie_word_embeddings=tied,
    )
    return LlamaForCausalLM(config)


def qwen3_moe() -> nn.Module:
    from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM

    torch.manual_seed(0)
    config = Qwen3MoeConfig(
        vocab_size=96, hidden_size=64, intermediate_size=96, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2, head_dim=32,
        num_experts=4, num_experts_per_tok=2, tie_word_embeddings=False,
    )
    model = Qwen3MoeForCausalLM(config)
    with torch.no_grad():  # random experts (the default init leaves them near-degenerate)
        for p in model.parameters():
            p.normal_(0, 0.02)
    return model


def with_lora(model: nn.Module) -> nn.Module:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(1)
    config = LoraConfig(
        r=4, lora_alpha=6, init_lora_weights=False, modules_to_save=["lm_head"],
        target_modules=["q_proj", "v_proj", "gate_proj"],
    )
    peft_model = get_peft_model(model, config)
    with torch.no_grad():
        peft_model.base_model.model.lm_head.modules_to_save["default"].weight.mul_(1.5)
    return peft_model


def build_model(case: str) -> nn.Module:
    """The unsharded model of a case, identical on every rank and in the test process."""
    if case == "ep":
        return qwen3_moe()
    if case in LORA_CASES:
        return with_lora(llama(tied=False))
    return llama(tied=case in ("fsdp2", "plain", "fail_rank", "fail_send"))


def reference(case: str) -> list[tuple[str, torch.Tensor]]:
    """The single-process oracle: names and tensors the server must receive, in order."""
    dtype = getattr(torch, SERVER_DTYPE.get(case, "float32"))
    model = build_model(case)
    if case in LORA_CASES:
        model = copy.deepcopy(model).merge_and_unload()
    out = []
    for name, param in model.named_parameters():
        if name.endswith("mlp.experts.gate_up_proj"):
            continue  # expanded with down_proj below
        if name.endswith("mlp.experts.down_proj"):
            out.extend(_per_expert(model, name.removesuffix(".down_proj"), dtype))
            continue
        out.append((name, param.detach().to(dtype)))
    return out


def _per_expert(model: nn.Module, prefix: str, dtype: torch.dtype) -> list[tuple[str, torch.Tensor]]:
    experts = model.get_submodule(prefix)
    inter = experts.gate_up_proj.shape[1] // 2
    rows = []
    for e in range(experts.gate_up_proj.shape[0]):
        rows.append((f"{prefix}.{e}.gate_proj.weight", experts.gate_up_proj[e, :inter].detach().to(dtype)))
        rows.append((f"{prefix}.{e}.up_proj.weight", experts.gate_up_proj[e, inter:].detach().to(dtype)))
        rows.append((f"{prefix}.{e}.down_proj.weight", experts.down_proj[e].detach().to(dtype)))
    return rows


# ---- layouts: how each case spreads the same model over the ranks --------------------------


def lay_out(case: str, model: nn.Module) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh

    from adapters.weights.shards import declare_shard

    world = dist.get_world_size()
    if case == "fail_rank" and dist.get_rank() == 1:  # a misdeclared shard on one rank only
        declare_shard(_layers(model)[1].mlp.gate_proj, "weight", dim=5, group=dist.group.WORLD)
    if case in ("fsdp2", "fsdp2_lora"):
        _fsdp(model, init_device_mesh("cpu", (world,)))
    if case in ("tp", "tp_lora"):
        _tp(model, init_device_mesh("cpu", (world,)))
    if case == "hsdp_tp":
        mesh = init_device_mesh("cpu", (world // 2, 2), mesh_dim_names=("dp", "tp"))
        _tp(model, mesh["tp"])
        _fsdp(model, mesh["dp"])
    if case == "ep":
        _ep(model, init_device_mesh("cpu", (world,)))
    return model


def _layers(model: nn.Module) -> nn.ModuleList:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return base.model.layers


def _fsdp(model: nn.Module, mesh: object) -> None:
    from torch.distributed.fsdp import fully_shard

    for layer in _layers(model):
        fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _base(module: nn.Module) -> nn.Module:
    return getattr(module, "base_layer", module)


def _tp(model: nn.Module, mesh: object) -> None:
    """DTensor TP for attention, hand-sliced (declared) TP for the MLP."""
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    from adapters.weights.shards import declare_shard

    size, rank = mesh.size(), mesh.get_local_rank()
    for layer in _layers(model):
        attn, mlp = layer.self_attn, layer.mlp
        for name in ("q_proj", "k_proj", "v_proj"):
            parallelize_module(_base(getattr(attn, name)), mesh, ColwiseParallel())
        parallelize_module(_base(attn.o_proj), mesh, RowwiseParallel())
        for name, dim in (("gate_proj", 0), ("up_proj", 0), ("down_proj", 1)):
            linear = _base(getattr(mlp, name))
            local = linear.weight.detach().chunk(size, dim=dim)[rank].clone()
            linear.weight = nn.Parameter(local, requires_grad=linear.weight.requires_grad)
            declare_shard(linear, "weight", dim=dim, group=mesh.get_group())


def _ep(model: nn.Module, mesh: object) -> None:
    """Layer 0: hand-sliced experts (declared); layer 1: experts as DTensor Shard(0)."""
    from torch.distributed.tensor import Shard, distribute_tensor

    from adapters.weights.shards import declare_expert_shard

    size, rank = mesh.size(), mesh.get_local_rank()
    first, second = _layers(model)[0].mlp.experts, _layers(model)[1].mlp.experts
    for name in ("gate_up_proj", "down_proj"):
        full = getattr(first, name).detach()
        setattr(first, name, nn.Parameter(full.chunk(size, dim=0)[rank].clone()))
        full = getattr(second, name).detach()
        setattr(second, name, nn.Parameter(distribute_tensor(full, mesh, [Shard(0)])))
    declare_expert_shard(first, group=mesh.get_group())


def local_tensors(model: nn.Module) -> list[tuple[str, torch.Tensor]]:
    from adapters.weights.dtensor import local_part

    return [(name, local_part(p).detach()) for name, p in model.named_parameters()]


def sender_for(case: str, sent: list):
    def send(chunk) -> None:
        if case == "fail_send" and len(sent) == 1:
            raise RuntimeError("server gone while receiving chunk 2")
        sent.append(chunk)

    return send


def main(out_dir: Path, cases: list[str]) -> None:
    from adapters.weights.gather import ModelWeightSource, gather_and_send_weights

    dist.init_process_group("gloo", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    for case in cases:
        model = lay_out(case, build_model(case))
        before = {n: t.detach().clone() for n, t in local_tensors(model)}
        sent: list = []
        source = ModelWeightSource(model, dtype=SERVER_DTYPE.get(case, "float32"))
        status = {"rank": rank, "ok": True, "error": None}
        try:
            status["bytes"] = gather_and_send_weights(
                model, sender_for(case, sent), chunk_bytes=16_384, source=source
            )
        except Exception as exc:  # noqa: BLE001 - recorded for the test to check
            status.update(ok=False, error=f"{type(exc).__name__}: {exc}")
        after = dict(local_tensors(model))
        status["unchanged"] = all(torch.equal(before[n], after[n]) for n in before)
        if rank == 0 and status["ok"]:
            torch.save(_record(sent), out_dir / f"{case}.pt")
        (out_dir / f"{case}.rank{rank}.json").write_text(json.dumps(status))
        dist.barrier()
    # Every result is on disk and every rank passed the last barrier. Skip the C++ teardown of the
    # gloo groups and device-mesh subgroups: on 2 cores it occasionally aborts ("terminate called
    # without an active exception") after the work is done, which says nothing about the gather.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def _record(sent: list) -> dict:
    return {
        "names": [s.name for chunk in sent for s in chunk.specs],
        "dtypes": [s.dtype for chunk in sent for s in chunk.specs],
        "chunks": [[s.name for s in chunk.specs] for chunk in sent],
        "tensors": [t.clone() for chunk in sent for t in chunk.payload],
    }


if __name__ == "__main__":
    main(Path(sys.argv[1]), sys.argv[2:])
