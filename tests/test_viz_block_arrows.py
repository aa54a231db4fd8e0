"""The block-table arrows' geometry (issue 28 [6], the review of lessons 00, 01, 04, 05, 06): an
arrow from a table cell to its physical block crosses no label, runs in straight runs across and
down, and meets another arrow only where their order swaps between the tables and the pool
(once, at a right angle), never along a shared run. Checked on the figure's own traces, for
tables of several sizes, shared blocks, forks, wrapped tables, several pool rows and shuffled or
reversed orders, in both themes. Arrows whose order swaps between the tables and the pool must
cross (a reversed table; a fork whose upper row points left of a lower row's arrow to the right);
they cross once each, at a right angle."""
from __future__ import annotations

import itertools

import pytest

import kvlab.viz as viz
from kvlab.memory.block_manager import BlockManager
from kvlab.memory.snapshot import MemorySnapshot

EPS = 1e-7


def _snapshot(num_blocks: int, tables: dict[str, list[int]], block_size: int = 4) -> MemorySnapshot:
    """A snapshot with exactly these tables (every block full; the first holder owns it)."""
    ref, owner = [0] * num_blocks, [None] * num_blocks
    for h, t in tables.items():
        for b in t:
            ref[b] += 1
            owner[b] = owner[b] or h
    return MemorySnapshot(num_blocks, block_size, tuple(ref), tuple(owner), {h: tuple(t) for h, t in tables.items()},
                          {h: len(t) * block_size for h, t in tables.items()},
                          tuple(block_size if r else 0 for r in ref), tuple(b for b in range(num_blocks) if not ref[b]))


def _managers() -> dict[str, tuple[MemorySnapshot, int | None]]:
    """Tables of several sizes, shared blocks and orders: name -> (snapshot, pool columns)."""
    cases: dict[str, tuple[MemorySnapshot, int | None]] = {}
    m = BlockManager(num_blocks=12, block_size=4)  # lesson 00 cells 9/12: forks, a lower pool row
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R1-sample2")
    m.add_sequence("R3", 17)
    cases["forks, two pool rows"] = (m.snapshot(), 4)
    m = BlockManager(num_blocks=12, block_size=4)  # lesson 06: one prompt, three samples
    m.add_sequence("P", 9)
    for k in range(3):
        m.fork("P", f"S{k}")
    cases["three samples share a prompt"] = (m.snapshot(), None)
    cases["shuffled, one row"] = (_snapshot(8, {"R1": [5, 2, 7], "R2": [0, 6, 1, 3]}), None)
    cases["reversed"] = (_snapshot(6, {"R1": [5, 4, 3, 2, 1, 0]}), None)
    cases["shared, shuffled"] = (_snapshot(8, {"A": [3, 1, 6], "B": [3, 1, 0], "C": [4, 3]}), None)
    cases["wrapped table, shuffled, 3 pool rows"] = (
        _snapshot(12, {"R1": [11, 0, 5, 9, 2, 7], "R2": [3, 8], "R3": [10, 4, 1, 6]}), 4)
    cases["last column"] = (_snapshot(4, {"A": [3, 0], "B": [0, 3, 2], "C": [1, 2, 3, 0]}), None)
    cases["rows below still short"] = (_snapshot(6, {"R1": [0, 1, 2], "R2": [3], "R3": [4]}), None)
    return cases


def _polylines(trace) -> list[list[tuple[float, float]]]:
    out, cur = [], []
    for x, y in zip(trace.x, trace.y):
        if x is None:
            out, cur = (out + [cur]) if cur else out, []
        else:
            cur.append((float(x), float(y)))
    return out + [cur] if cur else out


def _boxes(fig) -> list[tuple[float, float, float, float]]:
    """Every labelled box: the pool's blocks and the table cells (x0, x1, y0, y1)."""
    out = []
    for t in fig.data:
        if t.type == "bar" and t.name in ("blocks", "tables"):
            h = t.width / 2
            out += [(b, b + w, y - h, y + h) for b, w, y in zip(t.base, t.x, t.y)]
    return out


def _segment_in_box(p, q, box) -> bool:
    """Whether segment pq runs through the box's inside (its edges do not count)."""
    x0, x1, y0, y1 = box[0] + EPS, box[1] - EPS, box[2] + EPS, box[3] - EPS
    t0, t1 = 0.0, 1.0  # Liang-Barsky clipping
    dx, dy = q[0] - p[0], q[1] - p[1]
    for d, lo, hi, v in ((dx, x0, x1, p[0]), (dy, y0, y1, p[1])):
        if abs(d) < 1e-12:
            if not lo < v < hi:
                return False
            continue
        a, b = sorted(((lo - v) / d, (hi - v) / d))
        t0, t1 = max(t0, a), min(t1, b)
    return t1 - t0 > 1e-9


