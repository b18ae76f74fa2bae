"""`gather_and_send_weights`: the one gather routine of both jobs, parallelism- and PEFT-aware.

Every training rank calls it with the same model; each unit (see `units`) is planned locally,
agreed on (`agreement`: one rank's failure raises on all), gathered collectively, and, on the
sender only (global rank 0 = TP rank 0 of DP rank 0), cast to the server dtype out of place and
grouped into chunks. A chunk closes when its bytes exceed `chunk_bytes`, the tensor that crosses
included (the rule of `domain.packing`), so peak extra memory is about one chunk plus the largest
unit, never a whole state dict. Non-senders build the same chunk boundaries from metadata alone
and get `payload=None`. Supported and refused layouts: `adapters.weights.layout`.

Names are the server's (HF checkpoint) names; dtype names as in `domain.tensors` ("bfloat16").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import torch
from torch import nn

from application.ports.weight_sync import WeightChunk
from domain.tensors import DTYPE_ITEMSIZE, TensorSpec
from adapters.weights.agreement import GatherAgreement
from adapters.weights.layout import is_global_sender, refuse_context_parallel
from adapters.weights.memory import LiveBytes
from adapters.weights.units import walk_units


def dtype_name(dtype: torch.dtype) -> str:
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_ITEMSIZE:
        raise ValueError(f"dtype {name!r} has no wire name; known: {sorted(DTYPE_ITEMSIZE)}")
    return name


def resolve_dtype(dtype: torch.dtype | str | None) -> torch.dtype | None:
    if dtype is None or isinstance(dtype, torch.dtype):
        return dtype
    resolved = getattr(torch, str(dtype).removeprefix("torch."), None)
    if not isinstance(resolved, torch.dtype):
        raise ValueError(f"unknown server dtype {dtype!r}")
    return resolved


class ModelWeightSource:
    """`WeightSource` over a training model, in any supported layout (see module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        *,
        dtype: torch.dtype | str | None = None,
        model_type: str | None = None,
        context_parallel_size: int = 1,
        device_mesh: object | None = None,
        group: object | None = None,
    ) -> None:
        refuse_context_parallel(model, context_parallel_size=context_parallel_size, device_mesh=device_mesh)
        self._model = model
        self._dtype = resolve_dtype(dtype)
        self._model_type = model_type or getattr(getattr(model, "config", None), "model_type", None)
        self._agreement = GatherAgreement(group)
        self.memory = LiveBytes()

    @property
    def is_sender(self) -> bool:
        return is_global_sender()

    def entries(self) -> Iterator[tuple[TensorSpec, torch.Tensor | None]]:
        """(spec, full tensor on the sender / None elsewhere), in send order; then the final check."""
        yield from self._guarded(self._entries())

    def chunks(self, chunk_bytes: int) -> Iterator[WeightChunk]:
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be > 0, got {chunk_bytes}")
        yield from self._guarded(self._chunks(chunk_bytes))

    def abort(self, error: BaseException) -> None:
        """The sender's consumer failed (e.g. `send`): make every rank raise, then raise here."""
        if not self._agreement.aborted:
            self._agreement.check(error, "send")
        raise error

    def _guarded(self, items: Iterator) -> Iterator:
        try:
            yield from items
        except GeneratorExit:  # the consumer stopped early: free the ranks still gathering
            if not self._agreement.aborted:
                try:
                    self._agreement.check(RuntimeError("the weight consumer stopped before the end"), "close")
                except Exception:  # noqa: BLE001 - the other ranks got the abort; we are closing
                    pass
            raise
        self._agreement.check(None, "end of weights")

    def _chunks(self, chunk_bytes: int) -> Iterator[WeightChunk]:
        specs: list[TensorSpec] = []
        payload: list[torch.Tensor] = []
        total = 0
        for spec, tensor in self._entries():
            specs.append(spec)
            if tensor is not None:
                payload.append(tensor)
            total += spec.nbytes
            tensor = None
            if total > chunk_bytes:
                chunk = WeightChunk(tuple(specs), payload if self.is_sender else None)
                specs, payload, total = [], [], 0
                yield chunk
                chunk = None
        if specs:
            yield WeightChunk(tuple(specs), payload if self.is_sender else None)

    def _entries(self) -> Iterator[tuple[TensorSpec, torch.Tensor | None]]:
        sender = self.is_sender
        for unit in walk_units(self._model, is_sender=sender, model_type=self._model_type):
            error, planned = None, None
            try:
                planned = unit.plan()
            except Exception as exc:  # noqa: BLE001 - agreed on, then raised on every rank
                error = exc
            self._agreement.check(error, unit.where)
            try:
                tensors = planned.collect()
                specs = [
                    TensorSpec(name, dtype_name(self._target(dtype)), shape)
                    for name, shape, dtype in zip(planned.names, planned.shapes, planned.dtypes, strict=True)
                ]
                outputs = [self._cast(t, planned.sources) for t in tensors]
            except Exception as exc:  # noqa: BLE001
                self._agreement.check(exc, unit.where)
                raise
            tensors = planned = None
            while outputs:
                yield specs.pop(0), outputs.pop(0)

    def _target(self, dtype: torch.dtype) -> torch.dtype:
        return self._dtype if self._dtype is not None and dtype.is_floating_point else dtype

    def _cast(self, tensor: torch.Tensor | None, sources: list[torch.Tensor]) -> torch.Tensor | None:
        if tensor is None:
            return None
        out = tensor.detach().to(self._target(tensor.dtype))
        self.memory.track(out, sources)
        return out


def iter_full_weights(
    model: nn.Module, *, dtype: torch.dtype | str | None = None
) -> Iterator[tuple[str, torch.Tensor | None]]:
    """Every rank iterates; full tensors on the sender, None elsewhere; module order, ties once."""
    for spec, tensor in ModelWeightSource(model, dtype=dtype).entries():
        yield spec.name, tensor


def gather_and_send_weights(
    model: nn.Module,
    send: Callable[[WeightChunk], None],
    *,
    chunk_bytes: int,
    dtype: torch.dtype | str | None = None,
    source: ModelWeightSource | None = None,
) -> int:
    """Every rank calls this; only the sender calls `send`. Returns the bytes sent (0 elsewhere)."""
    source = source or ModelWeightSource(model, dtype=dtype)
    chunks = source.chunks(chunk_bytes)
    sent = 0
    try:
        while (chunk := next(chunks, None)) is not None:
            if source.is_sender:
                try:
                    send(chunk)
                except Exception as exc:  # noqa: BLE001 - every rank must learn of it
                    source.abort(exc)
                sent += sum(spec.nbytes for spec in chunk.specs)
            chunk = None  # drop it before the next gather: peak stays ~ one chunk
    finally:
        chunks.close()
    return sent
