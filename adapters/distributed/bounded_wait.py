"""`wait_bounded`: wait on a posted torch.distributed work for at most `timeout` seconds.

gloo reports a timeout or a vanished peer as a RuntimeError from `Work.wait`, and some works
return False instead; both become `ChannelTimeout` (a `TimeoutError`) naming what was waited
for, so a rank that never arrives makes the others raise instead of hanging.
"""

from __future__ import annotations

import datetime

import torch.distributed as dist


class ChannelTimeout(TimeoutError):
    """A rank did not join a collective within its bound (or its peer is gone)."""


def wait_bounded(work: dist.Work, timeout: float, what: str) -> None:
    if timeout <= 0:
        raise ValueError(f"{what}: timeout must be > 0, got {timeout}")
    try:
        completed = work.wait(timeout=datetime.timedelta(seconds=timeout))
    except RuntimeError as exc:
        raise ChannelTimeout(f"{what}: no answer from every rank within {timeout:.0f} s ({exc})") from exc
    if not completed:
        raise ChannelTimeout(f"{what}: no answer from every rank within {timeout:.0f} s")
