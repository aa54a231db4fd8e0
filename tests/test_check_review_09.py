"""Issue 28, the review of lesson 09 at 6b9afee: wrong answers of a student's kind, each rejected by its
checker AND named (the FAIL line says what the mistake is), and the exercise statements that state a
contract rather than a formula. Each answer is the reference solution with one mistake edited in."""
from __future__ import annotations

import re

import pytest
from test_check_mistakes_06_11 import _markdown, wrong_answer

from kvlab import check

# (exercise, the mistake, edits of the reference, words the FAIL note must contain)
WRONG_09 = [
    ("orca_reservation", "ceil as int(t / bs) + 1 (a block too many on a whole number of blocks)",
     [("blocks = -(-tokens // block_size)", "blocks = int(tokens / block_size) + 1")],
     "int(tokens / block_size) + 1 adds a block"),
    ("orca_reservation", "1 << blocks.bit_length() (doubles a run that already is a power of two)",
     [("return 1 << (blocks - 1).bit_length()", "return 1 << blocks.bit_length()")],
     "already a power of two blocks"),
    ("orca_reservation", "the run capped at a fixed 128 blocks",
     [("return 1 << (blocks - 1).bit_length()", "return min(128, 1 << (blocks - 1).bit_length())")],
     "not a fixed 128 blocks"),
    ("orca_reservation", "Orca (Oracle) reserves the prompt alone",
     [("estimate = output_len     ", "estimate = 0     ")],
     "not the prompt alone"),
    ("fit_requests", "reserve-max counted in blocks (max_len rounded up to whole blocks)",
     [("reserve_max = min(len(lengths), capacity // max_len)",
       "reserve_max = min(len(lengths), (capacity // block_size) // -(-max_len // block_size))")],
     "in token slots, not blocks"),
    ("optimal_hit_rate", "the rate rounded to 2 decimals",
     [("return 1 - len(prefixes) / total", "return round(1 - len(prefixes) / total, 2)")],
     "rounded to 2 decimals"),
    ("optimal_hit_rate", "the rate rounded to 3 decimals",
     [("return 1 - len(prefixes) / total", "return round(1 - len(prefixes) / total, 3)")],
     "rounded to 3 decimals"),
    ("optimal_hit_rate", "the share of prompts that hit, not of tokens",
     [("return 1 - len(prefixes) / total",
       "return sum(any(q[:1] == p[:1] for q in prompts[:i]) for i, p in enumerate(prompts) if p) / len(prompts)")],
     "a share of prompt TOKENS, not of prompts"),
    ("optimal_hit_rate", "the int 0 for no tokens (review r2: accepted)",
     [("        return 0.0\n", "        return 0\n")],
     "returned the int 0 where the rate is a float"),
]


