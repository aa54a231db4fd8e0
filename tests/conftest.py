"""Shared pytest set-up for kvlab's suite."""
from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Property tests: deterministic in CI (same examples every run), a few hundred by default.
settings.register_profile(
    "kvlab",
    max_examples=int(os.environ.get("KVLAB_HYPOTHESIS_EXAMPLES", "300")),
    deadline=None,
    derandomize=os.environ.get("CI", "") == "true",
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kvlab")
