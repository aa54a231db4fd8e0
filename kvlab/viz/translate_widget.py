"""The address-translation widget: pos -> logical block, offset -> block table -> physical block -> address.

Sliders for the token position and the block size, an editable block table and the
bytes per token (a value below 1 is refused with a message, the last good one kept);
below them the chain in words and a figure of the three layers (the sequence's token positions, its
block table, the physical pool) with the token, the table row and the physical slot highlighted
and joined by arrows, as in the source notes' figure. Every block is drawn one width whatever the
block size; a pool of more than 12 blocks shows the table's blocks with the runs between them
elided ("…"), a table of more than 6 entries a window around pos's block. The default state is the notes' example: block size 4, table
[3, 7, 1, 5, 9], pos 9 -> L2, offset 1 -> P1.

All numbers come from :func:`kvlab.memory.block_table.translate`. The widget exposes its state as
``w.chain`` (a dict, updated by every callback) for tests; CSS classes:
``kvlab-translation`` (box), ``kvlab-pos-slider``, ``kvlab-block-size-slider``,
``kvlab-block-table``, ``kvlab-bytes-per-token``, ``kvlab-chain``,
``kvlab-translation-error``, ``kvlab-figure``.

Example:
    >>> c = translation_chain([3, 7, 1, 5, 9], pos=9, block_size=4)
    >>> c["logical_block"], c["offset"], c["physical_block"], c["slot"], c["error"]
    (2, 1, 1, 5, None)
    >>> translation_chain([3, 7], pos=8, block_size=4)["error"]
    'pos 8 is past the block table: 2 block(s) x block_size 4 hold positions 0..7'
"""
from __future__ import annotations

import html
import re
from typing import Any, Sequence

from ..memory.block_table import translate
from .control import renew_slider
from .display import is_static
from .palette import FREE, HIGHLIGHT, SHARED_OUTLINE, TREE, classroom_css, label_px, request_color, source_label, theme, tint

__all__ = ["translation_chain", "parse_block_table", "translation_figure_data", "translation_figure",
           "TranslationWidget", "NOTES_TABLE", "chain_rows"]

NOTES_TABLE = (3, 7, 1, 5, 9)  # L0->P3, L1->P7, L2->P1, L3->P5, L4->P9 (the notes' figure)
SEQ = "R1"  # the colour the widget's sequence is drawn in


def translation_chain(
    block_table: Sequence[int], pos: int, block_size: int, bytes_per_token: int = 1, base: int = 0
) -> dict[str, Any]:
    """The translation as plain data; on bad input ``error`` holds the message and the
    numbers are None (the widget shows the message instead of failing)."""
    out: dict[str, Any] = {
        "block_table": list(block_table), "pos": pos, "block_size": block_size,
        "bytes_per_token": bytes_per_token, "base": base, "logical_block": None, "offset": None,
        "physical_block": None, "slot": None, "byte_address": None, "block_base": None, "steps": [], "error": None,
    }
    try:
        t = translate(list(block_table), pos, block_size, bytes_per_token, base)
    except (ValueError, TypeError, IndexError) as e:
        out["error"] = str(e)
        return out
    out.update(
        logical_block=t.logical_block, offset=t.offset, physical_block=t.physical_block, slot=t.slot,
        byte_address=t.byte_address, block_base=base + t.physical_block * block_size * bytes_per_token,
        steps=t.steps(block_size, bytes_per_token, base),
    )
    return out


def chain_rows(steps: Sequence[str]) -> list[tuple[str, str]]:
    """Each step of the walk as (label, formula): ``"offset in block       pos % block_size = 9 % 4 = 1"``
    -> ``("offset in block", "pos % block_size = 9 % 4 = 1")``. The widget draws them as two columns,
    so a label never runs into its formula (HTML collapses the spaces between them)."""
    out = []
    for line in steps:
        label, _sep, formula = line.partition("  ")
        out.append((label.strip(), formula.strip()))
    return out


def fits(text: str, room_px: float, font_px: float) -> bool:
    """Whether ``text`` (one line) fits in ``room_px`` at ``font_px`` (about 0.58 em a character)."""
    return room_px >= 0.58 * font_px * len(text) + 3


def _separated(text: str) -> str:
    """Every number of five digits or more with thousands separators: ``"= 16252928"`` -> ``"= 16,252,928"``."""
    return re.sub(r"\d{5,}", lambda m: f"{int(m.group()):,}", text)


