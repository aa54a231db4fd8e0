"""The review of 0a5526d (r6), lesson 10: three wrong answers the checkers accepted or did not name
(defect 7). A list where ``load_back_plan``'s contract asks for the tuple (device, loaded, computed),
a tuple where ``arc_victims`` asks for the list of names, and the threshold read as a chunk size
(load-back rounded down to a multiple of it). Each is a slip of the reference solution: it must FAIL
and its first failing case must name the slip (the words below)."""
from __future__ import annotations

import pytest

from kvlab.check import l10_tiers as L

from test_check_mistakes_06_11 import wrong_answer

WRONG_10 = [
    ("Ex2 a list where the tuple is asked", "load_back_plan",
     [("    return device, loaded, prompt_len - device - loaded",
       "    return [device, loaded, prompt_len - device - loaded]")],
     "returned a list where the contract asks for a tuple"),
    ("Ex4 a tuple where the list is asked", "arc_victims",
     [("    return out", "    return tuple(out)")],
     "returned a tuple where the contract asks for a list"),
    ("Ex2 the threshold read as a chunk size", "load_back_plan",
     [("    loaded = beyond if beyond and beyond >= threshold else 0",
       "    loaded = beyond // threshold * threshold if threshold else beyond")],
     "is a minimum, not a chunk size"),
]


@pytest.mark.parametrize("mistake,name,edits,words", WRONG_10, ids=[w[0] for w in WRONG_10])
def test_10_review_r6_wrong_answer_is_rejected_and_named(mistake, name, edits, words):
    r = getattr(L, name)(wrong_answer("10", name, edits), verbose=False)
    assert not r.passed, f"accepted: {mistake}"
    assert words in r.failures[0].note, [(f.label, f.note) for f in r.failures[:3]]
    assert words in r.summary


@pytest.mark.parametrize("name", ["load_back_plan", "arc_victims"])
def test_10_review_r6_reference_still_passes(name):
    r = getattr(L, name)(wrong_answer("10", name, []), verbose=False)
    assert r.passed, [(f.label, f.note) for f in r.failures[:3]]


def test_10_review_r6_tier_controls_run_each_setting_once():
    """Defect 2: Home, End, Left, Left on the host-ratio slider queued a re-simulation per key, and the
    figure lagged behind the readout; a setting seen before is now drawn from its first run."""
    from types import SimpleNamespace as NS

    from kvlab.viz.tier_controls import TierControls

    calls = []

    def run(r, p):
        calls.append((r, p))
        return NS(hit_rate=0.5, prefill_tokens=1000 - 100 * r, ttft_mean_s=0.1)

    c = TierControls(run, host_ratio=2, static=True)
    for r in (0.5, 4, 3, 2, 0.5, 4):
        c.update(host_ratio=r)
    assert sorted(calls) == sorted({(0, "write_back"), (2, "write_back"), (0.5, "write_back"), (4, "write_back"),
                                    (3, "write_back")}), calls
    assert c.host_ratio == 4 and c.row.prefill_tokens == 600
