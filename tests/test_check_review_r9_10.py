"""The review of lesson 10 (r9): a ``next_placement`` that leaves out the disk "miss" event (so
``disk --miss-->`` raises ValueError) got only expected beside actual; it now gets a named line."""
from __future__ import annotations

from kvlab.check import l10_tiers as L

from test_check_mistakes_06_11 import wrong_answer

NO_MISS = [('        ("disk", "miss"): "evicted",\n', "")]


def test_10_review_r9_disk_miss_left_out_is_named():
    r = L.next_placement(wrong_answer("10", "next_placement", NO_MISS), verbose=False)
    assert not r.passed
    miss = [f for f in r.failures if "disk --miss-->" in f.label]
    assert miss, [f.label for f in r.failures]
    assert all("CAN take a 'miss'" in (f.note or "") for f in miss), [(f.label, f.note) for f in miss]
