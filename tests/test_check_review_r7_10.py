"""The review of lesson 10 (r7): the checkers' findings E2 and E3. E2: a ``next_placement`` that
loads a disk chunk back to the host (``disk --load_back--> host``) got only expected beside actual,
where its sibling slip ("-> both") had a one-line diagnosis. E3: a FAIL's case title stated the
rule it tests ("T1 shrinks below target: switch to T2"), giving the answer away; a title now says
what the input is."""
from __future__ import annotations

from kvlab.check import l10_tiers as L

from test_check_mistakes_06_11 import wrong_answer

DISK_TO_HOST = [('("disk", "load_back"): "device"', '("disk", "load_back"): "host"')]


def test_10_review_r7_disk_load_back_to_host_is_named():
    r = L.next_placement(wrong_answer("10", "next_placement", DISK_TO_HOST), verbose=False)
    assert not r.passed
    first = r.failures[0]
    assert "disk --load_back-->" in first.label, first.label
    assert "brings the chunk to the DEVICE" in (first.note or ""), (first.label, first.note)


def test_10_review_r7_reference_next_placement_passes():
    assert L.next_placement(wrong_answer("10", "next_placement", []), verbose=False).passed


def test_10_review_r7_case_titles_describe_the_input():
    """No case title of exercise 1 or 4 says what the answer does (first / switch / dropped / stop)."""
    from kvlab.check.l10_tiers import arc_victims, write_back_evict

    r1 = write_back_evict(lambda leaves, host_free, need: {}, verbose=False)
    r4 = arc_victims(lambda t1, t2, target, need: [], verbose=False)
    labels = [c.label.split(":")[0] for c in r1.failures + r4.failures]
    assert labels
    for words in ("first", "switch", "dropped", "stop when", "makes room", "become room", "no copy needed"):
        assert not any(words in t for t in labels), (words, labels)
