"""The lifecycle state machine (kvlab.reuse.lifecycle): one definition of the legal edges, a tracker
that emits them, and a replay that catches an illegal or skipped step."""
from __future__ import annotations

import pytest

from kvlab.memory.events import EventLog
from kvlab.reuse.lifecycle import (DEVICE_STATES, HOST_STATES, LEGAL_EDGES, MACHINES, NODE_STATES, LifecycleTracker,
                                   is_legal, replay, transition_table)


def test_edges_name_only_known_states():
    for machine, edges in LEGAL_EDGES.items():
        states = set(MACHINES[machine])
        for (src, dst), why in edges.items():
            assert src in states and dst in states and src != dst and why
    assert "evicted" in NODE_STATES and "loading" in DEVICE_STATES and "writing" in HOST_STATES
    assert not any(src == "evicted" for src, _ in LEGAL_EDGES["node"])  # evicted is the end
    assert [r[:2] for r in transition_table("device")][0] == ("free", "allocated")
    with pytest.raises(ValueError, match="machine"):
        is_legal("gpu", "free", "allocated")


def test_the_tracker_groups_changes_and_flags_illegal_ones():
    log = EventLog()
    t = LifecycleTracker(log, num_device_blocks=3, num_host_blocks=1)
    t.observe("device", ["allocated", "allocated", "free"], "admit", "R1")
    assert len(log) == 1 and log[0].block_ids == (0, 1)
    t.observe("device", ["locked", "free", "free"], "mixed")
    assert t.illegal == []
    t.observe("device", ["free", "free", "free"], "bad")  # locked -> free skips cached
    assert t.illegal == [("device", "locked", "free", "bad")]
    t.node(7, "device", "insert")
    t.node(7, "host", "bad")  # device -> host skips both
    assert t.illegal[-1] == ("node", "device", "host", "bad")
    with pytest.raises(ValueError, match="blocks"):
        t.observe("host", ["free", "free"], "x")


def test_replay_rebuilds_states_and_catches_skipped_steps():
    log = EventLog()
    t = LifecycleTracker(log, num_device_blocks=2)
    t.observe("device", ["allocated", "free"], "admit")
    t.observe("device", ["cached", "free"], "finish")
    t.node(1, "device", "insert")
    t.node(1, "evicted", "evict")
    r = replay(log)
    assert (r.device, r.nodes, r.illegal, r.num_transitions) == ({0: "cached"}, {}, [], 4)
    log.record("transition", None, [1], machine="device", src="cached", dst="free", cause="forged")  # block 1 was free
    assert "was free" in replay(log).illegal[0]


def test_tier_view_draws_a_recorded_run():
    import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
    import graphviz  # noqa: F401  (installed by the set-up: a missing one fails)
    from kvlab.reuse.hicache_manager import HiCacheManager
    from kvlab.viz.tier_view import (STATE_COLORS, TierRecorder, animate_tiers, lifecycle_graph, tier_map_data,
                                     tier_map_figure, tier_stepper)

    cm = HiCacheManager(4, 1, host_ratio=2, write_policy="write_through")
    rec = TierRecorder(cm)
    for i, p in enumerate(([1, 2, 3], [7, 8, 9], [1, 2, 3, 4])):
        cm.admit(f"R{i}", p)
        cm.cache_finished_req(f"R{i}", p)
        cm.take_transfers()
        rec.snap(f"R{i} done")
    assert len(rec.snapshots) == 4 and rec.taken[0] == []
    d = tier_map_data(rec.snapshots[-1])
    assert d["device"]["colors"] == [STATE_COLORS["device"][s] for s in d["device"]["states"]]
    assert "host" in d["host"]["states"] or "backup" in d["host"]["states"]
    assert any(m == "node" and s == "host" and t == "both" for m, s, t, _ in rec.taken[-1])  # R2's load-back
    fig = animate_tiers(rec.snapshots)
    assert len(fig.frames) == 4 and fig.layout.xaxis.range == tier_map_figure(rec.snapshots[0]).layout.xaxis.range
    assert "(simulated)" in fig.layout.title.text
    src = lifecycle_graph("all", cm.tree.tracker.counts).source
    assert all(f"{m}_{s}" in src for m in ("device", "host", "node") for s in ("free",) if m != "node")
    with pytest.raises(ValueError, match="machine"):
        lifecycle_graph("gpu")
    with pytest.raises(TypeError, match="HiCacheManager"):
        TierRecorder(object())
    s = tier_stepper(rec, static=True, graph=True)
    s.go(len(s) - 1)  # one frame per machine a step changed: the last frame is the last step's
    assert s.error is None and "R2 done" in s.caption
