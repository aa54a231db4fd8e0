"""Lesson 11's pictures: they fit 850 px, say 'measured', and kept_blocks follows the rules."""
import pytest
import torch

from kvlab.compute.kv_measure import MethodResult, Profile
from kvlab.viz.kv_compress_view import attention_figure, budget_explorer, kept_blocks, tradeoff_figure

MASS = torch.tensor([[0.3, 0.02, 0.02, 0.02, 0.02, 0.02, 0.1, 0.5], [0.2, 0.05, 0.05, 0.05, 0.05, 0.1, 0.2, 0.3]])
P = Profile(MASS, [10.0] * 8, sinks=1, recent=2)


def test_kept_blocks_streaming_keeps_sinks_and_window_h2o_keeps_heavy():
    s = kept_blocks(P, "streaming", budget_tokens=4, sink_tokens=1, block_size=2)
    assert s["kept"] == [0, 1, 6, 7] and s["tokens_kept"] == 0.5
    assert s["mass_kept"] == pytest.approx(float(P.mass[[0, 1, 6, 7]].sum() / P.mass.sum()))
    h = kept_blocks(P, "h2o", budget_tokens=4, sink_tokens=0, block_size=2)
    assert h["kept"] == [0, 1, 6, 7]
    assert kept_blocks(P, "streaming", 100, 1, 2)["kept"] == list(range(8))   # within budget: all
    with pytest.raises(ValueError, match="method must be"):
        kept_blocks(P, "quest", 4, 1, 2)


def test_figures_fit_and_say_measured():
    rows = [MethodResult("full", 100, 1e6, 1e6, 9.0, 1.0), MethodResult("int8", 30, 3e5, 3e5, 9.1, 0.9)]
    for fig in (attention_figure(P), tradeoff_figure(rows)):
        assert fig.layout.width is None or fig.layout.width <= 850
        assert "measured" in fig.layout.title.text


def test_budget_explorer_builds():
    box = budget_explorer(P, block_size=2, budget_tokens=4, sink_tokens=1)
    assert box is not None


def test_methods_on_one_spot_are_named_there():
    """Review of lesson 11 (cell 26): h2o 64 (paper) sat on int8 and fp8 (about 3 MB, 100%), its
    diamond hidden under their marks; the legend alone could not say which methods were there."""
    rows = [MethodResult("full", 100, 12e6, 12e6, 9.0, 1.0), MethodResult("h2o 64 (paper)", 100, 3.0e6, 3.0e6, 9.3, 1.0),
            MethodResult("int8", 30, 3.01e6, 3.01e6, 9.1, 1.0), MethodResult("fp8", 30, 3.02e6, 3.02e6, 9.2, 1.0)]
    fig = tradeoff_figure(rows)
    named = [a.text for a in fig.layout.annotations if "on one spot" in a.text and "int8" in a.text]
    assert named and all("h2o 64 (paper)" in t and "fp8" in t for t in named), [a.text for a in fig.layout.annotations]
    sizes = [t.marker.size for t in fig.data]
    assert sizes == sorted(sizes, reverse=True)          # drawn large to small: a small mark stays on top
    assert [t.name for t in sorted(fig.data[::2], key=lambda t: t.legendrank)] == [r.label for r in rows]


@pytest.mark.parametrize("classroom", [False, True])
def test_the_one_spot_note_is_never_under_the_text_minimum(classroom):
    """The browser test found the "on one spot" note at 10 px (font_size - 2) in lesson 11 cell 26."""
    from kvlab.viz import classroom as set_classroom, theme

    rows = [MethodResult("int8", 30, 3.0e6, 3.0e6, 9.1, 1.0), MethodResult("fp8", 30, 3.0e6, 3.0e6, 9.1, 1.0)]
    set_classroom(classroom)
    try:
        fig, minimum = tradeoff_figure(rows), theme().min_text_px
    finally:
        set_classroom(False)
    notes = [a for a in fig.layout.annotations if "on one spot" in a.text]
    assert notes and all(a.font.size >= minimum for a in notes), [(a.font.size, minimum) for a in notes]


def test_budget_explorer_turns_the_sinks_off_for_h2o(monkeypatch):
    """Review of lesson 11 (cell 16): in H2O mode the "sinks (StreamingLLM)" slider still moved and
    changed nothing; classroom mode cut the method button to "StreamingL..."."""
    import kvlab.viz.kv_compress_view as v
    monkeypatch.setattr(v, "is_static", lambda *a: False)
    monkeypatch.setattr(v, "static_frames", lambda: False)
    box = budget_explorer(P, block_size=2, budget_tokens=4, sink_tokens=1)
    method = next(c for c in box.children if hasattr(c, "options") and "H2O" in str(c.options))
    sinks = next(s for c in box.children if hasattr(c, "children") for s in c.children if "sinks" in s.description)
    assert method.style.button_width == "auto" and not sinks.disabled
    method.value = "h2o"
    assert sinks.disabled
    method.value = "streaming"
    assert not sinks.disabled


