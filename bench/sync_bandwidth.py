"""Weight-sync bandwidth against the real vLLM CPU server (gloo engine), next to a raw gloo broadcast.

    PYTHONPATH=. .venv/bin/python bench/sync_bandwidth.py [--sizes small,135m,500m] [--out FILE]

For each model size (random Llama weights in float32 with the SmolLM2 tokenizer, saved to a temp
folder; float32 because the CPU server runs float32 here, as the CPU examples do), in one run:
1. raw: a plain gloo broadcast of the same bytes, in the same bucket sizes, between this process
   and one spawned process (receiver allocates a fresh buffer per bucket, as the server does),
   timed from the first byte to the receiver's 1-element acknowledgement;
2. ours: `SyncWeights` exactly as training wires it (`VllmHttpServer`, `GlooTransport`,
   `ModelWeightSource`, `CHUNK_BYTES` chunks, `PACKED_BUFFER_BYTES` buffers, 2 buffers):
   connect (handshake) once, then two full syncs (pause, start, update_weights || packed
   broadcast, finish = layerwise reload finalize, /weight_info, reset_prefix_cache, resume); the
   best one is reported, split into update (the /update_weights calls: broadcast and server load,
   which overlap), finish, and the other HTTP calls, plus the server's own split read from its log
   (seconds blocked waiting for bytes, seconds in `model.load_weights`);
3. sweep: the same with other (buffer, chunk, buffers) settings against the same server, to pick
   the wiring constants by measurement (`--sweep`, e.g. `1024:1024:1,256:1024:2`, MiB);
4. naive: one /update_weights and one unpacked broadcast per tensor (a group opened with
   `packed: false`, chunks of one tensor), the TRL-legacy shape of a sync;
5. glibc malloc (`--compare-glibc-malloc`): the wired sync again against a second server left on
   glibc's default malloc, where the embedded server runs with `RELOAD_FRIENDLY_MALLOC`
   (adapters/vllm/server_process.py), to show what that setting buys.
Prints a table and writes JSON (default bench/results/sync_bandwidth.json). CPU-heavy: run it on
an otherwise idle machine; numbers from a shared machine are a lower bound.
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import re
import socket
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from adapters.transport.gloo_transport import GlooTransport  # noqa: E402
from adapters.vllm.http_server import VllmHttpServer  # noqa: E402
from adapters.vllm.server_process import VllmServerProcess  # noqa: E402
from adapters.weights.gather import ModelWeightSource  # noqa: E402
from application.ports.weight_sync import TransferInit  # noqa: E402
from application.sync_report import SyncTarget  # noqa: E402
from application.sync_weights import SyncWeights  # noqa: E402
from domain.packing import bucket_boundaries  # noqa: E402
from infrastructure.model_assets import resolve_model_path  # noqa: E402
from infrastructure.wiring import CHUNK_BYTES, PACKED_BUFFER_BYTES, PACKED_NUM_BUFFERS  # noqa: E402

# hidden, layers, intermediate, heads, kv heads (head_dim 64, vocab of the SmolLM2 tokenizer, tied)
SIZES = {
    "small": (256, 4, 1024, 4, 2),
    "135m": (576, 30, 1536, 9, 3),  # SmolLM2-135M's shape
    "500m": (1024, 24, 5632, 16, 4),
}
TIMEOUT_S = 900.0
GiB = 1024**3
MiB = 1024**2
DEFAULT_SWEEP = "1024:1024:1,256:1024:1,256:2048:2,128:1024:2"
WIRED_NUM_BUFFERS = PACKED_NUM_BUFFERS["gloo"]  # what training wires for the gloo engine
SERVER_SPLIT = re.compile(r"gloo weight transfer: .* buffers: waiting ([0-9.]+)s, loading ([0-9.]+)s")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def save_random_llama(size: str, folder: Path) -> int:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    hidden, layers, inter, heads, kv = SIZES[size]
    tokenizer = AutoTokenizer.from_pretrained(resolve_model_path("smollm2-135m-instruct"))
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=inter,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv,
                         head_dim=64, max_position_embeddings=1024, tie_word_embeddings=True)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    params = sum(p.numel() for p in model.parameters())
    del model
    gc.collect()
    return params


# ---- raw gloo broadcast between two plain processes -------------------------------------------

def _group(port: int, rank: int) -> dist.ProcessGroupGloo:
    store = dist.TCPStore("127.0.0.1", port, 2, is_master=rank == 0, wait_for_workers=False,
                          timeout=timedelta(seconds=TIMEOUT_S))
    return dist.ProcessGroupGloo(store, rank, 2, timedelta(seconds=TIMEOUT_S))


def _broadcast(group: dist.ProcessGroupGloo, tensor: torch.Tensor, root: int) -> None:
    options = dist.BroadcastOptions()
    options.rootRank, options.rootTensor = root, 0
    group.broadcast([tensor], options).wait()


def _raw_receiver(port: int, sizes: list[int]) -> None:
    group = _group(port, 1)
    _broadcast(group, torch.zeros(1), 0)  # warm-up
    for size in sizes:
        _broadcast(group, torch.empty(size, dtype=torch.uint8), 0)
    _broadcast(group, torch.ones(1), 1)  # acknowledgement: everything arrived
    group.shutdown()


def raw_broadcast_seconds(sizes: list[int]) -> float:
    port = free_port()
    child = mp.get_context("spawn").Process(target=_raw_receiver, args=(port, sizes), daemon=True)
    child.start()
    group = _group(port, 0)
    _broadcast(group, torch.zeros(1), 0)
    source = torch.randint(0, 255, (max(sizes),), dtype=torch.uint8)
    started = time.perf_counter()
    for size in sizes:
        _broadcast(group, source[:size], 0)
    _broadcast(group, torch.zeros(1), 1)
    seconds = time.perf_counter() - started
    group.shutdown()
    child.join(60)
    return seconds


# ---- the real sync, timed per call ------------------------------------------------------------

class TimedServer:
    """`WeightSyncServer` that records how long each call to the real server took."""

    def __init__(self, inner: VllmHttpServer) -> None:
        self._inner = inner
        self.calls: list[tuple[str, float]] = []

    @property
    def url(self) -> str:
        return self._inner.url

    def _timed(self, name: str, fn, *args):  # noqa: ANN001, ANN202
        started = time.perf_counter()
        try:
            return fn(*args)
        finally:
            self.calls.append((name, time.perf_counter() - started))

    def world_size(self) -> int:
        return self._timed("world_size", self._inner.world_size)

    def init_weight_transfer(self, init: TransferInit, rank_offset: int) -> None:
        self._timed("init", self._inner.init_weight_transfer, init, rank_offset)

    def pause(self) -> None:
        self._timed("pause", self._inner.pause)

    def start_weight_update(self) -> None:
        self._timed("start", self._inner.start_weight_update)

    def update_weights(self, specs) -> None:  # noqa: ANN001
        self._timed("update", self._inner.update_weights, specs)

    def finish_weight_update(self, weight_version: int) -> None:
        self._timed("finish", self._inner.finish_weight_update, weight_version)

    def reset_prefix_cache(self) -> None:
        self._timed("reset", self._inner.reset_prefix_cache)

    def resume(self) -> None:
        self._timed("resume", self._inner.resume)

    def weight_version(self) -> int | None:
        return self._timed("weight_info", self._inner.weight_version)

    def split(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, seconds in self.calls:
            key = name if name in ("update", "finish") else "other_http"
            out[key] = out.get(key, 0.0) + seconds
        return out


class Setting:
    """Packed-broadcast sizing of one measured configuration."""

    def __init__(self, buffer_bytes: int, chunk_bytes: int, num_buffers: int) -> None:
        self.buffer_bytes, self.chunk_bytes, self.num_buffers = buffer_bytes, chunk_bytes, num_buffers

    @classmethod
    def parse(cls, text: str) -> Setting:
        buffer, chunk, buffers = (int(x) for x in text.split(":"))
        return cls(buffer * MiB, chunk * MiB, buffers)

    def label(self) -> str:
        return f"{self.buffer_bytes // MiB}:{self.chunk_bytes // MiB}:{self.num_buffers}"


def server_split(log: Path, offset: int) -> dict[str, float]:
    """Sum of the gloo engine's 'waiting / loading' seconds logged after byte `offset`."""
    time.sleep(0.3)  # the worker's log line trails the HTTP answer
    text = log.read_bytes()[offset:].decode(errors="replace")
    pairs = [(float(w), float(ld)) for w, ld in SERVER_SPLIT.findall(text)]
    return {"server_wait_s": sum(w for w, _ in pairs), "server_load_s": sum(ld for _, ld in pairs)}


