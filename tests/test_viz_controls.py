"""The lessons' live controls (issue 21 item 2), driven without a browser: each input changes
the result, the caption says it in words, bad input is refused and changes nothing."""
from __future__ import annotations

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
import ipywidgets  # noqa: F401  (installed by the set-up: a missing one fails)
import torch

from kvlab.lessons.eviction import POLICY_NAMES, popular_prefix_stream  # noqa: E402
from kvlab.lessons.sharing import beam_search_blocks, measured_sampling_blocks  # noqa: E402
from kvlab.viz import HitRateControl, SharingControl, ShuffleControl  # noqa: E402
from kvlab.viz.shuffle_view import permuted_table, table_snapshot  # noqa: E402


def _inputs(control, cls):
    """The input widget whose CSS class is ``cls``."""
    row = next(c for c in control.widget.children if hasattr(c, "children"))
    return next(w for w in row.children if cls in w._dom_classes)


@pytest.fixture(scope="module")
def shuffle():
    g = torch.Generator().manual_seed(2)
    table = torch.randperm(12, generator=g)[:10].tolist()          # 10 blocks of 16: 150 tokens, 3 tiles
    k = torch.randn(12, 16, 2, 8, generator=g)                      # (num_blocks, block_size, kv_heads, head_dim)
    v = torch.randn(12, 16, 2, 8, generator=g)
    q = torch.randn(1, 4, 8, generator=g)                           # (1, heads, head_dim)
    return ShuffleControl(q, k, v, table, 150, max_splits=3, static=False)


def test_shuffle_gives_the_same_output_bit_for_bit(shuffle):
    first = shuffle.result["table"]
    _inputs(shuffle, "kvlab-shuffle-button").click()
    assert shuffle.shuffles == 1 and shuffle.result["table"] != first
    assert shuffle.result["identical"] and shuffle.result["max_diff"] == 0.0
    assert "shuffle 1" in shuffle.caption() and "bit-for-bit identical" in shuffle.caption()
    assert shuffle._out.outputs                                     # the figure is drawn


def test_split_count_changes_the_programs_and_agrees_up_to_rounding(shuffle):
    _inputs(shuffle, "kvlab-splits-slider").value = 2
    assert shuffle.num_splits == 2 and shuffle.result["max_diff"] < 1e-5
    assert "num_splits = 2: 4 programs" in shuffle.caption()
    fig = shuffle.figure()
    assert "split-K: 2 programs" in fig.layout.title.text
    with pytest.raises(ValueError, match="num_splits"):
        shuffle.set(num_splits=4)
    assert shuffle.num_splits == 2                                   # unchanged
    _inputs(shuffle, "kvlab-unshuffle-button").click()
    shuffle.set(num_splits=1)
    assert shuffle.result["identical"] and "the original layout" in shuffle.caption()


def test_shuffle_picture_says_which_part_is_real(shuffle):
    """Review r5_05_06 (lesson 05, cell 20): the widget runs the real kernel on the layout it draws; the
    read order drawn over it is worked out in Python. The title said "(simulated)" of the whole."""
    from kvlab.viz import kernel_access_figure

    title = shuffle.figure().layout.title.text
    assert title.endswith("(the layout the kernel ran on; read order simulated)"), title
    with pytest.raises(ValueError, match="must say"):
        kernel_access_figure(table_snapshot(4, 4, {"R1": [1, 2]}, {"R1": 6}), "R1", source="measured",
                             source_note="the kernel's own layout")


def test_shuffle_caption_counts_what_it_timed(shuffle):
    """Review r5_05_06 (lesson 05, cells 20 and 23): the caption says how many programs ran and how many
    tiles each read, as the cost cell counts them, and that its time is one call."""
    shuffle.set(num_splits=1)
    assert "num_splits = 1: 2 programs (one per KV head and range), each reading at most 3 of the 3 tiles" \
        in shuffle.caption()
    assert "one call (measured, CPU interpreter)" in shuffle.caption()
    shuffle.set(num_splits=2)
    assert "num_splits = 2: 4 programs (one per KV head and range), each reading at most 2 of the 3 tiles" \
        in shuffle.caption()


def test_table_snapshot_and_permutation():
    snap = table_snapshot(5, 4, {"R1": [3, 0]}, {"R1": 6})
    assert snap.owner == ("R1", None, None, "R1", None) and snap.tokens_in_block == (2, 0, 0, 4, 0)
    assert permuted_table([3, 0], [4, 3, 2, 1, 0]) == [1, 4]
    with pytest.raises(ValueError, match="held twice"):
        table_snapshot(5, 4, {"R1": [3, 3]}, {"R1": 6})


