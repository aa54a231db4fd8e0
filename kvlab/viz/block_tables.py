"""Block tables beside the pool: every holder's table as a row of cells with an arrow into each block.

The memory map (:mod:`kvlab.viz.memory_map`) draws the physical blocks. This module adds what
points into them, as the translation widget draws one table: a row per holder (a sequence's block
table, or the radix tree's blocks as the holder ``"tree"``) with a cell per logical block, ``L0
L1 ...``, and an arrow from each cell down to its physical block (routed between the columns of
the rows below, so it never runs through their labels: :func:`arrow_route`), so a block with ref
count 2 has two arrows and both holders are named. A copy-on-write copy is drawn as an arc from the
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
    >>> arrows = table_arrows(memory_map_data(m.snapshot()), g)
    >>> [(h, [(i, b) for i, b, *_ in a]) for h, a in arrows.items()]
    [('R1', [(0, 0), (1, 1)]), ('R2', [(0, 0), (1, 1)])]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..memory.snapshot import MemorySnapshot
from .pool_grid import CELL_H, CELL_W, GridLayout, block_traces, cell_label_px
from .palette import HIGHLIGHT, holder_color, theme, tint

__all__ = ["MapGeometry", "map_geometry", "table_arrows", "arrow_route", "copy_arc", "frame_traces", "MAX_TABLE_HOLDERS"]

MAX_TABLE_HOLDERS = 8  # more holders than this: tables are not drawn (the hover still names them)
TABLE_PITCH = 0.75  # grid units between table rows
TABLE_CELL_H = 0.56
GAP = 1.3  # between the last table row and the pool: room for the arrows
COPY_ROOM = 0.95  # under the pool: room for copy-on-write arcs
ROW_STRETCH = 1.2  # px per grid unit down, relative to across: room for three lines of label in a block
CLASSROOM_DRAWING_PX = 400  # classroom mode: the drawing's height budget (title, legend and controls come on top)
CLASSROOM_MIN_CELL_PX = 72  # ... but a block never narrower than three lines of 16 px labels need


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

    @property
    def cell_px(self) -> float:
        """A block's column in px on the canvas (the table labels are sized from it)."""
        return (self.width - self.margin[0] - self.margin[1]) / self.layout.cols

    @property
    def y_range(self) -> list[float]:
        bottom = self.pool_y0 + self.layout.rows - 0.5 + (COPY_ROOM if self.copy_room else 0.0)
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
                 copies: bool = False) -> MapGeometry:
    """The geometry for a run's frames. ``tables``: draw block tables (None: when the pool is
    labelled and there are at most :data:`MAX_TABLE_HOLDERS` holders); ``copies``: leave room for
    copy-on-write arcs."""
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
    pool_y0 = table_height - TABLE_PITCH + TABLE_CELL_H / 2 + GAP if holders else 0.0
    left = _label_px(holders) if holders else layout.margin[0]
    right, top, bottom = layout.margin[1], layout.margin[2], layout.margin[3]
    cell = min((th.grid_width - left - right) / cols, 110.0 if th.high_contrast else 80.0)
    units = (pool_y0 + layout.rows + (COPY_ROOM if copies else 0.0)) if holders or copies else layout.rows
    if th.high_contrast:  # a projector shows 599 px: keep the drawing (and a stepper's controls) on one screen
        stretch = ROW_STRETCH if layout.show_text else 1.0
        cell = min(cell, max(CLASSROOM_DRAWING_PX / (units * stretch), CLASSROOM_MIN_CELL_PX))  # never wider than fits
    width = int(round(cell * cols)) + left + right
    height = int(round(cell * units * (ROW_STRETCH if layout.show_text else 1.0))) + top + bottom
    legend_ids = tuple(sorted(ids | {h for h in holders if h != "tree"})) + (("tree",) if "tree" in holders else ())
    return MapGeometry(layout, tuple(holders), row0, table_height, round(pool_y0, 6), bool(copies),
                       (left, right, top, bottom), width, height, legend_ids)