def timed_sync(url: str, model: torch.nn.Module, packed: bool, setting: Setting, versions: list[int],
               log: Path) -> dict:
    server = TimedServer(VllmHttpServer(url, timeout=TIMEOUT_S))
    init = TransferInit(master_address="127.0.0.1", master_port=free_port(), rank_offset=1, world_size=0,
                        packed=packed, packed_buffer_size_bytes=setting.buffer_bytes,
                        packed_num_buffers=setting.num_buffers)
    sync = SyncWeights([SyncTarget(server, GlooTransport(), init)], ModelWeightSource(model, dtype="float32"),
                       timeout=TIMEOUT_S, chunk_bytes=setting.chunk_bytes)
    started = time.perf_counter()
    sync.connect()
    handshake = time.perf_counter() - started
    runs = []
    for version in versions:
        server.calls.clear()
        offset = log.stat().st_size
        report = sync.sync(version)
        runs.append({"seconds": report.seconds, "bytes": report.bytes, "chunks": report.chunks, **server.split(),
                     **(server_split(log, offset) if packed else {})})
    sync.close()
    best = min(runs, key=lambda r: r["seconds"])
    return {"handshake_s": handshake, "runs": runs, **best}


def bench_size(size: str, python: Path, work: Path, naive: bool, sweep: list[Setting],
               server_env: dict[str, str] | None = None, compare_malloc: bool = False) -> dict:
    folder = work / size
    params = save_random_llama(size, folder)
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    specs = [(n, p.numel() * p.element_size()) for n, p in model.named_parameters()]
    nbytes = sum(b for _, b in specs)
    buckets = [sum(specs[i][1] for i in b) for b in bucket_boundaries([_Spec(b) for _, b in specs], PACKED_BUFFER_BYTES)]
    print(f"[{size}] {params / 1e6:.0f}M params, {nbytes / 1e9:.2f} GB, {len(specs)} tensors, buckets {buckets}", flush=True)
    raw = min(raw_broadcast_seconds(buckets) for _ in range(2))
    log = work / f"server_{size}.log"
    process = VllmServerProcess(python=python, model_path=folder, port=free_port(), max_model_len=256,
                                kv_cache_gib=1, log_path=log, startup_timeout_s=1800,
                                weight_transfer_backend="gloo", dtype="float32", extra_env=server_env)
    version = iter(range(1, 1000))
    wired = Setting(PACKED_BUFFER_BYTES, CHUNK_BYTES, WIRED_NUM_BUFFERS)
    with process:
        print(f"[{size}] server up in {process.startup_seconds:.0f}s", flush=True)
        ours = timed_sync(process.url, model, True, wired, [next(version), next(version)], log)
        swept = {}
        for setting in sweep:
            got = timed_sync(process.url, model, True, setting, [next(version), next(version)], log)
            swept[setting.label()] = {k: got[k] for k in ("seconds", "update", "server_wait_s", "server_load_s")}
            print(f"[{size}] sweep {setting.label()} (buffer MiB:chunk MiB:buffers): {got['seconds']:.2f}s", flush=True)
        slow = timed_sync(process.url, model, False, Setting(PACKED_BUFFER_BYTES, 1, 1), [next(version)], log) \
            if naive else None
    glibc = glibc_malloc_sync(size, python, folder, model, wired, work, server_env) if compare_malloc else None
    row = {
        "size": size, "params": params, "bytes": nbytes, "tensors": len(specs), "buckets": len(buckets),
        "raw_s": raw, "raw_gbps": nbytes / raw / 1e9,
        "sync_s": ours["seconds"], "sync_gbps": nbytes / ours["seconds"] / 1e9,
        "ratio_to_raw": raw / ours["seconds"],
        "update_s": ours.get("update", 0.0), "finish_s": ours.get("finish", 0.0), "other_http_s": ours.get("other_http", 0.0),
        "server_wait_s": ours["server_wait_s"], "server_load_s": ours["server_load_s"],
        "handshake_s": ours["handshake_s"],
        "sync_runs_s": [r["seconds"] for r in ours["runs"]],
        "sweep": {label: {**r, "ratio_to_raw": raw / r["seconds"]} for label, r in swept.items()},
    }
    if glibc is not None:
        row.update(glibc_malloc_sync_s=glibc["seconds"], glibc_malloc_ratio_to_raw=raw / glibc["seconds"],
                   glibc_malloc_server_load_s=glibc["server_load_s"], glibc_malloc_server_wait_s=glibc["server_wait_s"])
    if slow is not None:
        row.update(naive_s=slow["seconds"], naive_gbps=nbytes / slow["seconds"] / 1e9,
                   naive_ratio_to_ours=ours["seconds"] / slow["seconds"], naive_update_calls=slow["chunks"])
    del model
    gc.collect()
    return row


