"""Issue 30 item 5 (and issue 35 item 3): one example budget reaches every property test, and the
random drivers take a small seed budget in the suite, a large one under an environment variable.

Before: eleven ``@settings(max_examples=<a number>)`` overrode the profile, so
``KVLAB_HYPOTHESIS_EXAMPLES`` reached only the tests without one.
"""
from __future__ import annotations

import re
from pathlib import Path

import budget

TESTS = Path(__file__).resolve().parent


def test_no_property_test_hard_codes_its_example_count():
    hard = [f"{p.name}:{i}" for p in sorted(TESTS.glob("*.py")) for i, line in
            enumerate(p.read_text().splitlines(), 1) if re.search(r"max_examples\s*=\s*\d", line)]
    assert hard == [], f"use max_examples=budget.examples(n) so KVLAB_HYPOTHESIS_EXAMPLES reaches them: {hard}"


def test_random_drivers_take_their_seeds_from_the_budget():
    loops = [f"{p.name}:{i}" for p in sorted(TESTS.glob("test_*.py")) for i, line in
             enumerate(p.read_text().splitlines(), 1) if re.search(r"for seed in range\(\d", line)]
    assert loops == [], f"use budget.seeds(n) so KVLAB_RANDOM_SEEDS reaches them: {loops}"


def test_the_budgets_default_to_the_counts_given_and_scale_with_the_environment(monkeypatch):
    monkeypatch.delenv("KVLAB_HYPOTHESIS_EXAMPLES", raising=False)
    monkeypatch.delenv("KVLAB_RANDOM_SEEDS", raising=False)
    assert budget.examples(60) == 60 and budget.examples(12) == 12 and list(budget.seeds(8)) == list(range(8))
    monkeypatch.setenv("KVLAB_HYPOTHESIS_EXAMPLES", "6000")       # 20x the default 300
    monkeypatch.setenv("KVLAB_RANDOM_SEEDS", "2000")
    assert budget.examples(60) == 1200 and budget.examples(12) == 240 and len(budget.seeds(8)) == 2000
    monkeypatch.setenv("KVLAB_HYPOTHESIS_EXAMPLES", "3")
    assert budget.examples(12) == 1                                 # never below one example
