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
- per chunk, packed (`packed_tensor.py::packed_nccl_broadcast_consumer`): bucket sizes recomputed
  from the metadata (`math.prod(shape) * itemsize`, close a bucket when the total EXCEEDS the
  buffer size); `packed_num_buffers` streams used round-robin, a slot's stream waited for before
  reuse; on it `torch.empty(size, uint8)` received by broadcast from rank 0, split, `.view(dtype)
  .view(shape)` and "loaded" (copied out, as `load_weights` does); unpacked
  (`nccl_engine.py`): one `torch.empty(shape, dtype)` per tensor on the current stream;
- then, if asked, `raw_bytes` received as one plain uint8 broadcast (the bandwidth baseline).
Departures: host waits are bounded (`NcclCommunicator.wait`) where vLLM synchronizes streams.

A spec holds `sessions` (each: init_info, chunks, seed, fill, rounds, raw_bytes, raw_rounds,
barrier, kill_after_buckets, death_file) run one after the other; a spec with those keys at the
top level is one session. `barrier` adds a one-element all_reduce before every round, matching
the bench's trainer. `kill_after_buckets` SIGKILLs this process once that many buckets of the
first round have arrived (a worker killed mid-broadcast), after writing the wall time to
`death_file`. Every received tensor is compared bit for bit with `make_weights(fill, seed, ...)`,
which the trainer side uses to build what it sends. Results (one dict per session) are rewritten
to `spec["result"]` after each session.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import signal
import sys
import time
import types
from datetime import timedelta
from pathlib import Path

import torch

from tests.gpu.model_shapes import (  # noqa: F401 - re-exported for the tests and benches
    expected_weights, make_weights, raw_pattern, smollm2_specs, spec_bytes,
)

SESSION_KEYS = ("init_info", "chunks", "seed")


def receive_plan(specs: list[dict], buffer_size_bytes: int) -> list[list[int]]:
    """vLLM's consumer rule: indices per bucket, recomputed from the metadata alone."""
    buckets, current, total = [], [], 0
    for index, spec in enumerate(specs):
        current.append(index)
        total += spec_bytes(spec)
        if total > buffer_size_bytes:
            buckets.append(current)
            current, total = [], 0
    if current:
        buckets.append(current)
    return buckets


def unpack(buffer: torch.Tensor, specs: list[dict]) -> list[torch.Tensor]:
    """Split a received uint8 bucket into the tensors it carries (vLLM `unpack_tensor`)."""
    sizes = [spec_bytes(s) for s in specs]
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


def wait_stream(comm, stream: torch.cuda.Stream, deadline: float, what: str) -> None:
    done = torch.cuda.Event()
    done.record(stream)
    comm.wait(done, deadline, what)


def receive_into(comm, buffer: torch.Tensor, deadline: float, what: str) -> None:
    stream = torch.cuda.current_stream()
    comm.broadcast(buffer, stream, deadline, what)
    wait_stream(comm, stream, deadline, what)


def barrier(comm, deadline: float) -> None:
    one = torch.zeros(1, dtype=torch.float32, device="cuda")
    stream = torch.cuda.current_stream()
    comm.all_reduce_sum(one, stream, deadline, "barrier")
    wait_stream(comm, stream, deadline, "barrier")


class Killer:
    """Counts arrived buckets; SIGKILLs this process at `after` (None: never)."""

    def __init__(self, after: int | None, death_file: str | None) -> None:
        self.after, self.death_file, self.count = after, death_file, 0

    def arrived(self, comm, stream: torch.cuda.Stream, deadline: float) -> None:
        self.count += 1
        if self.after is not None and self.count >= self.after:
            wait_stream(comm, stream, deadline, "bucket before the kill")
            if self.death_file:
                Path(self.death_file).write_text(json.dumps({"killed_at": time.time(), "buckets": self.count}))
            os.kill(os.getpid(), signal.SIGKILL)


