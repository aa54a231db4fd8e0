"""Tests of the kernel access view: read order = block-table order, split-K ranges, figure data.

Bugs these keep from coming back (issue 16, item 7): the split-K figure said "one colour each"
while every block had the sequence's colour and the arrows the legend's "read now" red; the
read-order stepper drew every read from its first step; the teaching view's 4-token tiles
were not told apart from the kernel's 64-token tiles.
"""
from __future__ import annotations

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab.viz as viz  # noqa: E402
from kvlab import BlockManager  # noqa: E402
from kvlab.viz.kernel_view import ARROW_COLOR, SPLIT_COLORS  # noqa: E402
from kvlab.viz.palette import FREE, HIGHLIGHT, HIT, MISS, REQUEST_COLORS  # noqa: E402


def scattered() -> BlockManager:
    """R1 ends up with table [3, 7, 9, 10, 11] (18 tokens) among other sequences."""
    m = BlockManager(12, 4)
    m.add_sequence("X", 12)
    m.add_sequence("R1", 4)
    m.add_sequence("Y", 12)
    m.append("R1", 4)
    m.free("X")
    m.add_sequence("Z", 4)
    for n in (4, 4, 2):
        m.append("R1", n)
    return m


def test_order_is_block_table_order():
    reads = viz.kernel_access_order([3, 7, 1, 5, 9], 18, 4)
    assert [r.physical for r in reads] == [3, 7, 1, 5, 9]
    assert [r.tokens for r in reads] == [4, 4, 4, 4, 2]
    assert [r.iteration for r in reads] == [0, 1, 2, 3, 4]
    kern = viz.kernel_access_order([3, 7, 1, 5, 9], 18, 4, tile_tokens=64)  # the kvlab kernel's tile
    assert {r.iteration for r in kern} == {0} and [r.physical for r in kern] == [3, 7, 1, 5, 9]


def test_split_k_ranges_like_the_kernel():
    reads = viz.kernel_access_order(list(range(10)), 37, 4, num_splits=3)  # 10 tiles -> 4, 4, 2
    by_split = {s: [r.logical for r in reads if r.split == s] for s in range(3)}
    assert by_split == {0: [0, 1, 2, 3], 1: [4, 5, 6, 7], 2: [8, 9]}
    assert reads[-1].tokens == 1
    few = viz.kernel_access_order([5, 6], 5, 4, num_splits=4)  # 2 tiles, 4 programs: two idle
    assert {r.split for r in few} == {0, 1}
    for bad in (dict(num_splits=0), dict(tile_tokens=6), dict(context_len=99)):
        args = dict(block_table=[1, 2], context_len=5, block_size=4) | bad
        with pytest.raises(ValueError):
            viz.kernel_access_order(**args)


def test_figure_data_numbers_reads_and_fades_others():
    m = scattered()
    snap = m.snapshot()
    assert snap.tables["R1"] == (3, 7, 9, 10, 11)
    d = viz.kernel_access_data(snap, "R1", num_splits=2)
    assert d["label"][3].endswith("read 1</b> (p0)") and d["label"][11].endswith("read 2</b> (p1)")
    assert d["arrows"] == [(3, 7, 0), (7, 9, 0), (10, 11, 1)]
    d = viz.kernel_access_data(snap, "R1", num_splits=2, iteration=1)
    assert d["highlight"] == [7, 11]  # iteration 2: both programs in parallel
    assert d["outline_color"][7] == HIGHLIGHT
    plain = viz.memory_map_data(snap)
    assert d["color"][4] != plain["color"][4]  # Y faded
    fig = viz.kernel_access_figure(snap, "R1", num_splits=2, iteration=1)
    assert "program 1 reads L4→P11 (2 tok)" in fig.layout.title.subtitle.text
    assert "(simulated)" in fig.layout.title.text
    with pytest.raises(KeyError, match="R9"):
        viz.kernel_access_data(snap, "R9")
    with pytest.raises(ValueError, match="iteration"):
        viz.kernel_access_data(snap, "R1", iteration=5)


def test_stepper_one_frame_per_iteration():
    snap = scattered().snapshot()
    s = viz.kernel_access_stepper(snap, "R1", static=False)
    assert len(s) == 5
    s.go(2)
    assert "L2→P9" in s.caption and s.error is None
    assert s.frame.highlight == (9,)