def test_methods_on_one_spot_are_drawn_side_by_side():
    """Review of lesson 11 (cell 26): h2o 64 = int8 = fp8 on one spot hid one marker."""
    rows = [MethodResult("full", 100, 12e6, 12e6, 9.0, 1.0), MethodResult("h2o 64 (paper)", 100, 3.0e6, 3.0e6, 9.3, 1.0),
            MethodResult("int8", 30, 3.0e6, 3.0e6, 9.3, 1.0), MethodResult("fp8", 30, 3.0e6, 3.0e6, 9.3, 1.0)]
    fig = tradeoff_figure(rows)
    for axis in ("x", "x2"):
        xs = sorted(t.x[0] for t in fig.data if t.xaxis == axis and t.name != "full")
        assert len(set(xs)) == 3 and min(b - a for a, b in zip(xs, xs[1:])) > 0.2, xs   # 3 marks apart
        assert all(t.customdata[0] == pytest.approx(3.0) for t in fig.data if t.xaxis == axis and t.name != "full")


def test_bytes_read_has_its_own_panel_and_plain_ticks():
    """Review of lesson 11 (cell 7): bytes read on a second axis read like a mass; ticks said 100μ."""
    fig = attention_figure(P)
    read = next(t for t in fig.data if "read" in (t.name or ""))
    mass = next(t for t in fig.data if "mass" in (t.name or ""))
    assert read.yaxis != mass.yaxis and fig.layout[read.yaxis.replace("y", "yaxis")].type != "log"
    ticks = fig.layout[mass.yaxis.replace("y", "yaxis")].ticktext
    assert "0.01" in ticks and not any("μ" in t or "e" in t for t in ticks), ticks


def test_explorer_caption_says_why_fewer_tokens_than_the_budget(monkeypatch):
    """Review of lesson 11: a budget of 64 kept 59 tokens without saying why (the newest block is
    partly full)."""
    import kvlab.viz.kv_compress_view as v
    monkeypatch.setattr(v, "is_static", lambda *a: False)
    monkeypatch.setattr(v, "static_frames", lambda: False)
    odd = Profile(torch.rand(1, 7), [1.0] * 7, sinks=1, recent=2)           # blocks of 2: the newest holds 1
    box = budget_explorer(odd, block_size=2, budget_tokens=4, sink_tokens=2)
    words = next(c for c in box.children if "kvlab-control-caption" in c._dom_classes)
    assert "keeps 3 of 7" in words.value and "the newest block holds 1 of its 2" in words.value, words.value


def test_results_table_is_html_whose_rows_do_not_wrap():
    """Review of lesson 11 (cells 22, 24): the fixed-width table wrapped mid-row at 1280x720."""
    from kvlab.viz.kv_compress_view import results_table

    rows = [MethodResult("full", 96, 2e6, 2e6, 9.5, 1.0, kind="reference", pool_bytes=2e6, prompts=1, greedy_tokens=5,
                         scored_tokens=5), MethodResult("int8", 30, 5e5, 2e6, 9.6, 0.8, kind="kvlab", pool_bytes=5e5)]
    html = results_table(rows)._repr_html_()
    assert html.count("<tr>") == 4 and "0.50\u00a0/\u00a025%" in html
    assert html.count("nowrap") == len(rows)   # only the method's name is kept on one line (round 9: it wrapped)
    assert repr(results_table(rows)).splitlines()[2].startswith("full")


# ------------------------------------------------------------------ section 5's budget control
def _sweep_rows():
    from kvlab.compute.kv_measure import MethodResult

    full = MethodResult("full", 100, 8e6, 8e6, 2.0, 1.0, kind="reference", greedy_tokens=5)
    return [full] + [MethodResult(f"{m} 64", 100, 2e6, 2e6 if m != "quest" else 3e6, 2.5, 0.6, kind="paper",
                                  greedy_tokens=5) for m in ("streaming", "h2o", "quest")]


def _fake_measure(calls):
    from kvlab.compute.kv_measure import MethodResult

    def measure(method, budget):
        calls.append((method, budget))
        return MethodResult(f"{method} {budget}", 100, budget * 3e4, budget * 3e4, 2.0 + (64 / budget) ** 4,
                            min(1.0, budget / 128), kind="paper", greedy_tokens=5)
    return measure


