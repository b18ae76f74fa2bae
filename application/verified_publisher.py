"""`VerifyingPublisher`: a `WeightPublisher` that verifies every Nth publish it passes through.

Composition, not a loop change: it wraps the real publisher (`SyncWeights`) and, after every
`every_n_syncs`-th successful publish, asks a `SyncVerifier` whether each server now serves the
trainer's weights (version and probe log-probs). A mismatch raises `SyncVerificationError`
naming each failing server and what differed, so silent corruption stops the run at the sync
that caused it instead of poisoning the rollouts that follow. `every_n_syncs = 0` turns it off
(the inner publisher's report is passed through untouched). Publishes that raise are not counted.
"""

from __future__ import annotations

from application.ports.sync_verifier import SyncVerification, SyncVerifier
from application.ports.weight_publisher import PublishReport, WeightPublisher


class SyncVerificationError(RuntimeError):
    """The servers do not serve what the trainer holds after a sync that reported success."""

    def __init__(self, verification: SyncVerification, publish_number: int) -> None:
        self.verification = verification
        self.publish_number = publish_number
        lines = "; ".join(server.describe() for server in verification.failures)
        super().__init__(
            f"weight sync verification failed after publishing version {verification.version} "
            f"(publish #{publish_number}): {lines}"
        )


class VerifyingPublisher:
    def __init__(self, inner: WeightPublisher, verifier: SyncVerifier, every_n_syncs: int) -> None:
        if every_n_syncs < 0:
            raise ValueError(f"every_n_syncs must be >= 0 (0 = off), got {every_n_syncs}")
        self._inner = inner
        self._verifier = verifier
        self._every_n = every_n_syncs
        self._published = 0
        self.last_verification: SyncVerification | None = None

    def publish(self, version: int) -> PublishReport:
        report = self._inner.publish(version)
        self._published += 1
        if self._every_n and self._published % self._every_n == 0:
            verification = self._verifier.verify(version)
            self.last_verification = verification
            if not verification.ok:
                raise SyncVerificationError(verification, self._published)
        return report
