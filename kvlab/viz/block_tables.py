"""Block tables beside the pool: every holder's table as a row of cells with an arrow into each block.

The memory map (:mod:`kvlab.viz.memory_map`) draws the physical blocks. This module adds what
points into them, as the translation widget draws one table: a row per holder (a sequence's block
table, or the radix tree's blocks as the holder ``"tree"``) with a cell per logical block, ``L0
L1 ...``, and an arrow from each cell down to its physical block (routed in straight runs, down the
gaps between columns and along a track of its own between the tables and the pool, so it crosses
no label and no arrow it need not: :func:`arrow_routes`), so a block with ref count 2 has two
arrows and both holders are named. A copy-on-write copy is drawn as an arc from the
source block to its copy, under the pool, labelled "copy".

:class:`MapGeometry` fixes where everything goes for a whole run (the holders of every frame get
a row, in order of first appearance; a table longer than a pool row wraps like the pool), so
axes, canvas and trace count never change between frames.

Mirrors no vLLM or SGLang file (kvlab's pictures).

Example:
    >>> from kvlab.memory.block_manager import BlockManager
    >>> from kvlab.viz.memory_map import grid_layout, memory_map_data
    >>> m = BlockManager(num_blocks=6, block_size=4)
    >>> _ = m.add_sequence("R1", 5); _ = m.fork("R1", "R2")
    >>> g = map_geometry(grid_layout(6), [m.snapshot()])
    >>> g.holders, g.row0, g.pool_y0
    (('R1', 'R2'), {'R1': 0.0, 'R2': 0.75}, 2.33)
    >>> routes = arrow_routes(memory_map_data(m.snapshot()), g)
    >>> [(h, [(i, b) for i, b, _ in a]) for h, a in routes.items()]
    [('R1', [(0, 0), (1, 1)]), ('R2', [(0, 0), (1, 1)])]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..memory.snapshot import MemorySnapshot
from .pool_grid import CELL_H, CELL_W, GridLayout, block_traces, cell_label_px
from .palette import HIGHLIGHT, holder_color, theme, tint

__all__ = ["MapGeometry", "map_geometry", "arrow_routes", "copy_arc", "frame_traces", "MAX_TABLE_HOLDERS"]

MAX_TABLE_HOLDERS = 8  # more holders than this: tables are not drawn (the hover still names them)
TABLE_PITCH = 0.75  # grid units between table rows
TABLE_CELL_H = 0.56
# narrower than a pool block: the gaps between table columns carry the arrows down (review r7_06: up to four
# arrows share a gap in lesson 06, so the gaps are wide: 0.25 of a column, where lesson 05's "L7→P15" still
# fits, and 0.4 in classroom mode, whose lines are 3.5 px thick and whose cells say only "P3")
TABLE_CELL_W, CLASSROOM_TABLE_CELL_W = 0.75, 0.6
_POOL_LANES = (0.46, 0.495)  # ... and down the pool's gaps into a lower pool row (a block is CELL_W wide)
DEEP_CELL_W = 0.8  # a pool block's width when arrows run down its gaps into a lower pool row (room for them)
_DEEP_LANES = (0.43, 0.49)  # ... and where they run then
GAP = 1.3  # between the last table row and the pool: room for the arrows
COPY_ROOM = 0.95  # under the pool: room for copy-on-write arcs
COPY_LABEL_DROP = 0.1  # grid units between a copy arc's lowest point and its label
ROW_STRETCH = 1.2  # px per grid unit down, relative to across: room for three lines of label in a block
LABEL_UNITS_PX = 6.25  # fit_labels: px per grid unit down, per px of label font (3 lines x 1.25 in 0.6 units)
CLASSROOM_DRAWING_PX = 400  # classroom mode: the drawing's height budget (title, legend and controls come on top)
CLASSROOM_MIN_CELL_PX = 72  # ... but a block never narrower than three lines of 16 px labels need
CLASSROOM_GAP, CLASSROOM_COPY_ROOM = 0.85, 0.75  # classroom mode: the gaps shrink, not the blocks (599 px)


@dataclass(frozen=True)
class MapGeometry:
    """Where the tables, the pool and the copy arcs sit (grid units, y down), and the canvas in px."""

    layout: GridLayout
    holders: tuple[str, ...]
    row0: dict[str, float]  # y of each holder's first table row
    table_height: float  # grid units taken by the tables (0 without tables)
    pool_y0: float
    copy_room: bool
    margin: tuple[int, int, int, int]
    width: int
    height: int
    legend_ids: tuple[str, ...]  # every id that colours something in some frame
    copy_units: float = COPY_ROOM  # grid units under the pool for the copy arcs (when copy_room)
    pool_cell_w: float = CELL_W  # a pool block's width: narrower when arrows run down the gaps between blocks
    table_cell_w: float = TABLE_CELL_W  # a table cell's width (the rest of its column is the arrows' gap)

    @property
    def cell_px(self) -> float:
        """A block's column in px on the canvas (the table labels are sized from it)."""
        return (self.width - self.margin[0] - self.margin[1]) / self.layout.cols

    @property
    def y_range(self) -> list[float]:
        bottom = self.pool_y0 + self.layout.rows - 0.5 + (self.copy_units if self.copy_room else 0.0)
        return [bottom, -0.5]

    def legend(self, colors: dict[str, str]) -> dict[str, str]:
        return {s: holder_color(s, colors) for s in self.legend_ids}

    def annotations(self) -> list[dict[str, Any]]:
        """Row labels on the left: each holder's name, and "pool" beside the physical blocks."""
        th = theme()
        out = []
        rows = [(self.row0[h], "radix tree" if h == "tree" else h) for h in self.holders]
        if self.holders:
            rows.append((self.pool_y0, "pool"))
        for y, text in rows:
            out.append(dict(x=0, xshift=-6, y=y, xref="paper", yref="y", text=f"<b>{text}</b>", showarrow=False,
                            xanchor="right", font=dict(size=th.font_size, color=th.text_color)))
        return out


