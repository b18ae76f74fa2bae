"""Two-GPU NCCL weight sync: NcclTransport (GPU 0, rank 0) against vLLM's receive path (GPU 1, rank 1).

    PYTHONPATH=. python bench/nccl_two_gpu.py OUT_DIR [--smollm2-config PATH/config.json]

Needs two CUDA devices (device kind nvidia-h200-x2; NVLink multicast stays off: this script forces
NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1, NVSHMEM_DISABLE_NVLS=1 for itself and the
receiver). One receiver process (`tests.gpu.nccl_receiver`, CUDA_VISIBLE_DEVICES=1) runs the
sessions below in order; each session is a fresh rendezvous from `init_info` (TCPStore address
mode or `nccl_unique_id_b64` mode), NCCL's warm-up, then `rounds + 1` syncs of the whole model
(the first one untimed) and as many raw broadcasts of the same number of bytes on the same
communicator, each preceded by a one-element all_reduce barrier so both ranks start together.
The receiver recomputes the buckets from the metadata and checks every tensor bit for bit.
Models: SmolLM2-135M's exact shapes (from its config.json when given, else the built-in copy;
no download) and a random ~1.54B-parameter Qwen2-1.5B-shaped model, bf16. Timing: host wall
clock around `transport.broadcast` (which returns once every bucket completed) and around the
raw broadcast; medians. Packing: the same buckets built alone on GPU 0 (no send). The last
session kills the receiver (SIGKILL) mid-broadcast and times the trainer's TransportError.
Prints a table; writes OUT_DIR/nccl_two_gpu.json after every session.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from adapters.transport.gloo_transport import TransportError
from adapters.transport.nccl_library import NcclLibrary
from adapters.transport.nccl_rendezvous import NcclInitInfo
from adapters.transport.nccl_transport import NcclTransport
from adapters.transport.packed_tensors import packed_buckets, spec_of
from application.ports.weight_sync import WeightChunk
from tests.gpu.model_shapes import (
    QWEN2_1_5B_LIKE, SMOLLM2_135M, llama_specs, make_weights, parameter_count, raw_pattern, spec_bytes,
)

MiB = 1024**2
SEED, TIMEOUT, FAIL_TIMEOUT = 11, 120.0, 10.0
REPO = Path(__file__).resolve().parents[1]
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
S, B = "smollm2_135m", "qwen2_1.5b_like"
SESSIONS = [  # name, model, rendezvous, packed, buffer bytes, buffers, timed rounds, kill after buckets
    ("smollm2_store_packed_1GiB", S, "store", True, 1024 * MiB, 2, 10, None),
    ("smollm2_uid_packed_32MiB", S, "unique_id", True, 32 * MiB, 2, 5, None),
    ("smollm2_store_unpacked", S, "store", False, 1024 * MiB, 2, 5, None),
    ("1.5b_uid_packed_1GiB", B, "unique_id", True, 1024 * MiB, 2, 10, None),
    ("1.5b_store_packed_256MiB", B, "store", True, 256 * MiB, 2, 10, None),
    ("1.5b_uid_packed_64MiB_x3", B, "unique_id", True, 64 * MiB, 3, 10, None),
    ("kill_receiver_mid_broadcast", B, "store", True, 64 * MiB, 2, 3, 10),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def model_specs(model: str, smollm2_config: dict) -> tuple[list[dict], str]:
    """(specs, fill): SmolLM2 as normal draws on the CPU, the 1.5B model hashed on the device."""
    return (llama_specs(smollm2_config), "randn") if model == S else (llama_specs(QWEN2_1_5B_LIKE), "hash")


def make_init(session: tuple, lib: NcclLibrary) -> NcclInitInfo:
    _, _, mode, packed, buffer, buffers, _, _ = session
    common = dict(rank_offset=1, world_size=2, packed=packed, packed_buffer_size_bytes=buffer, packed_num_buffers=buffers)
    if mode == "store":
        return NcclInitInfo(master_address="127.0.0.1", master_port=free_port(), **common)
    return NcclInitInfo(nccl_unique_id_b64=NcclTransport(library=lib).mint_unique_id_b64(), **common)


def receiver_spec(sessions: list[tuple], inits: list[NcclInitInfo], specs: dict, out: Path) -> dict:
    plan = []
    for session, init in zip(sessions, inits):
        name, model, _, _, _, _, rounds, kill = session
        model_spec, fill = specs[model]
        entry = dict(init_info=init.as_init_info(), chunks=[model_spec], seed=SEED, fill=fill, barrier=True,
                     rounds=rounds + 1, raw_bytes=sum(spec_bytes(s) for s in model_spec), raw_rounds=rounds + 1)
        if kill is not None:
            entry.update(kill_after_buckets=kill, death_file=str(out / "receiver_death.json"), raw_bytes=0)
        plan.append(entry)
    return dict(sessions=plan, result=str(out / "receiver_result.json"), timeout=TIMEOUT)


def start_receiver(spec: dict, out: Path) -> subprocess.Popen:
    path = out / "receiver_spec.json"
    path.write_text(json.dumps(spec))
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="1", PYTHONPATH=str(REPO), PYTHONUNBUFFERED="1", **NO_MULTICAST)
    log = open(out / "receiver.log", "w")  # noqa: SIM115 - held by the child
    return subprocess.Popen([sys.executable, "-m", "tests.gpu.nccl_receiver", str(path)], env=env, cwd=REPO,
                            stdout=log, stderr=subprocess.STDOUT)


def barrier(comm) -> None:
    stream, one = torch.cuda.current_stream(0), torch.zeros(1, dtype=torch.float32, device="cuda:0")
    deadline = time.monotonic() + TIMEOUT
    comm.all_reduce_sum(one, stream, deadline, "barrier")
    done = torch.cuda.Event()
    done.record(stream)
    comm.wait(done, deadline, "barrier")


def timed_rounds(comm, send, rounds: int) -> list[float]:
    """`rounds + 1` barrier-then-send rounds; the wall seconds of all but the first."""
    seconds = []
    for _ in range(rounds + 1):
        barrier(comm)
        started = time.perf_counter()
        send()
        seconds.append(time.perf_counter() - started)
    return seconds[1:]


def raw_send(comm, raw: torch.Tensor) -> None:
    stream, deadline = torch.cuda.current_stream(0), time.monotonic() + TIMEOUT
    comm.broadcast(raw, stream, deadline, "raw broadcast")
    done = torch.cuda.Event()
    done.record(stream)
    comm.wait(done, deadline, "raw broadcast")


def pack_only_s(chunk: WeightChunk, buffer: int, repeats: int = 5) -> float:
    """Median seconds to build the same buckets on GPU 0 without sending them."""
    times = []
    for _ in range(repeats):
        torch.cuda.synchronize(0)
        started = time.perf_counter()
        for _bucket in packed_buckets(chunk.specs, chunk.payload, buffer):
            pass
        torch.cuda.synchronize(0)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def measure(session: tuple, init: NcclInitInfo, chunk: WeightChunk, lib: NcclLibrary) -> dict:
    name, model, mode, packed, buffer, buffers, rounds, _ = session
    total = sum(s.nbytes for s in chunk.specs)
    row = dict(session=name, model=model, rendezvous=mode, packed=packed, buffer_MiB=buffer // MiB, buffers=buffers,
               tensors=len(chunk.specs), bytes=total, rounds=rounds)
    row["pack_only_ms"] = pack_only_s(chunk, buffer) * 1e3 if packed else 0.0
    transport = NcclTransport(device=0, library=lib)
    started = time.monotonic()
    transport.open(init, timeout=TIMEOUT)
    row["open_s"] = time.monotonic() - started
    try:
        comm = transport.communicator
        ours = timed_rounds(comm, lambda: transport.broadcast(chunk, timeout=TIMEOUT), rounds)
        raw = raw_pattern(total, "cuda:0")
        baseline = timed_rounds(comm, lambda: raw_send(comm, raw), rounds)
    finally:
        transport.close()
    ours_s, raw_s = statistics.median(ours), statistics.median(baseline)
    row.update(ours_ms=ours_s * 1e3, raw_ms=raw_s * 1e3, ours_GBps=total / ours_s / 1e9, raw_GBps=total / raw_s / 1e9,
               ours_best_GBps=total / min(ours) / 1e9, raw_best_GBps=total / min(baseline) / 1e9,
               ratio=raw_s / ours_s, overhead_pct=(ours_s / raw_s - 1) * 100,
               pack_only_pct_of_raw=row["pack_only_ms"] / (raw_s * 1e3) * 100)
    return row


def kill_mid_broadcast(session: tuple, init: NcclInitInfo, chunk: WeightChunk, lib: NcclLibrary, out: Path) -> dict:
    name, _, _, _, buffer, _, rounds, kill = session
    row = dict(session=name, bytes=sum(s.nbytes for s in chunk.specs), buffer_MiB=buffer // MiB,
               kill_after_buckets=kill, timeout_s=FAIL_TIMEOUT)
    transport = NcclTransport(device=0, library=lib)
    transport.open(init, timeout=TIMEOUT)
    barrier(transport.communicator)
    started = time.monotonic()
    try:
        for _ in range(rounds + 1):
            call = time.monotonic()
            transport.broadcast(chunk, timeout=FAIL_TIMEOUT)
        row.update(raised=False)
    except TransportError as error:
        now, wall = time.monotonic(), time.time()
        row.update(raised=True, error=str(error)[:400], seconds_in_failing_call=now - call,
                   seconds_since_start=now - started)
        death = out / "receiver_death.json"
        if death.exists():
            row["seconds_since_receiver_killed"] = wall - json.loads(death.read_text())["killed_at"]
    row["transport_open_after"] = transport.is_open
    transport.close()
    row["within_timeout"] = bool(row.get("raised")) and row["seconds_in_failing_call"] <= FAIL_TIMEOUT + 12
    return row


def environment(lib: NcclLibrary) -> dict:
    return dict(torch=torch.__version__, cuda=torch.version.cuda, gpus=[torch.cuda.get_device_name(i) for i in range(2)],
                peer_access=torch.cuda.can_device_access_peer(0, 1), nccl_library=lib.path, nccl_version=lib.version(),
                nccl_env={k: v for k, v in os.environ.items() if k.startswith(("NCCL_", "TORCH_SYMM", "NVSHMEM"))})


def print_table(rows: list[dict]) -> None:
    head = f"{'session':30} {'MB':>7} {'ours ms':>8} {'ours GB/s':>9} {'raw GB/s':>9} {'ratio':>6} {'pack ms':>8} {'ovh %':>6} bit-exact"
    print(head)
    for r in rows:
        if "ours_ms" in r:
            print(f"{r['session']:30} {r['bytes'] / 1e6:7.1f} {r['ours_ms']:8.2f} {r['ours_GBps']:9.1f} {r['raw_GBps']:9.1f}"
                  f" {r['ratio']:6.3f} {r['pack_only_ms']:8.3f} {r['overhead_pct']:6.1f} {r.get('bit_exact')}")
        else:
            print(f"{r['session']:30} {json.dumps({k: v for k, v in r.items() if k != 'session'})}")


def one_session(session: tuple, init: NcclInitInfo, specs: dict, lib: NcclLibrary, out: Path) -> dict:
    model_spec, fill = specs[session[1]]
    tensors = make_weights(fill, SEED, model_spec, "cuda:0")
    chunk = WeightChunk(tuple(spec_of(s["name"], t) for s, t in zip(model_spec, tensors)), tensors)
    if session[7] is not None:
        return kill_mid_broadcast(session, init, chunk, lib, out)
    return measure(session, init, chunk, lib)


def run(out: Path, smollm2_config: dict, config_source: str) -> dict:
    for key, value in NO_MULTICAST.items():
        os.environ[key] = value
    torch.cuda.set_device(0)
    lib = NcclLibrary()
    report = dict(environment=environment(lib), smollm2_config_source=config_source, sessions=[])
    specs = {m: model_specs(m, smollm2_config) for m in (S, B)}
    report["models"] = {m: dict(tensors=len(s), params=parameter_count(s), bytes=sum(map(spec_bytes, s)), fill=f)
                        for m, (s, f) in specs.items()}
    inits = [make_init(session, lib) for session in SESSIONS]
    receiver = start_receiver(receiver_spec(SESSIONS, inits, specs, out), out)
    try:
        for session, init in zip(SESSIONS, inits):
            try:
                row = one_session(session, init, specs, lib, out)
            except Exception as error:  # noqa: BLE001 - recorded; the receiver is out of step now
                row = dict(session=session[0], error=f"{type(error).__name__}: {error}"[:600])
            report["sessions"].append(row)
            (out / "nccl_two_gpu.json").write_text(json.dumps(report, indent=1))
            if "error" in row:
                break
        report["receiver_returncode"] = receiver.poll() if "error" in row else receiver.wait(timeout=60)
    finally:
        receiver.kill()
    result = out / "receiver_result.json"
    received = json.loads(result.read_text()) if result.exists() else []
    for row, got in zip(report["sessions"], received):
        row.update(bit_exact=got["mismatches"] == [] and got.get("raw_intact", True), mismatches=got["mismatches"][:5],
                   received_tensors=got["tensors"], raw_intact=got.get("raw_intact"))
    return report


def main(argv: list[str]) -> None:
    out = Path(argv[0])
    config_path = Path(argv[2]) if len(argv) > 2 and argv[1] == "--smollm2-config" else None
    if config_path is not None and config_path.is_file():
        config, source = json.loads(config_path.read_text()), str(config_path)
    else:
        config, source = SMOLLM2_135M, "built-in copy (tests/gpu/model_shapes.py)"
    if torch.cuda.device_count() < 2:
        raise SystemExit(f"needs 2 CUDA devices, torch sees {torch.cuda.device_count()}")
    report = run(out, config, source)
    print_table(report["sessions"])
    (out / "nccl_two_gpu.json").write_text(json.dumps(report, indent=1))
    sys.stdout.flush()
    # The aborted communicator of the last session may leave NCCL threads that interpreter
    # teardown would wait on; everything is written, so leave without it.
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv[1:])