def test_split_k_one_colour_per_program_never_the_highlight_red():
    snap = scattered().snapshot()
    d = viz.kernel_access_data(snap, "R1", num_splits=2)
    by_split = {s: {d["color"][r.physical] for r in d["reads"] if r.split == s} for s in (0, 1)}
    assert by_split == {0: {SPLIT_COLORS[0]}, 1: {SPLIT_COLORS[1]}}  # one colour each, different
    fig = viz.kernel_access_figure(snap, "R1", num_splits=2)
    arrow_colours = [a.arrowcolor for a in fig.layout.annotations]
    assert [sh.line.color for sh in fig.layout.shapes] == arrow_colours == [SPLIT_COLORS[0]] * 2 + [SPLIT_COLORS[1]]
    legend = {t.name: t.marker.color for t in fig.data if t.name and t.x == (None,)}
    assert legend["R1: read by program 0 (split 0)"] == SPLIT_COLORS[0]
    assert legend["R1: read by program 1 (split 1)"] == SPLIT_COLORS[1]
    assert "one colour each" in fig.layout.title.text
    assert not {HIGHLIGHT, FREE, HIT, MISS, *REQUEST_COLORS} & set(SPLIT_COLORS + (ARROW_COLOR,))
    one = viz.kernel_access_figure(snap, "R1")
    assert {sh.line.color for sh in one.layout.shapes} == {ARROW_COLOR}


def test_stepper_draws_only_the_reads_done_so_far():
    snap = scattered().snapshot()
    table = snap.tables["R1"]
    for it in range(5):
        d = viz.kernel_access_data(snap, "R1", iteration=it)
        numbered = [b for b in table if "<b>read " in d["label"][b]]
        assert numbered == list(table[:it + 1])
        assert all("not yet" in d["label"][b] for b in table[it + 1:])
        assert len(d["arrows"]) == it and d["highlight"] == [table[it]]
        assert len({d["color"][b] for b in table[it + 1:]} & {d["color"][table[0]]}) == 0  # unread: faded
    s = viz.kernel_access_stepper(snap, "R1", static=True)
    s.go(1)
    fig = s.figure()
    assert len(fig.layout.shapes) == 1 and "read so far: 2 of 5 blocks" in s.caption


def test_the_stepper_counts_its_steps_once():
    """Issue 28, the review of lesson 05 (cell 8): "step 2 / 5" in the stepper's caption, and
    "iteration 2/5" in it and again under the figure's title."""
    s = viz.kernel_access_stepper(scattered().snapshot(), "R1", static=True)
    s.go(1)
    assert "iteration" not in s.caption and s.caption.startswith("the program reads L1")
    assert not s.figure().layout.title.subtitle.text
    assert "iteration 2/5" in viz.kernel_access_figure(scattered().snapshot(), "R1", iteration=1).layout.title.subtitle.text


def test_tile_size_is_in_the_title():
    """The teaching view steps 4-token tiles; the kernel's 64-token tile reads all 5 blocks in one iteration."""
    snap = scattered().snapshot()
    small = viz.kernel_access_figure(snap, "R1")
    assert "4-token tiles" in small.layout.title.text
    real = viz.kernel_access_data(snap, "R1", tile_tokens=64)
    assert real["num_iterations"] == 1 and len(real["reads"]) == 5
    assert "64-token tiles" in viz.kernel_access_figure(snap, "R1", tile_tokens=64).layout.title.text


def test_stepper_caption_counts_the_reads_of_its_own_step():
    """Issue 21 [5]: every frame said "read so far: 8 of 8 blocks" (the count of the whole run)."""
    snap = scattered().snapshot()
    frames = viz.kernel_access_frames(snap, "R1")
    assert [f.caption.rsplit("read so far: ", 1)[1] for f in frames] == [
        f"{k} of 5 blocks" for k in range(1, 6)]
    split = viz.kernel_access_frames(snap, "R1", num_splits=2)  # 3 + 2 tiles: both programs per step
    assert [f.caption.rsplit("read so far: ", 1)[1] for f in split] == ["2 of 5 blocks", "4 of 5 blocks", "5 of 5 blocks"]


