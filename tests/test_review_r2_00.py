"""The review r2_00_01 of lesson 00 (at b2adebf): a (pos + 1) answer to warm-up 1 was misnamed "the offset
counts from 1" in the summary line; the pool pictures gave one state two colours (cells 9, 12, 14); the
thesis widget's checkbox did nothing with the notes' table, and its dashes meant "free" in one view and
"evictable" in the other; classroom labels filled their boxes."""
from __future__ import annotations

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer


def test_pos_plus_one_is_named_in_the_summary_line():
    fn = wrong_answer("00", "block_and_offset", [("return divmod(pos, block_size)",
                                                  "return (pos + 1) // block_size, (pos + 1) % block_size")])
    r = check.block_and_offset(fn, verbose=False)
    assert not r.passed
    assert "as if pos were one more" in r.summary, r.summary
    assert "as if pos were one more" in r.failures[0].note, r.failures[0].note
