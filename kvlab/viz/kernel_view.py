"""Kernel access view: the order the paged decode kernel reads one sequence's blocks.

The paged decode kernel (``kvlab.kernels.paged_decode_attention``) walks a sequence's
context from position 0 up, a tile of tokens per loop iteration; every position finds
its physical block through the block table. So the blocks are read in block-table
order, L0, L1, L2..., wherever they sit in the pool. With split-K (``num_splits > 1``)
the tiles are cut into ``num_splits`` contiguous ranges, each read by its own program,
in parallel; a second kernel combines the partial results.

This view draws that order over the memory map: the sequence's blocks numbered in read
order and joined by arrows, the other sequences' blocks faded. With split-K each program
has one colour, used for its blocks, its arrows and its legend entry (never the red of
"read this iteration", which marks the blocks of the current iteration in the stepper).
The stepper draws only the reads done so far: blocks not read yet are faded and
unnumbered ("not yet"), and arrows join only blocks already read.

``tile_tokens``: tokens per loop iteration. The default (``block_size``: one block a
step) is a teaching view that shows the order block by block. The kvlab kernel loads
``max(block_size, 64)`` tokens per iteration (``kvlab.kernels.paged_decode.tile_tokens``):
a 30-token context with block size 4 is ONE iteration that reads all 8 blocks at once. Pass
that value to see its exact grouping; the order of the blocks is the same either way. It
needs only the block table (a MemorySnapshot); it imports neither torch nor Triton.

Mirrors no vLLM or SGLang file (a picture of ``kernels/paged_decode.py``'s loop).

Example (the notes' table: L0->P3, L1->P7, L2->P1, L3->P5, L4->P9; 18 tokens):
    >>> [(r.logical, r.physical) for r in kernel_access_order([3, 7, 1, 5, 9], 18, 4)]
    [(0, 3), (1, 7), (2, 1), (3, 5), (4, 9)]
    >>> [(r.split, r.iteration, r.physical) for r in kernel_access_order([3, 7, 1, 5, 9], 18, 4, num_splits=2)]
    [(0, 0, 3), (0, 1, 7), (0, 2, 1), (1, 0, 5), (1, 1, 9)]
    >>> {r.iteration for r in kernel_access_order([3, 7, 1, 5, 9], 18, 4, tile_tokens=64)}   # the real tile
    {0}
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..memory.ids import check_int
from ..memory.snapshot import MemorySnapshot
from .memory_map import _figure_from_data, memory_map_data, snapshot_ids
from .pool_grid import grid_layout
from .palette import FREE, assign_colors, source_label, theme, tint

__all__ = ["BlockRead", "kernel_access_order", "kernel_access_data", "kernel_access_figure",
           "kernel_access_frames", "kernel_access_stepper", "SPLIT_COLORS", "ARROW_COLOR"]

# One colour per split-K program: mid tones that dark labels stay readable on and lines show on
# white; none is a request colour, the highlight red, the free grey or a radix green/blue.
SPLIT_COLORS = ("#e6a100", "#7b86c9", "#c9577b", "#5aa39a", "#a08f5a", "#8f8f8f")
ARROW_COLOR = "#333333"  # the read order of a single program


@dataclass(frozen=True)
class BlockRead:
    """One block read: by program ``split``, in its loop ``iteration``; ``tokens`` of it used."""

    split: int
    iteration: int
    logical: int
    physical: int
    tokens: int


def kernel_access_order(
    block_table: Sequence[int], context_len: int, block_size: int, num_splits: int = 1,
    tile_tokens: int | None = None,
) -> list[BlockRead]:
    """Every block read for one sequence, program by program, in loop order.

    Mirrors ``paged_decode_kernel``: ``num_tiles = ceil(context_len / tile_tokens)``,
    ``tiles_per_split = ceil(num_tiles / num_splits)``, split ``s`` reads tiles
    ``[s * tiles_per_split, min((s + 1) * tiles_per_split, num_tiles))``; a later split
    may get none. Raises ValueError naming a bad value.
    """
    context_len = check_int("context_len", context_len, 0)
    block_size, num_splits = check_int("block_size", block_size, 1), check_int("num_splits", num_splits, 1)
    tile = block_size if tile_tokens is None else check_int("tile_tokens", tile_tokens, 1)
    if tile % block_size:
        raise ValueError(f"tile_tokens must be a positive multiple of block_size {block_size}, got {tile_tokens!r}")
    if context_len > len(block_table) * block_size:
        raise ValueError(f"context_len {context_len} is past the block table ({len(block_table)} blocks of {block_size})")
    num_tiles = -(-context_len // tile)
    per_split = -(-num_tiles // num_splits) if num_tiles else 0
    reads = []
    for s in range(num_splits):
        for it, t in enumerate(range(s * per_split, min((s + 1) * per_split, num_tiles))):
            start, end = t * tile, min((t + 1) * tile, context_len)
            for lb in range(start // block_size, -(-end // block_size)):
                used = min(end, (lb + 1) * block_size) - max(start, lb * block_size)
                reads.append(BlockRead(s, it, lb, block_table[lb], used))
    return reads


def _fade(hex_color: str) -> str:
    return tint(hex_color, 0.3)


def kernel_access_data(
    snapshot: MemorySnapshot, seq_id: str, num_splits: int = 1, tile_tokens: int | None = None,
    iteration: int | None = None, colors: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The memory map's data with ``seq_id``'s blocks numbered in read order and the other
    sequences' faded. ``iteration`` None: every read; an int: the reads of iterations
    0..iteration only (the stepper), those of ``iteration`` itself highlighted (all splits in
    parallel), later ones faded and unnumbered.

    Extra keys: ``reads`` (every BlockRead), ``done`` (those drawn), ``arrows`` ((from block,
    to block, split) between consecutive drawn reads of one program), ``split_colors`` (split
    -> colour), ``legend_colors`` (legend entry -> colour, for the figure), ``tile_tokens``.
    """
    if seq_id not in snapshot.tables:
        raise KeyError(f"unknown sequence {seq_id!r}; live sequences: {sorted(snapshot.tables)}")
    table = snapshot.tables[seq_id]
    tile = snapshot.block_size if tile_tokens is None else tile_tokens
    reads = kernel_access_order(table, snapshot.num_tokens[seq_id], snapshot.block_size, num_splits, tile)
    n_iter = 1 + max((r.iteration for r in reads), default=-1)
    if iteration is not None and not 0 <= iteration < max(n_iter, 1):
        raise ValueError(f"iteration {iteration} is outside 0..{n_iter - 1}")
    done = reads if iteration is None else [r for r in reads if r.iteration <= iteration]
    hl = [r.physical for r in reads if r.iteration == iteration]
    colors = colors if colors is not None else assign_colors(snapshot_ids([snapshot]))
    d = memory_map_data(snapshot, hl, colors, grid_layout(snapshot.num_blocks, cols=_cols(snapshot.num_blocks)))
    own = colors.get(seq_id, d["color"][table[0]] if table else FREE)
    split_colors = {s: SPLIT_COLORS[s % len(SPLIT_COLORS)] if num_splits > 1 else own for s in range(num_splits)}
    legend: dict[str, str] = {}
    drawn, count = {}, [0] * num_splits
    for r in done:  # each program numbers its own reads
        count[r.split] += 1
        drawn[r.physical] = (r, count[r.split])
    for b in range(snapshot.num_blocks):
        if b in drawn:
            r, k = drawn[b]
            d["color"][b] = split_colors[r.split]
            d["label"][b] += f"<br><b>read {k}</b>" + (f" (p{r.split})" if num_splits > 1 else "")
            name = f"{seq_id}: read by program {r.split} (split {r.split})" if num_splits > 1 else f"{seq_id}: read"
            legend[name] = split_colors[r.split]
        elif b in table:
            d["color"][b] = _fade(own)
            d["label"][b] += "<br>not yet"
            legend[f"{seq_id}: not read yet"] = _fade(own)
        elif snapshot.ref_count[b]:
            d["color"][b] = _fade(d["color"][b])
            who = d["holders"][b][0][0] if d.get("holders") and d["holders"][b] else snapshot.owner[b]
            legend.setdefault(f"{who} (another sequence)", d["color"][b])
    arrows = [(a.physical, b.physical, a.split) for a, b in zip(done, done[1:]) if a.split == b.split]
    d.update(reads=reads, done=done, arrows=arrows, num_iterations=n_iter, seq_id=seq_id, num_splits=num_splits,
             split_colors=split_colors, legend_colors=_legend_order(legend, d["color"]), tile_tokens=tile)
    d["legend"] = d["legend_colors"]  # what the figure's legend lists
    return d


