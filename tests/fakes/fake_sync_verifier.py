"""Fakes of the sync-verification ports: a scripted `SyncVerifier`, a trainer's log-probs, and a
`ProbedServer` view of a `FakeSyncServer` that serves the trainer's log-probs only while its
model is intact (a `corrupt(offset)` knob moves them, as wrong weights would)."""

from __future__ import annotations

from collections.abc import Sequence

from application.ports.sync_verifier import ServerVerification, SyncVerification
from tests.fakes.fake_sync import FakeSyncServer


class FakeTrainerLogprobs:
    """Deterministic log-probs of a probe: token i scores -(1 + (token_ids[i] % 5)) / 10."""

    def __init__(self) -> None:
        self.calls = 0

    def sequence_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        self.calls += 1
        return [-(1 + (t % 5)) / 10 for t in token_ids[1:]]


class FakeProbedServer:
    def __init__(self, server: FakeSyncServer, trainer: FakeTrainerLogprobs) -> None:
        self.server = server
        self._trainer = trainer
        self.offset = 0.0
        self.fail_with: Exception | None = None

    @property
    def url(self) -> str:
        return self.server.url

    def corrupt(self, offset: float) -> None:
        self.offset = offset

    def weight_version(self) -> int | None:
        return self.server.weight_version()

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        if self.fail_with is not None:
            raise self.fail_with
        broken = 3.0 if self.server.model != "intact" else 0.0
        values = self._trainer.sequence_logprobs(token_ids)
        return [None] + [v - self.offset - broken for v in values]


class FakeSyncVerifier:
    """Answers every verification as scripted: servers listed in `mismatching` fail their log-probs."""

    def __init__(self, urls: Sequence[str], tolerance: float = 1e-3) -> None:
        self.urls = tuple(urls)
        self.tolerance = tolerance
        self.mismatching: set[str] = set()
        self.verified: list[int] = []

    def verify(self, version: int) -> SyncVerification:
        self.verified.append(version)
        servers = tuple(
            ServerVerification(
                url=url, expected_version=version, reported_version=version,
                max_logprob_diff=1.0 if url in self.mismatching else 0.0, tolerance=self.tolerance, probe_tokens=8,
            )
            for url in self.urls
        )
        return SyncVerification(version=version, servers=servers)
