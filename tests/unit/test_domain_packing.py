"""The packed-broadcast bucket rule (vLLM packed_tensor.py: close a bucket once it exceeds the buffer)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from domain.packing import bucket_boundaries, bucket_sizes
from domain.tensors import TensorSpec

SPECS = st.lists(
    st.builds(
        TensorSpec,
        name=st.text("abc.", min_size=1, max_size=6),
        dtype=st.sampled_from(["float32", "bfloat16", "int8", "float64"]),
        shape=st.lists(st.integers(0, 9), min_size=0, max_size=3).map(tuple),
    ),
    max_size=30,
)
BUFFERS = st.integers(1, 600)


@given(specs=SPECS, buffer=BUFFERS)
def test_buckets_cover_every_tensor_once_in_order(specs, buffer):
    flat = [i for bucket in bucket_boundaries(specs, buffer) for i in bucket]
    assert flat == list(range(len(specs)))


@given(specs=SPECS, buffer=BUFFERS)
def test_each_non_final_bucket_just_crosses_the_buffer(specs, buffer):
    buckets = bucket_boundaries(specs, buffer)
    for bucket in buckets[:-1]:
        sizes = [specs[i].nbytes for i in bucket]
        assert sum(sizes) > buffer  # the crossing tensor is included
        assert sum(sizes[:-1]) <= buffer  # without it the bucket had not crossed
    if buckets:
        assert sum(specs[i].nbytes for i in buckets[-1][:-1]) <= buffer
        assert all(len(b) > 0 for b in buckets)


@given(specs=SPECS, buffer=BUFFERS)
def test_sizes_agree_with_boundaries(specs, buffer):
    assert sum(bucket_sizes(specs, buffer)) == sum(s.nbytes for s in specs)


def test_known_example():
    specs = [TensorSpec(n, "float32", (s,)) for n, s in [("a", 10), ("b", 10), ("c", 100), ("d", 1)]]  # 40, 40, 400, 4 bytes
    assert bucket_boundaries(specs, 50) == [range(0, 2), range(2, 3), range(3, 4)]
    assert bucket_boundaries(specs, 80) == [range(0, 3), range(3, 4)]  # 80 is not > 80: c joins and crosses
    assert bucket_boundaries([], 10) == []


def test_buffer_must_be_positive():
    with pytest.raises(ValueError, match="buffer_size_bytes"):
        bucket_boundaries([], 0)