def _label_px(holders: Sequence[str]) -> int:
    th = theme()
    longest = max([len("radix tree" if h == "tree" else h) for h in holders] + [4])
    return int(longest * th.font_size * 0.62) + 24


def map_geometry(layout: GridLayout, snapshots: Iterable[MemorySnapshot], tables: bool | None = None,
                 copies: bool = False, fit_labels: bool = False) -> MapGeometry:
    """The geometry for a run's frames. ``tables``: draw block tables (None: when the pool is
    labelled and there are at most :data:`MAX_TABLE_HOLDERS` holders); ``copies``: leave room for
    copy-on-write arcs; ``fit_labels``: blocks tall enough for a three-line label between the slot
    ticks and the arrowheads (a static figure: classroom mode's narrow blocks grow taller)."""
    snaps = list(snapshots)
    holders: list[str] = []
    longest: dict[str, int] = {}
    ids: set[str] = set()
    for s in snaps:
        for h, t in s.tables.items():
            if h not in holders:
                holders.append(h)
            longest[h] = max(longest.get(h, 0), len(t))
        ids.update(o for b, o in enumerate(s.owner) if o is not None and s.ref_count[b] > 0)
    if "tree" in holders:  # the tree's row last
        holders.remove("tree")
        holders.append("tree")
    if tables is None:
        tables = layout.show_text and 0 < len(holders) <= MAX_TABLE_HOLDERS
    th = theme()
    cols = layout.cols
    if not tables:
        holders = []
    row0, y = {}, 0.0
    for h in holders:
        row0[h] = y
        y += max(1, -(-longest[h] // cols)) * TABLE_PITCH
    table_height = y
    gap, copy_units = (CLASSROOM_GAP, CLASSROOM_COPY_ROOM) if th.high_contrast else (GAP, COPY_ROOM)
    pool_y0 = table_height - TABLE_PITCH + TABLE_CELL_H / 2 + gap if holders else 0.0
    left = _label_px(holders) if holders else layout.margin[0]
    right, top, bottom = layout.margin[1], layout.margin[2], layout.margin[3]
    cell = min((th.grid_width - left - right) / cols, 110.0 if th.high_contrast else 80.0)
    units = (pool_y0 + layout.rows + (copy_units if copies else 0.0)) if holders or copies else layout.rows
    stretch = ROW_STRETCH if layout.show_text else 1.0
    if th.high_contrast:  # a projector shows 599 px: keep the drawing (and a stepper's controls) on one screen
        cell = min(cell, max(CLASSROOM_DRAWING_PX / (units * stretch), CLASSROOM_MIN_CELL_PX))  # never wider than fits
    if fit_labels and layout.show_text:  # px per grid unit down: three label lines in the 0.6 units between the ticks
        stretch = max(stretch, LABEL_UNITS_PX * cell_label_px(layout.cell) / cell)
    width = int(round(cell * cols)) + left + right
    height = int(round(cell * units * stretch)) + top + bottom
    legend_ids = tuple(sorted(ids | {h for h in holders if h != "tree"})) + (("tree",) if "tree" in holders else ())
    deep = bool(holders) and layout.rows > 1  # arrows into a lower pool row run down the gaps of the rows above
    return MapGeometry(layout, tuple(holders), row0, table_height, round(pool_y0, 6), bool(copies),
                       (left, right, top, bottom), width, height, legend_ids, copy_units,
                       DEEP_CELL_W if deep else CELL_W, CLASSROOM_TABLE_CELL_W if th.high_contrast else TABLE_CELL_W)


def _cell_xy(i: int, cols: int, y0: float) -> tuple[float, float]:
    return float(i % cols), y0 + (i // cols) * TABLE_PITCH




@dataclass(frozen=True)
class _Arrow:
    """One table arrow while it is routed: where it enters and leaves the channel between the
    tables and the pool (x only; the channel's y range is fixed)."""

    holder: str
    logical: int
    block: int
    head: tuple[tuple[float, float], ...]  # from the cell down to the channel's top
    tail: tuple[tuple[float, float], ...]  # from the channel's bottom to the block's top

    @property
    def xs(self) -> float:
        return self.head[-1][0]

    @property
    def xt(self) -> float:
        return self.tail[0][0]


def _side(col: int, cols: int) -> int:
    """Which gap a column's arrows use: the one on its right, the last column's on its left."""
    return -1 if col == cols - 1 else 1


def _lane(col: int, side: int, rank: float, lanes: tuple[float, float]) -> float:
    """x of a lane in the gap right (``side`` 1) or left (-1) of ``col``: ``rank`` 0 (next to the
    column) to 1 (the far side of its half of the gap)."""
    lo, hi = lanes
    return col + side * (lo + (hi - lo) * rank)


def _table_row(geom: MapGeometry, holder: str, i: int) -> int:
    """The global index of the table row that holds ``holder``'s logical block ``i``."""
    return round((geom.row0[holder] + (i // geom.layout.cols) * TABLE_PITCH) / TABLE_PITCH)


def _gap_lanes(steps: list[tuple[int, int, int, int]], cols: int, cell_w: float) -> dict[int, float]:
    """x of each side step's lane: ``steps`` are (arrow, column, side, table row). The arrows that
    run down one gap between table columns share its whole width, evenly spaced: the left column's
    (side 1) first, its lowest row nearest the column; then the right column's (side -1), its highest
    row first. So a step sideways crosses no lane from above, and two tables' arrows keep apart (review
    r7_06: spaced 0.02 units in half a gap, R1's and R2's ran on top of each other for 60 px). The gaps
    outside the first and last columns are half as wide (the picture ends there)."""
    by_gap: dict[int, list[tuple[int, int, int, int]]] = {}
    for k, col, side, r in steps:
        by_gap.setdefault(col if side == 1 else col - 1, []).append((k, col, side, r))
    half = cell_w / 2
    out = {}
    for g, group in by_gap.items():
        group.sort(key=lambda t: (-t[2], -t[3] if t[2] == 1 else t[3]))
        lo = g + half if g >= 0 else -0.5
        hi = g + 1 - half if g < cols - 1 else cols - 0.5
        for j, (k, *_rest) in enumerate(group):
            out[k] = lo + (hi - lo) * (j + 1) / (len(group) + 1)
    return out


def _pick_sides(steps: list[list[int]], cols: int) -> None:
    """Turn each step's third item, how its block lies from the straight arrow's (1 right, -1 left,
    0 the same block), into the side of the gap it runs down (1 right, -1 left). An arrow into the
    same block may take either side, unless another arrow of its column must go one way (then the
    other, so that the two keep their order); it takes the gap fewer arrows run down (the gaps
    outside the first and last columns count double: they are half as wide), the right on a tie."""
    load: dict[int, float] = {}
    free: dict[int, list[list[int]]] = {}
    forced: dict[int, set[int]] = {}
    for st in steps:
        if st[2]:
            forced.setdefault(st[1], set()).add(st[2])
            load[st[1] if st[2] > 0 else st[1] - 1] = load.get(st[1] if st[2] > 0 else st[1] - 1, 0) + 1
        else:
            free.setdefault(st[1], []).append(st)

    def weight(g: int, extra: int) -> float:
        return (load.get(g, 0) + extra) * (2 if g in (-1, cols - 1) else 1)

    for col in sorted(free):
        sts, must = free[col], forced.get(col, set())
        if 1 in must or col == cols - 1:
            side = -1
        elif -1 in must:
            side = 1
        else:
            side = 1 if weight(col, len(sts)) <= weight(col - 1, len(sts)) else -1
        gap = col if side > 0 else col - 1
        load[gap] = load.get(gap, 0) + len(sts)
        for st in sts:
            st[2] = side


def _heads(data: dict[str, Any], geom: MapGeometry) -> list[tuple[str, int, int, tuple]]:
    """Each arrow's path from its cell to the channel's top: straight down when no cell of this
    frame lies below it in its column (the last table row, or rows still empty); else a step
    sideways into a lane of the gap on one side (:func:`_gap_lanes`) and down the lane. The side is
    the one its block lies on as seen from the block of the column's straight arrow, so that the
    two keep their left-right order down to the pool (lesson 06: R2's L2→P3 above R3's L2→P4 goes
    left of R3's arrow, not right); into the same block, the emptier gap (:func:`_pick_sides`)."""
    cols = geom.layout.cols
    top = geom.table_height - TABLE_PITCH + TABLE_CELL_H / 2  # the channel's top: under the last row
    lowest: dict[int, tuple[int, int]] = {}  # column -> (the lowest table row with a cell in it, that cell's block)
    for h in geom.holders:
        for i, b in enumerate(data["tables"].get(h, ())):
            lowest[i % cols] = max(lowest.get(i % cols, (-1, 0)), (_table_row(geom, h, i), b), key=lambda rb: rb[0])
    cells, steps = [], []
    for h in geom.holders:
        for i, b in enumerate(data["tables"].get(h, ())):
            x0, y0 = _cell_xy(i, cols, geom.row0[h])
            r, (low_row, low_block) = _table_row(geom, h, i), lowest[i % cols]
            if r != low_row:
                bx, lx = data["x"][b], data["x"][low_block]
                steps.append([len(cells), i % cols, (bx > lx) - (bx < lx), r])
            cells.append((h, i, b, x0, y0 + TABLE_CELL_H / 2))
    _pick_sides(steps, cols)
    lanes = _gap_lanes(steps, cols, geom.table_cell_w)
    out = []
    for k, (h, i, b, x0, y0) in enumerate(cells):
        if k not in lanes:
            head = ((x0, y0), (x0, top))
        else:
            mid = y0 + (TABLE_PITCH - TABLE_CELL_H) / 2
            head = ((x0, y0), (x0, mid), (lanes[k], mid), (lanes[k], top))
        out.append((h, i, b, head))
    return out


def _spread(x: float, own: list[float], others: list[float]) -> list[float]:
    """Where ``len(own)`` arrows (leaving the tables at ``own``, in order) land on a block centred at
    ``x``: evenly spaced, as far apart as its width allows (review r7_06: two of three arrowheads on
    P0 landed 3 px apart), the group slid sideways so that none lands on the line of an arrow that
    starts above (``others``) and as many as can land straight under their own start.

    Example: three arrows into P0, one straight from above its middle: ``_spread(0, [-0.47, -0.45, 0],
    [])`` -> the last lands at 0, straight."""
    m = len(own)
    step = min(0.25, 0.72 / m)
    reach = 0.36 - step * (m - 1) / 2   # how far the group may slide and stay on the block
    best: tuple[tuple[int, int, float], list[float]] | None = None
    for k in range(-8, 9):
        shift = k * step / 4
        if abs(shift) > reach + 1e-9:
            continue
        xs = [x + (j - (m - 1) / 2) * step + shift for j in range(m)]
        hits = sum(1 for p in xs for o in others if abs(p - o) < 0.06)
        straight = sum(1 for p, o in zip(xs, own) if abs(p - o) < 1e-6)
        score = (hits, -straight, abs(shift))
        if best is None or score < best[0]:
            best = (score, xs)
    return best[1] if best else [x] * m


def _landings(heads: list[tuple[str, int, int, tuple]], data: dict[str, Any], geom: MapGeometry) -> list[_Arrow]:
    """Each arrow's path from the channel's bottom into its block. Several arrows into one block
    land side by side in the order they leave the tables (so they need not cross); an arrow into
    a lower pool row runs down a lane in the gap beside its block's column (the deeper, the
    farther out) and steps in above its block."""
    cols = geom.layout.cols
    pool_top = geom.pool_y0 - CELL_H / 2
    into: dict[int, list[int]] = {}
    for k, (_h, _i, b, head) in enumerate(heads):
        into.setdefault(b, []).append(k)
    land: dict[int, tuple[float, int, int]] = {}  # arrow -> (x on its block, rank in the block, arrows into it)
    starts = [head[-1][0] for *_, head in heads]
    for b, ks in into.items():
        ks.sort(key=lambda k: starts[k])
        for j, x in enumerate(_spread(float(data["x"][b]), [starts[k] for k in ks],
                                      [s for n, s in enumerate(starts) if n not in ks])):
            land[ks[j]] = (x, j, len(ks))
    deep: dict[int, list[int]] = {}  # column -> arrows into its lower rows
    for k, (_h, _i, b, _head) in enumerate(heads):
        if data["y"][b] > 0.5:
            deep.setdefault(int(round(data["x"][b])), []).append(k)
    lane: dict[int, float] = {}
    for c, ks in deep.items():
        ks.sort(key=lambda k: (data["y"][heads[k][2]], _side(c, cols) * land[k][0]))
        for r, k in enumerate(ks):
            lane[k] = _lane(c, _side(c, cols), (r + 0.5) / len(ks),
                            _POOL_LANES if geom.pool_cell_w == CELL_W else _DEEP_LANES)
    out = []
    for k, (h, i, b, head) in enumerate(heads):
        x1, j, m = land[k]
        top = pool_top + data["y"][b]
        if k in lane:
            jog = top - 0.02 - 0.12 * (m - j - 0.5) / m
            tail = ((lane[k], pool_top), (lane[k], jog), (x1, jog), (x1, top))
        else:
            tail = ((x1, top),)
        out.append(_Arrow(h, i, b, head, tail))
    return out


def _above(a: _Arrow, b: _Arrow) -> bool | None:
    """Whether ``a`` takes a higher track than ``b`` in the channel (None: either will do, as
    their horizontal runs do not overlap). Two arrows running the same way cross nowhere when
    the one heading farther that way runs higher; two running opposite ways over the same
    stretch swap order and cross once whatever the tracks, and the one starting where the
    other ends runs higher, so that their vertical runs never overlap."""
    eps = 1e-9
    lo_a, hi_a = sorted((a.xs, a.xt))
    lo_b, hi_b = sorted((b.xs, b.xt))
    if hi_a < lo_b - eps or hi_b < lo_a - eps or hi_a - lo_a < eps or hi_b - lo_b < eps:
        return None
    right_a, right_b = a.xt > a.xs, b.xt > b.xs
    if right_a == right_b:
        return a.xt > b.xt if right_a else a.xt < b.xt
    if abs(a.xs - b.xt) < 1e-6:
        return True
    if abs(b.xs - a.xt) < 1e-6:
        return False
    return right_a


def _tracks(arrows: list[_Arrow]) -> list[int]:
    """A track per arrow (0 = highest): an arrow runs below every arrow that :func:`_above` puts
    above it, and as high as that allows (arrows whose runs do not overlap share tracks)."""
    n = len(arrows)
    higher = [[j for j in range(n) if j != i and _above(arrows[j], arrows[i])] for i in range(n)]
    order, state = [], [0] * n  # depth first (a cycle, which _above should not make, is cut)

    def visit(i: int) -> None:
        state[i] = 1
        for j in higher[i]:
            if state[j] == 0:
                visit(j)
        state[i] = 2
        order.append(i)

    for i in range(n):
        if state[i] == 0:
            visit(i)
    track = [0] * n
    for i in order:
        track[i] = max((track[j] + 1 for j in higher[i] if state[j] == 2 and order.index(j) < order.index(i)), default=0)
    return track


def _simplify(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The points without repeats and without middle points of straight runs."""
    out: list[tuple[float, float]] = []
    for p in points:
        if out and abs(p[0] - out[-1][0]) < 1e-9 and abs(p[1] - out[-1][1]) < 1e-9:
            continue
        if len(out) >= 2:
            (ax, ay), (bx, by) = out[-2], out[-1]
            if abs((bx - ax) * (p[1] - ay) - (by - ay) * (p[0] - ax)) < 1e-12:
                out[-1] = p
                continue
        out.append(p)
    return out


def arrow_routes(data: dict[str, Any], geom: MapGeometry) -> dict[str, list[tuple[int, int, list[tuple[float, float]]]]]:
    """Per drawn holder: ``(logical block, physical block, points)`` of each table arrow, routed
    in straight runs across and down.

    An arrow leaves its cell's bottom; from a higher table row it steps into the gap beside its
    column and runs down past the rows below (cells are ``geom.table_cell_w`` wide, so the gaps
    hold no label). Between the last table row and the pool each arrow has a track of its own: down
    to it, across, down into its block (or, into a lower pool row, down the gap beside the
    block's column and in). Arrows whose order is the same at both ends never cross; two whose
    order swaps cross once, at a right angle; no arrow crosses a label.

    Example (R1 and its fork R2 share P0 and P1; R1's L1 runs down the gap right of its column,
    past R2's row, and lands right of R2's arrow):
        >>> from kvlab.memory.block_manager import BlockManager
        >>> from kvlab.viz.memory_map import grid_layout, memory_map_data
        >>> m = BlockManager(num_blocks=4, block_size=4)
        >>> _ = m.add_sequence("R1", 8); _ = m.fork("R1", "R2")
        >>> g = map_geometry(grid_layout(4), [m.snapshot()])
        >>> [(round(x, 2), round(y, 2)) for x, y in arrow_routes(memory_map_data(m.snapshot()), g)["R1"][1][2]]
        [(1.0, 0.28), (1.0, 0.38), (1.5, 0.38), (1.5, 1.47), (1.25, 1.47), (1.25, 1.91)]
    """
    arrows = _landings(_heads(data, geom), data, geom)
    if not arrows:
        return {h: [] for h in geom.holders}
    top = geom.table_height - TABLE_PITCH + TABLE_CELL_H / 2
    bottom = geom.pool_y0 - CELL_H / 2
    track = _tracks(arrows)
    step = (bottom - top) / (max(track) + 2)
    out: dict[str, list] = {h: [] for h in geom.holders}
    for a, t in zip(arrows, track):
        y = top + (t + 1) * step
        mid = [(a.xs, y), (a.xt, y)] if abs(a.xs - a.xt) > 1e-9 else []
        out[a.holder].append((a.logical, a.block, _simplify(list(a.head) + mid + list(a.tail))))
    return out


def copy_arc(data: dict[str, Any], geom: MapGeometry, src: int, dst: int, points: int = 13) -> tuple[list[float], list[float]]:
    """Points of the arc under the pool from block ``src`` to block ``dst`` (a quadratic curve)."""
    x0, x1 = float(data["x"][src]), float(data["x"][dst])
    y0 = geom.pool_y0 + data["y"][src] + CELL_H / 2
    y1 = geom.pool_y0 + data["y"][dst] + CELL_H / 2
    cy = max(y0, y1) + geom.copy_units * 0.8
    xs, ys = [], []
    for k in range(points):
        t = k / (points - 1)
        xs.append((1 - t) ** 2 * x0 + 2 * (1 - t) * t * (x0 + x1) / 2 + t * t * x1)
        ys.append((1 - t) ** 2 * y0 + 2 * (1 - t) * t * cy + t * t * y1)
    return xs, ys


def _table_traces(data: dict[str, Any], colors: dict[str, str], geom: MapGeometry) -> list[Any]:
    """Table cells (one bar trace), their labels, one arrow trace per holder (fixed count)."""
    import plotly.graph_objects as go

    th = theme()
    cols = geom.layout.cols
    cx, cy, cc, ct, ch = [], [], [], [], []
    for h in geom.holders:
        col = holder_color(h, colors)
        n = data["num_tokens"].get(h, 0)
        for i, b in enumerate(data["tables"].get(h, ())):
            x, y = _cell_xy(i, cols, geom.row0[h])
            cx.append(x)
            cy.append(y)
            cc.append(tint(col, 0.55))
            ct.append(f"→P{b}" if h == "tree" else f"L{i}→P{b}")
            ch.append(f"{h}: L{i} -> P{b}" + ("" if h == "tree" else f" (tokens {i * data['block_size']}.."
                                                                         f"{min(n, (i + 1) * data['block_size']) - 1})"))
    size = cell_label_px(geom.cell_px, 5.2)
    w = geom.table_cell_w
    if ct and max(map(len, ct)) * size * 0.68 > geom.cell_px * w:  # "L12→P13" would spill over its cell:
        ct = [t.split("→")[-1] if "→" in t else t for t in ct]            # the position says L, the cell says P
    out = [
        go.Bar(x=[w] * len(cx), y=cy, base=[x - w / 2 for x in cx], orientation="h", width=TABLE_CELL_H,
               marker=dict(color=cc, line=dict(color="#555555", width=th.line_width)), hovertext=ch,
               hoverinfo="text", showlegend=False, name="tables"),
        go.Scatter(x=cx, y=cy, mode="text", text=ct, textfont=dict(size=size, color=th.text_color), hoverinfo="skip",
                   showlegend=False, name="table labels"),
    ]
    routes = arrow_routes(data, geom)
    for h in geom.holders:
        xs, ys, sizes = [], [], []
        for _i, _b, points in routes[h]:
            xs += [x for x, _ in points] + [None]
            ys += [y for _, y in points] + [None]
            sizes += [0] * (len(points) - 1) + [9 + 3 * th.high_contrast, 0]
        out.append(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"{h} arrows", hoverinfo="skip", showlegend=False,
                              line=dict(color=holder_color(h, colors), width=th.line_width + 0.5),
                              marker=dict(symbol="arrow", angleref="previous", size=sizes or [0],
                                          color=holder_color(h, colors))))
    return out


def _copy_traces(data: dict[str, Any], geom: MapGeometry) -> list[Any]:
    import plotly.graph_objects as go

    th = theme()
    xs, ys, sizes, text = [], [], [], []
    for src, dst in data["copies"]:
        ax, ay = copy_arc(data, geom, src, dst)
        # the label hangs from a point of its own (between two gaps: no line to it), under the
        # arc's lowest point: hung from the arc itself, the arc ran along the label's top edge
        xs += ax + [None, (ax[0] + ax[-1]) / 2, None]
        ys += ay + [None, max(ay) + COPY_LABEL_DROP, None]
        sizes += [0] * (len(ax) - 1) + [12 + 3 * th.high_contrast, 0, 0, 0]
        text += [""] * len(ax) + ["", f"copy P{src} → P{dst}", ""]
    return [go.Scatter(x=xs, y=ys, mode="lines+markers+text", text=text, textposition="bottom center",
                       textfont=dict(size=th.font_size, color=HIGHLIGHT), name="copy-on-write", hoverinfo="skip",
                       showlegend=False, line=dict(color=HIGHLIGHT, width=th.line_width + 1, dash="dot"),
                       marker=dict(symbol="arrow", angleref="previous", size=sizes or [0], color=HIGHLIGHT))]


def _short_labels(data: dict[str, Any]) -> list[str]:
    """With tables drawn the arrows name the holders: a block says its id and ref count on its first line,
    its fill on the second (two lines: a third would reach the slot ticks along the block's bottom edge).

    Example: a block P0 with 4 of 4 slots, held by three tables, reads ``P0 x3<br>4/4``.
    """
    out = []
    for b in range(data["num_blocks"]):
        rc = data["ref_count"][b]
        parts = [f"P{b} x{rc}" if rc > 1 else f"P{b}"]
        if rc:
            parts.append(f"{data['tokens'][b]}/{data['block_size']}")
        out.append("<br>".join(parts))
    return out


def frame_traces(data: dict[str, Any], colors: dict[str, str], geom: MapGeometry) -> list[Any]:
    """Every trace that changes between frames, in a fixed order: the pool, then (with tables)
    the tables and one arrow trace per holder, then (with copy room) the copy arcs."""
    labels = _short_labels(data) if geom.holders else None
    low, high = geom.y_range
    down = (geom.height - geom.margin[2] - geom.margin[3]) / (low - high)   # px per grid unit down
    out = block_traces(data, colors, geom.pool_y0, labels, geom.pool_cell_w, (geom.cell_px, down))
    if geom.holders:
        out += _table_traces(data, colors, geom)
    if geom.copy_room:
        out += _copy_traces(data, geom)
    return out
