"""Issue 28 (round 7): wrong answers to lessons 03 and 04 that a student review typed: three the
checkers accepted, and four rejected under the wrong name (or with a spurious second guess)."""
from __future__ import annotations

import math

import pytest

from kvlab import check
from test_check_memory import _solutions

S03, S04 = _solutions("03_contiguous"), _solutions("04_paging")


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


def _notes(result) -> str:
    assert not result.passed, "the checker accepted a wrong answer"
    return " | ".join(c.note for c in result.failures)


# ------------------------------------------------------------------------------ 03: accepted before
def _pow2(wrong):
    def answer(policy, length, max_len, final_len=None):
        if policy == "pow2" and 1 <= length <= max_len:
            return wrong(length, max_len)
        return S03.reservation(policy, length, max_len, final_len)
    return answer


def test_03_reservation_with_float_log2_fails_on_a_huge_length():
    r = check.reservation(_pow2(lambda n, m: min(1 << math.ceil(math.log2(n)), m)), verbose=False)
    assert "float" in _notes(r)


def test_03_reservation_that_doubles_above_1024_fails():
    r = check.reservation(_pow2(lambda n, m: min(1 << (n - 1).bit_length() if n <= 1024 else 2 * n, m)), verbose=False)
    assert "is not a power of two" in _notes(r) and all(c.note for c in r.failures)


def test_03_reservation_that_stops_doubling_at_1024_fails():
    r = check.reservation(_pow2(lambda n, m: min(1 << (n - 1).bit_length() if n <= 1024 else 2048, m)), verbose=False)
    assert "not the smallest one" in _notes(r) and "GiB" not in _notes(r)


def test_03_place_first_fit_that_refuses_a_once_refused_id_forever():
    def never_again(capacity, ops):
        refused_once, fixed = set(), []
        for op in ops:
            if op[0] == "admit" and op[1] in refused_once:
                fixed.append(("admit", op[1], capacity + 1))  # refused again, whatever fits
                continue
            fixed.append(op)
            if op[0] == "admit" and op[1] in S03.place_first_fit(capacity, fixed)["refused"]:
                refused_once.add(op[1])
        return S03.place_first_fit(capacity, fixed)

    r = check.place_first_fit(never_again, verbose=False)
    assert "refused id may be admitted again" in _notes(r)


# ------------------------------------------------------------------------------ 03 and 04: named now
def test_03_wasted_share_nan_when_nothing_is_free_is_named():
    def nan_share(capacity, ops):
        out = S03.place_first_fit(capacity, ops)
        return {**out, "wasted_share": float("nan")} if out["largest_hole"] == 0 else out

    assert "no free slots" in _notes(check.place_first_fit(nan_share, verbose=False))


def test_03_wasted_share_zero_division_when_nothing_is_free_is_named():
    def divides(capacity, ops):
        out = S03.place_first_fit(capacity, ops)
        if out["largest_hole"] == 0:
            raise ZeroDivisionError("division by zero")
        return out

    assert "no free slots" in _notes(check.place_first_fit(divides, verbose=False))


def test_04_translate_ignoring_bytes_per_token_is_named():
    def ignores(t, p, bs, bpt=1):
        return S04.translate(t, p, bs, 1)

    notes = _notes(check.translate(ignores, verbose=False))
    assert "bytes_per_token ignored" in notes and "KiB" not in notes and "one less" not in notes


def test_04_blocks_to_append_ignoring_n_is_named():
    def ignores_n(t, n, bs):
        if n < 0:
            raise ValueError(n)
        return 1 if t % bs == 0 else 0

    notes = _notes(check.blocks_to_append(ignores_n, verbose=False))
    assert "n ignored" in notes and "off by one" not in notes and "swapped" not in notes


def test_04_blocks_needed_floor_division_gets_no_float_hint():
    def floor(n, bs):
        if n < 0 or bs < 1:
            raise ValueError(n)
        return n // bs

    notes = _notes(check.blocks_needed(floor, verbose=False))
    assert "rounded down" in notes and "float" not in notes


def test_04_blocks_needed_float_division_still_named():
    def floats(n, bs):
        if n < 0 or bs < 1:
            raise ValueError(n)
        return math.ceil(n / bs)

    assert "float division" in _notes(check.blocks_needed(floats, verbose=False))