def test_sharing_control_counts_on_the_allocator():
    c = SharingControl(static=False)
    _inputs(c, "kvlab-samples-slider").value = 6
    _inputs(c, "kvlab-beam-width-slider").value = 3
    _inputs(c, "kvlab-prompt-len-slider").value = 200
    assert c.result["sampling"] == measured_sampling_blocks(200, 6, c.new_tokens, 16)
    shared, alone = beam_search_blocks(200, 3, c.new_tokens, 16)
    assert c.result["beam"] == (alone[-1], shared[-1])
    assert "n = 6" in c.caption() and "width 3" in c.caption() and "% saved" in c.caption()
    _inputs(c, "kvlab-samples-slider").value = 1
    assert c.result["sampling"][0] == c.result["sampling"][1] and "n = 1: one sample, nothing to share" in c.caption()
    with pytest.raises(ValueError, match="beam_width"):
        c.set(beam_width=0)
    assert c.beam_width == 3


def test_sharing_caption_at_width_1_does_not_claim_shared_text():
    """Issue 28 [7]: at beam width 1 the caption said "the beams share generated text too" beside
    "0% saved": one beam shares nothing."""
    c = SharingControl(static=False)
    _inputs(c, "kvlab-beam-width-slider").value = 1
    assert "width 1: one beam, nothing to share" in c.caption() and "generated text" not in c.caption()
    _inputs(c, "kvlab-beam-width-slider").value = 4
    assert "the beams share generated text too" in c.caption()


def test_hit_rate_control_policy_menu_in_words():
    c = HitRateControl(popular_prefix_stream(80, seed=3), sizes=(70, 120, 200), static=False)
    menu = _inputs(c, "kvlab-policy-menu")
    assert [label for label, _ in menu.options] == list(POLICY_NAMES.values())
    menu.value = "lfu"
    _inputs(c, "kvlab-pool-size-slider").value = 200
    assert c.result["hit_rate"]["lfu"] == pytest.approx(c.curves["lfu"][-1])
    assert POLICY_NAMES["lfu"] in c.caption() and "200 token slots" in c.caption()
    small = HitRateControl(popular_prefix_stream(80, seed=3), sizes=(70, 120, 200), static=True)
    assert small.result["hit_rate"]["lru"] <= c.result["hit_rate"]["lru"]
    with pytest.raises(ValueError, match="unknown policy"):
        c.set(policy="LRU")
    assert c.policy == "lfu"


def test_block_table_labels_never_spill_over_their_cells():
    """Lesson 05's pool in classroom mode: table cells 'L12→P13' ran into each other at 16 px;
    when the long label does not fit, a cell shows only its physical block (its place says L)."""
    import kvlab.viz as viz
    from kvlab import BlockManager

    m = BlockManager(num_blocks=16, block_size=4)                    # lesson 05's three requests
    for seq in ("R1", "R2", "R3"):
        m.add_sequence(seq, 0)
    for step in range(30):
        for seq, n in (("R1", 5), ("R2", 13), ("R3", 30)):
            if step < n:
                m.append(seq, 1)
    # 16 blocks a row: 'L0→P0' does not fit a cell, in either mode; 8 a row (what lesson 05 draws) it
    # does at 1500x1000; in classroom mode the drawing keeps to a projector's screen (issue 28 [5]),
    # its cells are narrower and show the physical block only
    for cols, cls, want in ((None, False, "P0"), (None, True, "P0"), (8, False, "L0→P0"), (8, True, "P0")):
        viz.classroom(cls)
        try:
            fig = viz.memory_map_figure(m.snapshot(), cols=cols)
        finally:
            viz.classroom(False)
        labels = next(t for t in fig.data if t.name == "table labels")
        assert labels.text[0] == want, (cols, cls, labels.text[0])


def test_page_size_control_reruns_the_four_requests_in_milliseconds():
    """Issue 28 [8]: lesson 07 had no sub-second control for its own parameter. The page size
    re-runs the notes' four requests on a real CacheManager: a match stops at a full page."""
    import time

    from kvlab.viz import PageSizeControl

    c = PageSizeControl(page_size=1, static=False)
    assert c.result["matched"] == c.result["matched_1"] and "Pages of 1 token:" in c.caption()
    slider = _inputs(c, "kvlab-page-size-slider")
    t0 = time.perf_counter()
    slider.value = 16
    elapsed = time.perf_counter() - t0
    m = c.result["matched"]
    assert all(k % 16 == 0 for k in m.values()) and m["R2"] < c.result["matched_1"]["R2"]
    assert all(m[n] + c.result["prefilled"][n] == c.result["prompt"][n] for n in m)
    assert "Pages of 16 tokens" in c.caption() and "R2 9," in c.caption()
    print(f"page size 1 -> 16 redrawn in {elapsed:.3f} s")  # a figure, not an assertion on time
    with pytest.raises(ValueError, match="page_size must be one of"):
        c.set(page_size=3)
    assert c.page_size == 16


