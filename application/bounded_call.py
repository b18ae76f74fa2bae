"""Run a blocking call on a daemon thread and wait for it at most a given time.

Used for every call that crosses a process boundary during a weight sync, so that a server that
never answers turns into a `CallTimedOut` within the timeout instead of a hang. A timed-out call
cannot be cancelled (Python threads cannot be killed): its thread is a daemon and is left to
finish or die with the process; the adapter's own timeout is what eventually frees it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class CallTimedOut(TimeoutError):
    """The call did not return within its bound."""


class PendingCall(Generic[T]):
    """A call running on its own daemon thread; `wait` collects its result or its exception."""

    def __init__(self, fn: Callable[[], T], name: str) -> None:
        self._fn = fn
        self._done = threading.Event()
        self._result: T | None = None
        self._error: BaseException | None = None
        self.started = time.monotonic()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._result = self._fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            self._error = exc
        finally:
            self._done.set()

    def failed(self) -> bool:
        """True when the call already ended with an exception."""
        return self._done.is_set() and self._error is not None

    def wait(self, timeout: float) -> T:
        """The call's result; re-raises its exception; `CallTimedOut` after `timeout` seconds."""
        if not self._done.wait(max(timeout, 0.0)):
            raise CallTimedOut(f"no answer after {time.monotonic() - self.started:.3f}s (timeout {timeout}s)")
        if self._error is not None:
            raise self._error
        return self._result  # type: ignore[return-value]


def call_bounded(fn: Callable[[], T], timeout: float, name: str = "bounded-call") -> T:
    """Run `fn` on a daemon thread and wait at most `timeout` seconds for it."""
    return PendingCall(fn, name).wait(timeout)
