"""The review r6_03_11, lesson 03: three wrong answers rejected with only expected beside actual
(first_fit W9, place_first_fit W4 and W8). Each is a slip of the reference solution; it must FAIL
and every failing case must name the slip (the words below)."""
from __future__ import annotations

import pytest

from kvlab import check

from test_check_mistakes_06_11 import wrong_answer

WRONG_03 = [
    ("W9 first_fit returns the hole's end (start + length - n)", "first_fit",
     [("            return start\n", "            return start + length - n\n")],
     "return the start of the hole"),
    ("W4 place_first_fit puts a split remainder at the back of the hole list", "place_first_fit",
     [("holes[i:i + 1] = [(start + n, length - n)] if length > n else []",
       "holes[i:i + 1] = []\n            holes += [(start + n, length - n)] if length > n else []")],
     "first fit scans holes in address order: keep the list sorted"),
    ("W8 place_first_fit gives wasted_share in slots", "place_first_fit",
     [('"wasted_share": (free - largest) / free if free else 0.0', '"wasted_share": float(free - largest)')],
     "a share of the free memory, 0..1, not slots"),
]


@pytest.mark.parametrize("mistake,name,edits,words", WRONG_03, ids=[w[0].split()[0] for w in WRONG_03])
def test_03_review_r6_wrong_answer_is_named_on_screen(mistake, name, edits, words, capsys):
    """What the student reads (verbose output) names the slip, in every failing case and the summary."""
    result = getattr(check, name)(wrong_answer("03", name, edits))
    printed = capsys.readouterr().out
    assert not result.passed, f"accepted: {mistake}"
    unnamed = [case.label for case in result.failures if words not in case.note]
    assert not unnamed, (unnamed, printed)
    assert words in result.summary and words in printed, printed
