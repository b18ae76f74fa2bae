"""Port: what the training loops need from the weight sync (publish version N to every server)."""

from __future__ import annotations

from typing import Protocol

import attrs


@attrs.frozen(kw_only=True)
class PublishReport:
    version: int
    seconds: float
    bytes_sent: int

    @property
    def gbps(self) -> float:
        return self.bytes_sent / self.seconds / 1e9 if self.seconds > 0 else 0.0


class WeightPublisher(Protocol):
    def publish(self, version: int) -> PublishReport: ...
