"""Test double of the RECEIVE side of vLLM 0.32's NCCL weight-transfer engine (one worker rank).

    python -m tests.gpu.nccl_receiver SPEC.json      (run with CUDA_VISIBLE_DEVICES=<its own GPU>)

Written from vLLM's code, not imported from it (the trainer env has no vLLM):
- rendezvous (`nccl_common.py::worker_init_process_group`): rank = `rank_offset` (one worker);
  with `nccl_unique_id_b64` the id is decoded from init_info; otherwise, as
  `StatelessProcessGroup.create` on a non-zero rank, a torch `TCPStore` CLIENT at
  (master_address, master_port) with `world_size` and `use_libuv=False`, then `broadcast_obj(None,
  src=0)` = `pickle.loads(store.get("broadcast_from/0/0"))`, with vLLM's `ncclUniqueId` class
  supplied by a stand-in module so the real `pickle.loads` runs, as on the worker;
- `ncclCommInitRank` + the one-element warm-up all_reduce (`PyNcclCommunicator._init_comm`);
- per chunk (`packed_tensor.py::packed_nccl_broadcast_consumer`): bucket sizes recomputed from
  the metadata (`math.prod(shape) * itemsize`, close a bucket when the total EXCEEDS the buffer
  size), `torch.empty(size, uint8)` received by broadcast from rank 0, split, `.view(dtype)
  .view(shape)`; unpacked: one `torch.empty(shape, dtype)` per tensor;
- then, if asked, `raw_bytes` received as one plain uint8 broadcast (the bandwidth baseline).
Every received tensor is compared bit for bit with `expected_weights(seed, specs)`, which the
trainer side uses to build what it sends. The NCCL calls go through the project's own ctypes
binding (`adapters.transport.nccl_comm`). The result is written as JSON to `spec["result"]`.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import pickle
import sys
import time
import types
from datetime import timedelta
from pathlib import Path

import torch

# SmolLM2-135M-Instruct (LlamaForCausalLM, tied embeddings): shapes of what the gather sends.
SMOLLM2_LAYERS, SMOLLM2_HIDDEN, SMOLLM2_KV, SMOLLM2_MLP, SMOLLM2_VOCAB = 30, 576, 192, 1536, 49152


def smollm2_specs(layers: int = SMOLLM2_LAYERS) -> list[dict]:
    """name/dtype/shape of SmolLM2-135M's weights in bf16, in module order (134.5M params at 30 layers)."""
    h, kv, mlp = SMOLLM2_HIDDEN, SMOLLM2_KV, SMOLLM2_MLP
    specs = [("model.embed_tokens.weight", [SMOLLM2_VOCAB, h])]
    for i in range(layers):
        p = f"model.layers.{i}"
        specs += [
            (f"{p}.self_attn.q_proj.weight", [h, h]), (f"{p}.self_attn.k_proj.weight", [kv, h]),
            (f"{p}.self_attn.v_proj.weight", [kv, h]), (f"{p}.self_attn.o_proj.weight", [h, h]),
            (f"{p}.mlp.gate_proj.weight", [mlp, h]), (f"{p}.mlp.up_proj.weight", [mlp, h]),
            (f"{p}.mlp.down_proj.weight", [h, mlp]), (f"{p}.input_layernorm.weight", [h]),
            (f"{p}.post_attention_layernorm.weight", [h]),
        ]
    specs.append(("model.norm.weight", [h]))
    return [{"name": n, "dtype": "bfloat16", "shape": s} for n, s in specs]


def expected_weights(seed: int, specs: list[dict], device: str | torch.device = "cpu") -> list[torch.Tensor]:
    """Deterministic random tensors for `specs` (same bytes in every process)."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for spec in specs:
        dtype = getattr(torch, spec["dtype"])
        data = torch.randn(spec["shape"], generator=generator, dtype=torch.float32).to(dtype)
        out.append(data.to(device))
    return out


def raw_pattern(nbytes: int, device: str | torch.device) -> torch.Tensor:
    """The bytes of the raw baseline broadcast: i % 251 (a prime, so no power-of-two period)."""
    return (torch.arange(nbytes, device=device) % 251).to(torch.uint8)


def receive_plan(specs: list[dict], buffer_size_bytes: int) -> list[list[int]]:
    """vLLM's consumer rule: indices per bucket, recomputed from the metadata alone."""
    buckets, current, total = [], [], 0
    for index, spec in enumerate(specs):
        current.append(index)
        total += math.prod(spec["shape"]) * getattr(torch, spec["dtype"]).itemsize
        if total > buffer_size_bytes:
            buckets.append(current)
            current, total = [], 0
    if current:
        buckets.append(current)
    return buckets


