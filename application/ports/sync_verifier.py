"""Port: verify that each generation server serves the weights the trainer holds, after a sync.

A verification compares, per server, the weight version it reports (`/weight_info`) with the
version just published, and its prompt log-probs on a fixed probe sequence with the trainer's own
log-probs of the same tokens (both at temperature 1), against a tolerance that suits the dtype.
That catches what the handshake alone cannot: a sync that "succeeded" but left stale, partial or
corrupted weights (e.g. a loader that writes checkpoint layout into kernel-layout storage).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import attrs


@attrs.frozen(kw_only=True)
class ServerVerification:
    """What one server showed; `error` is set when it could not be asked (it then fails)."""

    url: str
    expected_version: int
    reported_version: int | None
    max_logprob_diff: float | None  # max |server - trainer| over the probe's scored tokens
    tolerance: float
    probe_tokens: int = 0
    error: str | None = None

    @property
    def version_ok(self) -> bool:
        return self.error is None and self.reported_version == self.expected_version

    @property
    def logprobs_ok(self) -> bool:
        diff = self.max_logprob_diff
        return self.error is None and diff is not None and math.isfinite(diff) and diff <= self.tolerance

    @property
    def ok(self) -> bool:
        return self.version_ok and self.logprobs_ok

    def describe(self) -> str:
        if self.error is not None:
            return f"{self.url}: could not verify: {self.error}"
        problems = []
        if not self.version_ok:
            problems.append(
                f"GET /weight_info reports weight version {self.reported_version!r}, expected {self.expected_version}"
            )
        if not self.logprobs_ok:
            problems.append(
                f"prompt log-probs (/v1/completions) differ from the trainer's by up to {self.max_logprob_diff:.3g} "
                f"over {self.probe_tokens} probe tokens (tolerance {self.tolerance:g})"
            )
        return f"{self.url}: " + ("; ".join(problems) if problems else "ok")


@attrs.frozen(kw_only=True)
class SyncVerification:
    version: int
    servers: tuple[ServerVerification, ...]

    @property
    def ok(self) -> bool:
        return all(server.ok for server in self.servers)

    @property
    def failures(self) -> tuple[ServerVerification, ...]:
        return tuple(server for server in self.servers if not server.ok)


class SyncVerifier(Protocol):
    def verify(self, version: int) -> SyncVerification:
        """Ask every server; never raises for a server's failure (it is recorded instead)."""
        ...


class ProbedServer(Protocol):
    """What a verifier asks of a server (`VllmHttpServer` and `SglangHttpServer` both answer)."""

    @property
    def url(self) -> str: ...

    def weight_version(self) -> int | None: ...

    def prompt_logprobs(self, token_ids: Sequence[int]) -> list[float | None]:
        """One entry per token; the first is None (nothing to condition on)."""
        ...


class TrainerLogprobs(Protocol):
    """The trainer's side (`TorchPolicy`)."""

    def sequence_logprobs(self, token_ids: Sequence[int]) -> list[float]:
        """Log-prob of token_ids[i] given token_ids[:i] for i >= 1, at temperature 1."""
        ...