def _meet(p, q, r, s) -> tuple[str, tuple[float, float]] | None:
    """How segments pq and rs meet: ("cross", point), ("overlap", point) or None."""
    d = (q[0] - p[0]) * (s[1] - r[1]) - (q[1] - p[1]) * (s[0] - r[0])
    if abs(d) < 1e-12:  # parallel: do they share a stretch?
        if abs((r[0] - p[0]) * (q[1] - p[1]) - (r[1] - p[1]) * (q[0] - p[0])) > 1e-9:
            return None
        axis = 0 if abs(q[0] - p[0]) > abs(q[1] - p[1]) else 1
        lo, hi = sorted((p[axis], q[axis]))
        lo2, hi2 = sorted((r[axis], s[axis]))
        return ("overlap", p) if min(hi, hi2) - max(lo, lo2) > -1e-9 else None
    t = ((r[0] - p[0]) * (s[1] - r[1]) - (r[1] - p[1]) * (s[0] - r[0])) / d
    u = ((r[0] - p[0]) * (q[1] - p[1]) - (r[1] - p[1]) * (q[0] - p[0])) / d
    if -1e-9 <= t <= 1 + 1e-9 and -1e-9 <= u <= 1 + 1e-9:
        return "cross", (p[0] + t * (q[0] - p[0]), p[1] + t * (q[1] - p[1]))
    return None


def _x_at(line, y: float) -> float:
    """Where a polyline that runs down crosses height y (its first crossing)."""
    for (xa, ya), (xb, yb) in zip(line, line[1:]):
        if min(ya, yb) - 1e-9 <= y <= max(ya, yb) + 1e-9 and abs(yb - ya) > 1e-12:
            return xa + (xb - xa) * (y - ya) / (yb - ya)
    raise AssertionError(f"the arrow {line} never reaches y={y}")


def _problems(snap: MemorySnapshot, cols: int | None) -> list[str]:
    lay = viz.grid_layout(snap.num_blocks, cols)
    geom = viz.map_geometry(lay, [snap])
    fig = viz.memory_map_figure(snap, cols=cols)
    boxes = _boxes(fig)
    lines = [(t.name, line) for t in fig.data if t.name and t.name.endswith(" arrows") for line in _polylines(t)]
    assert len(lines) == sum(len(t) for t in snap.tables.values())
    problems = []
    for name, line in lines:
        for p, q in zip(line, line[1:]):
            if abs(p[0] - q[0]) > 1e-9 and abs(p[1] - q[1]) > 1e-9:
                problems.append(f"{name}: a slanted run {p} -> {q}")
            hit = [b for b in boxes if _segment_in_box(p, q, b)]
            if hit:
                problems.append(f"{name}: the run {p} -> {q} crosses the label box {hit[0]}")
    top = geom.table_height - 0.75 + 0.56 / 2 + 1e-6  # under the last table row
    bottom = geom.pool_y0 - 0.42 - 1e-6               # the pool's top
    for (na, a), (nb, b) in itertools.combinations(lines, 2):
        swapped = (_x_at(a, top) - _x_at(b, top)) * (_x_at(a, bottom) - _x_at(b, bottom)) < 0
        met = [m for (p, q), (r, s) in itertools.product(zip(a, a[1:]), zip(b, b[1:])) if (m := _meet(p, q, r, s))]
        points = {(round(x, 6), round(y, 6)) for _kind, (x, y) in met}
        if any(kind == "overlap" for kind, _ in met):
            problems.append(f"{na} and {nb} run along each other at {met[0][1]}")
        elif points and not swapped:
            problems.append(f"{na} and {nb} cross at {sorted(points)} though their order is the same at both ends")
        elif len(points) > 1:
            problems.append(f"{na} and {nb} cross {len(points)} times: {sorted(points)}")
    return problems


@pytest.mark.parametrize("case", list(_managers()))
def test_block_table_arrows_cross_no_label_and_no_arrow_they_need_not(case):
    snap, cols = _managers()[case]
    problems = _problems(snap, cols)
    assert not problems, "\n".join(problems)


def test_classroom_arrows_too():
    """The projector's theme sizes the canvas and the labels, not the routes: the same checks hold."""
    viz.classroom(True)
    try:
        problems = _problems(*_managers()["forks, two pool rows"])
    finally:
        viz.classroom(False)
    assert not problems, "\n".join(problems)