def glibc_malloc_sync(size: str, python: Path, folder: Path, model, wired: "Setting", work: Path,
                      server_env: dict[str, str] | None) -> dict:
    """The same wired sync against a server left on glibc's default malloc (no RELOAD_FRIENDLY_MALLOC)."""
    log = work / f"server_{size}_glibc_malloc.log"
    process = VllmServerProcess(python=python, model_path=folder, port=free_port(), max_model_len=256,
                                kv_cache_gib=1, log_path=log, startup_timeout_s=1800,
                                weight_transfer_backend="gloo", dtype="float32", extra_env=server_env, malloc={})
    with process:
        got = timed_sync(process.url, model, True, wired, [1, 2], log)
    print(f"[{size}] glibc default malloc on the server: {got['seconds']:.2f}s", flush=True)
    return got


class _Spec:
    """Just enough of a TensorSpec for `bucket_boundaries` (it reads `nbytes`)."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes


def render(rows: list[dict]) -> str:
    head = ("size", "params", "GB", "raw GB/s", "sync s", "sync GB/s", "ratio", "update s", "finish s",
            "other s", "srv wait s", "srv load s", "naive s", "naive GB/s")
    lines = [head]
    for r in rows:
        lines.append((r["size"], f"{r['params'] / 1e6:.0f}M", f"{r['bytes'] / 1e9:.2f}", f"{r['raw_gbps']:.2f}",
                      f"{r['sync_s']:.2f}", f"{r['sync_gbps']:.2f}", f"{r['ratio_to_raw']:.2f}", f"{r['update_s']:.2f}",
                      f"{r['finish_s']:.2f}", f"{r['other_http_s']:.2f}", f"{r['server_wait_s']:.2f}",
                      f"{r['server_load_s']:.2f}",
                      f"{r.get('naive_s', float('nan')):.2f}", f"{r.get('naive_gbps', float('nan')):.3f}"))
    widths = [max(len(line[i]) for line in lines) for i in range(len(head))]
    table = "\n".join("  ".join(c.rjust(w) for c, w in zip(line, widths)) for line in lines)
    sweeps = [f"{r['size']} {label}: {v['seconds']:.2f}s ratio {v['ratio_to_raw']:.2f} (update {v.get('update', 0):.2f}s, "
              f"srv wait {v['server_wait_s']:.2f}s, srv load {v['server_load_s']:.2f}s)"
              for r in rows for label, v in r.get("sweep", {}).items()]
    glibc = [f"{r['size']}: {r['glibc_malloc_sync_s']:.2f}s ratio {r['glibc_malloc_ratio_to_raw']:.2f} "
             f"(srv wait {r['glibc_malloc_server_wait_s']:.2f}s, srv load {r['glibc_malloc_server_load_s']:.2f}s)"
             for r in rows if "glibc_malloc_sync_s" in r]
    return (table + ("\nsweep (buffer MiB:chunk MiB:buffers):\n" + "\n".join(sweeps) if sweeps else "")
            + ("\nserver on glibc's default malloc:\n" + "\n".join(glibc) if glibc else ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="small,135m,500m")
    parser.add_argument("--no-naive", action="store_true", help="skip the one-request-per-tensor path")
    parser.add_argument("--sweep", default=DEFAULT_SWEEP, help="extra buffer MiB:chunk MiB:buffers settings ('' = none)")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "sync_bandwidth.json")
    parser.add_argument("--server-python", type=Path, default=REPO / ".venv-vllm" / "bin" / "python")
    parser.add_argument("--server-env", default="", help="KEY=VALUE,... laid over the server's environment")
    parser.add_argument("--compare-glibc-malloc", action="store_true",
                        help="also sync against a server on glibc's default malloc (one more server per size)")
    parser.add_argument("--work", type=Path, default=None, help="keep models and server logs here (default: a temp dir)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sync_bw_") as temp:
        tmp = args.work or temp
        for size in args.sizes.split(","):
            sweep = [Setting.parse(x) for x in args.sweep.split(",") if x]
            server_env = dict(kv.split("=", 1) for kv in args.server_env.split(",") if kv)
            rows.append(bench_size(size, args.server_python, Path(tmp), naive=not args.no_naive, sweep=sweep,
                                   server_env=server_env, compare_malloc=args.compare_glibc_malloc))
            print(render(rows[-1:]), flush=True)
    table = render(rows)
    print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"rows": rows, "table": table, "dtype": "float32",
                                    "packed_buffer_bytes": PACKED_BUFFER_BYTES, "chunk_bytes": CHUNK_BYTES,
                                    "packed_num_buffers": WIRED_NUM_BUFFERS, "server_env": args.server_env,
                                    "machine": f"{mp.cpu_count()} CPU cores (shared)"}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