_EM = {"→": 0.84, " ": 0.32, "–": 0.5, "(": 0.39, ")": 0.39}  # DejaVu Sans advances, in em; digits 0.64, others 0.6


def text_px(text: str, font_px: float) -> float:
    """About how wide ``text`` is drawn (DejaVu Sans, plotly's default): ``text_px("L3→P5", 16)`` -> 52.5.
    An arrow is wider than a letter: the 0.58 em a character of :func:`fits` put "L3→P5" in a 56 px cell
    that it filled edge to edge (classroom mode, review r2_00_01)."""
    return font_px * sum(_EM.get(ch, 0.64 if ch.isdigit() else 0.6) for ch in text)


def _wrap(label: str, room_px: float, font_px: float) -> str:
    """A table row's label: ``"L0 → P3"`` as it is, or ``"L0→P3"`` when only that fits its cell, else the
    entry alone, ``"P3"`` (the cell's place in the row is its logical block; the walk under the figure
    names both). Never two lines: a wrapped label filled the cell where the lookup's arrows end (review r12)."""
    def room_for(text: str) -> bool:
        return fits(text, room_px, font_px) and text_px(text, font_px) + 3 <= room_px

    if room_for(label) or " " not in label:
        return label
    if room_for(label.replace(" → ", "→")):
        return label.replace(" → ", "→")
    return label.rsplit(" ", 1)[-1]


def _one_line(label: str, room_px: float, font_px: float) -> str:
    """A pool block's label on one line (its foot holds the slot marks): ``"P9 (L4)"``, or
    ``"P9"`` when that does not fit (the table row above says which logical block it is); a shared
    block's ref count stays when it fits: ``"P0 (L0) x2"`` -> ``"P0 x2"`` -> ``"P0"``."""
    if fits(label, room_px, font_px):
        return label
    words = label.split(" ")
    short = f"{words[0]} {words[-1]}"
    return short if len(words) > 1 and words[-1].startswith("x") and fits(short, room_px, font_px) else words[0]


def parse_block_table(text: str) -> list[int]:
    """``"3, 7, 1, 5, 9"`` (commas, spaces or brackets) -> ``[3, 7, 1, 5, 9]``.

    Raises ValueError naming the bad entry: not an integer, negative, or repeated (one
    physical block cannot hold two logical blocks of one sequence).
    """
    parts = [p for p in text.replace("[", " ").replace("]", " ").replace(",", " ").split() if p]
    if not parts:
        raise ValueError("the block table is empty: type physical block ids, e.g. 3, 7, 1, 5, 9")
    out = []
    for p in parts:
        try:
            v = int(p)
        except ValueError:
            raise ValueError(f"block table entry {p!r} is not an integer") from None
        if v < 0:
            raise ValueError(f"block table entry {v} is negative")
        if v in out:
            raise ValueError(f"physical block {v} appears twice in the block table")
        out.append(v)
    return out


CELL_H = 0.36  # half height of a cell, in y units
TICK_H = 0.16  # slot dividers and the highlighted slot, at a cell's foot
MAX_LOGICAL = 6  # logical blocks drawn at once: a longer table shows a window around pos's block
MAX_POOL = 12  # physical blocks drawn one by one; a bigger pool shows the table's blocks and elides the rest
GAP_W = 0.6  # the width of an elided run ("…"), in block widths