def _cell_xy(i: int, cols: int, y0: float) -> tuple[float, float]:
    return float(i % cols), y0 + (i // cols) * TABLE_PITCH


def table_arrows(data: dict[str, Any], geom: MapGeometry) -> dict[str, list[tuple[int, int, float, float, float, float]]]:
    """Per holder: ``(logical block, physical block, x0, y0, x1, y1)`` arrows from its table cell
    to the top of the physical block (holders drawn in ``geom`` only)."""
    cols, out = geom.layout.cols, {}
    into: dict[int, list[str]] = {}  # block -> the drawn holders pointing into it, in row order
    for h in geom.holders:
        for b in data["tables"].get(h, ()):
            into.setdefault(b, []).append(h)
    for h in geom.holders:
        arrows = []
        for i, b in enumerate(data["tables"].get(h, ())):
            x0, y0 = _cell_xy(i, cols, geom.row0[h])
            k, m = into[b].index(h), len(into[b])  # several arrows into one block land side by side
            x1 = float(data["x"][b]) + (k - (m - 1) / 2) * min(0.2, 0.7 / m)
            y1 = geom.pool_y0 + data["y"][b] - CELL_H / 2
            arrows.append((i, b, x0, y0 + TABLE_CELL_H / 2, x1, y1))
        out[h] = arrows
    return out


def arrow_route(arrow: tuple[int, int, float, float, float, float], geom: MapGeometry,
                lane_shift: float = 0.0) -> list[tuple[float, float]]:
    """The points of one table arrow, routed so it crosses no other row's labels.

    An arrow from the last table row goes straight down to its block. One from a higher row
    steps sideways under its cell into the lane between two columns (a cell is
    :data:`~kvlab.viz.pool_grid.CELL_W` wide, so the lanes are empty), runs down the lane past
    the last row, then to its block: it never passes through the label of a cell below.
    ``lane_shift`` moves the lane a little, so the lanes of two holders do not coincide.

    An arrow into a lower pool row runs down the gap beside its block's column the same way.

    Example (two table rows of 4 columns: row 0's cell L1 goes down the lane at x = 1.5 to P1):
        >>> from kvlab.viz.memory_map import grid_layout
        >>> from kvlab.memory.block_manager import BlockManager
        >>> m = BlockManager(num_blocks=4, block_size=4)
        >>> _ = m.add_sequence("R1", 8); _ = m.fork("R1", "R2")
        >>> g = map_geometry(grid_layout(4), [m.snapshot()])
        >>> [(round(x, 2), round(y, 2)) for x, y in arrow_route((1, 1, 1.0, 0.28, 1.0, g.pool_y0 - 0.42), g)]
        [(1.0, 0.28), (1.0, 0.38), (1.5, 0.38), (1.5, 1.12), (1.0, 1.91)]
    """
    _i, _b, x0, y0, x1, y1 = arrow
    last_bottom = geom.table_height - TABLE_PITCH + TABLE_CELL_H / 2  # the bottom of the last table row
    cols = geom.layout.cols

    def lane_x(x: float) -> float:  # the gap right of column x (left of it in the last column)
        return round(x) + (0.5 if (round(x) % cols < cols - 1 or cols == 1) else -0.5) + lane_shift

    if y0 >= last_bottom - 1e-9:
        head = [(x0, y0)]
    else:
        mid = y0 + (TABLE_PITCH - TABLE_CELL_H) / 2  # half way to the next row
        below = last_bottom + (TABLE_PITCH - TABLE_CELL_H) / 2
        head = [(x0, y0), (x0, mid), (lane_x(x0), mid), (lane_x(x0), below)]
    pool_top = geom.pool_y0 - CELL_H / 2
    if y1 <= pool_top + 1e-9:  # a block in the pool's first row
        return head + [(x1, y1)]
    gap = (1 - CELL_H) / 2  # into a lower pool row: down the gap beside the target's column, then in
    return head + [(lane_x(x1), pool_top - gap), (lane_x(x1), y1 - gap), (x1, y1 - gap), (x1, y1)]


def copy_arc(data: dict[str, Any], geom: MapGeometry, src: int, dst: int, points: int = 13) -> tuple[list[float], list[float]]:
    """Points of the arc under the pool from block ``src`` to block ``dst`` (a quadratic curve)."""
    x0, x1 = float(data["x"][src]), float(data["x"][dst])
    y0 = geom.pool_y0 + data["y"][src] + CELL_H / 2
    y1 = geom.pool_y0 + data["y"][dst] + CELL_H / 2
    cy = max(y0, y1) + COPY_ROOM * 0.8
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
    if ct and max(map(len, ct)) * size * 0.68 > geom.cell_px * CELL_W:  # "L12→P13" would spill over its cell:
        ct = [t.split("→")[-1] if "→" in t else t for t in ct]            # the position says L, the cell says P
    out = [
        go.Bar(x=[CELL_W] * len(cx), y=cy, base=[x - CELL_W / 2 for x in cx], orientation="h", width=TABLE_CELL_H,
               marker=dict(color=cc, line=dict(color="#555555", width=th.line_width)), hovertext=ch,
               hoverinfo="text", showlegend=False, name="tables"),
        go.Scatter(x=cx, y=cy, mode="text", text=ct, textfont=dict(size=size, color=th.text_color), hoverinfo="skip",
                   showlegend=False, name="table labels"),
    ]
    arrows = table_arrows(data, geom)
    n = len(geom.holders)
    for k, h in enumerate(geom.holders):
        xs, ys, sizes = [], [], []
        for arrow in arrows[h]:
            points = arrow_route(arrow, geom, lane_shift=(k - (n - 1) / 2) * min(0.03, 0.08 / max(n, 1)))
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
        mid = len(ax) // 2
        xs += ax + [None]
        ys += ay + [None]
        sizes += [0] * (len(ax) - 1) + [12 + 3 * th.high_contrast, 0]
        text += ["" if k != mid else f"copy P{src} → P{dst}" for k in range(len(ax))] + [""]
    return [go.Scatter(x=xs, y=ys, mode="lines+markers+text", text=text, textposition="bottom center",
                       textfont=dict(size=th.font_size, color=HIGHLIGHT), name="copy-on-write", hoverinfo="skip",
                       showlegend=False, line=dict(color=HIGHLIGHT, width=th.line_width + 1, dash="dot"),
                       marker=dict(symbol="arrow", angleref="previous", size=sizes or [0], color=HIGHLIGHT))]


def _short_labels(data: dict[str, Any]) -> list[str]:
    """With tables drawn the arrows name the holders: a block says its id, fill and ref count."""
    out = []
    for b in range(data["num_blocks"]):
        parts = [f"P{b}"]
        if data["ref_count"][b]:
            parts.append(f"{data['tokens'][b]}/{data['block_size']}")
        if data["ref_count"][b] > 1:
            parts.append(f"x{data['ref_count'][b]}")
        out.append("<br>".join(parts))
    return out


def frame_traces(data: dict[str, Any], colors: dict[str, str], geom: MapGeometry) -> list[Any]:
    """Every trace that changes between frames, in a fixed order: the pool, then (with tables)
    the tables and one arrow trace per holder, then (with copy room) the copy arcs."""
    labels = _short_labels(data) if geom.holders else None
    out = block_traces(data, colors, geom.pool_y0, labels)
    if geom.holders:
        out += _table_traces(data, colors, geom)
    if geom.copy_room:
        out += _copy_traces(data, geom)
    return out