def test_lesson_08_charts_put_every_line_in_the_legend_and_share_one_colour_map():
    """Review of lesson 08 (cells 15, 28): the "this pool size" legend marker was LRU's orange, the
    red pool line and the dashed best-possible line had no legend entry, orange/purple meant
    LRU/LFU in one chart and FCFS/cache-aware in the other, and the log axis did not say so."""
    from kvlab.viz import SchedulingControl
    from kvlab.viz.eviction_view import ORDER_COLORS, POLICY_COLORS
    h = HitRateControl(popular_prefix_stream(60, seed=1), sizes=(70, 140), static=True).figure()
    s = SchedulingControl(sizes=(1024, 4096), static=True).figure()
    for fig in (h, s):
        assert not fig.layout.shapes, "a line drawn as a shape has no legend entry"
        shown = [t for t in fig.data if t.showlegend is not False]
        assert any(t.line.dash == "dash" and t.line.color == "#d62728" for t in shown)
        for t in shown:
            assert t.mode == "lines" or t.mode == "lines+markers"
    assert any("best possible" in t.name for t in s.data)
    assert not set(POLICY_COLORS.values()) & set(ORDER_COLORS.values())
    assert "log" in s.layout.xaxis.title.text
    here = [t for t in h.data if len(t.x) == 1]
    assert len({t.marker.size for t in here}) == len(here) == len(POLICY_COLORS)  # coinciding rates all show
    # review r8_08: the legend shows each policy's marker shape (the one-point marker traces carry it)
    for fig, n in ((h, len(POLICY_COLORS)), (s, 2)):
        marks = [t for t in fig.data if t.showlegend is not False and t.marker.symbol]
        assert len({t.marker.symbol for t in marks}) == len(marks) == n, [t.name for t in marks]


def test_lesson_08_scheduling_chart_shows_the_gap_to_the_best_possible():
    """Review r8_08 (cell 37): cell 38 explains a gap of a few points to the best possible hit rate, which a
    0-85% axis drew as a few pixels: a bracket from the chosen order's marker to the best-possible line, and
    a label with the gap in points (computed from the runs)."""
    from kvlab.viz import SchedulingControl
    s = SchedulingControl(sizes=(1024, 4096), order="cache-aware", pool_size=4096, static=True)
    gap = 100 * (s.optimum - s.result["hit_rate"]["cache-aware"])
    notes = [a.text for a in s.figure().layout.annotations if "best possible" in (a.text or "")]
    assert notes == [f"{abs(gap):.1f} points {'under' if gap >= 0 else 'above'} the best possible"], notes


def test_page_size_control_labels_every_segment_and_says_nothing_empty_at_page_1():
    """Review of lesson 07 (cell 21): R4's 11-token segment had no label (hidden: too small for its
    text), and at page size 1 the caption compared 228 with 228 and said it "costs nothing of
    prefill again"."""
    from kvlab.viz import PageSizeControl

    c = PageSizeControl(page_size=16, static=True)
    fig = c.figure()
    prefilled = next(t for t in fig.data if t.name == "prefilled now")
    assert prefilled.textposition == "outside" and fig.layout.uniformtext.mode != "hide"
    assert list(prefilled.text) == [str(v) for v in c.result["prefilled"].values()]
    one = PageSizeControl(page_size=1, static=True).caption()
    assert "costs nothing" not in one and "against" not in one, one


@pytest.mark.parametrize("classroom", [False, True])
def test_sharing_control_legend_leaves_the_bar_labels_alone(classroom):
    """Issue 28, the review of lesson 06 (classroom mode): the legend, 15% of the plot's height
    under it, sat on the bars' axis labels ("parallel sampling, n = 4" cut in half). The legend
    goes above the plot, under the title, with the top margin grown to hold it."""
    import kvlab.viz as viz

    viz.classroom(classroom)
    try:
        fig = viz.SharingControl(samples=4, beam_width=4, prompt_len=100).figure()
        lg = fig.layout.legend
        assert lg.yanchor == "bottom" and lg.y >= 1, (lg.y, lg.yanchor)
        th = viz.palette.theme()
        assert fig.layout.margin.t >= th.title_size * 1.4 + th.font_size * 2 + 10
        assert fig.layout.margin.b >= th.font_size * 2  # the category labels' own room
    finally:
        viz.classroom(False)


