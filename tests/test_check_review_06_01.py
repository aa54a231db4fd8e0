"""Issue 28, the review of lesson 06: wrong answers that were rejected WITHOUT naming the
mistake (exercise 2, "W5/W6" in the review; exercise 1 too), typed again as plausible slips of the
reference solution. Each must FAIL and its first failing case must name the slip (the words below).
"""
from __future__ import annotations

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

_W = "without = num_samples * blocks_needed(prompt_len + gen_len, block_size)"
_RET = "return without, full + num_samples * (blocks_needed(prompt_len + gen_len, block_size) - full)"

# (mistake, edits of solutions/06_sharing.py's sampling_blocks, words the FAIL note must contain)
SAMPLING_06 = [
    ("slots for blocks, without sharing",
     [(_W, _W + " * block_size")], "not token slots"),
    ("slots for blocks, both counts",
     [(_RET, "return without * block_size, block_size * (full + num_samples * "
             "(blocks_needed(prompt_len + gen_len, block_size) - full))")], "not token slots"),
    ("no new token: nothing held",
     [("return without, blocks_needed(prompt_len, block_size)", "return without, 0")],
     "still hold the prompt's blocks once"),
    ("no new token: every sample its own prompt",
     [("return without, blocks_needed(prompt_len, block_size)", "return without, without")],
     "not once per sample"),
    ("x // bs + 1 for the ceiling, on the pooled count",
     [(_W, "without = num_samples * (prompt_len + gen_len) // block_size + 1")], "is not a ceiling"),
    ("x // bs + 1 for the ceiling, per sample",
     [(_W, "without = num_samples * ((prompt_len + gen_len) // block_size + 1)")], "is not a ceiling"),
    ("full prompt blocks off by one at a block boundary",
     [("full = prompt_len // block_size", "full = (prompt_len - 1) // block_size")],
     "prompt fills its last block exactly"),
    ("new tokens left out of the count without sharing",
     [(_W, "without = num_samples * blocks_needed(prompt_len, block_size)")], "AND its gen_len new tokens"),
    ("tokens pooled across samples without sharing",
     [(_W, "without = blocks_needed(num_samples * (prompt_len + gen_len), block_size)")], "round up per sample"),
]


# (mistake, edits of solutions/06_sharing.py's cow_append, words the FAIL note must contain)
COW_06 = [
    ("the fresh block read but left in the free list",
     [("b = free_blocks.pop(0)", "b = free_blocks[0]")], "is still in free_blocks"),
    ("the copy's block read but left in the free list",
     [("dst = free_blocks.pop(0)", "dst = free_blocks[0]")], "is still in free_blocks"),
    ("the copy appended after the shared block instead of replacing it",
     [("block_table[-1] = dst", "block_table.append(dst)")], "not appended after it"),
    ("every reference of the copied block dropped",
     [("    ref_count[src] -= 1\n", "    ref_count[src] = 0\n")], "drop ONE reference"),
    ("OutOfBlocks whenever the free list is empty, even where no block is needed",
     [("    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one\n",
       "    if not free_blocks:\n        raise OutOfBlocks(1, 0)\n"
       "    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one\n")],
     "no block is needed"),
]


CASES = [("sampling_blocks", *w) for w in SAMPLING_06] + [("cow_append", *w) for w in COW_06]


@pytest.mark.parametrize("name,mistake,edits,words", CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_06_slip_is_rejected_and_named(name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer("06", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary
