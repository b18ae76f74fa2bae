"""Typed, strictly validated `init_info` / `update_info` of the gloo weight-transfer engine.

Matches vLLM 0.32's NCCL engine (`nccl_common.NCCLWeightTransferInitInfo`,
`nccl_engine.NCCLWeightTransferUpdateInfo`) field for field, minus the NCCL-only
`nccl_unique_id_b64`:

- init_info: `master_address`, `master_port`, `rank_offset`, `world_size` are required;
  `packed` (default False, like vLLM's worker side), `packed_buffer_size_bytes` (default 1 GiB)
  and `packed_num_buffers` (default 2) are optional, as in vLLM.
- update_info: `names`, `dtype_names` (torch attribute names, no `torch.` prefix), `shapes`
  (full shapes); equal lengths; all three empty means "reuse the previous call's metadata"
  (vLLM 0.33's rule; 0.32 has no such shortcut).

Departure: vLLM reports unknown keys as a bare `TypeError` text; here every problem (unknown key,
missing key, wrong type, bad value, unknown dtype) is a `ValueError` naming the key and value.
Imports torch only (no vLLM), so the trainer-side tests can reuse it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import torch

DEFAULT_PACKED_BUFFER_SIZE_BYTES = 1024**3
DEFAULT_PACKED_NUM_BUFFERS = 2

_INIT_REQUIRED = ("master_address", "master_port", "rank_offset", "world_size")
_INIT_OPTIONAL = ("packed", "packed_buffer_size_bytes", "packed_num_buffers")
_UPDATE_KEYS = ("names", "dtype_names", "shapes")


@dataclass(frozen=True, kw_only=True)
class GlooInitInfo:
    master_address: str
    master_port: int
    rank_offset: int
    world_size: int
    packed: bool = False
    packed_buffer_size_bytes: int = DEFAULT_PACKED_BUFFER_SIZE_BYTES
    packed_num_buffers: int = DEFAULT_PACKED_NUM_BUFFERS


@dataclass(frozen=True)
class TensorMeta:
    """One tensor announced over HTTP: its bytes arrive over gloo."""

    name: str
    dtype: torch.dtype
    shape: tuple[int, ...]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclass(frozen=True)
class GlooUpdateInfo:
    names: list[str] = field(default_factory=list)
    dtype_names: list[str] = field(default_factory=list)
    shapes: list[list[int]] = field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        return not (self.names or self.dtype_names or self.shapes)

    def metas(self) -> list[TensorMeta]:
        return [
            TensorMeta(name, parse_dtype(dtype_name), tuple(shape))
            for name, dtype_name, shape in zip(self.names, self.dtype_names, self.shapes)
        ]


def parse_init_info(raw: Any) -> GlooInitInfo:
    """Validate the `init_info` dict of `/init_weight_transfer_engine`."""
    if not isinstance(raw, dict):
        raise ValueError(f"gloo init_info must be a JSON object, got {type(raw).__name__}: {raw!r}")
    _check_keys("init_info", raw, required=_INIT_REQUIRED, optional=_INIT_OPTIONAL)
    address = raw["master_address"]
    if not isinstance(address, str) or not address:
        raise ValueError(f"gloo init_info.master_address must be a non-empty string, got {address!r}")
    info = GlooInitInfo(
        master_address=address,
        master_port=_int(raw, "master_port", low=1, high=65535),
        rank_offset=_int(raw, "rank_offset", low=0),
        world_size=_int(raw, "world_size", low=2),
        packed=_bool(raw, "packed", False),
        packed_buffer_size_bytes=_int(raw, "packed_buffer_size_bytes", low=1, default=DEFAULT_PACKED_BUFFER_SIZE_BYTES),
        packed_num_buffers=_int(raw, "packed_num_buffers", low=1, default=DEFAULT_PACKED_NUM_BUFFERS),
    )
    if info.rank_offset >= info.world_size:
        raise ValueError(
            f"gloo init_info.rank_offset={info.rank_offset} leaves no rank for the server in "
            f"world_size={info.world_size}"
        )
    return info


def parse_update_info(raw: Any) -> GlooUpdateInfo:
    """Validate the `update_info` dict of `/update_weights` (one worker's entry)."""
    if not isinstance(raw, dict):
        raise ValueError(f"gloo update_info must be a JSON object, got {type(raw).__name__}: {raw!r}")
    _check_keys("update_info", raw, required=(), optional=_UPDATE_KEYS)
    info = GlooUpdateInfo(
        names=list(raw.get("names", [])),
        dtype_names=list(raw.get("dtype_names", [])),
        shapes=[list(shape) for shape in raw.get("shapes", [])],
    )
    for key in ("dtype_names", "shapes"):
        if len(getattr(info, key)) != len(info.names):
            raise ValueError(
                f"gloo update_info.{key} has {len(getattr(info, key))} entries but names has "
                f"{len(info.names)}; they must be the same length"
            )
    for name, shape in zip(info.names, info.shapes):
        if not all(isinstance(dim, int) and not isinstance(dim, bool) and dim >= 0 for dim in shape):
            raise ValueError(f"gloo update_info.shapes entry for {name!r} is not a list of ints >= 0: {shape!r}")
    info.metas()  # rejects unknown dtype names now, before any bytes are awaited
    return info


def parse_dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None) if isinstance(name, str) else None
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"gloo update_info.dtype_names has unknown torch dtype {name!r} (spell it like 'bfloat16')")
    return dtype


def _check_keys(what: str, raw: dict, *, required: tuple[str, ...], optional: tuple[str, ...]) -> None:
    unknown = sorted(set(raw) - set(required) - set(optional))
    missing = [key for key in required if key not in raw]
    if unknown or missing:
        raise ValueError(
            f"gloo {what}: unknown keys {unknown}, missing keys {missing}; "
            f"expected {list(required)} and optionally {list(optional)}"
        )


def _int(raw: dict, key: str, *, low: int, high: int | None = None, default: int | None = None) -> int:
    value = raw.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f">= {low}" + (f" and <= {high}" if high is not None else "")
        raise ValueError(f"gloo init_info.{key} must be an int {bound}, got {value!r}")
    return value


def _bool(raw: dict, key: str, default: bool) -> bool:
    value = raw.get(key, default)
    if not isinstance(value, bool):
        raise ValueError(f"gloo init_info.{key} must be true or false, got {value!r}")
    return value
