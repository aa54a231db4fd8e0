"""Review r2_02_08 of lesson 02: a wrong answer that was misnamed, and exercise statements and hints
that spelled the answer out. Each wrong answer is the reference solution with one mistake edited in."""
from __future__ import annotations

import pytest
from test_check_mistakes_06_11 import wrong_answer

from kvlab import check

# (exercise, the mistake, edits of the reference, words the FAIL note must contain)
WRONG_02 = [
    ("max_concurrent", "longest first, skipping a request that does not fit (the review's answer)",
     [("for n in sorted(lengths):", "for n in sorted(lengths, reverse=True):"),
      ("        if need > free_blocks:\n            break", "        if need > free_blocks:\n            continue")],
     "longest first (sorted in reverse), skipping"),
    ("max_concurrent", "longest first, stopping at the first that does not fit",
     [("for n in sorted(lengths):", "for n in sorted(lengths, reverse=True):")],
     "longest first (sorted in reverse):"),
    ("max_concurrent", "arrival order, skipping a request that does not fit (first fit)",
     [("for n in sorted(lengths):", "for n in lengths:"),
      ("        if need > free_blocks:\n            break", "        if need > free_blocks:\n            continue")],
     "arrival order, skipping"),
    ("max_concurrent", "arrival order, stopping at the first that does not fit (named before; kept apart from first fit)",
     [("for n in sorted(lengths):", "for n in lengths:")],
     "arrival order (the order given), stopping"),
]


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch):
    monkeypatch.delenv("KVLAB_CHECK_STRICT", raising=False)


@pytest.mark.parametrize("name, mistake, edits, says", WRONG_02, ids=[w[1] for w in WRONG_02])
def test_wrong_answer_is_named(name, mistake, edits, says):
    r = getattr(check, name)(wrong_answer("02", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    notes = [c.note for c in r.failures]
    assert notes and says in notes[0], "\n".join(f"{c.label}: {c.note}" for c in r.failures)


def test_max_concurrent_case_labels_do_not_name_the_order():
    """The checker printed "shortest first 5" in a case label, before any mistake was made."""
    r = check.max_concurrent(wrong_answer("02", "max_concurrent", [("for n in sorted(lengths):", "for n in lengths:")]),
                             verbose=False)
    assert not [c.label for c in r.cases if "shortest" in c.label]
