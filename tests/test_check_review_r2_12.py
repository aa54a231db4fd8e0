"""Issue 28, review r2 of lesson 12 at 1304340: three wrong answers rejected without their mistake named
(e1i, p2k) or misnamed (p2i). Each is the reviewer's edit of the reference solution; the summary must name it."""
from __future__ import annotations

import pytest
from test_check_mistakes_06_11 import wrong_answer

from kvlab import check

_WORDS = [("    match = []\n", "    tw = text.split()\n    match = []\n"),   # the review's p2i: words, not characters
          ("            n = 0\n            while n < min(len(s), len(text)) and s[n] == text[n]:",
           "            sw = s.split()\n            n = 0\n            while n < min(len(sw), len(tw)) and sw[n] == tw[n]:"),
          ("match[w] / len(text)", "match[w] / max(1, len(tw))")]


@pytest.mark.parametrize("checker,name,edits,words", [
    ("predict_cached_tokens", "predict_cached", [("pos = min(pos, len(prompt) - 1)", "pos = max(pos - 1, 0)")],
     "one token was taken off every match"),
    ("choose_worker", "pick_worker", _WORDS, "matches CHARACTERS, not whitespace words"),
    ("choose_worker", "pick_worker",
     [("w = match.index(max(match))", "w = max(range(len(sent)), key=lambda k: (len(sent[k]), -k))")],
     "not the one that was sent the most texts"),
], ids=["e1i-minus-one", "p2i-words", "p2k-most-texts"])
def test_review_r2_12_wrong_answer_is_named_first(checker, name, edits, words):
    r = getattr(check, checker)(wrong_answer("12", name, edits), verbose=False)
    assert not r.passed
    assert words in r.summary, r.summary


@pytest.mark.parametrize("checker,name", [("predict_cached_tokens", "predict_cached"),
                                          ("choose_worker", "pick_worker")])
def test_the_reference_the_edits_start_from_passes(checker, name):
    assert getattr(check, checker)(wrong_answer("12", name, []), verbose=False).passed
