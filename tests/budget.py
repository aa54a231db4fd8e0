"""The suite's budgets for its random tests, in one place, each scaled by an environment variable.

- ``KVLAB_HYPOTHESIS_EXAMPLES`` (default 300, the hypothesis profile's ``max_examples`` in
  ``conftest.py``): every property test's own count ``n`` (what the default run takes) becomes
  ``n * KVLAB_HYPOTHESIS_EXAMPLES / 300``, at least 1: ``KVLAB_HYPOTHESIS_EXAMPLES=6000`` runs
  every property test at 20x, ``=30`` at a tenth.
- ``KVLAB_RANDOM_SEEDS``: the random drivers (``test_engine_random.py`` and the others that loop
  over seeds) run that many seeds instead of their small default.

Example: ``@settings(max_examples=budget.examples(60))``; ``for seed in budget.seeds(20): ...``.
"""
from __future__ import annotations

import os

DEFAULT_EXAMPLES = 300


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ValueError(f"{name}={raw!r} must be an int >= 1") from None
    if value < 1:
        raise ValueError(f"{name}={raw!r} must be an int >= 1")
    return value


def examples(n: int) -> int:
    """A property test's example count: its default ``n``, scaled by ``KVLAB_HYPOTHESIS_EXAMPLES / 300``."""
    return max(1, n * _env_int("KVLAB_HYPOTHESIS_EXAMPLES", DEFAULT_EXAMPLES) // DEFAULT_EXAMPLES)


def total_examples() -> int:
    """The profile's ``max_examples`` (tests without their own count): ``KVLAB_HYPOTHESIS_EXAMPLES``, default 300."""
    return _env_int("KVLAB_HYPOTHESIS_EXAMPLES", DEFAULT_EXAMPLES)


def seeds(n: int) -> range:
    """A random driver's seeds: ``range(n)`` in the suite, ``range(KVLAB_RANDOM_SEEDS)`` when it is set."""
    return range(_env_int("KVLAB_RANDOM_SEEDS", n))
