"""`AbortableStore`: a c10d store whose rendezvous waits stop as soon as the rendezvous is called off.

A process group's constructor (`ProcessGroupGloo`) blocks in `store.wait(keys, timeout)` until every
peer has published its address, and nothing can interrupt a `TCPStore` wait from outside. Wrapped
in this Python `dist.Store` (torch's Python-store trampoline calls its methods from C++), that wait
becomes a bounded polling loop of non-blocking `check(keys)` calls that raises `RendezvousAborted`
once `abort` is set (e.g. the server's `/init_weight_transfer_engine` call failed, so no peer is
coming) and `RendezvousTimeout` past its deadline. Every other call passes through unchanged.

Wrap the top of a `PrefixStore` chain, never its bottom: a C++ `PrefixStore` over a Python store
reaches trampoline methods torch does not implement ("Not implemented" internal assert).
"""

from __future__ import annotations

import threading
import time
import traceback
from datetime import timedelta

import torch.distributed as dist

POLL_SECONDS = 0.01


class RendezvousAborted(RuntimeError):
    """The rendezvous was called off while waiting for peers."""


class RendezvousTimeout(TimeoutError):
    """Peers did not publish their keys before the deadline."""


class AbortableStore(dist.Store):
    """Delegates to `inner`; `wait` polls `inner.check` and honours `abort` and `timeout`."""

    def __init__(self, inner: dist.Store, abort: threading.Event | None, timeout: float) -> None:
        super().__init__()
        self._inner = inner
        self._abort = abort or threading.Event()
        self._deadline = time.monotonic() + timeout

    def set(self, key: str, value: bytes | str) -> None:
        self._inner.set(key, value)

    def get(self, key: str) -> bytes:
        return self._inner.get(key)

    def add(self, key: str, value: int) -> int:
        return self._inner.add(key, value)

    def check(self, keys: list[str]) -> bool:
        return self._inner.check(keys)

    def compare_set(self, key: str, expected: bytes | str, desired: bytes | str) -> bytes:
        return self._inner.compare_set(key, expected, desired)

    def delete_key(self, key: str) -> bool:
        return self._inner.delete_key(key)

    def num_keys(self) -> int:
        return self._inner.num_keys()

    def wait(self, keys: list[str], timeout: timedelta | None = None) -> None:
        started = time.monotonic()
        deadline = self._deadline if timeout is None else min(self._deadline, started + timeout.total_seconds())
        while not self._inner.check(keys):
            if self._abort.wait(POLL_SECONDS):
                raise RendezvousAborted(
                    f"rendezvous called off after {time.monotonic() - started:.2f}s waiting for peer keys {keys}"
                )
            if time.monotonic() >= deadline:
                raise RendezvousTimeout(f"peer keys {keys} not published after {time.monotonic() - started:.1f}s")


def rendezvous_failure(what: str, timeout: float, abort: threading.Event | None, error: BaseException) -> str:
    """The message of a failed `open`: called off (another party failed) or failed on its own.

    Also clears the locals of the frames `error` went through (`AbortableStore.wait` holds the
    store): a traceback kept by the caller must not keep the rendezvous port listening."""
    traceback.clear_frames(error.__traceback__)
    if abort is not None and abort.is_set():
        return f"{what} called off (the other side's join failed): {error}"
    return f"{what} failed within {timeout:.0f}s: {error}"
