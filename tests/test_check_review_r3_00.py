"""Issue 28, review r3 of lesson 00 at ebc712e: wrong answers rejected with only a direction ("fewer than the
shared prefix") or misnamed. Each must be rejected and named on the first failure shown (the summary)."""
from __future__ import annotations

import pytest

from kvlab import check
from kvlab.check.l00_start import _common_prefix_len_ref


def _stops_early(a, b):
    n = 0
    for i in range(min(len(a), len(b)) - 1):
        if a[i] != b[i]:
            break
        n += 1
    return n


def _last_index(a, b):
    n = -1
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return max(n, 0)


def _suffix(a, b):
    n = 0
    for x, y in zip(reversed(a), reversed(b)):
        if x != y:
            break
        n += 1
    return n


def _ceil_block(pos, bs):
    if bs < 1 or pos < 0:
        raise ValueError(pos, bs)
    return (pos + bs - 1) // bs, pos % bs


def _round_then_minus_one(finished, new, bs):
    if bs < 1 or not finished or not new:
        raise ValueError(bs)
    return max(_common_prefix_len_ref(finished, new) // bs * bs - 1, 0)


@pytest.mark.parametrize("checker,answer,words", [
    ("common_prefix_len", _stops_early, "stops one position early"),
    ("common_prefix_len", _last_index, "INDEX of the last shared token"),
    ("common_prefix_len", _suffix, "from the END"),
    ("block_and_offset", _ceil_block, "rounded the block up"),
    ("reusable_tokens", _round_then_minus_one, "rounded to whole blocks, then took 1 token off"),
], ids=["stops-early", "last-index", "suffix", "ceil", "round-then-minus-one"])
def test_review_r3_00_wrong_answer_is_named_first(checker, answer, words):
    r = getattr(check, checker)(answer, verbose=False)
    assert not r.passed
    assert words in r.summary, r.summary


def test_a_one_based_block_number_is_still_named_as_such():
    def one_based(pos, bs):
        if bs < 1 or pos < 0:
            raise ValueError(pos, bs)
        return pos // bs + 1, pos % bs

    assert "1-based block number" in check.block_and_offset(one_based, verbose=False).summary