def consume_packed(comm, chunk: list[dict], info: dict, streams: list, deadline: float, killer: Killer) -> list:
    """One `update_weights` call's packed receive, as `packed_nccl_broadcast_consumer`."""
    loaded, slot = [], 0
    for bucket in receive_plan(chunk, info["packed_buffer_size_bytes"]):
        group = [chunk[i] for i in bucket]
        stream = streams[slot]
        wait_stream(comm, stream, deadline, f"buffer slot {slot} before reuse")
        with torch.cuda.stream(stream):
            buffer = torch.empty(sum(spec_bytes(s) for s in group), dtype=torch.uint8, device="cuda")
            comm.broadcast(buffer, stream, deadline, f"bucket of {group[0]['name']}")
            loaded += [tensor.clone() for tensor in unpack(buffer, group)]  # load_weights copies out
        killer.arrived(comm, stream, deadline)
        slot = (slot + 1) % len(streams)
    for stream in streams:
        wait_stream(comm, stream, deadline, "end of update_weights")
    return loaded


def consume_unpacked(comm, chunk: list[dict], deadline: float, killer: Killer) -> list:
    stream, loaded = torch.cuda.current_stream(), []
    for spec in chunk:
        weight = torch.empty(spec["shape"], dtype=getattr(torch, spec["dtype"]), device="cuda")
        comm.broadcast(weight, stream, deadline, f"tensor {spec['name']}")
        loaded.append(weight)
        killer.arrived(comm, stream, deadline)
    wait_stream(comm, stream, deadline, "end of update_weights")
    return loaded


def receive_round(comm, session: dict, streams: list, deadline: float, killer: Killer) -> list:
    info, loaded = session["init_info"], []
    for chunk in session["chunks"]:
        if info.get("packed", False):
            loaded += consume_packed(comm, chunk, info, streams, deadline, killer)
        else:
            loaded += consume_unpacked(comm, chunk, deadline, killer)
    return loaded


def mismatched(specs: list[dict], got: list, want: list) -> list[str]:
    return [
        s["name"] for s, g, w in zip(specs, got, want)
        if g.shape != w.shape or g.dtype != w.dtype or not torch.equal(g.reshape(-1).view(torch.uint8), w.reshape(-1).view(torch.uint8))
    ]


def run_session(session: dict, timeout: float) -> dict:
    info = session["init_info"]
    started = time.monotonic()
    comm = join(info, info["rank_offset"], timeout)
    result = {"joined_after_s": time.monotonic() - started}
    if session.get("ready_file"):
        Path(session["ready_file"]).write_text("ready")
    if session.get("die_after_warmup"):
        time.sleep(float(session.get("linger_s", 0)))
        os._exit(3)  # a receiver that vanishes without a word, like a killed vLLM worker
    deadline = time.monotonic() + timeout
    specs = [s for chunk in session["chunks"] for s in chunk]
    want = make_weights(session.get("fill", "randn"), session["seed"], specs, "cuda")
    streams = [torch.cuda.Stream() for _ in range(info.get("packed_num_buffers", 2))]
    killer = Killer(session.get("kill_after_buckets"), session.get("death_file"))
    mismatches: set[str] = set()
    rounds = int(session.get("rounds", 1))
    for _ in range(rounds):
        if session.get("barrier"):
            barrier(comm, deadline)
        got = receive_round(comm, session, streams, deadline, killer)
        mismatches.update(mismatched(specs, got, want))
        del got
    result.update(rounds=rounds, tensors=len(specs), mismatches=sorted(mismatches),
                  received_bytes=sum(spec_bytes(s) for s in specs))
    if session.get("raw_bytes"):
        raw = torch.empty(session["raw_bytes"], dtype=torch.uint8, device="cuda")
        for _ in range(int(session.get("raw_rounds", 1))):
            if session.get("barrier"):
                barrier(comm, deadline)
            raw.zero_()
            receive_into(comm, raw, deadline, "raw broadcast")
        result["raw_intact"] = bool(torch.equal(raw, raw_pattern(session["raw_bytes"], "cuda")))
    comm.destroy()
    return result


def main(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    result_path, timeout = Path(spec["result"]), float(spec.get("timeout", 60))
    sessions = spec["sessions"] if "sessions" in spec else [{k: v for k, v in spec.items() if k != "result"}]
    results: list[dict] = []
    for session in sessions:
        results.append(run_session(session, timeout))
        result_path.write_text(json.dumps(results if "sessions" in spec else results[0]))


if __name__ == "__main__":
    main(sys.argv[1])
