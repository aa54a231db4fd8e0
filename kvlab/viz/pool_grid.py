"""The paged pool's grid: where each physical block sits, and its cells as plotly traces.

Shared by the memory map (:mod:`kvlab.viz.memory_map`, the pool's data and figures) and the block
tables drawn above it (:mod:`kvlab.viz.block_tables`), which both import it: the layers of the
picture, bottom up, with no import circle between them.

Example:
    >>> g = grid_layout(12); (g.cols, g.rows, g.mode, g.show_text)
    (12, 1, 'grid', True)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..memory.ids import check_int
from .palette import FREE, HIGHLIGHT, SHARED_OUTLINE, UNOWNED, label_px, theme, tint

__all__ = ["CELL_W", "CELL_H", "LABELLED_MAX", "SQUARES_MAX", "GridLayout", "grid_layout", "block_traces",
           "cell_label_px"]

LABELLED_MAX = 64  # up to this many blocks: cells with text labels (and block tables drawn)
SQUARES_MAX = 256  # up to this many: cells, hover only; above: heatmap
CELL_W, CELL_H = 0.9, 0.84  # a block's cell, in grid units


@dataclass(frozen=True)
class GridLayout:
    """Where blocks sit: block ``b`` at column ``b % cols``, row ``b // cols`` (row 0 on top)."""

    num_blocks: int
    cols: int
    rows: int
    mode: str  # "grid" or "heatmap"
    show_text: bool
    width: int
    height: int
    cell: float  # px per block
    margin: tuple[int, int, int, int]  # left, right, top, bottom

    @property
    def x_range(self) -> list[float]:
        return [-0.5, self.cols - 0.5]

    @property
    def y_range(self) -> list[float]:
        return [self.rows - 0.5, -0.5]  # reversed: row 0 at the top


