"""VerifyingPublisher with fakes: verifies every Nth publish, raises naming the server, off at 0."""

from __future__ import annotations

import math

import pytest

from application.ports.sync_verifier import ServerVerification
from application.verified_publisher import SyncVerificationError, VerifyingPublisher
from tests.fakes.fake_sync_verifier import FakeSyncVerifier
from tests.fakes.fake_training import FakePublisher

URLS = ("http://a:8000", "http://b:8000")


def build(every_n: int) -> tuple[VerifyingPublisher, FakePublisher, FakeSyncVerifier]:
    inner, verifier = FakePublisher(), FakeSyncVerifier(URLS)
    return VerifyingPublisher(inner, verifier, every_n), inner, verifier


def test_verifies_after_every_nth_publish_only():
    publisher, inner, verifier = build(every_n=3)
    reports = [publisher.publish(v) for v in range(1, 8)]
    assert inner.versions == list(range(1, 8))
    assert verifier.verified == [3, 6]
    assert [r.version for r in reports] == list(range(1, 8))
    assert publisher.last_verification is not None and publisher.last_verification.version == 6


def test_off_at_zero_never_verifies():
    publisher, inner, verifier = build(every_n=0)
    for v in range(1, 5):
        publisher.publish(v)
    assert verifier.verified == [] and inner.versions == [1, 2, 3, 4]
    assert publisher.last_verification is None


def test_mismatch_error_details():
    publisher, _, verifier = build(every_n=2)
    publisher.publish(1)
    verifier.mismatching.add(URLS[1])
    with pytest.raises(SyncVerificationError) as caught:
        publisher.publish(2)
    message = str(caught.value)
    assert URLS[1] in message and URLS[0] not in message
    assert "version 2" in message and "publish #2" in message and "tolerance" in message
    assert caught.value.verification.failures[0].url == URLS[1]


def test_a_failed_publish_is_not_counted_and_not_verified():
    publisher, inner, verifier = build(every_n=2)

    def boom(version: int):
        raise RuntimeError(f"sync of {version} failed")

    publisher.publish(1)
    inner.publish, real = boom, inner.publish  # type: ignore[method-assign]
    with pytest.raises(RuntimeError, match="sync of 2 failed"):
        publisher.publish(2)
    inner.publish = real  # type: ignore[method-assign]
    assert verifier.verified == []
    publisher.publish(3)
    assert verifier.verified == [3]


def test_negative_every_n_is_refused():
    with pytest.raises(ValueError, match="every_n_syncs must be >= 0"):
        VerifyingPublisher(FakePublisher(), FakeSyncVerifier(URLS), -1)


@pytest.mark.parametrize(
    ("reported", "diff", "error", "ok", "says"),
    [
        (4, 5e-4, None, True, "ok"),
        (3, 5e-4, None, False, "GET /weight_info reports weight version 3, expected 4"),
        (4, 2e-3, None, False, "differ from the trainer's by up to 0.002"),
        (4, math.nan, None, False, "differ"),
        (4, math.inf, None, False, "differ"),
        (None, None, "ServerError: http://a:8000 /weight_info: no response", False, "could not verify"),
    ],
)
def test_server_verification_verdicts(reported, diff, error, ok, says):
    check = ServerVerification(url=URLS[0], expected_version=4, reported_version=reported, max_logprob_diff=diff,
                               tolerance=1e-3, probe_tokens=10, error=error)
    assert check.ok is ok
    assert says in check.describe() and check.describe().startswith(URLS[0])