def test_a_long_sequence_is_drawn_in_rows_of_8_without_tangled_arrows():
    """Lesson 05's shuffle control draws a 19-block sequence over 24 blocks: at 16 columns its
    labels overlapped and 18 arcs tangled; now 8 columns, the order in numbers, a wrapped subtitle."""
    from kvlab.viz.shuffle_view import table_snapshot

    snap = table_snapshot(24, 16, {"R1": [13, 0, 23, 16, 19, 11, 17, 7, 22, 15, 20, 21, 8, 14, 2, 3, 1, 12, 6]},
                          {"R1": 300})
    d = viz.kernel_access_data(snap, "R1", num_splits=2, tile_tokens=64)
    assert d["layout"].cols == 8 and d["layout"].rows == 3
    fig = viz.kernel_access_figure(snap, "R1", num_splits=2, tile_tokens=64)
    assert not fig.layout.shapes and "the numbers on the blocks give the order" in fig.layout.title.subtitle.text.replace("<br>", " ")
    assert all(len(line) <= 115 for line in fig.layout.title.subtitle.text.split("<br>"))
    few = viz.kernel_access_figure(scattered().snapshot(), "R1")          # 5 reads: arrows drawn
    assert len(few.layout.shapes) == 4


def test_the_legend_lists_the_red_outline_only_when_a_step_is_shown():
    """The whole-run picture outlines nothing in red, so its legend must not explain red."""
    snap = scattered().snapshot()
    names = lambda fig: [t.name for t in fig.data if t.x == (None,)]  # noqa: E731
    assert "read this iteration" not in names(viz.kernel_access_figure(snap, "R1"))
    assert "read this iteration" in names(viz.kernel_access_figure(snap, "R1", iteration=1))


def test_title_says_which_programs_got_no_tile():
    """Issue 28 [7]: lesson 05's title said "4 programs, one colour each" while 3 were drawn (the
    fourth got no tile: ceil(5 tiles / 4) = 2 a program, so programs 0-2 read and 3 idles)."""
    m = scattered()
    title = viz.kernel_access_figure(m.snapshot(), "R1", num_splits=4).layout.title.text
    assert "4 programs (1 with no tile to read)" in title, title
    assert "no tile" not in viz.kernel_access_figure(m.snapshot(), "R1", num_splits=2).layout.title.text


def lesson05_pool() -> BlockManager:
    """Lesson 05's pool: seq1 5, seq2 13 and seq3 30 tokens grown a token at a time (16 blocks of 4)."""
    m = BlockManager(num_blocks=16, block_size=4)
    lengths = {"seq1": 5, "seq2": 13, "seq3": 30}
    for seq in lengths:
        m.add_sequence(seq, 0)
    for step in range(max(lengths.values())):
        for seq, n in lengths.items():
            if step < n:
                m.append(seq, 1)
    return m


def _path_points(path: str, samples: int = 40) -> list[tuple[float, float]]:
    """Points along a shape's SVG path: its M/L polyline corners and Q curves, sampled."""
    toks = path.replace(",", " ").split()
    pts, cur, i = [], (0.0, 0.0), 0
    while i < len(toks):
        op = toks[i]
        if op in ("M", "L"):
            cur = (float(toks[i + 1]), float(toks[i + 2]))
            if op == "L":
                a = pts[-1]
                pts += [(a[0] + (cur[0] - a[0]) * k / samples, a[1] + (cur[1] - a[1]) * k / samples)
                        for k in range(1, samples + 1)]
            else:
                pts.append(cur)
            i += 3
        elif op == "Q":
            c, e = (float(toks[i + 1]), float(toks[i + 2])), (float(toks[i + 3]), float(toks[i + 4]))
            s = pts[-1]
            for k in range(1, samples + 1):
                t = k / samples
                pts.append(((1 - t) ** 2 * s[0] + 2 * (1 - t) * t * c[0] + t * t * e[0],
                            (1 - t) ** 2 * s[1] + 2 * (1 - t) * t * c[1] + t * t * e[1]))
            cur = e
            i += 5
        else:
            raise AssertionError(f"unexpected path command {op!r} in {path!r}")
    return pts


def _cells(fig) -> list[tuple[float, float, float, float]]:
    """Every block's cell (x0, x1, y0, y1) from the figure's own bar trace."""
    bars = next(t for t in fig.data if t.name == "blocks")
    return [(b, b + w, y - bars.width / 2, y + bars.width / 2) for b, w, y in zip(bars.base, bars.x, bars.y)]