def grid_layout(num_blocks: int, cols: int | None = None, mode: str = "auto") -> GridLayout:
    """The fixed layout for a pool of ``num_blocks`` (see the module doc for the sizes).

    Example: 12 blocks -> one row of 12 labelled cells; 4096 -> a 64 x 64 heatmap.
        >>> g = grid_layout(12); (g.cols, g.rows, g.mode, g.show_text)
        (12, 1, 'grid', True)
        >>> g = grid_layout(4096); (g.cols, g.rows, g.mode)
        (64, 64, 'heatmap')
    """
    num_blocks = check_int("num_blocks", num_blocks, 1)
    if mode not in ("auto", "grid", "heatmap"):
        raise ValueError(f"mode must be 'auto', 'grid' or 'heatmap', got {mode!r}")
    if mode == "auto":
        mode = "grid" if num_blocks <= SQUARES_MAX else "heatmap"
    if cols is None:
        cols = num_blocks if num_blocks <= 16 else 16 if num_blocks <= LABELLED_MAX else 32 if num_blocks <= SQUARES_MAX else 64
    cols = check_int("cols", cols, 1)
    cols = min(cols, num_blocks)
    rows = -(-num_blocks // cols)
    th = theme()
    left, right, top, bottom = 10, 10, 80 if th.high_contrast else 70, 50 if th.high_contrast else 40
    cell = min((th.grid_width - left - right) / cols, 110.0 if th.high_contrast else 80.0)
    width = int(round(cell * cols)) + left + right
    height = int(round(cell * rows)) + top + bottom
    show_text = mode == "grid" and num_blocks <= LABELLED_MAX
    return GridLayout(num_blocks, cols, rows, mode, show_text, width, height, cell, (left, right, top, bottom))


def cell_label_px(cell_px: float, lines: float = 4.2) -> int:
    """The font size of a cell's label: :func:`~kvlab.viz.palette.label_px` of ``cell_px / lines``,
    up to 2 px larger when the cell is wide (a pool drawn 8 to a row), never under the minimum.

    Example (normal theme):
        >>> cell_label_px(52), cell_label_px(80)
        (12, 14)
    """
    th = theme()
    return min(th.label_size + 2, max(label_px(cell_px / lines), int(cell_px / 5.5)))


def _palette_index(colors: dict[str, str]) -> list[str]:
    """The discrete colour list of heatmap mode: free, unowned, then each request colour."""
    out = [FREE, UNOWNED]
    for c in colors.values():
        if c not in out:
            out.append(c)
    return out


def _both_outlines(data: dict[str, Any], ys: list[float], left: list[float], cell_w: float,
                   px: tuple[float, float]) -> tuple[list[str], list[float], Any]:
    """A block both shared and changed this step shows both outlines: the shared one (black) on its
    edge, as on every shared block, and the red one just inside it, touching it, so the label keeps
    the block's whole room (review r7_06: the black outline drawn inside the red one boxed the label
    in). ``px``: px per grid unit across and down. Returns the edge outlines' colours and widths
    and the red ring (a transparent bar per block, line width 0 where the block is not both)."""
    import plotly.graph_objects as go

    th = theme()
    both = set(data["shared"]) & set(data["highlight"])
    n = data["num_blocks"]
    color = [SHARED_OUTLINE if b in both else c for b, c in enumerate(data["outline_color"])]
    width = [th.shared_width if b in both else w for b, w in enumerate(data["outline_width"])]
    gap = (th.shared_width + th.highlight_width) / 2 + 0.5   # px from the edge to the red line's middle
    across, down = gap / px[0], gap / px[1]
    ring = go.Bar(x=[cell_w - 2 * across] * n, y=ys, base=[x + across for x in left], orientation="h",
                  width=CELL_H - 2 * down, name="changed inside shared",
                  marker=dict(color="rgba(0,0,0,0)", line=dict(
                      color=[HIGHLIGHT if b in both else "rgba(0,0,0,0)" for b in range(n)],
                      width=[th.highlight_width if b in both else 0 for b in range(n)])),
                  hoverinfo="skip", showlegend=False)
    return color, width, ring


def _label_places(data: dict[str, Any], text: list[str], lay: GridLayout, cell_w: float) -> tuple[list[float], list[str]]:
    """Where each block's label is centred, and its text: the cell's middle, except in a partly filled
    block, whose label sits over the larger of its filled and empty parts when it fits there, if need
    be a word a line (up to three lines), so the fill's edge never cuts a word in two."""
    font = cell_label_px(lay.cell)

    def width(lines: list[str]) -> float:
        return max((len(line) for line in lines), default=0) * 0.58 * font + 6

    xs, out = [], []
    for b, x in enumerate(data["x"]):
        f, label = data["fill"][b], text[b]
        room = max(f, 1 - f) * cell_w * lay.cell
        lines = label.split("<br>")
        words = [w for line in lines for w in line.split(" ")]
        fit = lines if width(lines) <= room else words if len(words) <= 3 and width(words) <= room else None
        if 0 < f < 1 and fit is not None:
            x = x - cell_w / 2 + cell_w * (f / 2 if f >= 0.5 else (1 + f) / 2)
            label = "<br>".join(fit)
        xs.append(x)
        out.append(label)
    return xs, out


def block_traces(data: dict[str, Any], colors: dict[str, str], y0: float = 0.0, labels: list[str] | None = None,
                 cell_w: float = CELL_W, px: tuple[float, float] | None = None) -> list[Any]:
    """The pool's traces that change from frame to frame (same count and kinds in every frame).

    Grid mode: each block a cell (a horizontal bar ``CELL_W`` wide) tinted in its owner's
    colour, filled in that colour from the left as far as it holds tokens, outlined when shared
    or highlighted, and its label; ``y0``: the pool's first row in figure units; ``cell_w``: a
    cell's width (narrower where arrows run down the gaps between cells). ``data["place_labels"]`` (a
    static figure): a partly filled block's label clear of the fill's edge (:func:`_label_places`).
    ``px``: px per grid unit across and down (None: the layout's ``cell`` both ways), for the red
    outline drawn inside a shared block's (:func:`_both_outlines`)."""
    import plotly.graph_objects as go

    lay: GridLayout = data["layout"]
    th = theme()
    n = data["num_blocks"]
    if lay.mode == "grid":
        ys = [y0 + y for y in data["y"]]
        left = [x - cell_w / 2 for x in data["x"]]
        bg = [c if c in (FREE, UNOWNED) else tint(c, 0.3) for c in data["color"]]
        text = labels if labels is not None else data["label"]
        label_x = data["x"]
        if data.get("place_labels"):  # a static figure (frames keep their labels in place: nothing jumps)
            label_x, text = _label_places(data, text, lay, cell_w)
        edge, edge_w, ring = _both_outlines(data, ys, left, cell_w, px or (lay.cell, lay.cell))
        return [
            go.Bar(x=[cell_w] * n, y=ys, base=left, orientation="h", width=CELL_H, name="blocks",
                   marker=dict(color=bg, line=dict(color=edge, width=edge_w)),
                   hovertext=data["hover"], hoverinfo="text", showlegend=False),
            go.Bar(x=[cell_w * f for f in data["fill"]], y=ys, base=left, orientation="h", width=CELL_H * 0.92,
                   name="tokens", marker=dict(color=data["color"], line=dict(width=0)), hoverinfo="skip",
                   showlegend=False),
            ring,
            go.Scatter(x=label_x, y=ys, mode="text", text=text if lay.show_text else [""] * n,
                       textfont=dict(size=cell_label_px(lay.cell), color=th.text_color),
                       hoverinfo="skip", showlegend=False, name="labels"),
        ]
    pal = _palette_index(colors)
    idx = {c: i for i, c in enumerate(pal)}
    z = [[None] * lay.cols for _ in range(lay.rows)]
    hv = [[""] * lay.cols for _ in range(lay.rows)]
    for b in range(n):
        z[data["y"][b]][data["x"][b]] = idx[data["color"][b]]
        hv[data["y"][b]][data["x"][b]] = data["hover"][b]
    k = len(pal)
    scale = []
    for i, c in enumerate(pal):
        scale += [[i / k, c], [(i + 1) / k, c]]
    marked = sorted(set(data["shared"]) | set(data["highlight"]))
    return [
        go.Heatmap(
            z=z, hovertext=hv, hoverinfo="text", colorscale=scale, zmin=-0.5, zmax=k - 0.5,
            showscale=False, xgap=1 if lay.cell >= 6 else 0, ygap=1 if lay.cell >= 6 else 0, name="blocks",
        ),
        go.Scatter(
            x=[data["x"][b] for b in marked], y=[data["y"][b] for b in marked], mode="markers",
            marker=dict(
                symbol="square-open", size=max(lay.cell, 4),
                color=[data["outline_color"][b] for b in marked],
                line=dict(width=[min(data["outline_width"][b], 3) for b in marked]),
            ),
            hoverinfo="skip", showlegend=False, name="marks",
        ),
    ]
