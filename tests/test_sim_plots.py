"""kvlab.sim.plots: every figure labelled simulated beside published, and lesson 09's rate widget under 2 s."""
from __future__ import annotations

import re


import pytest

from kvlab import sim
from kvlab.sim import plots
from kvlab.sim import reproductions as rp
from kvlab.sim.policies import OrcaPolicy, SimRequest


@pytest.fixture(scope="module")
def small():
    return rp.vllm_batched_requests("sharegpt", 400, seeds=(0, 1)), rp.vllm_memory_breakdown(400, seeds=(0, 1))


def test_compare_bars_show_published_beside_simulated_with_intervals(small):
    fig13, _ = small
    fig = plots.compare_bars(fig13, "mean batched requests", rows=[0, 1, 2, 3])
    pub, simd = fig.data
    assert list(pub.y) == [7.0, 9.81, 13.62, 30.42] and list(pub.x) == ["Orca (Max)", "Orca (Pow2)", "Orca (Oracle)", "vLLM"]
    assert list(simd.y) == pytest.approx([r.simulated for r in fig13.rows[:4]])
    assert "simulated" in fig.layout.title.text and "Fig. 13, p. 10" in fig.layout.title.text
    assert all(e >= 0 for e in simd.error_y.array) and "2 seeds" in simd.name
    # issue 28 [6]: the simulated value sat outside the bar's top, under its error bar's whisker
    assert simd.textposition == "inside" and simd.insidetextanchor == "start"


def test_memory_breakdown_bars_stack_the_papers_four_categories(small):
    """The paper's four categories, and kvlab's buddy rounding and free slots each in its own colour
    (issue 28 review: Fig. 2 folded rounding and free memory into one colour). The paper's one
    'external frag. & others' has a colour of its own, drawn on the published bars only; kvlab's
    external fragmentation is the dark brown of the colour key (the review of 6b9afee: one thing,
    external fragmentation, was drawn in two colours)."""
    _, fig2 = small
    fig = plots.memory_breakdown_bars(fig2)
    names = [t.name for t in fig.data]
    assert names[:3] == ["token states", "reservation", "internal frag."]
    assert names[-1] == "the paper's 'external frag. & others'"
    assert {"buddy rounding", "free"} <= set(names) and len({t.marker.color for t in fig.data}) == len(names)
    paper = fig.data[-1]
    assert all(y == 0 for y in paper.y[1::2]) and all(y > 0 for y in paper.y[0::2])  # published bars only
    ext = [t for t in fig.data if t.name == "external frag."]
    assert ext and all(t.marker.color == plots.COLORS["external_fragmentation"] for t in ext)
    published = [sum(t.y[i] for t in fig.data) for i in range(0, 8, 2)]  # the published bars sum to 100%
    assert published == pytest.approx([99.9, 99.9, 100.0, 100.0], abs=0.11)
    simulated = [sum(t.y[i] for t in fig.data) for i in range(1, 8, 2)]
    assert simulated == pytest.approx([100.0] * 4)
    assert "read off the bar labels" in fig.layout.title.text and "simulated" in fig.layout.title.text


def test_rate_figure_marks_memory_bound_points_and_published_stars():
    rows = rp.batch_vs_rate(rates=(0.5, 2.0), duration_s=300, policies=("orca-max", "vllm"))
    fig = plots.batch_vs_rate_figure(rows, published={"orca-max": 7.0, "vllm": 30.42})
    assert [t.name for t in fig.data][:2] == ["Orca (Max) (simulated)", "vLLM (simulated)"]
    assert list(fig.data[0].marker.symbol) == ["circle-open", "circle"]  # reserve-max fills up at 2 req/s
    assert list(fig.data[-1].y) == [7.0, 30.42] and "Fig. 13a p. 10" in fig.data[-1].name


def test_timeline_and_buddy_figures():
    res = sim.simulate(sim.sharegpt(80, 4.0, seed=1), sim.make_policy("orca-pow2", 15_728), progress=False)
    fig = plots.memory_timeline_figure(res)
    names = [t.name for t in fig.data]
    assert "token states" in names and "buddy rounding" in names and names[-1] == "requests running"
    y2 = fig.layout.yaxis2  # issue 28 [6]: synced to the % grid, "requests running" ticked 1.47, 2.95, 4.42
    assert y2.tickmode == "linear" and y2.tick0 == 0 and isinstance(y2.dtick, int) and y2.dtick >= 1
    pol = OrcaPolicy(15_728, "orca-oracle")
    for r in sim.sharegpt(12, 2.0, seed=0):
        pol.admit(SimRequest(r))
    fig = plots.buddy_layout_figure(pol.buddy)
    free, asked, rounding, runs = fig.data
    assert sum(free.x) + sum(asked.x) + sum(rounding.x) == 983 == sum(free.x) + sum(runs.x)
    assert sum(rounding.x) == pol.buddy.stats().rounding_blocks and sum(asked.x) == pol.buddy.requested_blocks
    grey = free.marker.color  # issue 28 [6]: a request was drawn in grey, the free runs' colour
    assert asked.marker.color not in (grey, "#7f7f7f")
    # review r2: the hover showed the internal id "r18.0"; each run is outlined, its hover names the request
    assert all(h.startswith("request ") for h in runs.hovertext), runs.hovertext[:2]
    assert not any(re.search(r"\br\d+\.\d", h) for h in runs.hovertext) and runs.marker.line.width > 0