def test_budget_sweep_measures_each_new_budget_once_and_seeds_from_the_lesson_rows():
    """Review of lesson 11: section 5 had no control; the budget (64 tokens) is what a student wants
    to move. The control runs the model (here a fake) once per new (method, budget) and draws it."""
    from kvlab.viz.budget_sweep import BudgetSweep

    calls = []
    c = BudgetSweep(_sweep_rows(), _fake_measure(calls), methods=("streaming", "h2o", "quest"), static=True)
    assert calls == [] and c.result["seconds"] is None and c.result["row"].label == "streaming 64"
    assert "measured earlier in this run" in c.caption() and "25% of the full cache's KV memory" in c.caption()
    c.set(budget=128)
    assert calls == [("streaming", 128)] and c.result["seconds"] is not None and "measured now in" in c.caption()
    assert "perplexity 2.06 (full cache 2.00)" in c.caption() and "100% of 5 greedy tokens" in c.caption()
    c.set(budget=64)
    c.set(budget=128)
    assert calls == [("streaming", 128)]           # measured once, kept
    fig = c.figure()
    streaming = [t for t in fig.data if t.name == "streaming"]
    assert [list(t.x) for t in streaming] == [[64, 128], [64, 128]]   # both panels, every budget measured
    rings = [t for t in fig.data if t.marker.symbol == "circle-open" and t.name is None]
    assert [list(t.x) for t in rings] == [[128], [128]]
    assert all(t.cliponaxis is False for t in rings)   # a ring at an axis's end is drawn whole (round 9's review)
    assert "measured" in fig.layout.title.text and fig.layout.yaxis.type != "log"
    lo, hi = fig.layout.yaxis.range          # the full cache's dashed line inside the axis, off its edge
    assert lo < 2.0 < 2.5 < hi
    assert [t.opacity for t in fig.data if t.name == "streaming"] == [1.0, 1.0]
    assert {t.opacity for t in fig.data if t.name in ("h2o", "quest")} == {0.35}


def test_budget_sweep_refuses_a_bad_pick_and_keeps_its_state():
    from kvlab.viz.budget_sweep import BudgetSweep

    calls = []
    c = BudgetSweep(_sweep_rows(), _fake_measure(calls), methods=("streaming", "h2o"), static=True)
    for bad in ({"budget": 70}, {"budget": 0}, {"budget": 400}, {"method": "int8"}, {"budget": 64.0}):
        with pytest.raises(ValueError, match="budget|method"):
            c.set(**bad)
        assert (c.method, c.budget) == ("streaming", 64) and calls == []
    with pytest.raises(ValueError, match="full cache"):
        BudgetSweep(_sweep_rows()[1:], _fake_measure(calls))
    with pytest.raises(ValueError, match="methods"):
        BudgetSweep(_sweep_rows(), _fake_measure(calls), methods=("full",))


def test_budget_sweep_widget_says_measuring_and_fits_one_projector_screen():
    """The model takes a second or more a pick: the caption says "measuring" first; in classroom
    mode the controls, the figure and the caption fit the 599 px a projector shows."""
    from kvlab.viz import classroom as set_classroom
    from kvlab.viz.budget_sweep import BudgetSweep

    calls, seen = [], []
    set_classroom(True)
    try:
        c = BudgetSweep(_sweep_rows(), _fake_measure(calls), methods=("streaming", "h2o"), static=False)
        menu, slider = c.widget.children[1].children
        c._caption.observe(lambda ch: seen.append(ch["new"]), names="value")
        slider.value = 32
        fig = c.figure()
    finally:
        set_classroom(False)
    assert calls == [("streaming", 32)] and "measuring streaming at 32 tokens" in seen[0]
    assert "streaming 32" in seen[-1] and c.budget == 32
    assert fig.layout.height + 60 + 90 <= 599                      # controls row + a 3-line caption
    assert fig.layout.yaxis.type == "log"                          # 18 against the full cache's 2: a log axis


def test_round9_review_shares_colours_and_the_note_corner():
    from kvlab.viz.kv_compress_view import METHOD_MARKERS, _emptiest_corner, _share

    assert _share(0.9987) == "99.9%" and _share(0.99999) == ">99.9%" and _share(1.0) == "100%"
    assert _share(0.001) == "0.1%" and _share(0.5) == "50%"
    open_ones = {m for m, (symbol, _) in METHOD_MARKERS.items() if symbol.endswith("-open")}
    assert open_ones == {"streaming-orig", "h2o-block", "quest-shared"}   # the legend says: open = kvlab's variant
    # the reviewer's classroom case: a wide note in the top-left corner lay over the markers there
    pts = [(2.5, 1.78), (2.6, 1.78), (3.0, 1.64), (2.9, 1.60), (3.2, 1.60), (11.4, 1.67), (11.4, 1.62), (11.4, 1.60)]
    assert _emptiest_corner(pts, box=(0.5, 0.2)) == (0.96, 0.96)


