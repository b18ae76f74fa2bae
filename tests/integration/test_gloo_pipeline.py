"""Pipelined packed broadcast: the trainer's double-buffered `GlooTransport` against the plugin's
pipelined `receive_packed` (posted receives + `BufferPool`), and the pieces on their own.

The receiver keeps views of some received tensors without copying them, as layerwise reload does
for a layer not yet complete: the pool must never lend those bytes again, while buffers nobody
holds must be reused. Several syncs go through the same group so the warm slots and pooled
buffers are overwritten with new values.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import sys
from pathlib import Path

import pytest
import torch

from adapters.transport.gloo_transport import GlooTransport
from adapters.transport.packed_tensors import PackBuffers, spec_of
from application.ports.weight_sync import TransferInit, WeightChunk
from domain.packing import bucket_boundaries

PLUGIN_DIR = str(Path(__file__).resolve().parents[2] / "docker" / "vllm_gloo_engine")
BUFFER = 4096
SYNCS = 3
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _weights(sync: int) -> list[tuple[str, torch.Tensor]]:
    gen = torch.Generator().manual_seed(100 + sync)
    out = []
    for i in range(24):
        shape = (int(torch.randint(1, 40, (1,), generator=gen)), 17)
        dtype = (torch.float32, torch.bfloat16, torch.int64)[i % 3]
        tensor = torch.randn(shape, generator=gen).to(dtype) if dtype != torch.int64 else \
            torch.randint(-(2**40), 2**40, shape, generator=gen)
        out.append((f"layers.{i}.w", tensor))
    return out


def _chunks(sync: int) -> list[WeightChunk]:
    items = _weights(sync)
    parts = (items[:15], items[15:])
    return [WeightChunk(tuple(spec_of(n, t) for n, t in p), tuple(t for _, t in p)) for p in parts]


def _receiver(port: int, num_buffers: int, wires, out: str) -> None:
    sys.path.insert(0, PLUGIN_DIR)
    from rlsetup_vllm_gloo.buffers import BufferPool
    from rlsetup_vllm_gloo.group import join_gloo_group, post_broadcast
    from rlsetup_vllm_gloo.info import parse_update_info
    from rlsetup_vllm_gloo.receive import receive_packed

    group = join_gloo_group("127.0.0.1", port, 1, 2, timeout_s=30)
    pool = BufferPool(keep=num_buffers + 1)
    results, buckets = [], 0
    for wire_chunks in wires:
        held: dict[str, torch.Tensor] = {}

        def load(pairs) -> None:
            for name, tensor in pairs:  # odd layers: keep the view itself, like a partial layer
                held[name] = tensor if int(name.split(".")[1]) % 2 else tensor.clone()

        for names, dtype_names, shapes in wire_chunks:
            metas = parse_update_info({"names": names, "dtype_names": dtype_names, "shapes": shapes}).metas()
            got = receive_packed(metas, BUFFER, lambda t: post_broadcast(group, t, 30), load,
                                 num_buffers=num_buffers, pool=pool)
            buckets += got.buckets
        results.append({name: tensor.clone() for name, tensor in held.items()})
        del held, load
    torch.save({"syncs": results, "buckets": buckets, "reused": pool.reused}, out)


@pytest.mark.parametrize("num_buffers", [1, 3])
def test_pipelined_sync_is_bit_identical_and_reuses_only_free_buffers(tmp_path: Path, num_buffers: int) -> None:
    port = _free_port()
    syncs = [_chunks(s) for s in range(SYNCS)]
    wires = [[([s.name for s in c.specs], [s.dtype for s in c.specs], [list(s.shape) for s in c.specs])
              for c in chunks] for chunks in syncs]
    proc = mp.get_context("spawn").Process(
        target=_receiver, args=(port, num_buffers, wires, str(tmp_path / "rx.pt")), daemon=True
    )
    proc.start()
    transport = GlooTransport()
    init = TransferInit(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2,
                        packed=True, packed_buffer_size_bytes=BUFFER, packed_num_buffers=num_buffers)
    transport.open(init, timeout=60)
    try:
        for chunks in syncs:
            for chunk in chunks:
                transport.broadcast(chunk, timeout=30)
        proc.join(60)
    finally:
        transport.close()
    assert proc.exitcode == 0
    result = torch.load(tmp_path / "rx.pt")
    buckets = [len(bucket_boundaries(c.specs, BUFFER)) for chunks in syncs for c in chunks]
    assert min(buckets) > 2  # several buckets per chunk: the pipeline has work
    assert result["buckets"] == sum(buckets)
    assert result["reused"] > 0
    for sync, got in enumerate(result["syncs"]):
        for name, sent in _weights(sync):
            assert got[name].dtype == sent.dtype and torch.equal(got[name], sent), (sync, name)


def test_receive_posts_ahead_only_with_more_than_one_buffer() -> None:
    sys.path.insert(0, PLUGIN_DIR)
    from rlsetup_vllm_gloo.info import TensorMeta
    from rlsetup_vllm_gloo.receive import receive_packed

    metas = [TensorMeta(f"t{i}", torch.int32, (4,)) for i in range(4)]  # 16 bytes each: 4 buckets
    for num_buffers, ahead in ((1, 0), (2, 1), (3, 2)):
        events: list[str] = []

        def broadcast(buffer: torch.Tensor):  # noqa: ANN202
            index = len([e for e in events if e.startswith("post")])
            events.append(f"post{index}")

            def wait() -> None:  # the bytes "arrive" at wait time, like a completed gloo work
                buffer.view(torch.int32).fill_(index)
                events.append(f"wait{index}")

            return wait

        def load(pairs) -> None:
            (name, tensor), = pairs
            assert torch.equal(tensor, torch.full((4,), int(name[1:]), dtype=torch.int32))
            events.append(f"load{name[1:]}")

        got = receive_packed(metas, 10, broadcast, load, num_buffers=num_buffers)
        assert (got.buckets, got.nbytes) == (4, 64)
        for k in range(4):  # when bucket k loads, exactly min(k + ahead, 3) + 1 buckets were posted
            posted = len([e for e in events[: events.index(f"load{k}")] if e.startswith("post")])
            assert posted == min(k + ahead, 3) + 1, (num_buffers, events)


def test_buffer_pool_never_lends_bytes_still_viewed() -> None:
    sys.path.insert(0, PLUGIN_DIR)
    from rlsetup_vllm_gloo.buffers import BufferPool

    pool = BufferPool(keep=2)
    first = pool.take(100)
    view = first[10:20].view(torch.int16)
    address = first.data_ptr()
    del first
    second = pool.take(100)
    assert second.data_ptr() != address and pool.reused == 0  # `view` still reads those bytes
    del view
    third = pool.take(80)
    assert third.data_ptr() == address and pool.reused == 1
    del second, third
    assert pool.take(500).numel() == 500 and pool.reused == 1  # too small to reuse: a new one
    with pytest.raises(ValueError, match=">= 0"):
        BufferPool(keep=-1)


def test_pack_buffers_give_the_bytes_of_a_fresh_cat_and_reuse_their_slot() -> None:
    slots = PackBuffers()
    gen = torch.Generator().manual_seed(3)
    for size in (7, 50, 20):
        tensors = [torch.randn(size, generator=gen), torch.randn(3, 5, generator=gen).t().to(torch.bfloat16)]
        expected = torch.cat([t.contiguous().view(-1).view(torch.uint8) for t in tensors])
        packed = slots.pack(tensors, slot=0)
        assert torch.equal(packed, expected)
    assert slots.nbytes == 50 * 4 + 15 * 2  # grown once to the largest bucket, then reused
    single = torch.randn(4, generator=gen)
    assert slots.pack([single], slot=1).data_ptr() == single.data_ptr()  # one tensor: no copy
    slots.clear()
    assert slots.nbytes == 0
