"""Keep tied parameters (e.g. `lm_head.weight` is `embed_tokens.weight`) tied across a reload.

vLLM's layerwise reload documents that tied parameters only reflect one parent's processing
(`model_loader/reload/__init__.py`, limitation 2). On the CPU build the consequence is silent:
the embedding is reloaded and re-processed, but `lm_head` loads nothing ("Failed to load
weights"), gets its old kernel tensors placed back, and keeps the `cpu_linear` GEMM handle
(oneDNN / packed weights) built from the OLD weight at startup, so logits go stale.

The fix, applied after `finalize_layerwise_reload`: point every alias at the current parameter of
its first owner (registration order, i.e. the module the checkpoint loads) and, where the alias
computes through a CPU GEMM (`cpu_linear`), rebuild it with vLLM's own
`dispatch_cpu_unquantized_gemm(layer, remove_weight=False)`, as `UnquantizedEmbeddingMethod`
does at load time. Ties are captured before `initialize_layerwise_reload` swaps in meta tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TiedAlias:
    owner: torch.nn.Module
    owner_attr: str
    alias: torch.nn.Module
    alias_attr: str
    alias_path: str


def find_tied_parameters(model: torch.nn.Module) -> list[TiedAlias]:
    """Every (module, attribute) that holds a parameter already held by an earlier module."""
    first: dict[int, tuple[torch.nn.Module, str]] = {}
    aliases: list[TiedAlias] = []
    for path, module in model.named_modules(remove_duplicate=False):
        for attr, param in module.named_parameters(recurse=False, remove_duplicate=False):
            if id(param) not in first:
                first[id(param)] = (module, attr)
                continue
            owner, owner_attr = first[id(param)]
            if owner is not module:
                aliases.append(TiedAlias(owner, owner_attr, module, attr, f"{path}.{attr}"))
    return aliases


def retie(aliases: list[TiedAlias]) -> list[str]:
    """Re-point aliases at their owner's parameter and rebuild CPU GEMMs; returns alias paths fixed."""
    fixed: list[str] = []
    for tie in aliases:
        current = getattr(tie.owner, tie.owner_attr)
        if getattr(tie.alias, tie.alias_attr) is not current:
            setattr(tie.alias, tie.alias_attr, current)
        if tie.alias_attr == "weight" and hasattr(tie.alias, "cpu_linear"):
            from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

            dispatch_cpu_unquantized_gemm(tie.alias, remove_weight=False)
        fixed.append(tie.alias_path)
    return fixed