def test_shuffle_figure_comes_right_under_its_controls(shuffle):
    """Issue 28 (review of 34c45ca): the caption came between the buttons and the figure they change."""
    kids = [c for c in shuffle.widget.children if not (type(c).__name__ == "HTML" and "<style" in c.value)]
    kinds = [type(c).__name__ for c in kids]
    assert kinds[:3] == ["HBox", "Output", "HTML"], kinds
    assert "kvlab-control-caption" in kids[2]._dom_classes
    parts = shuffle._static_parts()
    assert isinstance(parts[-1], str) and "The kernel ran" in parts[-1] and not isinstance(parts[0], str)


def test_lesson_08_legends_sit_two_a_row_and_captions_name_orders():
    """Review of lesson 08 (cell 15, classroom): the legend's entry "the pool size you picked
    (markers: its hit rates)" was so long that the legend took one entry a row, four rows, and
    its first row sat on the title; the scheduling caption said "with fcfs" (an id) beside
    "first come, first served (FCFS)". Two entries a row need each name under ~28 characters at
    the classroom font (plotly sizes every column to the widest entry)."""
    from kvlab.viz import SchedulingControl

    h = HitRateControl(popular_prefix_stream(60, seed=1), sizes=(70, 140), static=True)
    names = [t.name for t in h.figure().data if t.showlegend is not False]
    assert len(names) == 4 and max(map(len, names)) <= 28, names
    assert "markers" in h.caption()                    # what the markers are moved to the caption
    s = SchedulingControl(sizes=(1024, 4096), order="cache-aware", static=True)
    assert "with FCFS" in s.caption() and "fcfs" not in s.caption(), s.caption()


def test_shuffle_picture_shows_its_tiles_and_a_wide_slider(shuffle):
    """The review of 6b9afee: the shuffle widget showed no tile boundaries, and its classroom slider
    was 40 px wide. 150 tokens in 64-token tiles: 3 tiles, one box each above the pool."""
    shuffle.set(num_splits=2)
    tiles = [a.text for a in shuffle.figure().layout.annotations if a.text and a.text.startswith("tile")]
    assert tiles == ["tile 0 · p0<br>L0-L3", "tile 1 · p0<br>L4-L7", "tile 2 · p1<br>L8-L9"], tiles
    assert _inputs(shuffle, "kvlab-splits-slider").layout.width == "min(460px, 100%)"
    shuffle.set(num_splits=1)


def test_shuffle_in_classroom_mode_keeps_its_outcome_short_and_its_strip_one_line(shuffle):
    """Classroom: the strip (two lines a tile) pushed the caption, the outcome of a click, under the
    599 px screen (696 px measured at 1280x720); one line a tile and a short caption there."""
    import kvlab.viz as viz

    viz.classroom(True)
    try:
        shuffle.set(num_splits=2)
        tiles = [a.text for a in shuffle.figure().layout.annotations if a.text and a.text.startswith("p")]
        caption = shuffle.caption()
    finally:
        viz.classroom(False)
        shuffle.set(num_splits=1)
    assert tiles == ["p0: L0-L3", "p0: L4-L7", "p1: L8-L9"], tiles
    assert "equal up to rounding" in caption and "table starts" not in caption, caption


def test_block_size_control_moves_the_ring_and_compares_half_and_double():
    """Review r8 of lesson 04 (cells 19, 21): the block size's trade-off was only printed tables,
    with no control. The control draws the measured rows; the slider moves the ring on both curves,
    the caption compares the pick with half and double it, and a size that was not measured is
    refused with the state unchanged."""
    from kvlab.viz import BlockSizeControl

    rows = [(bs, bs / 1000, bs - 1, 600 / bs) for bs in (1, 2, 4, 8, 16, 32)]
    c = BlockSizeControl(rows, block_size=16, static=False)
    slider = _inputs(c, "kvlab-block-size-choice")
    slider.value = 4
    assert c.block_size == 4 and c.result["lookups"] == 150.0 and c.result["max_waste"] == 3
    assert "Half (2): 0.2% empty, 300.0 lookups." in c.caption() and "Double (8)" in c.caption()
    rings = [t for t in c.figure().data if t.x == (4,)]
    assert [t.y for t in rings] == [(0.4,), (150.0,)]
    c.set(block_size=1)
    assert "Half" not in c.caption() and "Double (2)" in c.caption()
    with pytest.raises(ValueError, match="measured sizes .*got 12"):
        c.set(block_size=12)
    assert c.block_size == 1 and c.result["block_size"] == 1
    assert "Next larger (8)" in BlockSizeControl([(1, 0, 0, 9), (8, 0.1, 7, 2)], 1, static=True).caption()
