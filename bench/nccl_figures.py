"""Figures of the NCCL transport on one GPU (world of one): library, id, warm-up, packing, send.

    python bench/nccl_figures.py [OUT_DIR]

Prints one JSON object (and writes OUT_DIR/nccl_figures.json): the NCCL library and version,
the unique id's base64 length, the world-size-1 communicator's creation time (warm-up
all_reduce included), packing time and bandwidth of SmolLM2-135M-shaped bf16 tensors (random
weights, no download) for several bucket sizes, the transport's whole packed send of the model,
whether the payload is intact afterwards, and a device-to-device copy of the same bytes as the
ceiling to read the packing bandwidth against.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import torch

from adapters.transport.nccl_comm import NcclCommunicator
from adapters.transport.nccl_library import NcclLibrary
from adapters.transport.nccl_rendezvous import NcclInitInfo
from adapters.transport.nccl_transport import NcclTransport
from adapters.transport.packed_tensors import packed_buckets, spec_of
from application.ports.weight_sync import WeightChunk
from tests.gpu.nccl_receiver import expected_weights, smollm2_specs

MiB = 1024**2


def timed(fn, repeats: int = 3) -> float:
    """Best wall time of `fn` in seconds, CUDA work included."""
    best = float("inf")
    for _ in range(repeats):
        torch.cuda.synchronize()
        started = time.perf_counter()
        fn()
        torch.cuda.synchronize()
        best = min(best, time.perf_counter() - started)
    return best


def library_figures() -> dict:
    lib = NcclLibrary()
    started = time.perf_counter()
    comm = NcclCommunicator.create(lib, lib.unique_id(), 0, 1, torch.cuda.current_device(), timeout=60)
    created = time.perf_counter() - started
    comm.destroy()
    return {
        "library": lib.path, "nccl_version": lib.version(),
        "unique_id_b64_chars": len(NcclTransport(library=lib).mint_unique_id_b64()),
        "world1_create_and_warmup_ms": created * 1e3,
    }


def packing_figures(chunk: WeightChunk, total: int) -> dict:
    out = {}
    for buffer in (1024 * MiB, 64 * MiB, 8 * MiB):
        count = []
        seconds = timed(lambda: count.append(sum(1 for _ in packed_buckets(chunk.specs, chunk.payload, buffer))))
        out[f"pack_{buffer // MiB}MiB"] = {"buckets": count[-1], "ms": seconds * 1e3, "GBps": total / seconds / 1e9}
    flat = torch.empty(total, dtype=torch.uint8, device="cuda")
    seconds = timed(lambda: flat.clone())
    out["d2d_copy_same_bytes"] = {"ms": seconds * 1e3, "GBps": total / seconds / 1e9}
    return out


def send_figures(chunk: WeightChunk, total: int) -> dict:
    out = {}
    before = [t.clone() for t in chunk.payload]
    for buffer, buffers in ((1024 * MiB, 2), (64 * MiB, 2), (64 * MiB, 1)):
        transport = NcclTransport()
        init = NcclInitInfo(
            rank_offset=1, world_size=1, nccl_unique_id_b64=transport.mint_unique_id_b64(),
            packed_buffer_size_bytes=buffer, packed_num_buffers=buffers,
        )
        transport.open(init, timeout=60)
        seconds = timed(lambda: transport.broadcast(chunk, timeout=60))
        out[f"send_{buffer // MiB}MiB_x{buffers}"] = {
            "ms": seconds * 1e3, "GBps": total / seconds / 1e9, "bytes_sent_per_call": transport.bytes_sent // 3,
        }
        transport.close()
    out["payload_intact"] = all(torch.equal(a, b) for a, b in zip(chunk.payload, before))
    return out


def main(out_dir: str | None) -> None:
    torch.cuda.set_device(0)
    specs = smollm2_specs()
    tensors = expected_weights(0, specs, "cuda")
    chunk = WeightChunk(tuple(spec_of(s["name"], t) for s, t in zip(specs, tensors)), tensors)
    total = sum(s.nbytes for s in chunk.specs)
    figures = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "tensors": len(specs),
               "model_bytes": total, "params": total // 2}
    figures.update(library_figures())
    figures.update(packing_figures(chunk, total))
    figures.update(send_figures(chunk, total))
    text = json.dumps(figures, indent=1)
    print(text)
    if out_dir:
        Path(out_dir, "nccl_figures.json").write_text(text)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
