"""The model as a sequence of gather units, in module order, each planned before it gathers.

A unit is one module's own parameters, one PEFT LoRA layer (base weight + adapters, folded),
one `modules_to_save` wrapper (its trained copy), or one fused-experts module (all experts of a
MoE layer). `walk_units` visits modules in `named_modules` pre-order, so the tensors come out in
`named_parameters()` order, layer by layer, each layer complete before the next (what vLLM's
layerwise reload wants); a parameter seen before (tied weights) is skipped, like
`named_parameters(remove_duplicate=True)`. Buffers are not sent (vLLM recomputes rotary tables).

`Unit.plan()` runs locally and may raise (bad layout); `Planned.collect()` runs the collectives
on every rank and returns the full tensors on the sender, Nones elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import attrs
import torch
from torch import nn

from adapters.weights import experts as ex
from adapters.weights import lora
from adapters.weights.fetch import ParamFetch, plan_fetch


@attrs.frozen
class Planned:
    names: list[str]
    shapes: list[tuple[int, ...]]
    dtypes: list[torch.dtype]
    sources: list[torch.Tensor]  # local storages the outputs may alias (not counted as extra memory)
    collect: Callable[[], list[torch.Tensor | None]]


@attrs.frozen
class Unit:
    where: str
    plan: Callable[[], Planned]


@attrs.frozen
class _Context:
    is_sender: bool
    naming: ex.ExpertNaming | None
    model_type: str | None


def walk_units(model: nn.Module, *, is_sender: bool, model_type: str | None) -> Iterator[Unit]:
    naming = ex.EXPERT_NAMING.get(model_type) if model_type else None
    ctx = _Context(is_sender=is_sender, naming=naming, model_type=model_type)
    yield from _walk(model, "", ctx, set())


def _walk(module: nn.Module, prefix: str, ctx: _Context, seen: set[int]) -> Iterator[Unit]:
    if lora.is_lora_layer(module):
        yield Unit(prefix, lambda: _plan_lora(module, prefix, ctx, seen))
        return
    if lora.is_modules_to_save(module):
        yield from _walk(lora.trained_copy(module), prefix, ctx, seen)  # under the base name
        return
    if ex.is_fused_experts(module):
        yield Unit(prefix, lambda: _plan_experts(module, prefix, ctx, seen))
        return
    own = [n for n, p in module._parameters.items() if p is not None]
    if own:
        yield Unit(prefix or "<root>", lambda: _plan_plain(module, prefix, own, ctx, seen))
    for name, child in module.named_children():
        yield from _walk(child, _join(prefix, name), ctx, seen)


def _plan_plain(module: nn.Module, prefix: str, names: list[str], ctx: _Context, seen: set[int]) -> Planned:
    fetches: list[ParamFetch] = []
    for name in names:
        param = module._parameters[name]
        if id(param) in seen:
            continue
        seen.add(id(param))
        fetches.append(plan_fetch(module, name, _join(prefix, name), is_sender=ctx.is_sender))
    return Planned(
        names=[_server(f.where, ctx) for f in fetches],
        shapes=[f.shape for f in fetches],
        dtypes=[f.dtype for f in fetches],
        sources=[f.local() for f in fetches],
        collect=lambda: [f.run(ctx.is_sender) for f in fetches],
    )


def _plan_lora(layer: nn.Module, prefix: str, ctx: _Context, seen: set[int]) -> Planned:
    adapters = lora.active_adapters(layer, prefix)
    base_module = layer.base_layer
    base_names = [n for n, p in base_module._parameters.items() if p is not None and id(p) not in seen]
    seen.update(id(base_module._parameters[n]) for n in base_names)
    base = [plan_fetch(base_module, n, _join(prefix, f"base_layer.{n}"), is_sender=ctx.is_sender) for n in base_names]
    pairs = [
        (
            plan_fetch(layer.lora_A[a], "weight", f"{prefix}.lora_A.{a}.weight", is_sender=ctx.is_sender),
            plan_fetch(layer.lora_B[a], "weight", f"{prefix}.lora_B.{a}.weight", is_sender=ctx.is_sender),
            float(layer.scaling[a]),
        )
        for a in adapters
    ]

    def collect() -> list[torch.Tensor | None]:
        full = [f.run(ctx.is_sender) for f in base]
        deltas = [(a.run(ctx.is_sender), b.run(ctx.is_sender), s) for a, b, s in pairs]
        if not ctx.is_sender or "weight" not in base_names or not deltas:
            return full
        index = base_names.index("weight")
        full[index] = lora.fold(full[index], deltas, bool(layer.fan_in_fan_out))
        return full

    return Planned(
        names=[_server(f.where, ctx) for f in base],
        shapes=[f.shape for f in base],
        dtypes=[f.dtype for f in base],
        sources=[f.local() for f in base],
        collect=collect,
    )


def _plan_experts(module: nn.Module, prefix: str, ctx: _Context, seen: set[int]) -> Planned:
    naming = ex.naming_for(ctx.model_type, prefix)
    gate_up, down = ex.plan_experts(module, prefix, is_sender=ctx.is_sender)
    seen.update((id(gate_up.param), id(down.param)))
    named = ex.expert_shapes(prefix, gate_up.shape, naming)

    def collect() -> list[torch.Tensor | None]:
        full_gate_up, full_down = gate_up.run(ctx.is_sender), down.run(ctx.is_sender)
        if full_gate_up is None or full_down is None:
            return [None] * len(named)
        return list(ex.split_experts(full_gate_up, full_down))

    return Planned(
        names=[_server(name, ctx) for name, _ in named],
        shapes=[shape for _, shape in named],
        dtypes=[gate_up.dtype, gate_up.dtype, down.dtype] * gate_up.shape[0],
        sources=[gate_up.local(), down.local()],
        collect=collect,
    )


def _server(name: str, ctx: _Context) -> str:
    return ex.apply_renames(lora.server_name(name), ctx.naming)


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name
