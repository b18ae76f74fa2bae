"""One parameter's path to a full tensor: plan locally (may raise), then run the collectives.

Planning validates the layout (shard dim, sender's group rank) and computes the full shape on
every rank without communication, so a misconfigured rank fails *before* any collective starts
and the failure can be agreed on (`agreement.GatherAgreement`). Running does the collectives
(DTensor all-gather, then the gather of a declared hand-sliced shard) on every rank and keeps
the result only where asked.
"""

from __future__ import annotations

import attrs
import torch
from torch import nn

from adapters.weights.dtensor import global_shape, local_part, materialize
from adapters.weights.shards import ShardDecl, full_shape, gather_shards, shard_of, validate_sender


@attrs.frozen
class ParamFetch:
    where: str  # the parameter's qualified name in the training model, for errors
    param: torch.Tensor = attrs.field(eq=False)
    decl: ShardDecl | None
    shape: tuple[int, ...]

    @property
    def dtype(self) -> torch.dtype:
        return self.param.dtype

    def local(self) -> torch.Tensor:
        """This rank's own storage, to tell copies from aliases."""
        return local_part(self.param)

    def run(self, keep: bool) -> torch.Tensor | None:
        tensor: torch.Tensor | None = materialize(self.param)
        if self.decl is not None:
            tensor = gather_shards(tensor, self.decl)
        if tensor is not None and tuple(tensor.shape) != self.shape:
            raise ValueError(f"{self.where}: gathered shape {list(tensor.shape)} != planned {list(self.shape)}")
        return tensor if keep else None


def plan_fetch(module: nn.Module, param_name: str, where: str, *, is_sender: bool) -> ParamFetch:
    param = module._parameters[param_name]
    if param is None:
        raise ValueError(f"{where}: parameter is None")
    decl = shard_of(module, param_name)
    shape = global_shape(param)
    if decl is not None:
        shape = full_shape(shape, decl, where)
        validate_sender(decl, is_sender, where)
    return ParamFetch(where=where, param=param, decl=decl, shape=shape)
