"""TorchRankAgreement over a real gloo group of two processes: unanimous ok, one failure, a missing rank."""

from __future__ import annotations

import multiprocessing as mp
import os
import socket

import pytest

pytestmark = pytest.mark.integration


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, port: int, oks: list[bool], skip_last: bool, out) -> None:
    import datetime

    import torch.distributed as dist

    from adapters.distributed.rank_agreement import TorchRankAgreement

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=30))
    agreement = TorchRankAgreement()
    results = []
    try:
        for i, ok in enumerate(oks):
            if skip_last and rank == 1 and i == len(oks) - 1:
                import time

                time.sleep(8.0)  # alive but absent: rank 0 must give up after its 3 s bound
                break
            results.append(agreement.all_succeeded(ok if rank == 0 else True, timeout=3.0))
    except TimeoutError as exc:
        results.append(f"timeout: {exc}")
    out.put((rank, results))
    dist.destroy_process_group()


def _run(oks, skip_last=False):
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, port, oks, skip_last, out)) for r in range(2)]
    for p in procs:
        p.start()
    results = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(timeout=30)
        if p.is_alive():
            p.kill()
    return results


def test_every_rank_sees_a_failure_on_any_rank():
    results = _run([True, False, True])
    assert results[0] == results[1] == [True, False, True]


def test_a_rank_that_never_arrives_times_out_instead_of_hanging():
    results = _run([True, True], skip_last=True)
    assert results[0][0] is True
    assert isinstance(results[0][1], str) and results[0][1].startswith("timeout")
