"""Shared pytest set-up for kvlab's suite."""
from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, settings

import budget

# Property tests: deterministic in CI (same examples every run), a few hundred by default;
# KVLAB_HYPOTHESIS_EXAMPLES scales every property test (tests/budget.py).
settings.register_profile(
    "kvlab",
    max_examples=budget.total_examples(),
    deadline=None,
    derandomize=os.environ.get("CI", "") == "true",
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("kvlab")


@pytest.fixture(scope="module")
def bundled():
    """The bundled model and tokenizer, with torch on one thread while a module uses it
    (tiny matmuls: one thread is faster, and CI has 2 shared cores)."""
    import torch

    from kvlab.compute.loader import load_bundled

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield load_bundled()
    torch.set_num_threads(threads)
