"""Lessons 00-04's checkers name the mistakes a review typed in (issue 21): the dtype told apart from
the K/V factor, each rounding of requests_that_fit, a first-come-first-served answer on a pool that
really overflows, float answers to blocks_needed, and a diagnosis that never hands over the formula."""
from __future__ import annotations

import re

from kvlab import check
from kvlab.check import l02_how_big


def _valid(fn, bad):
    """``fn`` with the contract's ValueError on ``bad(*args)``, so only the mistake under test differs."""
    def g(*args):
        if bad(*args):
            raise ValueError("bad argument")
        return fn(*args)
    return g


def test_kv_cache_bytes_tells_the_dtype_from_the_kv_factor():
    """Issue 21: an answer without the bytes per number was told "did you count both K and V"."""
    bad = lambda l, h, d, t, b=2: min(l, h, d, b) < 1 or t < 0  # noqa: E731
    r = l02_how_big.kv_cache_bytes(_valid(lambda l, h, d, t, b=2: 2 * l * h * d * t, bad), verbose=False)
    assert "bytes per number are missing" in r.summary and "K and V" not in r.summary, r.summary
    r = l02_how_big.kv_cache_bytes(_valid(lambda l, h, d, t, b=2: l * h * d * t * b, bad), verbose=False)
    assert "the 2 for K and V is missing" in r.summary and "bytes per number" not in r.summary, r.summary


def test_requests_that_fit_names_each_rounding():
    bad = lambda kv, b, t: b < 1 or t < 1 or kv < 0  # noqa: E731
    for wrong, note in [(lambda kv, b, t: -(-kv // (b * t)), "rounded up"),
                        (lambda kv, b, t: round(kv / (b * t)), "nearest whole number"),
                        (lambda kv, b, t: kv / (b * t), "a fraction"),
                        (lambda kv, b, t: kv // b, "counts tokens, not requests")]:
        r = l02_how_big.requests_that_fit(_valid(wrong, bad), verbose=False)
        assert not r.passed and note in r.summary and " -- or: " not in r.summary, r.summary


def test_max_concurrent_first_come_first_served_case_really_overflows():
    """Issue 21: the FCFS case's pool held all five requests, so admitting in arrival order passed it."""
    def fcfs(lengths, g, u, w, b, bs=16):
        if not 0 < u <= 1 or bs < 1 or b < 1 or any(n < 1 for n in lengths):
            raise ValueError("bad")
        blocks, k = max(0, int(g * u) - w) // (bs * b), 0
        for n in lengths:
            if -(-n // bs) > blocks:
                break
            blocks, k = blocks - -(-n // bs), k + 1
        return k

    r = l02_how_big.max_concurrent(fcfs, verbose=False)
    fcfs_cases = [c for c in r.cases if "arrival order" in c.label]
    assert len(fcfs_cases) >= 2 and not any(c.passed for c in fcfs_cases)
    assert "take the shortest first" in r.summary and " -- or: " not in r.summary, r.summary


def test_blocks_needed_float_answers_are_named_as_floats():
    """Issue 21: math.ceil(n / bs) was diagnosed as "rounded down"; n / bs (a float) must never pass."""
    import math

    bad = lambda n, bs: n < 0 or bs < 1  # noqa: E731
    for wrong, note in [(lambda n, bs: math.ceil(n / bs), "float division"),
                        (lambda n, bs: n / bs, "fraction of a block"),
                        (lambda n, bs: float(-(-n // bs)), "returned the float")]:
        r = check.blocks_needed(_valid(wrong, bad), verbose=False)
        assert not r.passed and note in r.summary and "rounded down" not in r.summary, r.summary


def test_block_and_offset_diagnosis_never_gives_the_formula():
    """Issue 21: the counted-from-1 diagnosis handed over ``pos // block_size``."""
    r = check.block_and_offset(_valid(lambda p, bs: ((p + 1) // bs, p % bs), lambda p, bs: p < 0 or bs < 1),
                               verbose=False)
    assert "counted tokens from 1" in r.summary
    assert not re.search(r"pos\s*(//|%)\s*block_size|divmod", r.report()), r.report()
