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


def test_10_review_r7_tier_controls_precompute_the_grid():
    """I1: with ``precompute`` every (host ratio, policy) runs once in the constructor; a move is a lookup."""
    from types import SimpleNamespace as NS

    from kvlab.viz.tier_controls import POLICY_WORDS, TierControls

    calls = []

    def run(r, p):
        calls.append((r, p))
        return NS(hit_rate=0.5, prefill_tokens=1000 - 100 * r, ttft_mean_s=0.1)

    c = TierControls(run, host_ratio=2, static=True, precompute=True)
    n = len(calls)
    assert n == 1 + len(c.ratios) * len(POLICY_WORDS)
    for r in c.ratios:
        for p in POLICY_WORDS:
            c.update(host_ratio=r, policy=p)
    assert len(calls) == n


def test_10_review_r7_tier_rows_name_host_drops():
    """C6: a write-back chat writes fewer GB to a bigger host because the small one drops its copies."""
    from kvlab.sim.tiers import multi_turn_chat, run_tiers

    one, big = run_tiers(multi_turn_chat(num_sessions=40, turns=6, seed=0), capacity=8192, host_ratios=(1, 4),
                         write_policy="write_back")
    assert big.bytes_to_host < one.bytes_to_host
    assert one.host_dropped_tokens > big.host_dropped_tokens


def test_10_review_r7_purple_node_edges_name_their_nodes():
    """P3: in the stepper's node machine, a bold edge carries the letters of the nodes that took it."""
    from kvlab.reuse.hicache_manager import HiCacheManager
    from kvlab.viz.tier_view import TierRecorder, _movers, tier_stepper

    cm = HiCacheManager(4, 1, host_ratio=2, write_policy="write_through")
    rec = TierRecorder(cm, "start")
    for rid, p in (("R1", [1, 2, 3]), ("R2", [7, 8, 9])):
        cm.admit(rid, p)
        cm.cache_finished_req(rid, p)
        rec.snap(f"{rid} done")
    names = [{n: f"X{n}" for n in s.placements} for s in rec.snapshots]
    who = _movers(rec, 2, names)
    assert who and all(letters for letters in who.values()), who
    from kvlab.viz.palette import theme
    from kvlab.viz.tier_view import _stepper_graph

    bold = {t[:3] for t in rec.taken[2]}
    dot = _stepper_graph("node", {}, bold, theme(), ("node",), who).source
    assert all(f"[{x}]" in dot for letters in who.values() for x in letters), dot
    assert tier_stepper(rec, graph=True, names=names, static=True).frames