def _cols(num_blocks: int) -> int | None:
    """Rows of 8 above 8 blocks: a cell wide enough for its three lines of text."""
    return 8 if num_blocks > 8 else None


MAX_ARROWS = 12  # more reads than this: the numbers on the blocks say the order, arrows would tangle
LANE, HEADROOM = 0.5, 0.8  # grid units added between two pool rows when arrows are drawn (their lane: no
CLASSROOM_LANE, CLASSROOM_HEADROOM = 0.4, 0.55  # label in it) and above the first row; classroom: less (599 px)
HEAD_LEN = 0.16  # grid units from an arrow's head's base to its tip
EDGE = 0.45  # an arrow starts and ends this far from a block's centre, just off its edge (a cell is CELL_H high)


def _run_arrows(d: dict[str, Any]) -> int:
    """How many arrows the whole run draws (a stepper's last frame): the room every frame leaves."""
    reads = d["reads"]
    return sum(a.split == b.split for a, b in zip(reads, reads[1:]))


def _read_arrow(d: dict[str, Any], a: int, b: int) -> tuple[str, tuple[float, float], tuple[float, float]]:
    """The path from block ``a`` to block ``b`` (an SVG path in grid units), where its head starts and its tip.

    Both in one row: an arc above the row, inside the lane over it (the lower part; the upper part
    is for arrows between rows). Different rows: straight runs, from ``a``'s edge into the upper
    part of the lane next to it, along it to the gap between two columns, down (or up) that gap
    to the lane over ``b``'s row, along it and down into ``b``'s top. No run enters a block.

    Example (one row): a 4-block row, block 0 to block 2.
        >>> path, head, tip = _read_arrow({"x": [0, 1, 2, 3], "y": [0, 0, 0, 0], "row_pitch": 1.5,
        ...                                "headroom": 0.8}, 0, 2)
        >>> path.split()[0], tip
        ('M', (2, -0.45))
    """
    pitch, headroom = d["row_pitch"], d["headroom"]
    xa, xb = d["x"][a], d["x"][b]
    ra, rb = round(d["y"][a] / pitch), round(d["y"][b] / pitch)
    top = lambda r: r * pitch - EDGE  # noqa: E731
    band = lambda r: (r - 1) * pitch + EDGE + 0.16 if r else -0.5 - headroom + 0.15  # noqa: E731  (the upper part)
    if ra == rb:
        reach = headroom - 0.2 if ra == 0 else pitch - 1.14  # the arc's peak stays under the lane's upper part
        h = min(reach, 0.14 + 0.06 * abs(xb - xa))
        y0 = top(ra)
        cx, cy = (xa + xb) / 2, y0 - 2 * h
        tx, ty = cx - xb, cy - y0  # the arc's tangent at its end, back along the arc: the head lies along it
        k = HEAD_LEN / (tx * tx + ty * ty) ** 0.5  # a head of a fixed length (a short arc's was too short to draw)
        return f"M {xa},{y0} Q {cx},{cy} {xb},{y0}", (xb + tx * k, y0 + ty * k), (xb, y0)
    gap = xb - 0.5 if xb > 0 else xb + 0.5  # the gap beside b's column
    if rb > ra:
        pts = [(xa, ra * pitch + EDGE), (xa, band(ra + 1))]
        if rb > ra + 1:
            pts += [(gap, band(ra + 1)), (gap, band(rb))]
    else:
        pts = [(xa, top(ra)), (xa, band(ra)), (gap, band(ra)), (gap, band(rb))]
    pts += [(xb, band(rb)), (xb, top(rb))]
    path = "M " + " L ".join(f"{x},{y}" for x, y in pts)
    return path, (xb, top(rb) - HEAD_LEN), (xb, top(rb))


