"""The flattened-bucket layout both SGLang ends share: every offset passes SGLang's receiver rule,
and the transport's bytes are the layout's bytes."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.sglang.bucket_layout import flattened_layout
from adapters.transport.gloo_transport import TransportError
from adapters.transport.sglang_transport import C10dBucketTransport
from application.ports.weight_sync import WeightChunk
from domain.tensors import DTYPE_ITEMSIZE, TensorSpec
from tests.fakes.fake_sglang_server import _empty_bucket

WIRE_DTYPES = sorted(name for name in DTYPE_ITEMSIZE if name != "bool")
specs_strategy = st.lists(
    st.builds(
        TensorSpec,
        name=st.text("abcxyz.", min_size=1, max_size=6),
        dtype=st.sampled_from(WIRE_DTYPES),
        shape=st.lists(st.integers(0, 5), max_size=3).map(tuple),
    ),
    min_size=1,
    max_size=12,
)


@settings(max_examples=200, deadline=None)
@given(specs_strategy)
def test_layout_is_a_permutation_the_sglang_receiver_accepts(specs: list[TensorSpec]) -> None:
    layout = flattened_layout(specs)
    assert sorted(e.source_index for e in layout.entries) == list(range(len(specs)))
    assert [e.spec for e in layout.entries] == [specs[e.source_index] for e in layout.entries]
    assert layout.nbytes == sum(s.nbytes for s in specs)
    itemsizes = [DTYPE_ITEMSIZE[e.spec.dtype] for e in layout.entries]
    assert itemsizes == sorted(itemsizes, reverse=True)
    same_size = [e.source_index for e in layout.entries if DTYPE_ITEMSIZE[e.spec.dtype] == itemsizes[0]]
    assert same_size == sorted(same_size)  # stable within an itemsize
    bucket, metadata = _empty_bucket(
        [s.name for s in layout.specs], [s.dtype for s in layout.specs], [list(s.shape) for s in layout.specs]
    )
    assert bucket.numel() == layout.nbytes
    assert [(start, end) for *_, start, end in metadata] == [(e.offset, e.end) for e in layout.entries]


def test_the_callers_order_would_be_refused_by_sglang() -> None:
    specs = [TensorSpec("odd.bf16", "bfloat16", (3,)), TensorSpec("w.fp32", "float32", (2,))]
    with pytest.raises(ValueError, match="Unaligned received tensor w.fp32: byte offset 6"):
        _empty_bucket([s.name for s in specs], [s.dtype for s in specs], [list(s.shape) for s in specs])
    assert [s.name for s in flattened_layout(specs).specs] == ["w.fp32", "odd.bf16"]


def test_an_empty_chunk_is_refused() -> None:
    with pytest.raises(ValueError, match="at least one tensor"):
        flattened_layout([])


def test_the_transport_flattens_tensors_at_their_layout_offsets() -> None:
    tensors = [torch.arange(3, dtype=torch.bfloat16), torch.tensor([1.5, -2.0]), torch.tensor([7], dtype=torch.int8)]
    specs = [TensorSpec("a", "bfloat16", (3,)), TensorSpec("b", "float32", (2,)), TensorSpec("c", "int8", (1,))]
    layout = flattened_layout(specs)
    buffer = C10dBucketTransport("gloo")._flatten(layout, tensors)
    for entry in layout.entries:
        rebuilt = buffer[entry.offset:entry.end].view(tensors[entry.source_index].dtype)
        assert torch.equal(rebuilt, tensors[entry.source_index])


def test_the_transport_refuses_to_send_before_open() -> None:
    chunk = WeightChunk((TensorSpec("a", "float32", (2,)),), (torch.zeros(2),))
    with pytest.raises(TransportError, match="gloo transport is not open"):
        C10dBucketTransport("gloo").broadcast(chunk, timeout=1.0)


def test_an_unknown_backend_is_refused() -> None:
    with pytest.raises(ValueError, match="'mpi'"):
        C10dBucketTransport("mpi")
