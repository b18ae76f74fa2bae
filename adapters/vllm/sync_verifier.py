"""`PromptLogprobVerifier`: the `SyncVerifier` that compares server and trainer log-probs on a probe.

For each server: `GET /weight_info` must equal the version just published, and the server's
prompt log-probs of the probe tokens (`/v1/completions` with `prompt_logprobs: 0`, temperature
1; `VllmHttpServer.prompt_logprobs`, SGLang's adapter answers the same) must lie within
`tolerance` of the trainer's (`TorchPolicy.sequence_logprobs`, temperature 1, eval mode), for
every scored token (the max is reported). The trainer's side is computed once per verification.
A server that cannot be asked (HTTP error, timeout) is recorded as failed with the adapter's
error, which names the server and the endpoint; every HTTP call is bounded by the adapter's timeout.

Tolerance by dtype (`logprob_tolerance`): the two sides run different kernels (HF eager vs
vLLM's CPU/GPU kernels), so exact equality is not expected. float32: 1e-3 (SmolLM2-135M measures
~1e-5..1e-4 after a sync); float16: 0.1; bfloat16: 0.25 (8 bits of mantissa: per-logit rounding of
order 1e-2 adds up over layers to ~0.05-0.15 nats on a short probe). Corrupted or stale weights
move log-probs by whole nats on random and trained models alike, but a single small optimizer
step may stay under the bf16 bound: in bf16 the check catches corruption, not one-step staleness
(the version check covers that).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from application.ports.sync_verifier import ProbedServer, ServerVerification, SyncVerification, TrainerLogprobs

LOGPROB_TOLERANCE = {"float32": 1e-3, "float16": 0.1, "bfloat16": 0.25}


def logprob_tolerance(dtype: str) -> float:
    try:
        return LOGPROB_TOLERANCE[dtype]
    except KeyError:
        raise ValueError(f"no log-prob tolerance for model dtype {dtype!r}; known: {sorted(LOGPROB_TOLERANCE)}") from None


def max_abs_diff(served: Sequence[float | None], expected: Sequence[float]) -> float:
    """Max |a - b|; inf when a value is missing or not finite (a NaN must fail, never pass)."""
    worst = 0.0
    for a, b in zip(served, expected, strict=True):
        if a is None or not (math.isfinite(a) and math.isfinite(b)):
            return math.inf
        worst = max(worst, abs(a - b))
    return worst


class PromptLogprobVerifier:
    def __init__(
        self,
        servers: Sequence[ProbedServer],
        trainer: TrainerLogprobs,
        probe_token_ids: Sequence[int],
        tolerance: float,
    ) -> None:
        if len(probe_token_ids) < 2:
            raise ValueError(f"the probe needs at least 2 tokens, got {len(probe_token_ids)}")
        if not tolerance > 0:
            raise ValueError(f"log-prob tolerance must be > 0, got {tolerance}")
        if not servers:
            raise ValueError("no servers to verify")
        self._servers = tuple(servers)
        self._trainer = trainer
        self._probe = [int(t) for t in probe_token_ids]
        self._tolerance = tolerance

    @property
    def probe_token_ids(self) -> tuple[int, ...]:
        return tuple(self._probe)

    def verify(self, version: int) -> SyncVerification:
        expected = self._trainer.sequence_logprobs(self._probe)  # (n - 1,)
        if len(expected) != len(self._probe) - 1:
            raise ValueError(f"trainer gave {len(expected)} log-probs for a {len(self._probe)}-token probe")
        return SyncVerification(version=version, servers=tuple(self._check(s, version, expected) for s in self._servers))

    def _check(self, server: ProbedServer, version: int, expected: Sequence[float]) -> ServerVerification:
        try:
            reported = server.weight_version()
            served = server.prompt_logprobs(self._probe)
        except Exception as error:  # the adapter's error names the server and the endpoint
            return ServerVerification(
                url=server.url, expected_version=version, reported_version=None, max_logprob_diff=None,
                tolerance=self._tolerance, probe_tokens=len(expected), error=f"{type(error).__name__}: {error}",
            )
        if len(served) != len(self._probe):
            return ServerVerification(
                url=server.url, expected_version=version, reported_version=reported, max_logprob_diff=None,
                tolerance=self._tolerance, probe_tokens=len(expected),
                error=f"prompt_logprobs returned {len(served)} entries for a {len(self._probe)}-token probe",
            )
        return ServerVerification(
            url=server.url, expected_version=version, reported_version=reported,
            max_logprob_diff=max_abs_diff(served[1:], expected), tolerance=self._tolerance,
            probe_tokens=len(expected),
        )