def _wrap(text: str, chars: int) -> str:
    """Plotly does not wrap a subtitle: break it into lines of about ``chars`` characters."""
    import textwrap

    return "<br>".join(textwrap.wrap(text, chars)) or text


def _legend_order(legend: dict[str, str], used: list[str]) -> dict[str, str]:
    """The legend entries, sorted, plus an unnamed entry for any other colour in use (the
    picture's palette must hold every colour it draws)."""
    out = dict(sorted(legend.items()))
    for i, c in enumerate(dict.fromkeys(c for c in used if c != FREE and c not in out.values())):
        out[f"other block {i + 1}"] = c
    return out


def _tile_strip(d: dict[str, Any], cols: int, top: float, gap: float = 0.1) -> tuple[list[dict], list[dict]]:
    """The sequence's tiles in loop (table) order, as a strip ``STRIP`` grid units high from ``top``:
    one box per tile, as wide as its logical blocks, in the colour of the program that reads it and
    named (tile t, its blocks, its program): which program takes which tile, and where tiles end.
    A program with no tile is named at the strip's end; ``gap``: grid units above it (more under a
    subtitle, whose last line sits on the plot's top). Returns (shapes, annotations)."""
    th = theme()
    reads = d["reads"]
    n_logical = 1 + max((r.logical for r in reads), default=0)
    idle = sorted(set(range(d["num_splits"])) - {r.split for r in reads})
    w = (cols - (1 if idle else 0)) / n_logical   # grid units per logical block (the last column: the idle programs)
    tiles: dict[tuple[int, int], list[int]] = {}
    for r in reads:
        tiles.setdefault((r.split, r.iteration), []).append(r.logical)
    shapes, ann = [], []
    y0, y1 = top + gap, top + gap + _strip_units() - 0.18    # a gap under the subtitle and over the pool's arcs
    for t, ((split, _it), logical) in enumerate(sorted(tiles.items(), key=lambda kv: kv[1][0])):
        x0, x1 = -0.5 + logical[0] * w, -0.5 + (logical[-1] + 1) * w
        colour = d["split_colors"][split]
        shapes.append(dict(type="rect", xref="x", yref="y", x0=x0, x1=x1, y0=y0, y1=y1, fillcolor=colour,
                           line=dict(color="#ffffff", width=th.line_width + 2), layer="below"))
        blocks = f"L{logical[0]}" + (f"-L{logical[-1]}" if len(logical) > 1 else "")
        if th.high_contrast:   # a projector: one line (599 px), the program by its colour and name
            text = (f"p{split}: " if d["num_splits"] > 1 else f"tile {t}: ") + blocks
        else:
            text = f"tile {t}" + (f" · p{split}" if d["num_splits"] > 1 else "") + f"<br>{blocks}"   # p: as on the blocks
        ann.append(dict(x=(x0 + x1) / 2, y=(y0 + y1) / 2, xref="x", yref="y", text=text, showarrow=False,
                        font=dict(size=th.font_size, color="#222222")))
    if idle:   # the programs that get no tile, named in a dashed box of the first one's colour
        x0, x1 = cols - 1.5 + 0.08, cols - 0.5
        shapes.append(dict(type="rect", xref="x", yref="y", x0=x0, x1=x1, y0=y0, y1=y1, fillcolor="#ffffff",
                           line=dict(color=d["split_colors"][idle[0]], width=th.line_width + 1, dash="dash")))
        who = f"p{idle[0]}" if len(idle) == 1 else f"p{idle[0]}-p{idle[-1]}"
        ann.append(dict(x=(x0 + x1) / 2, y=(y0 + y1) / 2, xref="x", yref="y",
                        text=f"{who}: none" if th.high_contrast else f"{who}:<br>no tile",
                        showarrow=False, font=dict(size=th.font_size, color="#222222")))
    return shapes, ann


