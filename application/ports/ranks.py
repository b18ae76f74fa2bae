"""Port: agreement among the training ranks on whether a step succeeded on all of them.

A weight sync must end the same way on every rank (all return or all raise): a rank that
raised while the others went on would deadlock them in the next collective gather. The real
adapter is an all-reduce (MIN of 0/1) over the training process group; the single-process
implementation is `application.single_process.SingleProcessAgreement`.
"""

from __future__ import annotations

from typing import Protocol


class RankAgreement(Protocol):
    """Every rank calls `all_succeeded` at the same point of the same step."""

    def all_succeeded(self, ok: bool, timeout: float) -> bool:
        """True iff every rank passed `ok=True`; raises TimeoutError after `timeout` seconds."""
        ...
