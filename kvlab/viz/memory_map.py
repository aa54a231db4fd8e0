"""The memory map: the paged pool's physical blocks as a fixed grid (plotly).

Each block is coloured by the request that owns it and labelled ``P5 / R1 L2``
(physical block, request, logical block); free blocks are light grey; a block shared by
several block tables (ref_count > 1) gets a dark outline and ``x2`` (its ref count);
the block being written or read gets a red outline. Hover shows the token fill.

Sizes: up to 64 blocks are drawn as labelled squares (the lessons use a dozen),
up to 256 as unlabelled squares (hover for details), more (a real pool, up to 4,096
and beyond) as a heatmap. Axes, canvas size and trace structure never change between
frames of one animation or stepper.

Pure data first, pictures second: :func:`memory_map_data` returns plain lists (colour,
label, outline per block) that tests check; :func:`memory_map_figure` draws them. A recorded
run's frames, its plotly animation and its stepper are in :mod:`kvlab.viz.memory_animation`.

Example:
    >>> from kvlab import BlockManager
    >>> m = BlockManager(num_blocks=6, block_size=4)
    >>> _ = m.add_sequence("R1", 5); _ = m.fork("R1", "R2")
    >>> d = memory_map_data(m.snapshot())
    >>> d["label"][0], d["color"][0] == request_color("R1"), d["color"][5]
    ('P0<br>R1 L0<br>x2', True, '#e6e6e6')
    >>> d["shared"]
    [0, 1]

Not handled: what the blocks contain (tokens as text are drawn by the translation
widget and the radix view).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ..memory.events import Event
from ..memory.snapshot import MemorySnapshot
from .palette import (
    FREE, HIGHLIGHT, SHARED_OUTLINE, UNOWNED, assign_colors, request_color, source_label, theme,
)

__all__ = ["GridLayout", "grid_layout", "snapshot_ids", "memory_map_data", "memory_map_figure", "event_highlight",
           "pool_snapshot"]

LABELLED_MAX = 64  # up to this many blocks: squares with text labels
SQUARES_MAX = 256  # up to this many: squares, hover only; above: heatmap


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

    Example: 12 blocks -> one row of 12 labelled squares; 4096 -> a 64 x 64 heatmap.
        >>> g = grid_layout(12); (g.cols, g.rows, g.mode, g.show_text)
        (12, 1, 'grid', True)
        >>> g = grid_layout(4096); (g.cols, g.rows, g.mode)
        (64, 64, 'heatmap')
    """
    if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks < 1:
        raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
    if mode not in ("auto", "grid", "heatmap"):
        raise ValueError(f"mode must be 'auto', 'grid' or 'heatmap', got {mode!r}")
    if mode == "auto":
        mode = "grid" if num_blocks <= SQUARES_MAX else "heatmap"
    if cols is None:
        if num_blocks <= 16:
            cols = num_blocks
        elif num_blocks <= LABELLED_MAX:
            cols = 16
        elif num_blocks <= SQUARES_MAX:
            cols = 32
        else:
            cols = 64
    if isinstance(cols, bool) or not isinstance(cols, int) or cols < 1:
        raise ValueError(f"cols must be a positive int, got {cols!r}")
    cols = min(cols, num_blocks)
    rows = -(-num_blocks // cols)
    th = theme()
    left, right, top, bottom = 10, 10, 80 if th.high_contrast else 70, 50 if th.high_contrast else 40
    cell = (th.grid_width - left - right) / cols
    cell = min(cell, 110.0 if th.high_contrast else 80.0)
    width = int(round(cell * cols)) + left + right
    height = int(round(cell * rows)) + top + bottom
    show_text = mode == "grid" and num_blocks <= LABELLED_MAX
    return GridLayout(num_blocks, cols, rows, mode, show_text, width, height, cell, (left, right, top, bottom))


def snapshot_ids(snapshots: Iterable[MemorySnapshot]) -> list[str]:
    """Every request id that owns or holds a block in any of the snapshots (for colours)."""
    ids: set[str] = set()
    for s in snapshots:
        ids.update(o for o in s.owner if o is not None)
        ids.update(s.tables)
    return sorted(ids)


def _holders(snapshot: MemorySnapshot) -> list[list[tuple[str, int]]]:
    held: list[list[tuple[str, int]]] = [[] for _ in range(snapshot.num_blocks)]
    for seq, ids in snapshot.tables.items():
        for logical, b in enumerate(ids):
            held[b].append((seq, logical))
    return held


def event_highlight(event: Event, snapshot: MemorySnapshot) -> tuple[int, ...]:
    """The blocks an event touches: its block ids, or for an ``append`` that took no new
    block, the sequence's last block (the one being written)."""
    if event.block_ids:
        return tuple(event.block_ids)
    if event.kind == "append" and event.seq_id in snapshot.tables and snapshot.tables[event.seq_id]:
        return (snapshot.tables[event.seq_id][-1],)
    return ()


def memory_map_data(
    snapshot: MemorySnapshot,
    highlight: Sequence[int] = (),
    colors: dict[str, str] | None = None,
    layout: GridLayout | None = None,
) -> dict[str, Any]:
    """Per-block colour, label, outline and hover text for one snapshot (plain data).

    ``highlight``: blocks being written or read (red outline). ``colors``: request ->
    colour (default: :func:`assign_colors` over this snapshot's ids; an animation passes
    one mapping for all frames). Keys of the result: ``color``, ``label``, ``hover``,
    ``outline_color``, ``outline_width``, ``x``, ``y`` (one entry per block), ``shared``,
    ``highlight`` (block ids), ``legend`` (request -> colour), ``layout``.
    """
    if not isinstance(snapshot, MemorySnapshot):
        raise TypeError(f"memory_map_data takes a MemorySnapshot, got {type(snapshot).__name__}")
    n = snapshot.num_blocks
    lay = layout or grid_layout(n)
    if lay.num_blocks != n:
        raise ValueError(f"layout is for {lay.num_blocks} blocks, snapshot has {n}")
    bad = [b for b in highlight if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < n]
    if bad:
        raise ValueError(f"highlight: unknown block id(s) {bad} (valid ids are 0..{n - 1})")
    colors = colors if colors is not None else assign_colors(snapshot_ids([snapshot]))
    th = theme()
    held = _holders(snapshot)
    hl = set(highlight)
    color, label, hover, oc, ow, shared = [], [], [], [], [], []
    for b in range(n):
        rc = snapshot.ref_count[b]
        owner = snapshot.owner[b]
        who = held[b]
        if rc == 0:
            c = FREE
            lines = [f"P{b}"]
            hv = f"P{b}: free"
        else:
            key = owner if owner is not None else (who[0][0] if who else None)
            c = colors.get(key, request_color(key)) if key is not None else UNOWNED
            first = f"{who[0][0]} L{who[0][1]}" if who else (owner or "?")
            lines = [f"P{b}", first]
            tables = ", ".join(f"{s} L{i}" for s, i in who) or "no block table"
            hv = (
                f"P{b}: owner {owner}; {tables}; "
                f"{snapshot.tokens_in_block[b]}/{snapshot.block_size} tokens; ref_count {rc}"
            )
        if rc > 1:
            lines.append(f"x{rc}")
            shared.append(b)
        if b in hl:
            oc.append(HIGHLIGHT)
            ow.append(th.highlight_width)
        elif rc > 1:
            oc.append(SHARED_OUTLINE)
            ow.append(th.shared_width)
        else:
            oc.append("#ffffff")
            ow.append(th.line_width)
        color.append(c)
        label.append("<br>".join(lines))
        hover.append(hv)
    used = {o for o in snapshot.owner if o is not None} | set(snapshot.tables)
    return {
        "num_blocks": n,
        "block_size": snapshot.block_size,
        "x": [b % lay.cols for b in range(n)],
        "y": [b // lay.cols for b in range(n)],
        "color": color,
        "label": label,
        "hover": hover,
        "outline_color": oc,
        "outline_width": ow,
        "shared": shared,
        "highlight": sorted(hl),
        "legend": {s: colors.get(s, request_color(s)) for s in sorted(used)},
        "num_free_blocks": snapshot.num_free_blocks,
        "caption": snapshot.caption,
        "layout": lay,
    }


def pool_snapshot(allocator: Any, tables: dict[str, Sequence[int]] | None = None, caption: str = "") -> MemorySnapshot:
    """A MemorySnapshot of a bare :class:`~kvlab.BlockAllocator` (e.g. the pool under a
    ``RadixCache``), read only. ``tables``: who holds which blocks, drawn as block tables
    (for a radix tree: ``{f"node {n.id}": n.kv for n in cache.snapshot().nodes}``); held
    blocks count as full. Blocks in no table are drawn with their owner's colour.

    Example:
        >>> from kvlab import BlockAllocator
        >>> a = BlockAllocator(4, block_size=2)
        >>> _ = a.allocate(2, owner="R1")
        >>> s = pool_snapshot(a, {"R1": [0, 1]})
        >>> s.ref_count, s.num_tokens, s.free_block_ids
        ((1, 1, 0, 0), {'R1': 4}, (2, 3))
    """
    tables = {str(k): tuple(v) for k, v in (tables or {}).items()}
    n, bs = allocator.num_blocks, allocator.block_size
    for k, ids in tables.items():
        bad = [b for b in ids if not (isinstance(b, int) and 0 <= b < n)]
        if bad:
            raise ValueError(f"pool_snapshot: table {k!r} holds unknown block id(s) {bad[:5]}")
    filled = [bs if allocator.ref_count[b] else 0 for b in range(n)]
    return MemorySnapshot(
        num_blocks=n, block_size=bs, ref_count=tuple(allocator.ref_count), owner=tuple(allocator.owner),
        tables=tables, num_tokens={k: len(v) * bs for k, v in tables.items()}, tokens_in_block=tuple(filled),
        free_block_ids=tuple(allocator.free_block_ids), caption=caption,
    )


# ------------------------------------------------------------------------ figures
def _palette_index(colors: dict[str, str]) -> list[str]:
    """The discrete colour list of heatmap mode: free, unowned, then each request colour."""
    out = [FREE, UNOWNED]
    for c in colors.values():
        if c not in out:
            out.append(c)
    return out


def _block_traces(data: dict[str, Any], colors: dict[str, str]) -> list[Any]:
    """The traces that change from frame to frame (same count and kinds in every frame)."""
    import plotly.graph_objects as go

    lay: GridLayout = data["layout"]
    th = theme()
    if lay.mode == "grid":
        return [
            go.Scatter(
                x=data["x"], y=data["y"], mode="markers+text" if lay.show_text else "markers",
                marker=dict(
                    symbol="square", size=lay.cell * 0.9, color=data["color"],
                    line=dict(color=data["outline_color"], width=data["outline_width"]),
                ),
                text=data["label"] if lay.show_text else None,
                textfont=dict(size=min(th.label_size, max(7, int(lay.cell / 4.2))), color=th.text_color),
                hovertext=data["hover"], hoverinfo="text", showlegend=False, name="blocks",
            )
        ]
    pal = _palette_index(colors)
    idx = {c: i for i, c in enumerate(pal)}
    z = [[None] * lay.cols for _ in range(lay.rows)]
    hv = [[""] * lay.cols for _ in range(lay.rows)]
    for b in range(data["num_blocks"]):
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


LEGEND_MAX_REQUESTS = 16  # more requests than this: no per-request legend entries (hover tells)


def _legend_entries(legend: dict[str, str]) -> dict[str, str]:
    return legend if len(legend) <= LEGEND_MAX_REQUESTS else {}


def _legend_rows(legend: dict[str, str], lay: GridLayout) -> int:
    per_row = max(1, int((lay.width - 20) // (200 if theme().high_contrast else 140)))
    return -(-(len(_legend_entries(legend)) + 3) // per_row)


def _legend_traces(legend: dict[str, str], lay: GridLayout) -> list[Any]:
    import plotly.graph_objects as go

    th = theme()
    sq = dict(symbol="square", size=14 if not th.high_contrast else 20)
    out = [
        go.Scatter(x=[None], y=[None], mode="markers", name=s, marker=dict(color=c, **sq))
        for s, c in _legend_entries(legend).items()
    ]
    out.append(go.Scatter(x=[None], y=[None], mode="markers", name="free", marker=dict(color=FREE, **sq)))
    out.append(go.Scatter(
        x=[None], y=[None], mode="markers", name="shared (xN = ref count)",
        marker=dict(color="#ffffff", line=dict(color=SHARED_OUTLINE, width=th.shared_width), **sq),
    ))
    out.append(go.Scatter(
        x=[None], y=[None], mode="markers", name="written / read now",
        marker=dict(color="#ffffff", line=dict(color=HIGHLIGHT, width=th.highlight_width), **sq),
    ))
    return out


def _title(title: str, source: str, caption: str = "") -> dict[str, Any]:
    th = theme()
    t: dict[str, Any] = {
        "text": f"{title} ({source_label(source)})", "x": 0.01, "xanchor": "left",
        "font": {"size": th.title_size, "color": th.text_color},
    }
    t["subtitle"] = {"text": caption, "font": {"size": th.font_size, "color": th.text_color}}
    return t


def _axes(lay: GridLayout) -> dict[str, Any]:
    common = dict(visible=False, fixedrange=True, autorange=False, showgrid=False, zeroline=False)
    return {"xaxis": dict(range=lay.x_range, **common), "yaxis": dict(range=lay.y_range, **common)}


def _base_layout(lay: GridLayout, title: str, source: str, caption: str, legend: dict[str, str]) -> dict[str, Any]:
    th = theme()
    left, right, top, bottom = lay.margin
    extra = _legend_rows(legend, lay) * (30 if th.high_contrast else 22)
    return dict(
        width=lay.width, height=lay.height + extra, margin=dict(l=left, r=right, t=top, b=bottom + extra),
        title=_title(title, source, caption), plot_bgcolor="#ffffff", paper_bgcolor="#ffffff",
        font=dict(size=th.font_size, color=th.text_color),
        legend=dict(orientation="h", x=0, y=0, yanchor="top", font=dict(size=th.font_size)),
        hovermode="closest", template="none", **_axes(lay),
    )


def memory_map_figure(
    snapshot: MemorySnapshot,
    highlight: Sequence[int] = (),
    title: str = "Paged KV pool",
    source: str = "simulated",
    colors: dict[str, str] | None = None,
    cols: int | None = None,
    mode: str = "auto",
) -> Any:
    """One snapshot as a static plotly figure (``go.Figure``).

    The title ends in ``(simulated)`` or ``(measured)``; the snapshot's caption is the
    subtitle.
    """
    lay = grid_layout(snapshot.num_blocks, cols, mode)
    colors = colors if colors is not None else assign_colors(snapshot_ids([snapshot]))
    data = memory_map_data(snapshot, highlight, colors, lay)
    return _figure_from_data(data, colors, title, source)


def _figure_from_data(data: dict[str, Any], colors: dict[str, str], title: str, source: str) -> Any:
    import plotly.graph_objects as go

    lay = data["layout"]
    fig = go.Figure(data=_block_traces(data, colors) + _legend_traces(colors, lay))
    fig.update_layout(**_base_layout(lay, title, source, data["caption"], colors))
    return fig