@pytest.mark.parametrize("classroom", [False, True])
@pytest.mark.parametrize("splits", [1, 2])
def test_read_arrows_never_enter_a_block(classroom, splits):
    """Issue 28, the review of lesson 05 (cell 7): the split-K figure's arcs between the second
    row's blocks rose into the first row and crossed its "read 1 (p0)" labels, and the arrow from
    P7 to P9 ran across them. Every arrow (its whole path, and its head) stays outside every block
    but the two it joins, where it only touches the edge."""
    from kvlab.viz.pool_grid import CELL_H

    viz.classroom(classroom)
    try:
        for snap, seq in ((lesson05_pool().snapshot(), "seq3"), (scattered().snapshot(), "R1")):
            fig = viz.kernel_access_figure(snap, seq, num_splits=splits)
            cells = _cells(fig)
            assert fig.layout.shapes
            for sh in fig.layout.shapes:
                for x, y in _path_points(sh.path):
                    inside = [b for b, (x0, x1, y0, y1) in enumerate(cells)
                              if x0 + 1e-6 < x < x1 - 1e-6 and y0 + 1e-6 < y < y1 - 1e-6]
                    assert not inside, f"{seq}, {splits} programs: {sh.path} passes through block {inside}"
            for a in fig.layout.annotations:  # the heads: from (ax, ay) to (x, y), outside every block too,
                assert ((a.x - a.ax) ** 2 + (a.y - a.ay) ** 2) ** 0.5 >= 0.15  # and long enough to be drawn
                for k in range(11):
                    x, y = a.ax + (a.x - a.ax) * k / 10, a.ay + (a.y - a.ay) * k / 10
                    assert not [b for b, (x0, x1, y0, y1) in enumerate(cells)
                                if x0 + 1e-6 < x < x1 - 1e-6 and y0 + 1e-6 < y < y1 - 1e-6]
            assert CELL_H  # the cells above are the figure's own
    finally:
        viz.classroom(False)


@pytest.mark.parametrize("classroom", [False, True])
def test_the_stepper_keeps_its_layout_from_frame_to_frame(classroom):
    """Issue 28, the review of lesson 05 (cell 8): frame 1 draws no arrow, so it had no room
    above the grid and every later frame moved the blocks down by about 90 px."""
    viz.classroom(classroom)
    try:
        snap = lesson05_pool().snapshot()
        s = viz.kernel_access_stepper(snap, "seq3", tile_tokens=4, static=True)
        seen = set()
        for i in range(len(s)):
            s.go(i)
            fig = s.figure()
            bars = next(t for t in fig.data if t.name == "blocks")
            seen.add((fig.layout.height, tuple(fig.layout.yaxis.range), fig.layout.margin.t, tuple(bars.y)))
        assert len(seen) == 1, seen
    finally:
        viz.classroom(False)


def _strip(fig) -> list[tuple[float, float, str]]:
    """The tile strip's boxes (x0, x1, fill), left to right: the rects above the pool (y < -0.5)."""
    rects = [s for s in fig.layout.shapes if s.type == "rect" and s.y1 is not None and s.y1 < -0.5]
    return sorted((r.x0, r.x1, r.fillcolor) for r in rects)


def test_split_k_picture_shows_which_program_takes_which_tile():
    """The review of 6b9afee: lesson 05's split-K picture (8 one-block tiles, 2 programs, 4 each)
    could not teach the rule, and showed no tile boundaries. The strip draws seq3's tiles in loop
    order, one box per tile in its program's colour; lesson 05 draws 30 tokens in 8-token tiles
    over 3 programs: 2, 2 and none (an even spread would give 2, 1, 1)."""
    m = lesson05_pool()
    fig = viz.kernel_access_figure(m.snapshot(), "seq3", num_splits=3, tile_tokens=8, tiles=True)
    boxes = _strip(fig)
    assert [c for _, _, c in boxes] == [SPLIT_COLORS[0]] * 2 + [SPLIT_COLORS[1]] * 2 + ["#ffffff"]  # p0 p0 p1 p1, p2 idle
    assert all(a[1] <= b[0] + 1e-9 for a, b in zip(boxes, boxes[1:]))                   # side by side, in order
    words = [a.text for a in fig.layout.annotations if a.text and a.text.startswith("tile")]
    assert words == ["tile 0 · p0<br>L0-L1", "tile 1 · p0<br>L2-L3", "tile 2 · p1<br>L4-L5", "tile 3 · p1<br>L6-L7"]
    assert "3 programs (1 with no tile to read)" in fig.layout.title.text
    assert any(a.text == "p2:<br>no tile" for a in fig.layout.annotations)
    assert not _strip(viz.kernel_access_figure(m.snapshot(), "seq3", num_splits=3, tile_tokens=8))  # off by default
