"""Contiguous versus paged, side by side on the same request trace.

One trace of operations (admit a request with its prompt, grow it by n tokens, finish
it) drives a :class:`~kvlab.memory.contiguous.ContiguousArena` and a
:class:`~kvlab.memory.block_manager.BlockManager` of the
same capacity. Every step records both states; the figure draws two memory maps at slot
level (same geometry, animated in step), bars for where the slots are (token states,
reserved but unused, external fragmentation, free) and the bytes copied on growth.

Slot colours: the request's colour where a token is stored; a light tint of it where a
slot is reserved (contiguous) or allocated (paged, the tail of a partial block) but
empty; light grey where free; a darker grey where free but stranded in a hole smaller
than the largest one (external fragmentation, 外部碎片).

Example (the notes' fragmentation example at lesson size: 48 slots, block size 4):
    >>> steps = run_compare(notes_trace(), capacity=48, block_size=4)
    >>> last = steps[-1]
    >>> last.caption
    "admit D' (24 tokens): contiguous FAILS (24 slots free, largest range 16); paged fits"
    >>> (last.contiguous["external_fragmentation"], last.paged["external_fragmentation"])
    (8, 0)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..memory.block_manager import BlockManager
from ..memory.block_pool import OutOfBlocks
from ..memory.contiguous import ContiguousArena, OutOfContiguousSpace
from ..memory.snapshot import MemorySnapshot
from .palette import FREE, REQUEST_COLORS, STRONG_COLORS, assign_colors, label_px, request_color, source_label, theme, tint

__all__ = ["notes_trace", "growth_trace", "CompareStep", "run_compare", "compare_data", "compare_figure",
           "animate_compare", "compare_stepper", "STRANDED", "TRACE_COLORS", "trace_colors"]

STRANDED = "#a6a6a6"  # free slot outside the largest free range (external fragmentation)
# One colour per request of lesson 03, the same in every figure of the lesson (both steppers and the
# policy widget): the notes' A, B, C, D' and the growing R1, R2, R3, seven colours that differ from each
# other, from free (light grey), stranded (dark grey) and any tint (reserved); R1..R3 keep the colour
# they have in every other lesson (request_color). No light colour: a tint would read as "reserved".
TRACE_COLORS: dict[str, str] = {
    "A": "#ff7f0e", "B": "#bcbd22", "C": "#8c564b", "D'": "#7b4173",  # orange, olive, brown, plum
    **{rid: request_color(rid) for rid in ("R1", "R2", "R3")},  # purple, cyan, pink
}
BAR_KINDS = ("token states", "reserved, unused", "external fragmentation", "free (usable)")


def notes_trace() -> list[tuple]:
    """The notes' [A 4096][B 2048][C 4096][free 2048] example scaled by 1/256 (16, 8, 16 in
    48 slots): A finishes, D' needs 24 slots; 24 are free but the largest range is 16.

    The last request is D' (6,144 / 256 = 24, all the free space), not the notes' D (8,192 / 256
    = 32, more than is free, which no allocator could place): lesson 03 tells the two apart."""
    return [("admit", "A", 16), ("admit", "B", 8), ("admit", "C", 16), ("finish", "A"), ("admit", "D'", 24)]


def growth_trace() -> list[tuple]:
    """Requests that grow while decoding: under the ``pow2`` policy they outgrow their
    ranges and are copied; paged growth only takes a new block."""
    return [("admit", "R1", 3), ("admit", "R2", 5), ("grow", "R1", 2), ("grow", "R2", 4), ("admit", "R3", 6),
            ("grow", "R1", 4), ("grow", "R3", 3), ("finish", "R2"), ("grow", "R3", 8)]


@dataclass(frozen=True)
class CompareStep:
    """Both states after one trace operation (plain data; the stepper's frame snapshot)."""

    index: int
    op: tuple
    caption: str
    capacity: int
    block_size: int
    reservations: tuple[tuple[str, int, int, int], ...]  # (req_id, start, reserved, length)
    contiguous: dict[str, int]  # token_states, reserved_unused, external_fragmentation, free, bytes_copied, moves
    paged_snapshot: MemorySnapshot
    paged: dict[str, int]
    contiguous_ok: bool
    paged_ok: bool

    def check_integrity(self) -> None:
        """Paged snapshot invariants, and contiguous ranges inside the arena, disjoint."""
        self.paged_snapshot.check_integrity()
        spans = sorted((s, s + r, rid) for rid, s, r, _ in self.reservations)
        for (s1, e1, a), (s2, _e, b) in zip(spans, spans[1:]):
            assert e1 <= s2, f"contiguous: {a} [{s1},{e1}) overlaps {b} at {s2}"
        for rid, s, r, n in self.reservations:
            assert 0 <= s and s + r <= self.capacity and 0 <= n <= r, f"contiguous: bad range for {rid}"
        c = self.contiguous
        assert c["token_states"] + c["reserved_unused"] + c["free"] == self.capacity, "contiguous slots do not add up"
        p = self.paged
        assert p["token_states"] + p["reserved_unused"] + p["free"] == self.capacity, "paged slots do not add up"


def _paged_stats(snap: MemorySnapshot) -> dict[str, int]:
    tokens = sum(snap.num_tokens.values())
    allocated = (snap.num_blocks - snap.num_free_blocks) * snap.block_size
    free = snap.num_free_blocks * snap.block_size
    return {"token_states": tokens, "reserved_unused": allocated - tokens, "external_fragmentation": 0,
            "free": free, "free_usable": free, "bytes_copied": 0, "moves": 0}


def run_compare(
    trace: Sequence[tuple],
    capacity: int = 48,
    block_size: int = 4,
    policy: str = "exact",
    max_len: int | None = None,
    bytes_per_token: int = 1,
) -> list[CompareStep]:
    """Run ``trace`` on both allocators; one :class:`CompareStep` per operation.

    Operations: ``("admit", req_id, prompt_len)`` (policy ``exact`` reserves the
    request's final length, computed from the trace's later grows),
    ``("grow", req_id, n)``, ``("finish", req_id)``. A request that does not fit is
    recorded as failed on that side and its later operations are skipped there; a growth
    that does not fit fails that step only (the request keeps its range and tokens).
    """
    if capacity % block_size:
        raise ValueError(f"capacity {capacity} must be a multiple of block_size {block_size}")
    arena = ContiguousArena(capacity=capacity, policy=policy, max_len=max_len or capacity,
                            bytes_per_token=bytes_per_token)
    pool = BlockManager(num_blocks=capacity // block_size, block_size=block_size)
    final = _final_lengths(trace)
    steps: list[CompareStep] = []
    for i, op in enumerate(trace):
        kind = op[0]
        if kind == "admit":
            caption, ok_c, ok_p = _admit_both(arena, pool, op, final if policy == "exact" else None)
        elif kind == "grow":
            caption, ok_c, ok_p = _grow_both(arena, pool, op)
        elif kind == "finish":
            caption, ok_c, ok_p = _finish_both(arena, pool, op)
        else:
            raise ValueError(f"trace step {i}: unknown operation {kind!r} (use admit, grow or finish)")
        steps.append(_record_step(i, op, caption, capacity, block_size, arena, pool, ok_c, ok_p))
    return steps


def _with_notes(caption: str, note_c: str, note_p: str, admit: bool, ok_p: bool) -> str:
    """``caption`` followed by the sides' failure notes; an admit that only contiguous refused adds "paged fits".

    Example: ``_with_notes("admit D' (24 tokens)", "contiguous FAILS (...)", "", True, True)``
    -> ``"admit D' (24 tokens): contiguous FAILS (...); paged fits"``.
    """
    notes = [x for x in (note_c, note_p) if x]
    if admit and notes and ok_p:
        notes.append("paged fits")
    return caption + (": " + "; ".join(notes) if notes else "")


def _admit_both(arena: ContiguousArena, pool: BlockManager, op: tuple,
                final: dict[str, int] | None) -> tuple[str, bool, bool]:
    """``("admit", rid, n)`` on both sides; ``final`` (policy ``exact``): each request's final length to reserve.

    Returns the step's caption and whether each side (contiguous, paged) took it."""
    rid, n = op[1], op[2]
    ok_c = ok_p = True
    note_c = note_p = ""
    try:
        arena.admit(rid, n, final_len=final[rid] if final is not None else None)
    except OutOfContiguousSpace:
        ok_c = False
        note_c = f"contiguous FAILS ({arena.free_tokens} slots free, largest range {arena.largest_free_range})"
    try:
        pool.add_sequence(rid, n)
    except OutOfBlocks as e:
        ok_p, note_p = False, f"paged FAILS ({e})"
    return _with_notes(f"admit {rid} ({n} tokens)", note_c, note_p, True, ok_p), ok_c, ok_p


def _grow_both(arena: ContiguousArena, pool: BlockManager, op: tuple) -> tuple[str, bool, bool]:
    """``("grow", rid, n)`` on each side that holds ``rid``; a growth that does not fit fails this step only.

    Returns the step's caption (with the slots contiguous copied, if it moved the request) and
    whether each side (contiguous, paged) grew."""
    rid, n = op[1], op[2]
    ok_c = ok_p = True
    note_c = note_p = ""
    copied = 0
    if rid in arena.requests:
        try:
            copied = arena.grow(rid, n)
        except OutOfContiguousSpace as e:
            r = arena.requests[rid]
            ok_c, note_c = False, (f"contiguous FAILS (no free range of {e.needed} slots): {rid} keeps "
                                   f"its {r.length} tokens")  # two lines with "step k / N" on a projector
    if rid in pool.tables:
        try:
            pool.append(rid, n)
        except OutOfBlocks:
            ok_p, note_p = False, f"paged FAILS to grow {rid}: no free block"
    caption = f"grow {rid} by {n}" + (f": contiguous moves it, copying {copied} token slots" if copied else "")
    return _with_notes(caption, note_c, note_p, False, ok_p), ok_c, ok_p


def _finish_both(arena: ContiguousArena, pool: BlockManager, op: tuple) -> tuple[str, bool, bool]:
    """``("finish", rid)`` on each side that holds ``rid``; it never fails. Example caption: ``"finish A"``."""
    rid = op[1]
    if rid in arena.requests:
        arena.finish(rid)
    if rid in pool.tables:
        pool.free(rid)
    return f"finish {rid}", True, True


def _record_step(i: int, op: tuple, caption: str, capacity: int, block_size: int, arena: ContiguousArena,
                 pool: BlockManager, ok_c: bool, ok_p: bool) -> CompareStep:
    """Both sides' state after trace operation ``i`` as one :class:`CompareStep`."""
    st = arena.stats()
    cont = {"token_states": st.token_states, "reserved_unused": st.reserved_unused,
            "external_fragmentation": st.external_fragmentation, "free": st.free,
            "free_usable": st.largest_free_range, "bytes_copied": st.bytes_copied, "moves": st.moves}
    snap = pool.snapshot(caption)
    return CompareStep(
        i, tuple(op), caption, capacity, block_size,
        tuple((r.req_id, r.start, r.reserved, r.length) for r in sorted(arena.requests.values(), key=lambda r: r.start)),
        cont, snap, _paged_stats(snap), ok_c, ok_p,
    )


def _final_lengths(trace: Sequence[tuple]) -> dict[str, int]:
    out: dict[str, int] = {}
    for op in trace:
        if op[0] == "admit":
            out[op[1]] = op[2]
        elif op[0] == "grow":
            out[op[1]] = out.get(op[1], 0) + op[2]
    return out


# ----------------------------------------------------------------------- data
def compare_data(step: CompareStep, colors: dict[str, str] | None = None, cols: int | None = None) -> dict[str, Any]:
    """Per-slot colours of both maps (same geometry), and the bar values.

    ``contiguous_color[s]`` / ``paged_color[s]`` for slot ``s``; ``x``, ``y``: its place
    (``cols`` slots a row, a whole number of blocks); ``bars``: side -> values in
    :data:`BAR_KINDS` order.
    """
    cap, bs = step.capacity, step.block_size
    colors = colors if colors is not None else _all_colors([step])
    cols = cols or _cols(cap, bs)
    cc, cl = [FREE] * cap, [""] * cap
    for rid, start, reserved, length in step.reservations:
        for k in range(reserved):
            cc[start + k] = colors.get(rid, "#7f7f7f") if k < length else tint(colors.get(rid, "#7f7f7f"))
        cl[start] = rid
    ranges, largest = _free_ranges(step), step.contiguous["free_usable"]
    big = next((s for s, n in ranges if n == largest), None)
    for s, n in ranges:
        if s != big:
            for k in range(n):
                cc[s + k] = STRANDED
    if step.op[0] == "admit" and not step.contiguous_ok and big is not None:  # the refused request, where it would go
        cl[big] = f"{step.op[1]} ({step.op[2]}): no range fits"
    snap = step.paged_snapshot
    pc, pl = [FREE] * cap, [""] * cap
    for rid, ids in snap.tables.items():
        for logical, b in enumerate(ids):
            filled = min(bs, snap.num_tokens[rid] - logical * bs)
            for k in range(bs):
                pc[b * bs + k] = colors.get(rid, "#7f7f7f") if k < filled else tint(colors.get(rid, "#7f7f7f"))
            pl[b * bs] = f"{rid} L{logical}"
    if bs < LABEL_EVERY_BLOCK_FROM:  # "D' L8" does not fit a block of 1 or 2 slots: label where each run of a table starts
        owner = {b * bs: (rid, logical) for rid, ids in snap.tables.items() for logical, b in enumerate(ids)}
        for slot, (rid, logical) in owner.items():
            if owner.get(slot - bs) == (rid, logical - 1) and slot % cols:
                pl[slot] = ""
    side = {"contiguous": step.contiguous, "paged": step.paged}
    bars = {k: [v["token_states"], v["reserved_unused"], v["external_fragmentation"], v["free_usable"]]
            for k, v in side.items()}
    return {"x": [s % cols for s in range(cap)], "y": [s // cols for s in range(cap)], "cols": cols,
            "rows": -(-cap // cols), "contiguous_color": cc, "paged_color": pc, "contiguous_label": cl,
            "paged_label": pl, "bars": bars, "bytes_copied": step.contiguous["bytes_copied"],
            "moves": step.contiguous["moves"], "caption": step.caption, "legend": colors}


def _free_ranges(step: CompareStep) -> list[tuple[int, int]]:
    out, cursor = [], 0
    for _rid, s, r, _n in step.reservations:
        if s > cursor:
            out.append((cursor, s - cursor))
        cursor = s + r
    if cursor < step.capacity:
        out.append((cursor, step.capacity - cursor))
    return out


LABEL_EVERY_BLOCK_FROM = 4  # block size from which every paged block gets its "R L3" label


def _cols(capacity: int, block_size: int) -> int:
    """Slots a row: up to 48 for a small arena whatever the block size (a whole number of
    blocks), else 32 blocks. Example: ``_cols(48, 1) == _cols(48, 4) == 48``."""
    if capacity <= 96:
        return max(block_size, min(capacity, 48) // block_size * block_size)
    return max(1, min(capacity // block_size, 32)) * block_size


# --------------------------------------------------------------------- figures
def _traces(d: dict[str, Any], step: CompareStep) -> list[Any]:
    import plotly.graph_objects as go

    th = theme()
    size = max(3, min(22, int((th.grid_width - 40) / d["cols"] * 0.85)))
    show_text = d["cols"] <= 48
    out = []
    for k, side in enumerate(("contiguous", "paged")):
        out.append(go.Scatter(
            x=d["x"], y=d["y"], mode="markers+text" if show_text else "markers",
            marker=dict(symbol="square", size=size, color=d[f"{side}_color"], line=dict(color="#ffffff", width=1)),
            text=d[f"{side}_label"] if show_text else None, textposition="top right",
            textfont=dict(size=label_px(), color=th.text_color),
            hoverinfo="skip", showlegend=False, xaxis=f"x{k + 1}" if k else "x", yaxis=f"y{k + 1}" if k else "y",
        ))
    # not grey (free in the maps) and no request's colour (a brown bar read as request C's, review r6):
    # contiguous hatched dark slate over white, paged solid navy
    marker = {"contiguous": dict(color="#ffffff", line=dict(color="#2f3b45", width=1.5),
                                 pattern=dict(shape="/", fgcolor="#2f3b45", size=8, solidity=0.45)),
              "paged": dict(color="#393b79", line=dict(width=0))}
    for side in ("contiguous", "paged"):
        out.append(go.Bar(x=list(BAR_KINDS), y=d["bars"][side], name=side, text=d["bars"][side],
                          textposition="outside", marker=marker[side], xaxis="x3", yaxis="y3", showlegend=True))
    return out


TITLE_LINE_PX = 24  # a line of a compact title (18 px text): its first line in bold, then the caption's lines
COMPACT_CAPTION_CHARS = 80  # a compact subtitle's line: about 80 characters of 18 px text fill a projector's output


def _legend_text(d: dict[str, Any], compact: bool) -> str:
    """What the map colours mean; the dark grey only when this step draws a stranded slot.

    Example: a step with no hole beside the largest one gives "full colour: a token · ... · light grey: free".
    """
    stranded = STRANDED in d["contiguous_color"]
    if compact:  # one line on a projector
        return "full colour: a token · tint: reserved, empty · light grey: free" + (
            " · dark grey: stranded" if stranded else "")
    return "full colour: a token · tint: reserved or allocated, empty · light grey: free" + (
        "<br>dark grey: free but stranded (external fragmentation; equal holes: the first is usable)" if stranded else "")


def _heading(d: dict[str, Any], caption: str, compact: bool) -> tuple[int, str]:
    """The figure's top margin and its subtitle: the caption (wrapped on a projector) and the copy counter.

    Compact (lesson 03's policy widget, classroom): the caption only, in at most two lines, which
    says why a side failed; :func:`_layout` puts them under the title (a subtitle sits a line
    lower: it ran into the map's name) and the counter beside the bars' legend.
    Example: ``_heading(d, "", False)`` -> ``(80, "contiguous token slots copied on growth: 0 (0 moves); paged: 0")``.
    """
    import textwrap

    th = theme()
    copied = f"contiguous token slots copied on growth: {d['bytes_copied']} ({d['moves']} moves); paged: 0"
    if compact:
        sides = caption.split("; ")  # "...: contiguous FAILS (...); paged FAILS (...)": one line a side
        lines = ([sides[0] + ";", sides[1]] if len(sides) == 2 and max(map(len, sides)) < COMPACT_CAPTION_CHARS
                 else textwrap.wrap(caption, COMPACT_CAPTION_CHARS, max_lines=2, placeholder=" …"))
        return 60 + TITLE_LINE_PX * len(lines), "<br>".join(lines)
    sub = f"{caption}<br>{copied}" if caption else copied
    if th.high_contrast:
        return 106 + (34 if caption else 0), sub
    return 80 + (17 if caption else 0), sub  # the title, the subtitle's lines, the map's name: no empty band


def _layout(d: dict[str, Any], step: CompareStep, title: str, source: str, caption: str,
            compact: bool = False) -> dict[str, Any]:
    th = theme()
    rows = d["rows"]
    map_h = max(50, rows * 34 + 10)
    # classroom mode: the stepper's controls and this whole figure on one 599 px projector screen
    bar_h = 150 if not th.high_contrast else (54 if compact else 124)
    gap = 50 if not th.high_contrast else (24 if compact else 34)
    top, sub = _heading(d, caption, compact)
    head = f"{title} ({source_label(source)})"
    if compact and sub:
        head, sub = f"<b>{head}</b><br>{sub}", ""  # one font size: plotly spaces a title's lines by its size
    legend_px = 22 if compact else 40  # the colours' legend under the paged map: one line, or two
    height = top + 2 * map_h + bar_h + 3 * gap + 60
    plot_h = height - top - 40

    def frac(px: float) -> float:
        return 1 - px / plot_h

    y1 = [frac(map_h), frac(0)]
    y2 = [frac(2 * map_h + gap), frac(map_h + gap)]
    y3 = [0, frac(2 * map_h + 2 * gap + legend_px)]
    ax = dict(visible=False, fixedrange=True, autorange=False)
    xr = [-0.6, d["cols"] - 0.4]
    yr = [rows - 0.5, -0.95]
    note = dict(xref="paper", yref="paper", xanchor="left", showarrow=False, font=dict(size=th.font_size))
    counter = [dict(note, text=f"slots copied on growth: {d['bytes_copied']} ({d['moves']} moves); paged: 0", x=0,
                    y=y3[1], yanchor="bottom", font=dict(size=th.label_size))] if compact else []
    return dict(
        width=None if th.autosize else th.grid_width + 40, autosize=th.autosize, height=height, template="none",
        margin=dict(l=60, r=20, t=top, b=40),
        title=dict(text=head, x=0.01, font=dict(size=th.font_size if compact else th.title_size),
                   yref="container", y=1, yanchor="top", pad=dict(t=20 if compact else 12),  # a multi-line title
                   subtitle=dict(text=sub, font=dict(size=th.font_size))),
        font=dict(size=th.font_size, color=th.text_color), barmode="group", plot_bgcolor="#ffffff",
        xaxis=dict(domain=[0, 1], range=xr, anchor="y", **ax), yaxis=dict(domain=y1, range=yr, anchor="x", **ax),
        xaxis2=dict(domain=[0, 1], range=xr, anchor="y2", **ax), yaxis2=dict(domain=y2, range=yr, anchor="x2", **ax),
        xaxis3=dict(domain=[0, 1], anchor="y3", fixedrange=True),
        yaxis3=dict(domain=y3, anchor="x3", range=[0, step.capacity * (1.35 if compact else 1.15)], fixedrange=True,
                    autorange=False,  # compact: short bars, so more room above the tallest for its label
                    title=dict(text="slots")),
        legend=dict(orientation="h", x=0.6, y=y3[1], yanchor="bottom"),
        annotations=[
            dict(note, text="<b>contiguous</b>: one range per request", x=0, y=y1[1], yanchor="bottom"),
            dict(note, text=f"<b>paged</b>: blocks of {step.block_size} slot{'s' if step.block_size != 1 else ''}, "
                            "on demand", x=0, y=y2[1], yanchor="bottom"),
            dict(note, text=_legend_text(d, compact), x=0, y=y2[0], yanchor="top", align="left",
                 font=dict(size=th.label_size)),
            *counter,
        ],
    )


def compare_figure(step: CompareStep, title: str = "Contiguous versus paged", source: str = "simulated",
                   colors: dict[str, str] | None = None, caption: str | None = None, compact: bool = False) -> Any:
    """One step as a static figure: both maps, the bars, the copy counter.

    ``caption`` (default: the step's own) heads the subtitle; ``""`` leaves it out, for a
    stepper that already shows "step k / N: caption" above the figure (once is enough).
    ``compact`` (classroom mode, lesson 03's policy widget, whose own text says what the run did):
    the caption in at most two lines, the copy counter beside the bars' legend, shorter bars.
    """
    import plotly.graph_objects as go

    d = compare_data(step, colors)
    fig = go.Figure(data=_traces(d, step))
    fig.update_layout(**_layout(d, step, title, source, step.caption if caption is None else caption, compact))
    return fig


def trace_colors(ids: Sequence[str]) -> dict[str, str]:
    """The colour of every id: :data:`TRACE_COLORS` for lesson 03's requests, so one request keeps
    one colour across the lesson; any other id gets a strong colour none of those ids took.

    Example: ``trace_colors(["R1", "A"]) == {"R1": TRACE_COLORS["R1"], "A": TRACE_COLORS["A"]} -> True``.
    """
    known = {i: TRACE_COLORS[i] for i in ids if i in TRACE_COLORS}
    rest = sorted(set(ids) - known.keys())
    pool = STRONG_COLORS if len(rest) + len(known) <= len(STRONG_COLORS) else REQUEST_COLORS
    free = [c for c in pool if c not in known.values()] or list(REQUEST_COLORS)
    return {**known, **assign_colors(rest, free)}  # tints mean reserved: strong colours first


def _all_colors(steps: Sequence[CompareStep]) -> dict[str, str]:
    ids: set[str] = set()
    for s in steps:
        ids.update(r[0] for r in s.reservations)
        ids.update(s.paged_snapshot.tables)
    return trace_colors(sorted(ids))


def animate_compare(steps: Sequence[CompareStep], title: str = "Contiguous versus paged",
                    source: str = "simulated", duration_ms: int = 900) -> Any:
    """A plotly animation: both maps and the bars move in step, one frame per operation."""
    import plotly.graph_objects as go

    from .memory_animation import animation_controls, step_caption

    colors = _all_colors(steps)
    fig = compare_figure(steps[0], title, source, colors)
    first = _layout(compare_data(steps[0], colors), steps[0], title, source, step_caption(0, len(steps), steps[0].caption))
    fig.layout.title.subtitle.text = first["title"]["subtitle"]["text"]
    frames = []
    for i, st in enumerate(steps):
        d = compare_data(st, colors)
        lay = _layout(d, st, title, source, step_caption(i, len(steps), st.caption))
        frames.append(go.Frame(data=_traces(d, st), traces=[0, 1, 2, 3], name=str(i + 1),
                               layout=dict(title=lay["title"], annotations=lay["annotations"],  # the legend's dark grey
                                           xaxis=lay["xaxis"], yaxis=lay["yaxis"],
                                           xaxis2=lay["xaxis2"], yaxis2=lay["yaxis2"], yaxis3=lay["yaxis3"])))
    fig.frames = frames
    fig.update_layout(**animation_controls(len(frames), duration_ms, fig.layout))
    fig.layout.sliders[0].currentvalue.visible = False  # the subtitle says "step k / N" already: once is enough
    return fig


class CompareView:
    """Renders CompareStep frames with one palette for the whole trace."""

    def __init__(self, steps: Sequence[CompareStep], title: str = "Contiguous versus paged",
                 source: str = "simulated") -> None:
        self.colors, self.title, self.source = _all_colors(steps), title, source_label(source)

    def __call__(self, frame: Any) -> Any:
        # The stepper's line above the figure says "step k / N: caption": not again in the subtitle.
        return compare_figure(frame.snapshot, self.title, self.source, self.colors, caption="")


def compare_stepper(trace: Sequence[tuple] | None = None, capacity: int = 48, block_size: int = 4,
                    policy: str = "exact", static: bool | None = None, **kw: Any) -> Any:
    """A stepper over :func:`run_compare` (default: the notes' fragmentation example)."""
    from .stepper import Frame, Stepper

    steps = run_compare(trace if trace is not None else notes_trace(), capacity, block_size, policy, **kw)
    frames = [Frame(s, s.caption) for s in steps]
    return Stepper(frames, CompareView(steps), static=static, title="contiguous vs paged", caption_lines=2)