def test_log_ticks_give_a_short_log_axis_more_than_one_tick():
    """Issue 28 [6]: a log axis from 1.3 to 7.9 with dtick=1 showed the single tick "10"."""
    assert plots.log_tickvals([1.3, 7.9]) == [1, 2, 5, 10]
    assert plots.log_tickvals([100, 2000]) == [100, 200, 500, 1000, 2000]
    with pytest.raises(ValueError, match="positive"):
        plots.log_tickvals([0])


def _five_minutes(rate, policy):
    t = sim.sharegpt(max(100, int(rate * 300)), rate=rate, seed=0)
    return sim.simulate(t, sim.make_policy(policy, 15_728), progress=False)


def test_rate_widget_reruns_a_small_simulation():
    w = plots.RateWidget(_five_minutes, rp.PAPER_POLICIES, rate=2.0, static=True)
    assert w.policy == "orca-max" and "orca-max at 2 req/s" in w.caption and w.show() is not None
    for rate, policy in ((4.0, "vllm"), (4.0, "orca-oracle")):
        w.update(rate, policy)  # its time: bench/bench_lessons.py (a control answers in < 1 s)
        assert f"{policy} at 4 req/s" in w.caption and w.result.num_requests == 1200
    with pytest.raises(ValueError, match="unknown policy"):
        w.update(policy="paged")
    with pytest.raises(ValueError, match="rate"):
        plots.RateWidget(_five_minutes, ["vllm"], rate=9.0)


def test_rate_widget_live_controls_redraw():
    import ipywidgets  # noqa: F401  (installed by the set-up: a missing one fails)
    w = plots.RateWidget(_five_minutes, ["vllm", "orca-max"], rate=1.0, static=False)
    assert w.widget is not None and w._out.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    w._pol.value = "orca-max"  # the menu re-runs and redraws
    assert w.policy == "orca-max" and "orca-max at 1 req/s" in w._cap.value
    w._rate.value = 1.5
    assert w.rate == 1.5 and "1.5 req/s" in w._out.outputs[0]["data"]["text/plain"]


def test_rate_widget_step_time_slider_moves_a_bar_that_keeps_up_not_a_memory_bound_one():
    from kvlab.sim.reproductions import setting

    def run(rate, policy, step_time):
        t = sim.sharegpt(240, rate=rate, seed=0)
        return sim.simulate(t, sim.make_policy(policy, 15_728), cost=setting(step_time)[1], progress=False)

    w = plots.RateWidget(run, ["vllm", "orca-max"], rate=2.0, static=True, step_times=(0.6, 1.6, 0.1))
    base = w.result.mean_batch
    assert "step time x1" in w.caption
    w.update(step_time=1.5)
    assert w.result.mean_batch > base * 1.1 and "step time x1.5" in w.caption   # slower steps: a bigger batch
    w.update(step_time=1.0, policy="orca-max")
    capped = w.result.mean_batch
    w.update(step_time=1.5)
    assert abs(w.result.mean_batch / capped - 1) < 0.05                          # memory-bound: the batch stays
    before = (w.rate, w.policy, w.step_time, w.caption)
    with pytest.raises(ValueError, match="step_time"):
        w.update(step_time=0.0)
    assert (w.rate, w.policy, w.step_time, w.caption) == before
    with pytest.raises(ValueError, match="step_time"):
        plots.RateWidget(_five_minutes, ["vllm"]).update(step_time=1.2)
    with pytest.raises(ValueError, match="step_times"):
        plots.RateWidget(run, ["vllm"], step_times=(1.2, 2.0, 0.1))


def test_rate_widget_hands_the_static_site_every_state_of_its_grid_as_data(monkeypatch):
    def run(rate, policy):
        return sim.simulate(sim.sharegpt(60, rate=rate, seed=0), sim.make_policy(policy, 15_728), progress=False)

    w = plots.RateWidget(run, ["vllm", "orca-max"], rate=2.0, static=True)
    before = (w.rate, w.policy, w.caption)
    bundle = w.site_states()
    assert [a[0] for a in bundle["axes"]] == ["rate", "policy"] and bundle["axes"][0][1] == [1.0, 2.0, 4.0]
    assert len(bundle["states"]) == 6 and "orca-max at 1 req/s" in bundle["states"][1]["html"]
    assert "vllm at 4 req/s" in bundle["states"][4]["html"] and bundle["states"][4]["fig"]["data"]
    assert (w.rate, w.policy, w.caption) == before                  # the widget is left as it was
    shown = []
    monkeypatch.setattr("IPython.display.display", lambda obj, *a, **k: shown.append(obj))
    monkeypatch.setenv("KVLAB_STATIC", "frames")
    w._ipython_display_()
    assert "application/vnd.kvlab.explorer+json" in shown[0]
    from kvlab.viz.explorer import explorer_from_bundle

    assert 'data-states="6"' in explorer_from_bundle(shown[0]["application/vnd.kvlab.explorer+json"])


