"""Shared pytest set-up for kvlab's suite."""
from __future__ import annotations

import os
import sys
import uuid

# jsonschema (under nbformat) imports rfc3987_syntax when it is installed, which builds a parser
# for the "iri" string format at import: about 1.3 s of CPU in every pytest process (collection
# runs in each xdist worker). Nothing here validates that format; without the module jsonschema
# simply does not register it.
sys.modules.setdefault("rfc3987_syntax", None)

import pytest  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

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


def pytest_configure(config):
    """One id per test session, inherited by pytest-xdist's workers (started after this): the
    lessons' headless runs (tests/lesson_runs.py) are made once per session and shared."""
    os.environ.setdefault("KVLAB_TEST_RUN_ID", uuid.uuid4().hex)


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