def test_round9_review_the_spot_note_never_covers_a_mark_in_classroom_mode():
    from kvlab.compute.kv_measure import MethodResult
    from kvlab.viz import kv_compress_view as v
    from kvlab.viz.palette import classroom

    rows = [MethodResult("full", 96, 11.4e6, 11.4e6, 1.60, 1.0, kind="reference", pool_bytes=11.4e6)]
    for label, kv, ppl in (("streaming 64", 2.5e6, 1.78), ("streaming-orig 64", 2.5e6, 1.78), ("h2o 64", 3.0e6, 1.64),
                           ("h2o-block 64", 2.5e6, 1.78), ("quest 64", 11.4e6, 1.62), ("quest-shared 64", 11.4e6, 1.67),
                           ("int8", 2.9e6, 1.60), ("fp8", 3.2e6, 1.60)):
        rows.append(MethodResult(label, 96, kv, kv, ppl, 0.8, kind="paper", pool_bytes=kv))
    classroom(True)
    try:
        fig = v.tradeoff_figure(rows)
    finally:
        classroom(False)
    notes = [a for a in fig.layout.annotations if a.text.startswith("on one spot")]
    assert notes and notes[0].xref == "x domain"
    lo, hi = fig.layout.yaxis.range or (None, None)
    if notes[0].y > 0.5 and notes[0].x < 0.5:            # top-left: only with headroom above every mark
        assert hi is not None and (1.78 - lo) / (hi - lo) < 0.8


def test_explorer_caption_gives_the_block_share_of_the_pool(monkeypatch):
    """Review r6_03_11 of lesson 11 (cell 16): "keeps 59 of 251 tokens (24% of the KV memory)" is
    the token share; the pool holds 4 of 16 blocks (25%), and blocks are the unit."""
    import kvlab.viz.kv_compress_view as v
    monkeypatch.setattr(v, "is_static", lambda *a: False)
    monkeypatch.setattr(v, "static_frames", lambda: False)
    odd = Profile(torch.rand(1, 7), [1.0] * 7, sinks=1, recent=2)           # 4 blocks of 2, the newest holds 1
    box = budget_explorer(odd, block_size=2, budget_tokens=4, sink_tokens=2)
    words = next(c for c in box.children if "kvlab-control-caption" in c._dom_classes)
    assert "keeps 3 of 7 tokens (43%) in 2 of 4 blocks (50% of the KV memory)" in words.value, words.value


def test_explorer_log_axis_has_one_tick_format():
    """Review r6_03_11 of lesson 11 (cell 16): the log axis read "100µ, 0.001, 0.01, 0.1"."""
    from kvlab.viz.kv_compress_view import _kept_figure

    fig = _kept_figure(P, kept_blocks(P, "streaming", 4, 1, 2), "")
    ticks = fig.layout.yaxis.ticktext
    assert fig.layout.yaxis.type == "log" and ticks and "0.01" in ticks, ticks
    assert not any("μ" in t or "µ" in t or "e" in t for t in ticks), ticks


def test_budget_sweep_menu_shows_names_not_ids():
    """Review r6_03_11 of lesson 11 (cell 31): the method menu showed `streaming-orig`, `h2o-block`."""
    from kvlab.viz.budget_sweep import BUDGET_METHODS, BudgetSweep

    c = BudgetSweep(_sweep_rows(), _fake_measure([]), static=False)
    menu = next(k for box in c.widget.children for k in getattr(box, "children", ()) if hasattr(k, "options"))
    labels = [label for label, _ in menu.options]
    assert [value for _, value in menu.options] == list(BUDGET_METHODS) and menu.value == "streaming"
    assert "StreamingLLM, original positions (variant)" in labels and not set(labels) & set(BUDGET_METHODS), labels


def test_tradeoff_legend_title_sits_above_its_entries_in_classroom_mode():
    """Review r6_03_11 of lesson 11 (classroom cell 29): the legend's last entry ended 5 px from the
    output's right edge: plotly wraps the entries at the plot's width beside a title at their side."""
    from kvlab.viz import classroom as set_classroom

    rows = [MethodResult("full", 100, 1e6, 1e6, 9.0, 1.0), MethodResult("int8", 30, 3e5, 3e5, 9.1, 0.9)]
    set_classroom(True)
    try:
        fig = tradeoff_figure(rows)
    finally:
        set_classroom(False)
    assert fig.layout.legend.title.side == "top" and "<br>" not in fig.layout.legend.title.text
    assert fig.layout.width is None or fig.layout.margin.r >= 30
