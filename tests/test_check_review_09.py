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