def test_samples_of_one_prompt_cross_nowhere():
    """Lesson 06's picture (a prompt and three samples, every table in order): not one crossing
    (the straight arrows of the last round crossed 18 times)."""
    snap, cols = _managers()["three samples share a prompt"]
    lines = [line for t in viz.memory_map_figure(snap, cols=cols).data if t.name and t.name.endswith(" arrows")
             for line in _polylines(t)]
    for a, b in itertools.combinations(lines, 2):
        assert not [pq for pq in itertools.product(zip(a, a[1:]), zip(b, b[1:])) if _meet(*pq[0], *pq[1])], (a, b)


def test_an_arrow_with_no_cell_below_goes_straight_down():
    """Lesson 04's stepper: at its first step only R1 has cells, and its arrows ran down the gaps
    past the empty rows of R2 and R3, a detour around nothing."""
    snap, cols = _managers()["rows below still short"]
    r1 = [line for t in viz.memory_map_figure(snap, cols=cols).data if t.name == "R1 arrows" for line in _polylines(t)]
    assert [len(line) for line in r1] == [6, 2, 2]  # L0 steps round R2's and R3's cells; L1, L2 drop straight


@pytest.mark.parametrize("classroom", [False, True])
def test_a_copy_label_sits_under_its_own_arc(classroom):
    """Issue 28, the review of lesson 06 (the stepper's step 4): the "copy P2 → P3" label hung
    from the arc's lowest point, so the arc (and its thick dotted line) ran along the label's top
    edge. Every arc point above the label's width is at least 6 px above the label's anchor."""
    from kvlab.viz.palette import theme

    viz.classroom(classroom)
    try:
        m = BlockManager(num_blocks=12, block_size=4)  # lesson 06: one prompt, three samples, then a copy
        m.add_sequence("R1", 10)
        m.fork("R1", "R2")
        m.fork("R1", "R3")
        copies = m.append("R2", 1)
        for pair in (copies, [(2, 9)], [(9, 2)]):
            fig = viz.memory_map_figure(m.snapshot(), copies=pair, cols=12)
            tr = next(t for t in fig.data if t.name == "copy-on-write")
            lay = fig.layout
            width = lay.width or theme().grid_width
            ux = (width - lay.margin.l - lay.margin.r) / (lay.xaxis.range[1] - lay.xaxis.range[0])
            uy = (lay.height - lay.margin.t - lay.margin.b) / abs(lay.yaxis.range[0] - lay.yaxis.range[1])
            pts = [(x, y, t) for x, y, t in zip(tr.x, tr.y, tr.text) if x is not None]
            labels = [(x, y, t) for x, y, t in pts if t]
            arc = [(x, y) for x, y, t in pts if not t]
            assert labels and arc
            for lx, ly, text in labels:
                half = len(text) * theme().font_size * 0.3 / ux  # half the label's width, in grid units
                above = [(ly - y) * uy for x, y in arc if abs(x - lx) <= half]
                assert above and min(above) >= 6, (pair, text, min(above))
    finally:
        viz.classroom(False)


@pytest.mark.parametrize("classroom", [False, True])
def test_arrows_down_the_pool_gaps_keep_clear_of_the_blocks(classroom):
    """Issue 28, the review of lesson 05 (cell 6, classroom mode): the arrows into the pool's second
    row ran down the gaps of the first row 1 px from the blocks' edges, their 3 px lines on the
    blocks. With arrows into a lower row the pool's blocks are narrower, and every run down a gap
    keeps at least 2 px between its line and a block."""
    from kvlab.viz.palette import theme

    viz.classroom(classroom)
    try:
        m = BlockManager(num_blocks=16, block_size=4)  # lesson 05: three requests grown a token at a time
        lengths = {"seq1": 5, "seq2": 13, "seq3": 30}
        for seq in lengths:
            m.add_sequence(seq, 0)
        for step in range(30):
            for seq, n in lengths.items():
                if step < n:
                    m.append(seq, 1)
        fig = viz.memory_map_figure(m.snapshot(), cols=8)
        geom = viz.block_tables.map_geometry(viz.memory_map.grid_layout(16, 8), [m.snapshot()])
        bars = next(t for t in fig.data if t.name == "blocks")
        blocks = [(b, b + w, y - bars.width / 2, y + bars.width / 2) for b, w, y in zip(bars.base, bars.x, bars.y)]
        half_line = (theme().line_width + 0.5) / 2
        runs = 0
        for tr in (t for t in fig.data if t.name.endswith(" arrows")):
            for line in _polylines(tr):
                for (x0, y0), (x1, y1) in zip(line, line[1:]):
                    if abs(x0 - x1) > EPS:
                        continue
                    for bx0, bx1, by0, by1 in blocks:
                        if min(y0, y1) < by1 - EPS and max(y0, y1) > by0 + EPS:  # beside this block
                            runs += 1
                            gap_px = min(abs(x0 - bx0), abs(x0 - bx1)) * geom.cell_px - half_line
                            assert gap_px >= 2, (x0, (bx0, bx1), gap_px)
        assert runs  # some arrows do run down the first row's gaps
    finally:
        viz.classroom(False)


