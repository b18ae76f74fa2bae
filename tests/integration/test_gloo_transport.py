"""GlooTransport (trainer, rank 0) against the vLLM plugin's own receive code (rank 1), no vLLM.

The receiver runs in a spawned process and imports `rlsetup_vllm_gloo.group` / `.receive` /
`.info` straight from `docker/vllm_gloo_engine` (they import torch only), so the bytes the
transport packs are split by exactly the code the server runs.
"""

from __future__ import annotations

import multiprocessing as mp
import socket
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from adapters.transport.gloo_transport import GlooTransport, TransportError
from adapters.transport.packed_tensors import TensorMismatch, spec_of
from application.ports.weight_sync import TransferInit, WeightChunk
from domain.packing import bucket_boundaries
from domain.tensors import TensorSpec

PLUGIN_DIR = str(Path(__file__).resolve().parents[2] / "docker" / "vllm_gloo_engine")
pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _tensors() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    return {
        "a.bf16_odd": torch.randn(3, generator=gen).to(torch.bfloat16),  # 6 bytes: misaligns what follows
        "b.fp32": torch.randn(5, 7, generator=gen),
        "c.scalar_i64": torch.tensor(-(2**40) + 7, dtype=torch.int64),
        "d.empty": torch.empty(0, 4),
        "e.big_fp32": torch.randn(40, generator=gen),  # 160 bytes > 64-byte buffer
        "f.i64": torch.randint(-(2**62), 2**62, (1, 3, 5), generator=gen),
        "g.bf16": torch.randn(2, 9, generator=gen).to(torch.bfloat16),
        "h.noncontig": torch.randn(6, 4, generator=gen).t(),
    }


def _receiver(port: int, world_size: int, packed: bool, buffer_size: int, chunks, out: str, die_after) -> None:
    sys.path.insert(0, PLUGIN_DIR)
    from rlsetup_vllm_gloo.group import broadcast_from_root, join_gloo_group
    from rlsetup_vllm_gloo.info import parse_update_info
    from rlsetup_vllm_gloo.receive import receive_packed, receive_unpacked

    group = join_gloo_group("127.0.0.1", port, 1, world_size, timeout_s=30)
    received: dict[str, torch.Tensor] = {}
    calls = {"n": 0}

    def broadcast(tensor: torch.Tensor) -> None:
        if die_after is not None and calls["n"] == die_after:
            import os

            os._exit(3)
        broadcast_from_root(group, tensor, timeout_s=30)
        calls["n"] += 1

    def load(pairs) -> None:
        received.update((name, tensor.clone()) for name, tensor in pairs)

    for names, dtype_names, shapes in chunks:
        metas = parse_update_info({"names": names, "dtype_names": dtype_names, "shapes": shapes}).metas()
        if packed:
            receive_packed(metas, buffer_size, broadcast, load)
        else:
            receive_unpacked(metas, broadcast, load)
    torch.save({"tensors": received, "broadcasts": calls["n"]}, out)


def _wire(specs: list[TensorSpec]):
    return ([s.name for s in specs], [s.dtype for s in specs], [list(s.shape) for s in specs])


def _start(packed: bool, buffer_size: int, chunk_specs, out: Path, die_after=None):
    port = _free_port()
    init = TransferInit(
        master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2,
        packed=packed, packed_buffer_size_bytes=buffer_size,
    )
    wire = [_wire(specs) for specs in chunk_specs]
    proc = mp.get_context("spawn").Process(
        target=_receiver, args=(port, 2, packed, buffer_size, wire, str(out), die_after), daemon=True
    )
    proc.start()
    transport = GlooTransport()
    transport.open(init, timeout=60)
    return transport, proc


def _split(tensors: dict[str, torch.Tensor]):
    items = list(tensors.items())
    first, second = items[:5], items[5:]
    return [
        WeightChunk(tuple(spec_of(n, t) for n, t in part), tuple(t for _, t in part)) for part in (first, second)
    ]


@pytest.mark.parametrize("packed", [True, False])
def test_bit_identical_over_several_chunks_and_buckets(tmp_path: Path, packed: bool) -> None:
    tensors = _tensors()
    chunks = _split(tensors)
    buffer_size = 64
    transport, proc = _start(packed, buffer_size, [c.specs for c in chunks], tmp_path / "rx.pt")
    try:
        assert not dist.is_initialized(), "the transport must not create the default process group"
        wrong = WeightChunk(chunks[0].specs, (chunks[0].payload[0].float(),) + chunks[0].payload[1:])
        with pytest.raises(TensorMismatch, match="a.bf16_odd"):
            transport.broadcast(wrong, timeout=30)  # refused before a byte is sent: the group stays usable
        for chunk in chunks:
            transport.broadcast(chunk, timeout=30)
        proc.join(60)
    finally:
        transport.close()
    assert proc.exitcode == 0
    result = torch.load(tmp_path / "rx.pt")
    expected_broadcasts = (
        sum(len(bucket_boundaries(c.specs, buffer_size)) for c in chunks) if packed else len(tensors)
    )
    assert result["broadcasts"] == expected_broadcasts > len(chunks)
    for name, sent in tensors.items():
        got = result["tensors"][name]
        assert got.dtype == sent.dtype and got.shape == sent.shape, name
        assert torch.equal(got, sent), name
    assert transport.bytes_sent == sum(t.numel() * t.element_size() for t in tensors.values())


def test_receiver_dying_mid_way_makes_broadcast_raise_within_timeout(tmp_path: Path) -> None:
    gen = torch.Generator().manual_seed(1)
    payload = tuple(torch.randn(256, 1024, generator=gen) for _ in range(8))  # 8 x 1 MiB
    chunk = WeightChunk(tuple(spec_of(f"w{i}", t) for i, t in enumerate(payload)), payload)
    transport, proc = _start(True, 1024 * 1024, [chunk.specs], tmp_path / "rx.pt", die_after=2)
    started = time.monotonic()
    try:
        with pytest.raises(TransportError, match="127.0.0.1"):
            transport.broadcast(chunk, timeout=10)
    finally:
        transport.close()
        proc.join(10)
    assert time.monotonic() - started < 15
    assert proc.exitcode == 3
    assert not transport.is_open


def test_open_without_peer_times_out_naming_the_rendezvous() -> None:
    port = _free_port()
    init = TransferInit(master_address="127.0.0.1", master_port=port, rank_offset=1, world_size=2)
    transport = GlooTransport()
    started = time.monotonic()
    with pytest.raises(TransportError, match=f"127.0.0.1:{port}"):
        transport.open(init, timeout=2)
    assert time.monotonic() - started < 10
    assert not transport.is_open


def test_plugin_bucket_rule_equals_domain_rule() -> None:
    sys.path.insert(0, PLUGIN_DIR)
    from rlsetup_vllm_gloo.receive import bucket_boundaries as plugin_rule

    gen = torch.Generator().manual_seed(2)
    for _ in range(200):
        sizes = torch.randint(0, 50, (int(torch.randint(0, 12, (1,), generator=gen)),), generator=gen).tolist()
        buffer = int(torch.randint(1, 80, (1,), generator=gen))
        specs = [TensorSpec(f"t{i}", "uint8", (n,)) for i, n in enumerate(sizes)]
        assert plugin_rule(sizes, buffer) == bucket_boundaries(specs, buffer), (sizes, buffer)


def test_plugin_info_parsing_names_the_offending_key() -> None:
    sys.path.insert(0, PLUGIN_DIR)
    from rlsetup_vllm_gloo.info import parse_init_info, parse_update_info

    good = TransferInit(master_address="10.0.0.1", master_port=29500, rank_offset=1, world_size=3).as_init_info()
    parsed = parse_init_info(good)
    assert (parsed.world_size, parsed.packed, parsed.packed_buffer_size_bytes) == (3, True, 1024**3)
    with pytest.raises(ValueError, match=r"unknown keys \['nccl_unique_id_b64'\].*missing keys \['world_size'\]"):
        parse_init_info({**{k: v for k, v in good.items() if k != "world_size"}, "nccl_unique_id_b64": "x"})
    with pytest.raises(ValueError, match="master_port"):
        parse_init_info({**good, "master_port": "29500"})
    with pytest.raises(ValueError, match="rank_offset=3"):
        parse_init_info({**good, "rank_offset": 3})
    with pytest.raises(ValueError, match="'float33'"):
        parse_update_info({"names": ["w"], "dtype_names": ["float33"], "shapes": [[2]]})
    with pytest.raises(ValueError, match="shapes has 0 entries"):
        parse_update_info({"names": ["w"], "dtype_names": ["float32"], "shapes": []})
    assert parse_update_info({}).is_empty
