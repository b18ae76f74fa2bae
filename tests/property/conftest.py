"""Hypothesis profiles for the property tests: `ci` (default, bounded run time on 2 cores)
and `local` (longer), chosen with HYPOTHESIS_PROFILE. The ci profile runs ~900 syncs
(~5000 state-machine steps) of tests/property/test_sync_protocol.py in ~20 s."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", max_examples=200, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile(
    "local", max_examples=2000, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
