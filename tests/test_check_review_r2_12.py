"""Issue 28, review r2 of lesson 12 at 1304340: three wrong answers rejected without their mistake named
(e1i, p2k) or misnamed (p2i). Each is the reviewer's edit of the reference; the summary must name it."""
from __future__ import annotations

import pytest

from kvlab import check

PREDICT = '''
def predict_cached(nodes, prompt, page_size):
    children = {}
    for n in nodes:
        if not n["evicted"]:
            children.setdefault(n["parent"], []).append(n)
    node, pos = 0, 0
    while pos < len(prompt):
        nxt, k = None, 0
        for child in children.get(node, []):
            ids = child["ids"]
            m = 0
            while m < len(ids) and pos + m < len(prompt) and ids[m] == prompt[pos + m]:
                m += 1
            if m > k:
                nxt, k = child, m
        if nxt is None:
            break
        pos += k
        if k < len(nxt["ids"]):
            break
        node = nxt["id"]
    pos = min(pos, len(prompt) - 1)
    return pos // page_size * page_size
'''
PICK = '''
def pick_worker(sent, text, loads):
    lo, hi = min(loads), max(loads)
    if hi - lo > 64 and hi > 1.5 * lo:
        return loads.index(lo)
    match = []
    for texts in sent:
        best = 0
        for s in texts:
            n = 0
            while n < min(len(s), len(text)) and s[n] == text[n]:
                n += 1
            best = max(best, n)
        match.append(best)
    w = match.index(max(match))
    if match[w] / len(text) > 0.3:
        return w
    return loads.index(lo)
'''
WORDS = (PICK.replace("    match = []\n", "    tw = text.split()\n    match = []\n")
         .replace("            n = 0\n            while n < min(len(s), len(text)) and s[n] == text[n]:",
                  "            sw = s.split()\n            n = 0\n            while n < min(len(sw), len(tw)) and sw[n] == tw[n]:")
         .replace("match[w] / len(text)", "match[w] / max(1, len(tw))"))   # the review's p2i: words, not characters


def _fn(src: str, name: str):
    ns: dict = {}
    exec(src, ns)
    return ns[name]


@pytest.mark.parametrize("checker,src,name,words", [
    ("predict_cached_tokens", PREDICT.replace("pos = min(pos, len(prompt) - 1)", "pos = max(pos - 1, 0)"),
     "predict_cached", "one token was taken off every match"),
    ("choose_worker", WORDS, "pick_worker", "matches CHARACTERS, not whitespace words"),
    ("choose_worker", PICK.replace("w = match.index(max(match))",
                                   "w = max(range(len(sent)), key=lambda k: (len(sent[k]), -k))"),
     "pick_worker", "not the one that was sent the most texts"),
], ids=["e1i-minus-one", "p2i-words", "p2k-most-texts"])
def test_review_r2_12_wrong_answer_is_named_first(checker, src, name, words):
    r = getattr(check, checker)(_fn(src, name), verbose=False)
    assert not r.passed
    assert words in r.summary, r.summary


@pytest.mark.parametrize("checker,src,name", [("predict_cached_tokens", PREDICT, "predict_cached"),
                                              ("choose_worker", PICK, "pick_worker")])
def test_the_reviewers_reference_passes(checker, src, name):
    assert getattr(check, checker)(_fn(src, name), verbose=False).passed
