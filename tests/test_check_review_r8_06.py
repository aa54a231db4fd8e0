"""Review r8 of lesson 06: FAIL notes that gave the formula or the code away, and the answer that reads
the last block of an empty block table (it was told it counted num_tokens wrongly)."""
from __future__ import annotations

import re

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

# code a note must not hand over: a modulo condition, a blocks_needed(...) call, a // ceiling
GIVEAWAY = re.compile(r"%\s*block_size|blocks_needed\(|//\s*block_size|-\(-")


# reads block_table[-1] before asking whether the table is empty (IndexError on an empty sequence)
_read_last_first = wrong_answer("06", "cow_append", [(
    "    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one\n",
    "    last = block_table[-1]\n"
    "    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one\n")])


def test_an_empty_table_has_no_last_block():
    r = check.cow_append(_read_last_first, verbose=False)
    assert not r.passed
    assert [f.label for f in r.failures] == ["empty sequence"]
    assert "no last block" in r.failures[0].note and "num_tokens counts" not in r.failures[0].note


def _prompt_answer_apart(p, n, g, bs):
    c = lambda x: -(-x // bs)   # noqa: E731
    return n * (c(p) + c(g)), p // bs + n * c(p % bs + g)


def _answers_in_new_blocks(p, n, g, bs):
    c = lambda x: -(-x // bs)   # noqa: E731
    return n * c(p + g), c(p) + n * c(g)


SAMPLING = [
    (_prompt_answer_apart, "not in separate blocks"),
    (_answers_in_new_blocks, "not its new tokens alone"),
    (wrong_answer("06", "sampling_blocks", [("full = prompt_len // block_size", "full = (prompt_len - 1) // block_size")]),
     "prompt fills its last block exactly"),
    (wrong_answer("06", "sampling_blocks", [("    if gen_len == 0:\n        return without, blocks_needed(prompt_len, block_size)\n",
                                             "    if gen_len == 0:\n        return without, 0\n")]),
     "still hold the prompt's blocks once"),
]


@pytest.mark.parametrize("fn, words", SAMPLING)
def test_sampling_notes_name_the_idea_not_the_formula(fn, words):
    r = check.sampling_blocks(fn, verbose=False)
    assert not r.passed
    note = r.failures[0].note
    assert words in note, note
    assert not GIVEAWAY.search(note), note


COW = [
    [("        b = free_blocks.pop(0)\n        ref_count[b] = 1\n        block_table.append(b)\n        return []\n",
      "        copies = []\n        if block_table and ref_count[block_table[-1]] > 1:\n"
      "            d = free_blocks.pop(0)\n            ref_count[d] = 1\n            ref_count[block_table[-1]] -= 1\n"
      "            copies = [(block_table[-1], d)]\n            block_table[-1] = d\n"
      "        b = free_blocks.pop(0)\n        ref_count[b] = 1\n        block_table.append(b)\n        return copies\n")],
    [("num_tokens % block_size == 0", "(num_tokens + 1) % block_size == 0")],
]


@pytest.mark.parametrize("edits", COW)
def test_cow_notes_name_the_idea_not_the_formula(edits):
    r = check.cow_append(wrong_answer("06", "cow_append", edits), verbose=False)
    assert not r.passed
    for f in r.failures:
        assert not GIVEAWAY.search(f.note or ""), f.note
