"""Hand-sliced parameter shards (TP without DTensor, EP expert slices): declare, then gather.

A training setup that slices a weight by hand (each rank keeps rows or columns of a Linear, or a
contiguous share of a fused expert tensor) declares it on the owning module:

    declare_shard(module, "weight", dim=0, group=tp_group)

Contract: the shards are equal in size along `dim` and concatenate in group-rank order into the
full tensor. The gather is a `dist.gather` to group rank 0 (not an all-gather: only that rank
needs the full tensor, so the others allocate nothing); the sender must therefore be group rank 0
of every group it is declared in, which `validate_sender` checks before any collective runs.
A DTensor whose local shard is itself hand-sliced is first materialised, then gathered here.
"""

from __future__ import annotations

import attrs
import torch
import torch.distributed as dist
from torch import nn

_REGISTRY_ATTR = "_rlsetup_param_shards"


@attrs.frozen
class ShardDecl:
    """`param` is split along `dim` across the ranks of `group`, in group-rank order."""

    dim: int
    group: object = attrs.field(eq=False)


def declare_shard(module: nn.Module, param_name: str, *, dim: int, group: object) -> None:
    """Record that `module.<param_name>` holds this rank's slice along `dim` across `group`."""
    if param_name not in module._parameters:
        raise KeyError(f"declare_shard: {type(module).__name__} has no parameter {param_name!r}")
    registry = module.__dict__.setdefault(_REGISTRY_ATTR, {})
    registry[param_name] = ShardDecl(dim=dim, group=group)


def declare_expert_shard(experts: nn.Module, *, group: object) -> None:
    """Expert parallelism: every 3D expert tensor of `experts` holds a share of the experts (dim 0)."""
    for name, param in experts.named_parameters(recurse=False):
        if param.dim() == 3:
            declare_shard(experts, name, dim=0, group=group)


def shard_of(module: nn.Module, param_name: str) -> ShardDecl | None:
    return module.__dict__.get(_REGISTRY_ATTR, {}).get(param_name)


def full_shape(local_shape: tuple[int, ...], decl: ShardDecl, where: str) -> tuple[int, ...]:
    """The full shape of an evenly sharded tensor, checked against the declaration."""
    if not -len(local_shape) <= decl.dim < len(local_shape):
        raise ValueError(f"{where}: shard dim {decl.dim} is out of range for a tensor of shape {list(local_shape)}")
    dim = decl.dim % len(local_shape)
    shape = list(local_shape)
    shape[dim] *= dist.get_world_size(decl.group)
    return tuple(shape)


def validate_sender(decl: ShardDecl, is_sender: bool, where: str) -> None:
    if is_sender and dist.get_rank(decl.group) != 0:
        raise ValueError(
            f"{where}: the sending rank is rank {dist.get_rank(decl.group)} of the shard group; "
            "it must be rank 0 (TP rank 0 of DP rank 0)"
        )


def gather_shards(local: torch.Tensor, decl: ShardDecl) -> torch.Tensor | None:
    """The full tensor on group rank 0, None elsewhere; every rank of the group must call it."""
    local = local.detach().contiguous()
    size = dist.get_world_size(decl.group)
    dim = decl.dim % local.dim()
    if dist.get_rank(decl.group) != 0:
        dist.gather(local, None, group=decl.group, group_dst=0)
        return None
    if dim == 0:  # slices of dim 0 are contiguous: gather straight into the result
        out = local.new_empty((local.shape[0] * size, *local.shape[1:]))
        dist.gather(local, list(out.chunk(size, dim=0)), group=decl.group, group_dst=0)
        return out
    parts = [torch.empty_like(local) for _ in range(size)]
    dist.gather(local, parts, group=decl.group, group_dst=0)
    return torch.cat(parts, dim=dim)
