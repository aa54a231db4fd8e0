"""The memory map: the paged pool's physical blocks as a fixed grid, with the block tables that point into it.

Each block is a cell coloured by the request that allocated it and filled from the left as far
as it holds tokens (a block of 4 with 3 tokens is three quarters full); free blocks are light
grey; a block shared by several holders (ref_count > 1) gets a dark outline and ``x2`` (its ref
count); the blocks the step changed (taken, written or freed) get a red outline. Above the pool, every holder's block
table is drawn as a row of cells ``L0 L1 ...`` with an arrow from each cell to its physical block
(as the translation widget draws one table), so every holder of a shared block is visible; the
radix tree is a holder too (``CacheManager.snapshot()`` adds its blocks as ``"tree"``). A
copy-on-write copy is an arc from the source block to its copy. Module layout: this file draws
the pool's data and figures; :mod:`kvlab.viz.pool_grid` its grid and cells; :mod:`kvlab.viz.block_tables`
the tables, arrows and copies.

Sizes: up to 64 blocks are drawn as labelled cells with their tables (the lessons use a dozen),
up to 256 as unlabelled cells (hover for details), more (a real pool, up to 4,096 and beyond) as
a heatmap. Axes, canvas size and trace structure never change between frames of one animation
or stepper.

Pure data first, pictures second: :func:`memory_map_data` returns plain lists (colour, fill,
label, outline per block) that tests check; :func:`memory_map_figure` draws them. A recorded
run's frames, its plotly animation and its stepper are in :mod:`kvlab.viz.memory_animation`.

Example:
    >>> from kvlab import BlockManager
    >>> m = BlockManager(num_blocks=6, block_size=4)
    >>> _ = m.add_sequence("R1", 5); _ = m.fork("R1", "R2")
    >>> d = memory_map_data(m.snapshot())
    >>> d["label"][0], d["color"][0] == request_color("R1"), d["color"][5], d["fill"][:2]
    ('P0<br>R1 L0<br>x2', True, '#e6e6e6', [1.0, 0.25])
    >>> d["shared"], d["holders"][1]
    ([0, 1], [('R1', 1), ('R2', 1)])

Mirrors no vLLM or SGLang file (kvlab's pictures). Not handled: what the blocks contain (tokens
as text are drawn by the translation widget and the radix view).
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from ..memory.block_pool import check_block_ids
from ..memory.events import Event
from ..memory.snapshot import MemorySnapshot
from .block_tables import frame_traces, map_geometry
from .palette import (
    FREE, HIGHLIGHT, SHARED_OUTLINE, TREE, UNOWNED, assign_colors, holder_color, request_color,
    source_label, theme,
)
from .pool_grid import CELL_H, CELL_W, GridLayout, block_traces, grid_layout

__all__ = ["snapshot_ids", "memory_map_data", "memory_map_figure", "event_highlight", "pool_snapshot"]


def snapshot_ids(snapshots: Iterable[MemorySnapshot]) -> list[str]:
    """Every request id that owns or holds a block in any of the snapshots (for colours)."""
    ids: set[str] = set()
    for s in snapshots:
        ids.update(o for o in s.owner if o is not None)
        ids.update(h for h in s.tables if h != "tree")
    return sorted(ids)


def _holders(snapshot: MemorySnapshot) -> list[list[tuple[str, int]]]:
    held: list[list[tuple[str, int]]] = [[] for _ in range(snapshot.num_blocks)]
    for seq, ids in snapshot.tables.items():
        for logical, b in enumerate(ids):
            held[b].append((seq, logical))
    return held


HELD_BY_TREE = "held by the radix tree only"


def _block_color(owner: str | None, who: list[tuple[str, int]], colors: dict[str, str], by_holder: bool,
                 extra: dict[str, str]) -> tuple[str, str | None]:
    """(colour, request it names or None) of one used block; ``extra`` gets the non-request legend entries.
    By holder, a block two or more requests hold keeps one request's colour (the one that allocated it
    while it still holds it, else the first in its tables): its outline and ``xN`` say it is shared.

    >>> _block_color("R1", [("R2", 0), ("tree", 0)], {"R2": "#17becf"}, True, {})
    ('#17becf', 'R2')
    >>> _block_color("R1", [("R1", 0), ("R3", 0)], {"R1": "#9467bd", "R3": "#e377c2"}, True, {})
    ('#9467bd', 'R1')
    """
    reqs = list(dict.fromkeys(s for s, _ in who if s != "tree"))
    if by_holder and not reqs and who:
        extra[HELD_BY_TREE] = TREE
        return TREE, None
    if by_holder and reqs:
        key = owner if owner in reqs else reqs[0]
    else:
        key = owner if owner is not None else next(iter(reqs), None)
    return (colors.get(key, request_color(key)) if key is not None else UNOWNED), key


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
    copies: Sequence[tuple[int, int]] = (),
    by_holder: bool = False,
) -> dict[str, Any]:
    """Per-block colour, fill, label, outline and hover text for one snapshot (plain data).

    ``by_holder``: colour each block by who HOLDS it now, not by who allocated it: a request whose table
    has it (of several, the one that allocated it; the shared outline and ``xN`` say there are more), the
    tree's green when only the radix tree does (``legend_extra`` names that green).

    ``highlight``: blocks the step changed (red outline; ``highlight_name`` in the legend). ``colors``: request ->
    colour (default: :func:`assign_colors` over this snapshot's ids; an animation passes
    one mapping for all frames). ``copies``: copy-on-write ``(src, dst)`` pairs to draw.
    Keys of the result: ``color``, ``fill`` (tokens / block_size), ``tokens``, ``label``, ``hover``,
    ``outline_color``, ``outline_width``, ``x``, ``y`` (one entry per block), ``holders`` (per block:
    ``(holder, logical block)`` pairs), ``shared``, ``highlight`` (block ids), ``copies``,
    ``legend`` (request -> colour, only those that colour a block), ``tables``, ``num_tokens``, ``layout``.
    """
    if not isinstance(snapshot, MemorySnapshot):
        raise TypeError(f"memory_map_data takes a MemorySnapshot, got {type(snapshot).__name__}")
    n = snapshot.num_blocks
    lay = layout or grid_layout(n)
    if lay.num_blocks != n:
        raise ValueError(f"layout is for {lay.num_blocks} blocks, snapshot has {n}")
    highlight = check_block_ids(highlight, n, "highlight")
    copies = [tuple(check_block_ids(pair, n, "copies")) for pair in copies]
    colors = colors if colors is not None else assign_colors(snapshot_ids([snapshot]))
    th = theme()
    held = _holders(snapshot)
    hl = set(highlight)
    bs = snapshot.block_size
    color, label, hover, oc, ow, shared, fill, owners = [], [], [], [], [], [], [], set()
    extra: dict[str, str] = {}
    for b in range(n):
        rc, owner, who, k = snapshot.ref_count[b], snapshot.owner[b], held[b], snapshot.tokens_in_block[b]
        if rc == 0:
            c, lines, hv = FREE, [f"P{b}"], f"P{b}: free"
        else:
            c, key = _block_color(owner, who, colors, by_holder, extra)
            if key is not None:
                owners.add(key)
            first = f"{who[0][0]} L{who[0][1]}" if who else (owner or "?")
            lines = [f"P{b}", first]
            tables = ", ".join(f"{s} L{i}" for s, i in who) or "no block table"
            hv = f"P{b}: {'held by' if by_holder else f'owner {owner};'} {tables}; {k}/{bs} tokens; ref_count {rc}"
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
        fill.append(k / bs if rc else 0.0)
        label.append("<br>".join(lines))
        hover.append(hv)
    return {
        "num_blocks": n,
        "block_size": bs,
        "x": [b % lay.cols for b in range(n)],
        "y": [b // lay.cols for b in range(n)],
        "color": color,
        "fill": fill,
        "tokens": list(snapshot.tokens_in_block),
        "ref_count": list(snapshot.ref_count),
        "label": label,
        "hover": hover,
        "outline_color": oc,
        "outline_width": ow,
        "holders": held,
        "shared": shared,
        "highlight": sorted(hl),
        "highlight_name": "changed this step",  # the legend's words for the red outline (the kernel view: "read now")
        "copies": [tuple(p) for p in copies],
        "legend": {s: colors.get(s, request_color(s)) for s in sorted(owners)},
        "legend_extra": extra,
        "by_holder": by_holder,
        "tables": {h: list(ids) for h, ids in snapshot.tables.items()},
        "num_tokens": dict(snapshot.num_tokens),
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
        tables[k] = tuple(check_block_ids(ids, n, f"pool_snapshot: table {k!r}"))
    filled = [bs if allocator.ref_count[b] else 0 for b in range(n)]
    return MemorySnapshot(
        num_blocks=n, block_size=bs, ref_count=tuple(allocator.ref_count), owner=tuple(allocator.owner),
        tables=tables, num_tokens={k: len(v) * bs for k, v in tables.items()}, tokens_in_block=tuple(filled),
        free_block_ids=tuple(allocator.free_block_ids), caption=caption,
    )


# ------------------------------------------------------------------------ figures
def _slot_ticks(lay: GridLayout, block_size: int, y0: float = 0.0, pitch: float = 1.0,
                cell_w: float = CELL_W) -> list[Any]:
    """Static ticks along each cell's bottom edge, one per slot boundary (labelled grids, block size <= 16);
    ``pitch``: grid units from one pool row to the next (the kernel view leaves lanes between rows)."""
    import plotly.graph_objects as go

    if lay.mode != "grid" or not lay.show_text or block_size < 2 or block_size > 16:
        return []
    xs, ys = [], []
    for b in range(lay.num_blocks):
        x0, y = b % lay.cols - cell_w / 2, y0 + (b // lay.cols) * pitch + CELL_H / 2
        for k in range(1, block_size):
            x = x0 + cell_w * k / block_size
            xs += [x, x, None]
            ys += [y, y - 0.12, None]
    return [go.Scatter(x=xs, y=ys, mode="lines", line=dict(color="#555555", width=1), hoverinfo="skip",
                       showlegend=False, name="slots")]


LEGEND_MAX_REQUESTS = 16  # more requests than this: no per-request legend entries (hover tells)


def _legend_entries(legend: dict[str, str]) -> dict[str, str]:
    return legend if len(legend) <= LEGEND_MAX_REQUESTS else {}


def _legend_rows(legend: dict[str, str], width: int, extra_names: Sequence[str] = (
        "free", "shared (xN = ref count)", "changed this step")) -> int:
    """Rows the horizontal legend takes: its entries packed by their text's width into the figure's
    width (an autosized figure: the output area's, ``theme().grid_width``)."""
    th = theme()
    room = (max(width, th.grid_width) if th.autosize else width) - 20
    rows, used = 1, 0.0
    for name in [*_legend_entries(legend), *extra_names]:
        w = len(name) * th.font_size * 0.56 + (46 if th.high_contrast else 36)  # swatch, gap and text
        if used and used + w > room:
            rows, used = rows + 1, 0.0
        used += w
    return rows


def _holder_legend(data: dict[str, Any], colors: dict[str, str], geom: Any) -> dict[str, str]:
    """A map coloured by holder: each request whose table (and arrows) or blocks are drawn in its colour,
    then the colours of blocks held by two or more requests or by the tree alone; the tree's table, in
    the tree's green, is "radix tree" unless a block held by the tree alone already names that green."""
    out = {h: holder_color(h, colors) for h in geom.holders if h != "tree"}
    out.update(data["legend"])
    out.update(data["legend_extra"])
    if "tree" in geom.holders and TREE not in out.values():
        out["radix tree"] = TREE
    return out


def _legend_traces(legend: dict[str, str], highlight_name: str = "changed this step", shared: bool = True) -> list[Any]:
    """The legend's entries: each request's colour, free, shared (with ``shared``) and the red
    outline (``highlight_name``; "" for none)."""
    import plotly.graph_objects as go

    th = theme()
    sq = dict(symbol="square", size=14 if not th.high_contrast else 20)
    out = [
        go.Scatter(x=[None], y=[None], mode="markers", name=s, marker=dict(color=c, **sq))
        for s, c in _legend_entries(legend).items()
    ]
    out.append(go.Scatter(x=[None], y=[None], mode="markers", name="free", marker=dict(color=FREE, **sq)))
    if shared:
        out.append(go.Scatter(
            x=[None], y=[None], mode="markers", name="shared (xN = ref count)",
            marker=dict(color="#ffffff", line=dict(color=SHARED_OUTLINE, width=th.shared_width), **sq),
        ))
    if highlight_name:  # "" when no block can be outlined red in this picture
        out.append(go.Scatter(
            x=[None], y=[None], mode="markers", name=highlight_name,
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


def _axes(lay: GridLayout, y_range: list[float] | None = None) -> dict[str, Any]:
    common = dict(visible=False, fixedrange=True, autorange=False, showgrid=False, zeroline=False)
    return {"xaxis": dict(range=lay.x_range, **common), "yaxis": dict(range=y_range or lay.y_range, **common)}


def _base_layout(lay: GridLayout, title: str, source: str, caption: str, legend: dict[str, str],
                 geom: Any = None, extra_names: Sequence[str] = ("free", "shared (xN = ref count)", "changed this step"),
                 ) -> dict[str, Any]:
    th = theme()
    left, right, top, bottom = geom.margin if geom is not None else lay.margin
    width = geom.width if geom is not None else lay.width
    height = geom.height if geom is not None else lay.height
    extra = _legend_rows(legend, width, extra_names) * (30 if th.high_contrast else 22)
    out = dict(
        width=None if th.autosize else width, autosize=th.autosize, height=height + extra,
        margin=dict(l=left, r=right, t=top, b=bottom + extra),
        title=_title(title, source, caption), plot_bgcolor="#ffffff", paper_bgcolor="#ffffff",
        font=dict(size=th.font_size, color=th.text_color), barmode="overlay", bargap=0,
        legend=dict(orientation="h", x=0, y=0, yanchor="top", font=dict(size=th.font_size)),
        hovermode="closest", template="none", **_axes(lay, geom.y_range if geom is not None else None),
    )
    if geom is not None:
        out["annotations"] = geom.annotations()
    return out


def memory_map_figure(
    snapshot: MemorySnapshot,
    highlight: Sequence[int] = (),
    title: str = "Paged KV pool",
    source: str = "simulated",
    colors: dict[str, str] | None = None,
    cols: int | None = None,
    mode: str = "auto",
    tables: bool | None = None,
    copies: Sequence[tuple[int, int]] = (),
    by_holder: bool = False,
) -> Any:
    """One snapshot as a static plotly figure (``go.Figure``).

    The title ends in ``(simulated)`` or ``(measured)``; the snapshot's caption is the
    subtitle. ``tables``: draw each holder's block table above the pool with arrows into it
    (default: when the pool is drawn with labels and there are at most 8 holders);
    ``copies``: copy-on-write ``(src, dst)`` arcs to draw; ``by_holder``: blocks coloured by who holds
    them now (see :func:`memory_map_data`).
    """
    lay = grid_layout(snapshot.num_blocks, cols, mode)
    colors = colors if colors is not None else assign_colors(snapshot_ids([snapshot]))
    data = memory_map_data(snapshot, highlight, colors, lay, copies, by_holder=by_holder)
    data["place_labels"] = True  # one picture: a label may move clear of a fill's edge (frames keep theirs still)
    if not data["highlight"]:  # one picture, nothing outlined red: the legend does not list the red outline
        data["highlight_name"] = ""
    geom = map_geometry(lay, [snapshot], tables, copies=bool(copies), fit_labels=True)
    return _figure_from_data(data, colors, title, source, geom, shared_legend=bool(data["shared"]))


def _figure_from_data(data: dict[str, Any], colors: dict[str, str], title: str, source: str, geom: Any = None,
                      shared_legend: bool = True, drawn_only: bool = False) -> Any:
    """The figure for one frame's data. Without ``geom`` (a :class:`~kvlab.viz.block_tables.MapGeometry`)
    the pool alone, in grid units (row 0 at y = 0): what the kernel view draws its arcs over.
    ``shared_legend``: list the shared outline in the legend (an animation's frames always do);
    ``drawn_only``: the legend lists only the holders and outlines this frame draws (its height
    stays the whole legend's)."""
    import plotly.graph_objects as go

    lay = data["layout"]
    if geom is None:
        traces = block_traces(data, colors)
        legend = {**data["legend"], **data.get("legend_extra", {})}
        static = _slot_ticks(lay, data["block_size"], pitch=data.get("row_pitch", 1.0))
    else:
        traces = frame_traces(data, colors, geom)
        legend = geom.legend(colors) if not data.get("by_holder") else _holder_legend(data, colors, geom)
        static = _slot_ticks(lay, data["block_size"], geom.pool_y0, cell_w=geom.pool_cell_w)
    highlight = data.get("highlight_name", "changed this step")
    names = ["free"] + (["shared (xN = ref count)"] if shared_legend else []) + ([highlight] if highlight else [])
    if drawn_only:
        drawn = set(data["tables"]) | set(data["legend"]) | set(data.get("legend_extra", {}))
        shown = _legend_traces({s: c for s, c in legend.items() if s in drawn},
                               highlight if data["highlight"] else "", shared_legend and bool(data["shared"]))
    else:
        shown = _legend_traces(legend, highlight, shared_legend)
    fig = go.Figure(data=traces + static + shown)
    fig.update_layout(**_base_layout(lay, title, source, data["caption"], legend, geom, names))
    return fig
