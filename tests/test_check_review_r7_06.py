"""Issue 28, review r7 of lesson 06: the wrong answers it saw accepted or unnamed, and the FAIL
notes that gave the code line away. Each wrong answer must FAIL, its first failing case naming it."""
from __future__ import annotations

import pytest

from kvlab import check
from kvlab.lessons.sharing import measured_sampling_blocks

from test_check_mistakes_06_11 import wrong_answer


def test_a_simulation_is_not_a_formula():
    r = check.sampling_blocks(lambda p, n, g, bs: measured_sampling_blocks(p, n, g, bs), verbose=False)
    assert not r.passed
    assert "measured_sampling_blocks" in r.failures[0].note and "formula" in r.failures[0].note


def test_a_list_is_not_the_tuple():
    def as_list(p, n, g, bs):
        return list(wrong_answer("06", "sampling_blocks", [])(p, n, g, bs))
    r = check.sampling_blocks(as_list, verbose=False)
    assert not r.passed
    assert "return a tuple" in r.failures[0].note


def test_the_reference_still_passes():
    assert check.sampling_blocks(wrong_answer("06", "sampling_blocks", []), verbose=False).passed
    assert check.cow_append(wrong_answer("06", "cow_append", []), verbose=False).passed


def test_an_empty_sequence_needs_a_fresh_block():
    skip_empty = wrong_answer("06", "cow_append", [
        ("    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one\n",
         "    if not block_table:\n        return []\n"
         "    if num_tokens % block_size == 0:           # last block full (or no block yet): take a fresh one\n")])
    r = check.cow_append(skip_empty, verbose=False)
    assert not r.passed
    assert [f.label for f in r.failures] == ["empty sequence"]
    assert "no last block" in r.failures[0].note


@pytest.mark.parametrize("edits", [
    [("    ref_count[src] -= 1\n", "")],                              # the copied block's reference kept
    [("    ref_count[src] -= 1\n", "    ref_count[src] = 0\n")],      # every reference dropped
    [("    block_table[-1] = dst\n", "")],                            # the table left on the shared block
    [("block_table[-1] = dst", "block_table.append(dst)")],
    [("dst = free_blocks.pop(0)", "dst = free_blocks.pop()")],
    [("b = free_blocks.pop(0)", "b = free_blocks[0]")],
])
def test_notes_name_the_idea_not_the_code(edits):
    r = check.cow_append(wrong_answer("06", "cow_append", edits), verbose=False)
    assert not r.passed
    for f in r.failures:
        for code in ("-= 1", "[-1] = dst", "pop(0)", ".append(b)"):
            assert code not in f.note, (code, f.note)
