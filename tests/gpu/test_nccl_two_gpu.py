"""Two processes, two GPUs: NcclTransport (GPU 0) against the receiver double (GPU 1).

Skipped unless two CUDA devices are visible (issue 7; needs kind nvidia-h200-x2). Covers both
rendezvous modes, packed and unpacked sends checked bit for bit by the receiver, the bandwidth
of the packed transport against one raw NCCL broadcast of the same bytes, and a receiver that
dies after the warm-up or is killed mid-broadcast: the trainer must fail with TransportError within its timeout.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from adapters.transport.gloo_transport import TransportError
from adapters.transport.nccl_rendezvous import NcclInitInfo
from adapters.transport.nccl_transport import NcclTransport
from adapters.transport.packed_tensors import spec_of
from application.ports.weight_sync import WeightChunk
from tests.gpu.model_shapes import expected_weights, raw_pattern, smollm2_specs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs 2 GPUs"),
]
REPO = Path(__file__).resolve().parents[2]
TIMEOUT = 120.0
SEED = 7


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_receiver(tmp_path: Path, init: NcclInitInfo, chunks: list[list[dict]], **extra) -> tuple[subprocess.Popen, Path]:
    result = tmp_path / "result.json"
    spec = dict(init_info=init.as_init_info(), chunks=chunks, seed=SEED, result=str(result), timeout=TIMEOUT, **extra)
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="1", PYTHONPATH=str(REPO), NCCL_NVLS_ENABLE="0",
               TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    process = subprocess.Popen([sys.executable, "-m", "tests.gpu.nccl_receiver", str(spec_path)], env=env, cwd=REPO)
    return process, result


def make_init(mode: str, transport: NcclTransport, packed: bool, buffer: int) -> NcclInitInfo:
    common = dict(rank_offset=1, world_size=2, packed=packed, packed_buffer_size_bytes=buffer)
    if mode == "store":
        return NcclInitInfo(master_address="127.0.0.1", master_port=free_port(), **common)
    return NcclInitInfo(nccl_unique_id_b64=transport.mint_unique_id_b64(), **common)


def weight_chunks(layers: int, per_chunk: int) -> tuple[list[list[dict]], list[WeightChunk]]:
    specs = smollm2_specs(layers)
    tensors = expected_weights(SEED, specs, "cuda:0")
    groups = [list(range(i, min(i + per_chunk, len(specs)))) for i in range(0, len(specs), per_chunk)]
    meta = [[specs[i] for i in g] for g in groups]
    chunks = [WeightChunk(tuple(spec_of(specs[i]["name"], tensors[i]) for i in g), [tensors[i] for i in g]) for g in groups]
    return meta, chunks


def finish(process: subprocess.Popen, result: Path) -> dict:
    assert process.wait(timeout=TIMEOUT) == 0
    return json.loads(result.read_text())


@pytest.mark.parametrize(("mode", "packed"), [("store", True), ("unique_id", True), ("store", False)])
def test_weights_reach_the_receiver_bit_for_bit(tmp_path, mode, packed):
    torch.cuda.set_device(0)
    transport = NcclTransport(device=0)
    init = make_init(mode, transport, packed, buffer=32 * 1024**2)
    meta, chunks = weight_chunks(layers=30, per_chunk=60)
    total = sum(s.nbytes for c in chunks for s in c.specs)
    raw = raw_pattern(total, "cuda:0")
    process, result = start_receiver(tmp_path, init, meta, raw_bytes=total)
    try:
        transport.open(init, timeout=TIMEOUT)
        torch.cuda.synchronize()
        started = time.perf_counter()
        for chunk in chunks:
            transport.broadcast(chunk, timeout=TIMEOUT)
        transport_s = time.perf_counter() - started
        comm, stream = transport.communicator, torch.cuda.current_stream()
        started = time.perf_counter()
        comm.broadcast(raw, stream, time.monotonic() + TIMEOUT, "raw broadcast")
        done = torch.cuda.Event()
        done.record(stream)
        comm.wait(done, time.monotonic() + TIMEOUT, "raw broadcast")
        raw_s = time.perf_counter() - started
        report = finish(process, result)
    finally:
        transport.close()
        process.kill()
    assert report["mismatches"] == [] and report["received_bytes"] == total and report["raw_intact"]
    figures = dict(mode=mode, packed=packed, bytes=total, transport_GBps=total / transport_s / 1e9,
                   raw_GBps=total / raw_s / 1e9, ratio=raw_s / transport_s)
    print("NCCL two-GPU figures:", json.dumps(figures))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], f"two_gpu_{mode}_{packed}.json").write_text(json.dumps(figures))


@pytest.mark.parametrize(
    ("how", "extra", "code"),
    [("after_warmup", dict(die_after_warmup=True, linger_s=1.0), 3), ("mid_broadcast", dict(kill_after_buckets=2), -9)],
)
def test_a_receiver_that_dies_makes_the_trainer_fail_within_its_timeout(tmp_path, how, extra, code):
    torch.cuda.set_device(0)
    transport = NcclTransport(device=0)
    init = make_init("store", transport, packed=True, buffer=8 * 1024**2)
    meta, chunks = weight_chunks(layers=4, per_chunk=100)
    process, _ = start_receiver(tmp_path, init, meta, **extra)
    try:
        transport.open(init, timeout=TIMEOUT)
        if how == "after_warmup":
            assert process.wait(timeout=60) == code
        started = time.monotonic()
        with pytest.raises(TransportError, match="failed"):
            for chunk in chunks * 50:  # more than NCCL can buffer without a receiver
                transport.broadcast(chunk, timeout=10)
        assert time.monotonic() - started < 10 + 12
        assert not transport.is_open
        assert process.wait(timeout=60) == code
    finally:
        transport.close()
        process.kill()