STRIP, CLASSROOM_STRIP = 0.85, 0.6  # grid units: the tile strip's height, gaps included (two lines; one on a projector)


def _strip_units() -> float:
    return CLASSROOM_STRIP if theme().high_contrast else STRIP


def kernel_access_figure(
    snapshot: MemorySnapshot, seq_id: str, num_splits: int = 1, tile_tokens: int | None = None,
    iteration: int | None = None, source: str = "simulated", colors: dict[str, str] | None = None,
    subtitle: bool = True, tiles: bool = False, source_note: str = "",
) -> Any:
    """The read order over the memory map, as a static plotly figure. ``subtitle=False``: no
    sentence under the title (a control that prints its own caption beside the figure).
    ``tiles``: a strip above the pool with the sequence's tiles in loop order, each in the colour of
    the program that reads it (:func:`_tile_strip`). ``source_note``: the title's parenthesis in
    place of the bare ``source`` when the figure mixes both, and says which part is which (it must
    name ``source``)."""
    if source_note and source_label(source) not in source_note:
        raise ValueError(f"source_note {source_note!r} must say what is {source!r}")
    colors = colors if colors is not None else assign_colors(snapshot_ids([snapshot]))
    d = kernel_access_data(snapshot, seq_id, num_splits, tile_tokens, iteration, colors)
    d["highlight_name"] = "read this iteration" if iteration is not None else ""  # the red outline's legend words
    working = len({r.split for r in d["reads"]})  # a later split may get no tile: say so, do not count it as drawn
    idle = f" ({num_splits - working} with no tile to read)" if working < num_splits else ""
    each = "" if theme().high_contrast else ", one colour each"  # a projector: the legend says it; one title line
    splits = f", split-K: {num_splits} programs{idle}{each}" if num_splits > 1 else ""
    cap = d["caption"] = _caption(d, iteration)
    title = f"Kernel reads {seq_id}: {d['tile_tokens']}-token tiles{splits}"
    roomy = 0 < _run_arrows(d) <= MAX_ARROWS  # arrows in some frame: every frame leaves the same room for them
    if roomy:
        lane, d["headroom"] = (CLASSROOM_LANE, CLASSROOM_HEADROOM) if theme().high_contrast else (LANE, HEADROOM)
        d["row_pitch"] = 1 + lane
        d["y"] = [y * d["row_pitch"] for y in d["y"]]
    fig = _figure_from_data(d, d["legend_colors"], title, source_label(source), shared_legend=bool(d["shared"]))
    th = theme()
    lay = d["layout"]
    shapes, ann = [], []
    arrows = d["arrows"] if roomy else []
    for a, b, s in arrows:
        colour = d["split_colors"][s] if num_splits > 1 else ARROW_COLOR
        path, head, tip = _read_arrow(d, a, b)
        shapes.append(dict(type="path", path=path, xref="x", yref="y", line=dict(color=colour, width=th.line_width + 1)))
        ann.append(dict(x=tip[0], y=tip[1], ax=head[0], ay=head[1], xref="x", yref="y", axref="x", ayref="y",
                        showarrow=True, arrowhead=2, arrowsize=1.2, arrowwidth=th.line_width + 1,
                        arrowcolor=colour, text=""))
    headroom = d["headroom"] if roomy else 0.0  # space above the grid for row 0's arcs (every frame of a stepper)
    lanes = (lay.rows - 1) * (d.get("row_pitch", 1.0) - 1)  # the lanes between the rows
    if tiles:                                   # the tile strip, above the arcs' room
        gap = 0.25 if subtitle else 0.1
        strip_shapes, strip_ann = _tile_strip(d, lay.cols, -0.5 - headroom - _strip_units() - gap + 0.1, gap)
        shapes, ann, headroom = strip_shapes + shapes, strip_ann + ann, headroom + _strip_units() + gap - 0.1
    if d["arrows"] and not arrows and iteration is None:  # too many reads to list: say who reads how many
        per = [[r for r in d["reads"] if r.split == p] for p in range(num_splits)]
        cap = (f"{seq_id}: " + "; ".join(f"program {p} reads {len(rs)} blocks, P{rs[0].physical} first"
                                         for p, rs in enumerate(per) if rs)
               + (" (in parallel)" if num_splits > 1 else "") + "; the numbers on the blocks give the order")
    lines = _wrap(cap, 76 if th.high_contrast else 110) if subtitle else ""
    head = _wrap(title, 56 if th.high_contrast else 90)            # a long title wraps too, never cut at the edge
    extra = int(1.9 * th.font_size) * lines.count("<br>") + int(1.4 * th.title_size) * head.count("<br>")
    cut = 0 if subtitle else int(1.9 * th.font_size)  # the subtitle's own line, left empty
    fig.update_layout(shapes=shapes, annotations=ann,
                      height=fig.layout.height + int((headroom + lanes) * lay.cell) + extra - cut,
                      yaxis=dict(range=[lay.rows - 0.5 + lanes, -0.5 - headroom]),
                      margin=dict(t=fig.layout.margin.t + extra - cut))
    fig.layout.title.subtitle.text = lines
    fig.layout.title.text = head + f" ({source_note or source_label(source)})"
    return fig