@pytest.mark.parametrize("name,mistake,edits,words", WRONG_09, ids=[w[1] for w in WRONG_09])
def test_review_09_wrong_answer_is_rejected_and_named(name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer("09", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary  # what the student reads: the FAIL line names it


def _statement(n: int) -> str:
    return _markdown("09_at_scale").split(f"### Exercise {n}")[1].split("# %%")[0]


def test_exercise_1_states_the_contract_not_the_steps():
    """The review: exercise 1 was close to transcription ("as in section 2", whose steps 1-3 are the
    function). The statement gives the contract and asks for a prediction first; it no longer
    points at the steps, nor spells out the cap or the two roundings."""
    text = _statement(1)
    assert "as in section 2" not in text and "predict" in text.lower()
    assert "min(" not in text and "next power of two" not in text


def test_exercise_3_gives_neither_the_answer_nor_the_method():
    """The review: exercise 3's worked example gave the answer (4 of 8 tokens, 0.5) and hint 2 the
    method (a radix tree with page size 1: count its nodes)."""
    text = _statement(3)
    assert "0.5" not in text and "4 of their 8" not in text
    hints = "".join(re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>",
                               _markdown("09_at_scale").split("### Exercise 3")[1], re.S))
    assert "radix tree" not in hints and "node" not in hints


# --------------------------------------------------------------------------- exercise 2's contract
# A result of the documented type (a tuple), a length over max_len refused with ValueError before any
# request is admitted (wherever it stands in the list), the caller's list left as it was. Each wrong
# answer below is the reference with one edit; the FAIL line must name the mistake.
_FIT = "fit_requests"
_VALIDATE = ("    if any(n > max_len for n in lengths):\n"
             "        raise ValueError(f\"a length over max_len {max_len}: {max(lengths)}\")\n")
WRONG_FIT = [
    ("a list, not the documented tuple", [("return reserve_max, paged", "return [reserve_max, paged]")],
     "return a tuple"),
    ("no check of max_len at all", [(_VALIDATE, "")], "must raise ValueError"),
    ("max_len checked inside the paged loop (after the first misfit it is never reached)",
     [(_VALIDATE, ""), ("        need = -(-n // block_size)",
                        "        if n > max_len:\n            raise ValueError(n)\n        need = -(-n // block_size)")],
     "check every length before admitting any"),
    ("a length of exactly max_len refused (>= for >)", [("if any(n > max_len", "if any(n >= max_len")],
     "raise ValueError only for a length OVER max_len"),
    ("the caller's list emptied (pop while admitting)",
     [("    for n in lengths:\n        need", "    while lengths:\n        n = lengths.pop(0)\n        need")],
     "changed its argument `lengths`"),
    ("the list sorted in place before raising (a change before the error)",
     [(_VALIDATE, "    lengths.sort()\n" + _VALIDATE)], "changed its argument `lengths`"),
    ("reserve-max as a float (/ for //)", [("capacity // max_len)", "capacity / max_len)")],
     "where an int is expected"),
    ("a request's blocks as n // block_size + 1 (a block too many on a full last block)",
     [("need = -(-n // block_size)", "need = n // block_size + 1")], "n // block_size + 1"),
    ("a request that needs exactly the free blocks refused (a tie)",
     [("if need > free_blocks:", "if need >= free_blocks:")], "> not >="),
]


@pytest.mark.parametrize("mistake,edits,words", WRONG_FIT, ids=[w[0] for w in WRONG_FIT])
def test_fit_requests_contract_wrong_answer_is_rejected_and_named(mistake, edits, words):
    r = check.fit_requests(wrong_answer("09", _FIT, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary


def test_fit_requests_reference_refuses_a_length_over_max_len_before_admitting():
    """The reference itself: a length over max_len raises ValueError even behind the first misfit,
    and the caller's list is unchanged (measured on the real arena and allocator)."""
    from kvlab.check.l09_at_scale import measured_fit

    lengths = [16, 16, 16, 16, 16, 40]   # the fifth does not fit, the sixth is over max_len 16
    with pytest.raises(ValueError, match="max_len"):
        measured_fit(64, 4, 16, lengths)
    assert lengths == [16, 16, 16, 16, 16, 40]
    assert measured_fit(64, 4, 16, [16, 16]) == (2, 2)


def test_exercise_2_states_the_contract():
    text = _statement(2)
    assert "tuple" in text and "ValueError" in text and "max_len" in text
    assert "unchanged" in text or "left as" in text


# own wrong answers to exercises 1 and 3 (round 12), each named by its own mistake, not a neighbour's
WRONG_OWN = [
    ("orca_reservation", "the output rounded DOWN to a power of two (2 ** int(log2))",
     [("estimate = 1 << (output_len - 1).bit_length()", "estimate = 1 << (output_len.bit_length() - 1)")],
     "rounds it down"),
    ("orca_reservation", "the rounded run capped at max_len // block_size blocks",
     [("tokens = min(prompt_len + estimate, max_len)", "tokens = prompt_len + estimate"),
      ("return 1 << (blocks - 1).bit_length()", "return min(1 << (blocks - 1).bit_length(), max_len // block_size)")],
     "the cap comes BEFORE the rounding"),
    ("fit_requests", "the lengths sorted, shortest first", [("    for n in lengths:", "    for n in sorted(lengths):")],
     "in the order given"),
    ("optimal_hit_rate", "prefixes up to len(p) - 1 (the whole prompt left out)",
     [("for i in range(1, len(p) + 1)}", "for i in range(1, len(p))}")], "range(1, len(p) + 1)"),
]


@pytest.mark.parametrize("name,mistake,edits,words", WRONG_OWN, ids=[w[1] for w in WRONG_OWN])
def test_own_wrong_answer_is_rejected_and_named(name, mistake, edits, words):
    r = getattr(check, name)(wrong_answer("09", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
