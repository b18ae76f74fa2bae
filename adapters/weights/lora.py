"""PEFT LoRA: fold each adapter into its base weight out of place, under the base model's names.

For a `peft.tuners.lora.Linear` the sender computes, for each active adapter in order,
    merged = (W + delta).to(W.dtype),   delta = (B @ A)[.T if fan_in_fan_out] * scaling
with PEFT's own arithmetic (`get_delta_weight`: fp16/bf16 adapters upcast to fp32 on CPU, then
cast back; `merge`: `W += delta` in W's dtype), so the result is bit-identical to
`merge_and_unload()` on a copy. Departure from the brief's "in the server dtype": the fold runs
in the training dtype and the sum is then cast to the server dtype, exactly as merging first and
casting after would. The frozen base weight is never written; lora_A/lora_B are never sent.
`modules_to_save` copies are sent from the trained copy under the base name.
Refused (clear error naming the module): DoRA, `lora_bias`, LoRA on anything but `nn.Linear`
(embedding, conv, experts via `target_parameters`), which we cannot fold exactly.
"""

from __future__ import annotations

import re

import torch
from torch import nn

try:  # peft is a trainer dependency; without it no module is a LoRA layer
    from peft.tuners.lora import LoraLayer
    from peft.tuners.lora import Linear as LoraLinear
    from peft.utils.other import ModulesToSaveWrapper
except ImportError:  # pragma: no cover - peft ships with the trainer env
    LoraLayer = LoraLinear = ModulesToSaveWrapper = ()  # type: ignore[assignment,misc]

_WRAPPER_SEGMENTS = re.compile(r"(^|\.)(base_layer|_fsdp_wrapped_module|_checkpoint_wrapped_module|_orig_mod)(?=\.|$)")


def server_name(name: str) -> str:
    """The base model's name for a parameter of a (PEFT-, compile- or checkpoint-)wrapped model."""
    name = name.removeprefix("base_model.model.")
    return _WRAPPER_SEGMENTS.sub("", name).lstrip(".")


def is_lora_layer(module: nn.Module) -> bool:
    return bool(LoraLayer) and isinstance(module, LoraLayer)


def is_modules_to_save(module: nn.Module) -> bool:
    return bool(ModulesToSaveWrapper) and isinstance(module, ModulesToSaveWrapper)


def active_adapters(layer: nn.Module, where: str) -> list[str]:
    """The adapters to fold into `layer`'s base weight ([] when merged or disabled)."""
    if not isinstance(layer, LoraLinear):
        raise ValueError(f"{where}: LoRA on {type(layer).__name__} cannot be folded; only lora.Linear is supported")
    if layer.merged or layer.disable_adapters:
        return []  # merged: the base already holds the deltas; disabled: the policy is the base
    names = [a for a in layer.active_adapters if a in layer.lora_A]
    for adapter in names:
        if layer.use_dora.get(adapter, False):
            raise ValueError(f"{where}: DoRA adapter {adapter!r} is not supported by the weight sync")
        if getattr(layer, "lora_bias", {}).get(adapter, False):
            raise ValueError(f"{where}: adapter {adapter!r} uses lora_bias, not supported by the weight sync")
    return names


def delta_weight(a: torch.Tensor, b: torch.Tensor, scaling: float, fan_in_fan_out: bool) -> torch.Tensor:
    """PEFT's `get_delta_weight` on full tensors."""
    dtype = b.dtype
    upcast = b.device.type == "cpu" and dtype in (torch.float16, torch.bfloat16)
    if upcast:
        a, b = a.float(), b.float()
    delta = b @ a
    if fan_in_fan_out:
        delta = delta.T
    delta = delta * scaling
    return delta.to(dtype) if upcast else delta


def fold(
    base: torch.Tensor, adapters: list[tuple[torch.Tensor, torch.Tensor, float]], fan_in_fan_out: bool
) -> torch.Tensor:
    """W + sum of deltas, out of place, in W's dtype (`base` is never written)."""
    merged = base
    for a, b, scaling in adapters:
        merged = (merged + delta_weight(a, b, scaling, fan_in_fan_out)).to(base.dtype)
    return merged


def trained_copy(wrapper: nn.Module) -> nn.Module:
    """The module whose weights the policy uses: the active adapter's copy, else the original."""
    adapters = [a for a in getattr(wrapper, "active_adapters", []) if a in wrapper.modules_to_save]
    if wrapper.disable_adapters or not adapters:
        return wrapper.original_module
    return wrapper.modules_to_save[adapters[0]]