def _lesson06_frames() -> list:
    """Lesson 06's stepper (cell 8) and its free of R2 (section 3): one prompt, three forks, three appends, a free."""
    from kvlab.viz.memory_animation import memory_frames

    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 10)
    m.fork("R1", "R2")
    m.fork("R1", "R3")
    for s in ("R2", "R3", "R1"):
        m.append(s, 1)
    m.free("R2")
    return memory_frames(m.snapshots, m.log)


@pytest.mark.parametrize("classroom", [False, True])
def test_lesson06_stepper_arrows_never_cross(classroom):
    """Review r5_05_06 (lesson 06, cell 8): from step 6 on, R3's L2→P4 ran across R2's L2→P3 where R2's
    arrow stepped out of column 2 into the gap on its right (towards P3) and R3's dropped straight down
    from under it towards P4, further right: their order swapped for nothing. Every table here is in
    order, so in no frame, in either theme, does one arrow meet another."""
    from kvlab.viz.memory_animation import MemoryMapView

    viz.classroom(classroom)
    try:
        frames = _lesson06_frames()
        view = MemoryMapView(frames, cols=12, step_legend=True)
        bad = []
        for k, f in enumerate(frames, 1):
            lines = [(t.name, line) for t in view(f).data if t.name and t.name.endswith(" arrows")
                     for line in _polylines(t)]
            for (na, a), (nb, b) in itertools.combinations(lines, 2):
                met = [m for (p, q), (r, s) in itertools.product(zip(a, a[1:]), zip(b, b[1:])) if (m := _meet(p, q, r, s))]
                if met:
                    bad.append(f"step {k}: {na} and {nb} meet at {met[0][1]}")
        assert not bad, "\n".join(bad)
    finally:
        viz.classroom(False)


def _vertical_runs(fig) -> list[tuple[str, float, float, float]]:
    """Every vertical run of a table arrow: (holder, x, y top, y bottom)."""
    out = []
    for t in fig.data:
        if t.name and t.name.endswith(" arrows"):
            for line in _polylines(t):
                out += [(t.name[:-7], p[0], min(p[1], q[1]), max(p[1], q[1])) for p, q in zip(line, line[1:])
                        if abs(p[0] - q[0]) < 1e-9 and abs(p[1] - q[1]) > 1e-9]
    return out


@pytest.mark.parametrize("classroom", [False, True])
def test_lesson06_tables_keep_their_own_corridors_and_heads_apart(classroom):
    """Review r7_06 (cell 8 and cell 12): from step 4 on, R1's and R2's arrows ran down one corridor,
    0.02 grid units (about 1 px) apart, for about 60 px, and three arrowheads landed within a few px
    of each other on P0 and P1. Now the arrows of one gap share its whole width (table cells 0.75 of a
    column wide, 0.6 in classroom mode), so two tables' vertical runs side by side are at least 0.05
    units apart (3.3 px at 66 px a block, 1.5 px lines), 0.08 in classroom mode (5.3 px, 3.5 px lines),
    and the arrowheads on one block at least 0.2 units apart."""
    from kvlab.viz.memory_animation import MemoryMapView

    viz.classroom(classroom)
    try:
        frames = _lesson06_frames()
        view = MemoryMapView(frames, cols=12, step_legend=True)
        bad, apart = [], 0.075 if classroom else 0.049
        for k, f in enumerate(frames, 1):
            fig = view(f)
            runs = _vertical_runs(fig)
            for (ha, xa, ta, ba), (hb, xb, tb, bb) in itertools.combinations(runs, 2):
                if ha != hb and min(ba, bb) - max(ta, tb) > 0.2 and abs(xa - xb) < apart:
                    bad.append(f"step {k}: {ha} and {hb} run {abs(xa - xb):.3f} apart at x {xa:.2f}")
            heads = [(line[-1][0], line[-1][1]) for t in fig.data if t.name and t.name.endswith(" arrows")
                     for line in _polylines(t)]
            for (xa, ya), (xb, yb) in itertools.combinations(heads, 2):
                if abs(ya - yb) < 1e-6 and abs(xa - xb) < 0.2:
                    bad.append(f"step {k}: two arrowheads {abs(xa - xb):.3f} apart at x {xa:.2f}")
        assert not bad, "\n".join(bad[:10])
    finally:
        viz.classroom(False)