def test_one_seed_draws_no_interval():
    """Issue 28, the review of 09's appendix: a "95% interval" drawn from one seed. One seed: no
    error bar, and the legend says one seed."""
    one = rp.vllm_batched_requests("sharegpt", 200, seeds=(0,))
    simd = plots.compare_bars(one, "mean batched requests", rows=[0, 1, 2, 3]).data[1]
    assert simd.error_y.visible is False and simd.name == "simulated (one seed: no interval)"


def test_timeline_draws_free_memory_in_one_colour_and_the_requests_in_a_panel_of_their_own():
    """Issue 28 reviews of 09 (cell 21): free memory was drawn grey or brown depending on whether a
    request waited (two colours for one thing); the "requests running" line ran over the stacked
    areas on a second axis with odd ticks (13, 26, 39). Free slots are one trace at every time; the
    requests (running, and the times requests wait) sit in a panel below the memory's, with round
    whole-number ticks."""
    res = sim.simulate(sim.sharegpt(300, 4.0, seed=0), sim.make_policy("orca-pow2", 15_728), progress=False)
    rows = res.timeline_rows()
    assert any(r["waiting"] for r in rows) and not all(r["waiting"] for r in rows)
    fig = plots.memory_timeline_figure(res)
    by = {t.name: t for t in fig.data}
    assert not [n for n in by if n.startswith("external frag")], list(by)
    free = by["free (ext. frag. while waiting)"]   # review r2: the legend names what the grey is
    assert list(free.y) == pytest.approx([100 * (r["free"] + r["external_fragmentation"]) / res.capacity
                                                for r in rows])
    assert [bool(y) for y in by["requests waiting"].y] == [bool(r["waiting"]) for r in rows]
    assert list(by["requests running"].y) == [r["running"] for r in rows]
    top, low = fig.layout.yaxis.domain, fig.layout.yaxis2.domain
    assert low[1] < top[0], (low, top)  # the panels do not overlap
    assert by["requests running"].yaxis == "y2" and not fig.layout.yaxis2.overlaying
    dtick = fig.layout.yaxis2.dtick
    assert dtick in (1, 2, 5, 10, 20, 50, 100) and max(r["running"] for r in rows) / dtick <= 5, dtick


def test_one_colour_one_meaning_across_lesson_09():
    """Issue 28 review of 09: colours changed meaning between figures (Orca (Max) drawn in the grey
    of the free memory and of the simulated bars; the buddy picture's requests in the green, amber
    and cyan of token states, reservation and Orca (Oracle)). No system, no request of the buddy
    picture and no memory category share a colour, and the lesson's colour key lists each."""
    greys = {"#d9d9d9", "#404040", "#969696", "#7f7f7f", "#ffffff", "#000000"}  # free, simulated, range, published
    systems = {p: plots.SYSTEM_COLORS[p] for p in ("orca-max", "orca-pow2", "orca-oracle", "vllm")}
    assert not set(systems.values()) & (greys | set(plots.COLORS.values())), systems
    assert len(set(systems.values())) == len(systems)
    pol = OrcaPolicy(15_728, "orca-oracle")
    for r in sim.sharegpt(12, 2.0, seed=0):
        pol.admit(SimRequest(r))
    _, asked, _, _ = plots.buddy_layout_figure(pol.buddy).data
    used = set(asked.marker.color) if not isinstance(asked.marker.color, str) else {asked.marker.color}
    assert not used & (greys | set(plots.COLORS.values()) | set(plots.SYSTEM_COLORS.values())), used
    key = plots.colour_key_html()
    for c in [*systems.values(), *(plots.COLORS[k] for k in ("token_states", "reservation", "internal_fragmentation",
                                                             "rounding", "external_fragmentation", "free")), *used]:
        assert c in key, c


def test_paged_is_one_blue_in_every_lesson_09_figure():
    """Review (round 12): "paged" was violet in section 9 and vLLM (paging) blue in every other figure.
    Paged is vLLM's paging: one colour, blue, and radix a colour of its own; the key lists both."""
    assert plots.SYSTEM_COLORS["paged"] == plots.SYSTEM_COLORS["vllm"] == "#1f77b4"
    others = {v for k, v in plots.SYSTEM_COLORS.items() if k != "radix"} | set(plots.COLORS.values())
    assert plots.SYSTEM_COLORS["radix"] not in others
    assert plots.SYSTEM_COLORS["radix"] in plots.colour_key_html()
