"""Single-process stand-ins for multi-rank ports: one rank agrees with itself."""

from __future__ import annotations


class SingleProcessAgreement:
    """`RankAgreement` for a run of one training rank: the verdict is the rank's own."""

    def all_succeeded(self, ok: bool, timeout: float) -> bool:
        if timeout <= 0:
            raise ValueError(f"agreement timeout must be > 0, got {timeout}")
        return ok