def unpack(buffer: torch.Tensor, specs: list[dict]) -> list[torch.Tensor]:
    """Split a received uint8 bucket into the tensors it carries (vLLM `unpack_tensor`)."""
    sizes = [math.prod(s["shape"]) * getattr(torch, s["dtype"]).itemsize for s in specs]
    if sum(sizes) != buffer.numel():
        raise ValueError(f"bucket has {buffer.numel()} bytes, metadata says {sum(sizes)}")
    return [
        piece.contiguous().view(getattr(torch, s["dtype"])).view(s["shape"])
        for piece, s in zip(buffer.split(sizes), specs)
    ]


def install_vllm_unique_id_class() -> None:
    """Stand-in for `vllm.distributed.device_communicators.pynccl_wrapper.ncclUniqueId` (unpickling only)."""
    class ncclUniqueId(ctypes.Structure):  # noqa: N801 - vLLM's spelling
        _fields_ = [("internal", ctypes.c_byte * 128)]

    names = ["vllm", "vllm.distributed", "vllm.distributed.device_communicators"]
    for name in names:
        sys.modules.setdefault(name, types.ModuleType(name))
    module = types.ModuleType("vllm.distributed.device_communicators.pynccl_wrapper")
    ncclUniqueId.__module__ = module.__name__
    module.ncclUniqueId = ncclUniqueId
    sys.modules[module.__name__] = module


def unique_id_from_store(info: dict, timeout: float) -> bytes:
    import torch.distributed as dist

    store = dist.TCPStore(
        host_name=info["master_address"], port=info["master_port"], world_size=info["world_size"],
        is_master=False, timeout=timedelta(seconds=timeout), use_libuv=False,
    )
    install_vllm_unique_id_class()
    return bytes(pickle.loads(store.get("broadcast_from/0/0")))


def join(info: dict, rank: int, timeout: float):
    from adapters.transport.nccl_comm import NcclCommunicator
    from adapters.transport.nccl_library import NcclLibrary
    from adapters.transport.nccl_rendezvous import decode_unique_id_b64

    if info.get("nccl_unique_id_b64"):
        unique_id = decode_unique_id_b64(info["nccl_unique_id_b64"])
    else:
        unique_id = unique_id_from_store(info, timeout)
    return NcclCommunicator.create(NcclLibrary(), unique_id, rank, info["world_size"], 0, timeout)


def receive_into(comm, buffer: torch.Tensor, deadline: float, what: str) -> None:
    stream = torch.cuda.current_stream()
    comm.broadcast(buffer, stream, deadline, what)
    done = torch.cuda.Event()
    done.record(stream)
    comm.wait(done, deadline, what)


def receive_chunks(comm, spec: dict, deadline: float) -> dict:
    info = spec["init_info"]
    expected_all = expected_weights(spec["seed"], [s for chunk in spec["chunks"] for s in chunk], "cuda")
    mismatches, received, position = [], 0, 0
    for chunk_index, chunk in enumerate(spec["chunks"]):
        if info.get("packed", False):
            groups = [[chunk[i] for i in bucket] for bucket in receive_plan(chunk, info["packed_buffer_size_bytes"])]
        else:
            groups = [[s] for s in chunk]
        for group in groups:
            nbytes = sum(math.prod(s["shape"]) * getattr(torch, s["dtype"]).itemsize for s in group)
            buffer = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
            receive_into(comm, buffer, deadline, f"chunk {chunk_index}")
            for s, got in zip(group, unpack(buffer, group)):
                want = expected_all[position]
                position += 1
                if not torch.equal(got.view(torch.uint8), want.view(torch.uint8)):
                    mismatches.append(s["name"])
            received += nbytes
    return {"received_bytes": received, "mismatches": mismatches, "tensors": position}


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    result_path, timeout = Path(spec["result"]), float(spec.get("timeout", 60))
    started = time.monotonic()
    comm = join(spec["init_info"], spec["init_info"]["rank_offset"], timeout)
    result = {"joined_after_s": time.monotonic() - started}
    if spec.get("ready_file"):
        Path(spec["ready_file"]).write_text("ready")
    if spec.get("die_after_warmup"):
        time.sleep(float(spec.get("linger_s", 0)))
        os._exit(3)  # a receiver that vanishes without a word, like a killed vLLM worker
    deadline = time.monotonic() + timeout
    result.update(receive_chunks(comm, spec, deadline))
    if spec.get("raw_bytes"):
        raw = torch.empty(spec["raw_bytes"], dtype=torch.uint8, device="cuda")
        receive_into(comm, raw, deadline, "raw broadcast")
        result["raw_intact"] = bool(torch.equal(raw, raw_pattern(spec["raw_bytes"], "cuda")))
    comm.destroy()
    result_path.write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1])