def _caption(d: dict[str, Any], iteration: int | None) -> str:
    reads, ns = d["reads"], d["num_splits"]
    if iteration is None:
        if ns == 1:
            return f"{d['seq_id']}: blocks read in block-table order " + " → ".join(f"P{r.physical}" for r in reads)
        parts = [f"program {s} reads " + " → ".join(f"P{r.physical}" for r in reads if r.split == s)
                 for s in range(ns) if any(r.split == s for r in reads)]
        return f"{d['seq_id']}: " + "; ".join(parts) + " (in parallel)"
    parts = []
    for s in range(ns):
        now = [r for r in reads if r.split == s and r.iteration == iteration]
        if now:
            who = f"program {s}" if ns > 1 else "the program"
            parts.append(f"{who} reads " + ", ".join(f"L{r.logical}→P{r.physical} ({r.tokens} tok)" for r in now))
    so_far = f"; read so far: {sum(r.iteration <= iteration for r in reads)} of {len(reads)} blocks"
    return f"iteration {iteration + 1}/{d['num_iterations']}: " + "; ".join(parts or ["nothing left to read"]) + so_far


def kernel_access_frames(snapshot: MemorySnapshot, seq_id: str, num_splits: int = 1,
                         tile_tokens: int | None = None) -> list[Any]:
    """One frame per loop iteration (all splits run in parallel within an iteration). The stepper
    numbers its steps, one iteration each, so a caption does not count them again."""
    from .stepper import Frame

    d = kernel_access_data(snapshot, seq_id, num_splits, tile_tokens)
    return [Frame(snapshot, _caption(d, i).split(": ", 1)[1], tuple(r.physical for r in d["reads"] if r.iteration == i),
                  {"iteration": i}) for i in range(max(d["num_iterations"], 1))]


class KernelAccessView:
    def __init__(self, snapshot: MemorySnapshot, seq_id: str, num_splits: int, tile_tokens: int | None,
                 source: str) -> None:
        self.seq_id, self.num_splits, self.tile_tokens, self.source = seq_id, num_splits, tile_tokens, source
        self.colors = assign_colors(snapshot_ids([snapshot]))

    def __call__(self, frame: Any) -> Any:
        return kernel_access_figure(frame.snapshot, self.seq_id, self.num_splits, self.tile_tokens,  # the stepper
                                    frame.extra["iteration"], self.source, self.colors, subtitle=False)  # captions it


def kernel_access_stepper(snapshot: MemorySnapshot, seq_id: str, num_splits: int = 1,
                          tile_tokens: int | None = None, static: bool | None = None,
                          source: str = "simulated") -> Any:
    """A stepper over the kernel's loop iterations for one sequence."""
    from .stepper import Stepper

    frames = kernel_access_frames(snapshot, seq_id, num_splits, tile_tokens)
    return Stepper(frames, KernelAccessView(snapshot, seq_id, num_splits, tile_tokens, source), static=static,
                   title=f"kernel reads {seq_id}, one loop iteration a step")
