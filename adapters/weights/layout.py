"""Which training layouts the weight gather supports, who sends, and the refusal of CP.

Supported: a single process; FSDP2 (`fully_shard`, any number of DP ranks); DTensor tensor
parallelism (`parallelize_module`, also combined with FSDP2 on a 2D mesh); hand-sliced TP shards
declared with `adapters.weights.shards.declare_shard`; expert parallelism (fused 3D expert tensors
sharded on the expert dim, as DTensor or declared shards); PEFT LoRA on `nn.Linear` layers, with
`modules_to_save`.

Refused at construction: context parallelism. GRPO computes `logits_to_keep` completion logits and
sums log-probs over each whole sequence; a sequence split across CP ranks breaks both, so a
policy trained that way is not one we can sync (the seed: "CP is unsupported for GRPO").
Refused while gathering (clear error naming the module): LoRA variants other than plain
`lora.Linear` (DoRA, lora_bias, embedding/conv LoRA), fused experts of an architecture whose
checkpoint naming we do not know.

The sender is global rank 0. With `init_device_mesh` (row-major ranks) that is TP rank 0 of
DP rank 0, the rank the architecture names as "the global main rank".
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn

CP_MESH_DIM_NAMES = ("cp", "context", "context_parallel")


class ContextParallelUnsupported(ValueError):
    """The training layout splits sequences across ranks; GRPO's weight sync refuses it."""


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def global_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_global_sender() -> bool:
    """True on the one rank that talks to the servers (global rank 0)."""
    return global_rank() == 0


def refuse_context_parallel(
    model: nn.Module | None = None, *, context_parallel_size: int = 1, device_mesh: object | None = None
) -> None:
    """Raise `ContextParallelUnsupported` if the layout asks for context parallelism.

    Looks at the explicit size, a device mesh's dimension names, and the meshes of the
    model's DTensor parameters (a mesh dimension named cp/context of size > 1).
    """
    reason = (
        "context parallelism is unsupported for GRPO: logits_to_keep and the global log-prob "
        "sums over each sequence do not survive sequence splitting"
    )
    if context_parallel_size != 1:
        raise ContextParallelUnsupported(f"{reason} (context_parallel_size={context_parallel_size})")
    meshes = [device_mesh] if device_mesh is not None else []
    if model is not None:
        meshes.extend(_param_meshes(model))
    for mesh in meshes:
        for dim_name, size in _cp_dims(mesh):
            raise ContextParallelUnsupported(f"{reason} (device mesh dimension {dim_name!r} has size {size})")


def _param_meshes(model: nn.Module) -> list[object]:
    from torch.distributed.tensor import DTensor

    meshes: dict[int, object] = {}
    for param in model.parameters():
        if isinstance(param, DTensor):
            meshes.setdefault(id(param.device_mesh), param.device_mesh)
    return list(meshes.values())


def _cp_dims(mesh: object) -> list[tuple[str, int]]:
    names = getattr(mesh, "mesh_dim_names", None) or ()
    shape = tuple(getattr(mesh, "shape", ()))
    return [
        (name, shape[i])
        for i, name in enumerate(names)
        if name in CP_MESH_DIM_NAMES and i < len(shape) and shape[i] > 1
    ]