def _visible_logical(n: int, lb: int | None) -> list[int]:
    """The logical blocks drawn: all of them up to :data:`MAX_LOGICAL`, else a window of that many
    around ``lb`` (clamped to the table). Example: ``_visible_logical(9, 8)`` -> ``[3, 4, 5, 6, 7, 8]``."""
    if n <= MAX_LOGICAL:
        return list(range(n))
    start = min(max(0, (lb or 0) - MAX_LOGICAL // 2), n - MAX_LOGICAL)
    return list(range(start, start + MAX_LOGICAL))


def _pool_columns(n: int, shown: set[int]) -> list[tuple[str, int, int]]:
    """The physical row as columns: ``("block", b, b)`` or ``("gap", first, last)`` for an elided
    run. Up to :data:`MAX_POOL` blocks every block is drawn; above it only ``shown`` (the drawn
    table entries), every run between them elided.

    Example: ``_pool_columns(100, {3, 7})`` -> gap 0..2, block 3, gap 4..6, block 7, gap 8..99."""
    if n <= MAX_POOL:
        return [("block", b, b) for b in range(n)]
    cols: list[tuple[str, int, int]] = []
    prev = -1
    for b in sorted(shown) + [n]:
        if b > prev + 1:
            cols.append(("gap", prev + 1, b - 1))
        if b < n:
            cols.append(("block", b, b))
        prev = b
    return cols


def _layout_x(items: list[tuple[str, Any]]) -> dict[Any, tuple[float, float]]:
    """Left to right: a block one unit wide, a gap :data:`GAP_W`; key -> (x0, x1)."""
    out, x = {}, 0.0
    for kind, key in items:
        w = 1.0 if kind == "block" else GAP_W
        out[key] = (x, x + w)
        x += w
    return out


def _pool_block(b: int, owner: dict[int, int], holders: dict[int, str], seq: str, ref_count: int) -> dict[str, Any]:
    """One pool block's ``label``, ``color`` and ``holder`` (who holds it now: ``holders``, else ``seq`` for a
    block of this table, else None: free). Example: ``_pool_block(3, {}, {3: "tree"}, "R1", 1)`` ->
    ``{'label': 'P3 (tree)', 'color': '#2ca02c', 'holder': 'tree'}``; with ref count 2 the label ends in " x2"."""
    h = holders.get(b, seq if b in owner else None)
    suffix = f" (L{owner[b]})" if b in owner else "" if h is None else f" ({h})"
    color = FREE if h is None else TREE if h == "tree" else request_color(h)
    return {"label": f"P{b}{suffix}" + (f" x{ref_count}" if ref_count > 1 else ""), "color": color, "holder": h}


def translation_figure_data(chain: dict[str, Any], num_blocks: int | None = None,
                            holders: dict[int, str] | None = None, seq: str = SEQ,
                            ref_counts: dict[int, int] | None = None) -> dict[str, Any]:
    """Cells of the three layers, in block widths along x (plain data for the figure). Every
    block is one unit wide whatever the block size, so the picture reads the same at block size
    1 and 16 and for a block id of 99.

    ``tokens``: one cell per drawn logical block, labelled with the positions it holds (y = 2);
    ``table``: its block-table row under it (y = 1); ``physical``: the pool's blocks (y = 0),
    in id order, every one when the pool has at most :data:`MAX_POOL` blocks, else the drawn
    table's blocks with ``gaps`` (``"…"`` cells) for the runs between them. A table longer than
    :data:`MAX_LOGICAL` shows a window around pos's block (``more_left``/``more_right``: the
    logical blocks left out). Each cell has x0, x1, label, color, highlight. ``pos_slot`` and
    ``slot``: (x0, x1) of pos in its logical block and of its slot in the physical block;
    ``arrows``: (x, y) points token -> table row -> slot (a physical cell's ``holder``: who holds it, or
    None). ``holders``: physical block -> who holds it NOW (``"tree"`` or a request id), given when the
    caller knows the whole pool: every block is then drawn in its holder's colour, this table's too (a
    finished request's table points at blocks others hold), outside the table named, and a block nobody
    holds is ``free`` (light grey). Without it, the table's blocks take ``seq``'s colour and the others
    are only "not in this table" (white, dotted). ``seq``: the request whose table this is (its tokens
    take that request's colour, as in every other picture). ``ref_counts``: physical block -> ref count;
    a block held more than once is ``shared``, labelled ``xN`` (a cell's ``ref_count``).
    """
    known, holders = holders is not None, holders or {}
    table, bs = chain["block_table"], chain["block_size"]
    if not isinstance(bs, int) or bs < 1:
        bs = 1
    n = num_blocks if num_blocks is not None else max(max(table, default=0) + 1, len(table), 8)
    seq_color = request_color(seq)
    ok = chain["error"] is None
    lb, off, pb = chain["logical_block"], chain["offset"], chain["physical_block"]
    vis = _visible_logical(len(table), lb if ok else None)
    left_out = (vis[0] if vis else 0, len(table) - 1 - vis[-1] if vis else 0)
    lx = _layout_x([("gap", "<")] * bool(left_out[0]) + [("block", i) for i in vis] + [("gap", ">")] * bool(left_out[1]))
    tokens = [
        dict(x0=lx[i][0], x1=lx[i][1], label=f"{i * bs}" if bs == 1 else f"{i * bs}–{i * bs + bs - 1}",
             color=seq_color, highlight=ok and i == lb, group=i)
        for i in vis
    ]
    rows = [dict(x0=lx[i][0], x1=lx[i][1], label=f"L{i} → P{table[i]}", color="#ffffff", highlight=ok and i == lb)
            for i in vis]
    owner = {table[i]: i for i in vis}
    cols = _pool_columns(n, set(owner) | ({pb} if ok else set()))
    px = _layout_x([(kind, (kind, a)) for kind, a, _ in cols])

    rcs = ref_counts or {}
    phys = [dict(x0=px[("block", b)][0], x1=px[("block", b)][1], highlight=ok and b == pb, ref_count=rcs.get(b, 0),
                 known=known, **_pool_block(b, owner, holders, seq, rcs.get(b, 0)))
            for kind, b, _ in cols if kind == "block"]
    gaps = [dict(x0=px[("gap", a)][0], x1=px[("gap", a)][1], label="…", first=a, last=z)
            for kind, a, z in cols if kind == "gap"]
    arrows, pos_slot, slot = [], None, None
    if ok:
        t0 = lx[lb][0]
        p0 = px[("block", pb)][0]
        pos_slot, slot = (t0 + off / bs, t0 + (off + 1) / bs), (p0 + off / bs, p0 + (off + 1) / bs)
        arrows = [(sum(pos_slot) / 2, 2.0), (t0 + 0.5, 1.0), (sum(slot) / 2, 0.0)]
    more = [dict(x0=lx[k][0], x1=lx[k][1], label=f"+{n_out}", count=n_out)
            for k, n_out in zip("<>", left_out) if n_out]
    width = max([c["x1"] for c in tokens + phys + gaps + more] + [1.0])
    return {"tokens": tokens, "table": rows, "physical": phys, "gaps": gaps, "more": more, "arrows": arrows,
            "pos_slot": pos_slot, "slot": slot, "width": width, "ok": ok}


def _figure_shapes(d: dict[str, Any], bs: int, px_per_unit: float) -> list[dict[str, Any]]:
    """The cells, the slot ticks (where a slot is at least 3 px wide) and the two highlighted slots."""
    th = theme()
    shapes: list[dict[str, Any]] = []

    def cell(c: dict[str, Any], y: float, fill: str, dash: str = "solid") -> None:
        shared = c.get("ref_count", 0) > 1   # outlined as in the memory map: dark and thick
        shapes.append(dict(
            type="rect", x0=c["x0"], x1=c["x1"], y0=y - CELL_H, y1=y + CELL_H, fillcolor=fill,
            line=dict(color=HIGHLIGHT if c["highlight"] else SHARED_OUTLINE if shared else "#555555",
                      width=th.highlight_width if c["highlight"] else th.shared_width if shared else th.line_width,
                      dash=dash),
            layer="below",
        ))

    for c in d["tokens"]:  # one shade, the one of the table's blocks below: the cells' borders part the blocks
        cell(c, 2, tint(c["color"], 0.6))
    for c in d["table"]:
        cell(c, 1, "#ffe0e0" if c["highlight"] else "#ffffff")
    for c in d["physical"]:  # free: light grey when the pool's holders are known, else white, dotted ("not in this table")
        if c["color"] != FREE:
            cell(c, 0, tint(c["color"], 0.6))
        else:
            cell(c, 0, FREE) if c["known"] else cell(c, 0, "#ffffff", "dot")
    if bs > 1 and px_per_unit / bs >= 3:  # slot dividers at the foot of every token block and pool block
        for c, y in [(c, 2) for c in d["tokens"]] + [(c, 0) for c in d["physical"]]:
            for k in range(1, bs):
                x = c["x0"] + k / bs
                shapes.append(dict(type="line", x0=x, x1=x, y0=y - CELL_H, y1=y - CELL_H + TICK_H,
                                   line=dict(color="#777777", width=1)))
    for span, y in ((d["pos_slot"], 2), (d["slot"], 0)):  # the token and its slot, at the cell's foot
        if span is not None:
            x0, x1 = span[0], max(span[1], span[0] + 4 / px_per_unit)  # never thinner than 4 px
            shapes.append(dict(type="rect", x0=x0, x1=x1, y0=y - CELL_H, y1=y - CELL_H + TICK_H + 0.05,
                               fillcolor=HIGHLIGHT, line=dict(color=HIGHLIGHT, width=1), opacity=0.85))
    return shapes


def _figure_texts(d: dict[str, Any], px_per_unit: float) -> list[Any]:
    """Labels: the positions each logical block holds, the table rows, the pool's blocks and
    "…" for what is left out (one text trace each; labels sit in a cell's upper part)."""
    import plotly.graph_objects as go

    th = theme()
    room = px_per_unit - 4  # a pool block's label keeps 2 px from each side of its cell (one line)
    texts = []
    more = [dict(c, label="…") for c in d["more"]]
    for layer, y, cs in (("tokens", 2, d["tokens"]), ("table", 1, d["table"]), ("physical", 0, d["physical"]),
                         ("gaps", 0, d["gaps"]), ("more", 2, more), ("more", 1, d["more"])):
        hover = [f"P{c['first']}–P{c['last']}: not in this table" if layer == "gaps" else
                 f"{c['count']} more logical block(s) of this table" if layer == "more" else c["label"] for c in cs]
        texts.append(go.Scatter(
            x=[(c["x0"] + c["x1"]) / 2 for c in cs], y=[y + (0.03 if layer in ("tokens", "physical") else 0)] * len(cs),
            mode="text", text=[_one_line(c["label"], room, th.label_size) if layer == "physical" else
                               _wrap(c["label"], room - 6, th.label_size) for c in cs], textfont=dict(size=th.label_size),
            hovertext=hover, hoverinfo="text", showlegend=False, name=layer))
    return texts


def _legend_traces(d: dict[str, Any], seq: str, seq_name: str) -> list[Any]:
    """One legend entry per colour the pool row draws (the tokens share the table's colour), and the
    red of the lookup: what each colour means, in the figure's own fills."""
    import plotly.graph_objects as go

    th = theme()
    sq = dict(symbol="square", size=14 if not th.high_contrast else 18)
    names = {tint(request_color(seq), 0.6): seq_name}
    for c in d["physical"]:
        fill = tint(c["color"], 0.6)
        if c["holder"] is not None and fill not in names:
            names[fill] = "held by the radix tree only" if c["holder"] == "tree" else f"held by {c['holder']}"
    out = [go.Scatter(x=[None], y=[None], mode="markers", name=n, marker=dict(color=f, **sq)) for f, n in names.items()]
    free = [c for c in d["physical"] if c["color"] == FREE]
    if free:   # drawn as the pool draws it: light grey when the holders are known, else white
        out.append(go.Scatter(x=[None], y=[None], mode="markers", name="free", marker=dict(
            color=FREE if free[0]["known"] else "#ffffff", line=dict(color="#555555", width=1.5), **sq)))
    if any(c["ref_count"] > 1 for c in d["physical"]):
        out.append(go.Scatter(x=[None], y=[None], mode="markers", name="shared (xN = ref count)", marker=dict(
            color="#ffffff", line=dict(color=SHARED_OUTLINE, width=th.shared_width), **sq)))
    out.append(go.Scatter(x=[None], y=[None], mode="markers", name="pos and its lookup",
                          marker=dict(color="#ffffff", line=dict(color=HIGHLIGHT, width=th.line_width), **sq)))
    return out


def _legend_room(names: list[str]) -> int:
    """Pixels under the pool for a horizontal legend of ``names`` (0 for none), laid out as plotly does:
    one row when every entry fits the figure's width, else columns as wide as the widest entry. One row is
    40 px (classroom: 30 px a row, at least 60). Example: ``_legend_room([])`` -> 0."""
    if not names:
        return 0
    th = theme()
    room = (850 if th.autosize else th.grid_width) - 20
    widths = [text_px(name, th.font_size) + (46 if th.high_contrast else 36) for name in names]  # swatch, gap, text
    rows = 1 if sum(widths) <= room else -(-len(names) // max(1, int(room // max(widths))))
    return max(60, 30 * rows) if th.high_contrast else 20 + 20 * rows


def translation_figure(chain: dict[str, Any], num_blocks: int | None = None, source: str = "simulated",
                       holders: dict[int, str] | None = None, seq: str = SEQ, legend: str = "",
                       ref_counts: dict[int, int] | None = None) -> Any:
    """The notes' figure for one translation, as a static plotly figure (``holders``, ``seq``,
    ``ref_counts``: see :func:`translation_figure_data`). ``legend``: the legend's words for the table's
    colour (its tokens), for a legend under the figure that says what each colour means ("" for none)."""
    import plotly.graph_objects as go

    d = translation_figure_data(chain, num_blocks, holders, seq, ref_counts)
    th = theme()
    bs = chain["block_size"] if isinstance(chain["block_size"], int) and chain["block_size"] > 0 else 1
    left = 110 if th.high_contrast else 90
    px_per_unit = ((th.grid_width if not th.autosize else 850) - left - 10) / max(d["width"], 1)
    annotations = [
        dict(x=0, xref="paper", xshift=-8, y=y, yref="y", text=f"<b>{t}</b>", showarrow=False, xanchor="right",
             align="right", font=dict(size=th.font_size))
        for y, t in ((2, "token<br>positions"), (1, "block table<br>(块表)"), (0, "physical<br>blocks"))
    ]
    if d["pos_slot"] is not None:  # pos itself, above its slot
        annotations.append(dict(x=sum(d["pos_slot"]) / 2, y=2 + CELL_H, xref="x", yref="y", yanchor="bottom", yshift=3,
                                showarrow=False, text=f"<b>pos {chain['pos']}</b>", font=dict(size=th.label_size,
                                color=HIGHLIGHT)))
    for (x0, y0), (x1, y1) in zip(d["arrows"], d["arrows"][1:]):
        annotations.append(dict(x=x1, y=y1 + CELL_H, ax=x0, ay=y0 - CELL_H, xref="x", yref="y", axref="x", ayref="y",
                                text="", showarrow=True, arrowhead=3, arrowsize=1.2,
                                arrowwidth=th.line_width + 1, arrowcolor=HIGHLIGHT,
                                **({"standoff": 4} if th.high_contrast else {})))  # classroom: thick heads stop short
    if chain["error"] is None:
        sub = (f"pos {chain['pos']} → L{chain['logical_block']} (pos // {bs}), offset {chain['offset']} "
               f"(pos % {bs}) → P{chain['physical_block']} → slot {chain['slot']:,} → byte {chain['byte_address']:,}")
    else:
        sub = f"error: {chain['error']}"
    width = th.grid_width
    keys = _legend_traces(d, seq, legend) if legend else []
    fig = go.Figure(data=_figure_texts(d, px_per_unit) + keys)
    room = _legend_room([k.name for k in keys])                             # the legend's row(s) under the pool
    fig.update_layout(
        width=None if th.autosize else width, autosize=th.autosize,
        height=(300 if not th.high_contrast else 320) + room,                # classroom: widget + figure in 599 px
        template="none", shapes=_figure_shapes(d, bs, px_per_unit),
        annotations=annotations, showlegend=bool(keys), margin=dict(l=left, r=10, t=80, b=10 + room),
        legend=dict(orientation="h", x=0, xanchor="left", y=0, yanchor="top", font=dict(size=th.font_size)),
        title=dict(text=f"Address translation through the block table ({source_label(source)})", x=0.01,
                   subtitle=dict(text=html.escape(sub), font=dict(size=th.font_size)),
                   font=dict(size=th.title_size, color=th.text_color)),
        xaxis=dict(range=[-0.05, d["width"] + 0.05], visible=False, fixedrange=True),
        yaxis=dict(range=[-0.5, 2.75], visible=False, fixedrange=True),
        font=dict(size=th.font_size, color=th.text_color), plot_bgcolor="#ffffff",
    )
    return fig


class TranslationWidget:
    """The interactive translation (see module doc). ``w.chain`` is the current state.

    Python API: ``set(pos=..., block_size=..., block_table=..., bytes_per_token=...)``
    moves the widgets (or, in static mode, just the state) and recomputes.
    """

    def __init__(
        self,
        block_table: Sequence[int] = NOTES_TABLE,
        pos: int = 9,
        block_size: int = 4,
        bytes_per_token: int = 1,
        base: int = 0,
        num_blocks: int | None = None,
        static: bool | None = None,
        max_block_size: int = 16,
    ) -> None:
        self.block_table = list(block_table)
        self.pos, self.block_size, self.bytes_per_token, self.base = pos, block_size, bytes_per_token, base
        self.num_blocks = num_blocks
        self.static = is_static(static)
        self.table_error: str | None = None
        self.bpt_error: str | None = None
        self.widget: Any = None
        self.chain: dict[str, Any] = {}
        self._recompute()
        if not self.static:
            self._build(max_block_size)

    # -- state
    def _recompute(self) -> None:
        """``self.good`` is the walk of the last good inputs (drawn, and listed, while a refused input's
        message shows once above them); ``self.chain`` is that walk with the refusal as its ``error``."""
        self.good = translation_chain(self.block_table, self.pos, self.block_size, self.bytes_per_token, self.base)
        self.chain = {**self.good, "error": self.table_error or self.bpt_error or self.good["error"]}

    def set(self, **kw: Any) -> None:
        unknown = set(kw) - {"pos", "block_size", "block_table", "bytes_per_token"}
        if unknown:
            raise TypeError(f"set() got unknown argument(s) {sorted(unknown)}")
        if self.widget is None:
            if "block_table" in kw:
                self.block_table = list(kw["block_table"])
            for k in ("block_size", "bytes_per_token", "pos"):
                if k in kw:
                    setattr(self, k, kw[k])
            self._recompute()
            return
        if "block_table" in kw:
            self._table.value = ", ".join(str(b) for b in kw["block_table"])
        if "block_size" in kw:
            self._bs.value = kw["block_size"]
        if "bytes_per_token" in kw:
            self._bpt.value = str(kw["bytes_per_token"])
        if "pos" in kw:
            self._pos.value = kw["pos"]

    def figure(self) -> Any:
        return translation_figure(self.good, self.num_blocks)

    def chain_html(self) -> str:
        """The walk as a numbered two-column table: what each step is, then its formula with numbers."""
        c, th = self.good, theme()
        if c["error"]:
            return ""
        px = max(th.font_size + 1, th.control_px)
        rows = "".join(
            f"<tr><td style='padding:1px 10px 1px 0;color:#666'>{i}.</td>"
            f"<td style='padding:1px 16px 1px 0;white-space:nowrap'>{html.escape(label)}</td>"
            f"<td style='padding:1px 0'><code>{html.escape(_separated(formula))}</code></td></tr>"
            for i, (label, formula) in enumerate(chain_rows(c["steps"]), 1))
        return f"<table style='font-size:{px}px;line-height:{1.3 if th.high_contrast else 1.5};border-collapse:collapse'>{rows}</table>"

    def _error_html(self) -> str:
        if not self.chain["error"]:
            return ""
        return ("<div style='color:#ffffff;background:#d62728;padding:4px 8px;line-height:1.5;font-weight:bold'>"
                f"{html.escape(self.chain['error'])}</div>")

    # -- widgets
    def _build(self, max_block_size: int) -> None:
        import ipywidgets as W

        style = {"description_width": "initial"}
        wide = "min(420px, 100%)"
        self._pos = self._pos_slider(max(1, len(self.block_table) * self.block_size - 1))
        self._bs = W.IntSlider(value=self.block_size, min=1, max=max(max_block_size, self.block_size),
                               description="block size", style=style,
                               layout=W.Layout(width="min(340px, 100%)"))
        self._bs.add_class("kvlab-block-size-slider")
        self._table = W.Text(value=", ".join(map(str, self.block_table)), description="block table (L0, L1, ...)",
                             continuous_update=False, style=style, layout=W.Layout(width=wide))
        self._table.add_class("kvlab-block-table")
        self._bpt = W.Text(value=str(self.bytes_per_token), description="bytes per token",  # not a whole number >= 1:
                           continuous_update=False, style=style, layout=W.Layout(width="220px"))  # a message
        self._bpt.add_class("kvlab-bytes-per-token")
        self._chain = W.HTML(self.chain_html())
        self._chain.add_class("kvlab-chain")
        # one banner line's height is kept even with no error: a bad entry does not push the figure down
        self._error = W.HTML(self._error_html(), layout=W.Layout(min_height="calc(1.5em + 16px)"))
        self._error.add_class("kvlab-translation-error")
        self._out = W.Output()
        self._out.add_class("kvlab-figure")
        self._bs.observe(self._on_block_size, names="value")
        self._table.observe(self._on_table, names="value")
        self._bpt.observe(self._on_bpt, names="value")
        self._redraw()
        row = W.Layout(flex_flow="row wrap", max_width="100%")
        self._pos_row = W.HBox([self._pos, self._bs], layout=row)
        parts = [self._pos_row, W.HBox([self._table, self._bpt], layout=row),
                 self._error, self._chain, self._out]
        css = classroom_css("kvlab-translation")
        if css:  # classroom mode: bigger controls that wrap instead of overflowing a projector's width
            parts.insert(0, W.HTML(css))
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-translation")

    def _redraw(self) -> None:
        if not hasattr(self, "_out"):
            return
        from .stepper import figure_output

        self._chain.value = self.chain_html()
        self._error.value = self._error_html()
        self._out.outputs = (figure_output(self.figure()),)

    def _pos_slider(self, cap: int) -> Any:
        """The pos slider over 0..cap (observed)."""
        import ipywidgets as W

        slider = W.IntSlider(value=min(self.pos, cap), min=0, max=cap, description="token position pos",
                             style={"description_width": "initial"}, layout=W.Layout(width="min(420px, 100%)"))
        slider.add_class("kvlab-pos-slider")
        slider.observe(self._on_pos, names="value")
        return slider

    def _fit_pos(self) -> None:
        """A new range for pos: a NEW slider, made with it (:func:`kvlab.viz.control.renew_slider`:
        a ``max`` changed on the live slider left End at the old maximum, 19 after block size 4 -> 16)."""
        cap = max(0, len(self.block_table) * self.block_size - 1)
        self.pos = min(self.pos, cap)
        if self._pos.max == max(cap, 1):
            if self._pos.value > cap:
                self._pos.value = cap  # fires _on_pos
            return
        self._pos = renew_slider(self._pos_row, self._pos, max(cap, 1), self._on_pos, value=self.pos)

    def _on_pos(self, ch: dict[str, Any]) -> None:
        self.pos = ch["new"]
        self._recompute()
        self._redraw()

    def _on_block_size(self, ch: dict[str, Any]) -> None:
        self.block_size = ch["new"]
        self._fit_pos()
        self._recompute()
        self._redraw()

    def _on_bpt(self, ch: dict[str, Any]) -> None:
        text = str(ch["new"]).strip().replace(",", "").replace("_", "")  # a text box: "2.5" stays as typed
        if not re.fullmatch(r"[+-]?\d+", text):  # keep the last good value; show the message (as the table does)
            self.bpt_error = (f"bytes per token {str(ch['new']).strip() or '(empty)'} is not a whole number of bytes "
                              f"(kept {self.bytes_per_token})")
        elif int(text) < 1:
            self.bpt_error = (f"bytes per token {int(text)} is below 1: a token's K and V take at least one byte "
                              f"(kept {self.bytes_per_token})")
        else:
            self.bpt_error = None
            self.bytes_per_token = int(text)
        self._recompute()
        self._redraw()

    def _on_table(self, ch: dict[str, Any]) -> None:
        try:
            table = parse_block_table(ch["new"])
        except ValueError as e:
            self.table_error = str(e)  # keep the last good table; show the message
        else:
            self.table_error = None
            self.block_table = table
            self._fit_pos()
        self._recompute()
        self._redraw()

    # -- display
    def __repr__(self) -> str:
        c = self.chain
        if c["error"]:
            return f"<TranslationWidget error: {c['error']}>"
        return (f"<TranslationWidget pos {c['pos']} -> L{c['logical_block']} offset {c['offset']} -> "
                f"P{c['physical_block']} slot {c['slot']} byte {c['byte_address']}>")

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        if self.widget is not None:
            display(self.widget)
            return
        from .display import static_frames

        if static_frames() and not self.chain["error"]:
            display(HTML(self._explore()))
            return
        display(HTML(self._error_html() + self.chain_html()))
        display(self.figure())

    def _explore(self) -> str:
        """The site's grid: every token position of the current block table and block size."""
        from .explorer import explorer_html

        axes = {"pos": list(range(len(self.block_table) * self.block_size))}
        return explorer_html(self.set, lambda: [self.chain_html(), self.figure()], axes, {"pos": self.pos},
                             title=f"Try it here: block table {self.block_table}, blocks of {self.block_size}")
