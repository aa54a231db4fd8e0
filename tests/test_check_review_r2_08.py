"""Review r2_02_08, the lesson 08 half (at b2adebf): exercise 3's wrong answers that were rejected but
misnamed or unnamed, each now named in the FAIL line the student reads; the hint ladder that added up to
the solution; and the pictures and sentences the review found at odds with the data.

Each wrong answer is the reference solution with one mistake edited in, the edit the reviewer's code in
/work/review/r2_02_08/wrong/08_ex3*.py makes to the same function."""
from __future__ import annotations

import re

import pytest
from test_check_mistakes_06_11 import _markdown, wrong_answer

from kvlab import check

_LEAVES = ("evictable += len(n.key) if n.lock_ref == 0 else 0",
           "evictable += len(n.key) if n.lock_ref == 0 and not n.children else 0")
_MATCH = ("        path.append((child, k))\n        pos += k\n"
          "        if k < len(child.key):                # the match ends inside this node\n            break\n")
_WHOLE = "        if k < len(child.key):\n            break\n        path.append((child, k))\n        pos += k\n"
_FITS = "    if need <= num_free:\n        return (pos, 0)\n"

# (the mistake, edits of the reference, words the first FAIL's note and the summary must contain)
WRONG_ADMIT = [
    ("counts only leaves as evictable (review r2: misnamed as '> not >=')", [_LEAVES],
     "every unlocked node counts, not only the leaves"),
    ("counts only leaves, on the path too", [_LEAVES, ("sum(k for n, k in path if n.lock_ref == 0)",
                                                       "sum(k for n, k in path if n.lock_ref == 0 and not n.children)")],
     "every unlocked node counts, not only the leaves"),
    ("counts only wholly matched nodes (review r2: expected/actual only)", [(_MATCH, _WHOLE)],
     "a match may end inside a node"),
    ("ignores num_free: evicts the whole need (review r2: named only in later case lines)",
     [(_FITS, ""), ("return (pos, need - num_free)", "return (pos, need)")],
     "the free slots come first"),
    ("ignores num_free everywhere, the wait test too",
     [(_FITS, ""), ("if need > num_free + evictable:", "if need > evictable:"),
      ("return (pos, need - num_free)", "return (pos, need)")],
     "the free slots come first"),
]


@pytest.mark.parametrize("mistake,edits,words", WRONG_ADMIT, ids=[w[0] for w in WRONG_ADMIT])
def test_admit_plan_wrong_answer_is_rejected_and_named(mistake, edits, words):
    r = check.admit_plan(wrong_answer("08", "admit_plan", edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, (mistake, r.failures[0].label, r.failures[0].note)
    assert words in r.summary  # what the student reads: the FAIL line names it
    assert "> not >=" not in r.summary, r.summary


def _exercise_3() -> str:
    return _markdown("08_eviction_scheduling").split("### Exercise 3")[1].split("## Summary")[0]


def test_exercise_3_hints_stop_at_the_idea():
    """The review: Hint 2 gave the evictable sum word for word, and with the contract's three steps and
    Hint 3's three outcomes the ladder was the solution. Each hint now asks; none spells out a sum or
    the three outcomes."""
    hints = re.findall(r"<details><summary>Hint \d</summary>(.*?)</details>", _exercise_3(), re.S)
    assert len(hints) == 3
    text = " ".join(hints)
    assert "summed over" not in text and "len(node.key)" not in text and "Three outcomes" not in text
    assert all("?" in h for h in hints), "every hint is a question"


def test_lock_goes_up_to_but_not_including_the_root():
    """The review: section 2 said the lock goes 'up to the root' while exercise 2 says the root is never
    locked (SGLang's inc_lock_ref stops below it)."""
    src = _markdown("08_eviction_scheduling")
    assert "up to, but not including, the root" in src
    assert "every ancestor up to the root" not in src and "`inc_lock_ref` up to the root" not in src
