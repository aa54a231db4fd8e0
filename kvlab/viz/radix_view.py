"""Radix trees in graphviz (SVG): what matched, what was prefilled, what was evicted.

Each node shows its token text (decoded and shortened), its token count, its lock count
and its last access time. Colours follow the notes' legend: the path of the current
match green (reused KV, 命中), the newly prefilled suffix blue (未命中, computed now);
nodes that can be evicted (unlocked) have a dashed border; nodes evicted since the
previous frame are drawn faded where they were.

Sources of frames:
* the notes' four-request example (``kvlab.lessons.four_request_example()``): one frame per
  request, captioned in words, e.g. ``"R3: matched 57 tokens (system prompt [A] +
  few-shot examples [B]), prefilling 5 (R3's question [E]: 发票怎么开)"``, a node split
  named in the caption of the request that caused it, nodes lettered as in the notes'
  figure ([A] system prompt, [B] few-shot examples, [C] R1's turn, [D] R2, [E] R3, [F] R4),
  a node's question and answer on separate lines; see :func:`radix_request_frames`;
* any run on a :class:`~kvlab.reuse.radix_cache.RadixCache`: :class:`RadixRecorder` keeps a
  snapshot after every event (match, split, insert, lock, evict...), and
  :func:`radix_event_frames` turns them into frames (a match that splits a node is shown
  first, then the split it causes).

In the stepper the tree is drawn as an SVG that scales to the output's width
(:func:`fit_svg`), so a deep tree is never cut off at the right edge, and every frame on one
canvas width (:func:`on_canvas`, the widest frame's), so the picture keeps one scale from step
to step; each frame keeps its own height, drawn from the top (the header never moves, and no
blank band is left under a small tree). The stepper's trees are compact (the title and the counts on
one line, centred over the legend on one row): in classroom mode the controls, the caption and
the tree fit a projector's 599 px.

:func:`radix_tree_graph` renders one tree (any step); :func:`radix_tree_data` is the
plain data behind it (tests check it and the DOT source, never the SVG bytes). The frame
builders are in :mod:`kvlab.viz.radix_frames` and re-exported here.

Example:
    >>> from kvlab.lessons.four_requests import four_request_example
    >>> frames = radix_request_frames(four_request_example())
    >>> frames[3].caption
    "R3: matched 57 tokens (system prompt [A] + few-shot examples [B]), prefilling 5 (R3's question [E]: 发票怎么开)"
    >>> frames[2].caption.split("; ")[1]
    'its match ended inside node [B+C] after 31 of its 62 tokens, so that node was split into [B] -> [C]'
    >>> g = radix_tree_graph(frames[3].snapshot)
    >>> 'fillcolor="#2ca02c"' in g.source
    True
"""
from __future__ import annotations

import html
import re
from typing import Any, Callable, Sequence

from .display import is_static
from .palette import EVICTED, HIT, MISS, source_label, theme
from .radix_frames import radix_request_frames
from .radix_state import RadixState

__all__ = ["radix_tree_data", "radix_tree_graph", "radix_stepper", "radix_graph_at", "fit_svg", "on_canvas"]


def _short(text: str, max_chars: int) -> str:
    text = text.replace("\n", "⏎").replace("\\", "\\\\")
    return text if len(text) <= max_chars else text[: max_chars - 1] + "…"


def _text(tokens: Sequence[int], detokenize: Callable[[Sequence[int]], str] | None, max_chars: int,
          max_ids: int = 6) -> str:
    if detokenize is not None:
        try:
            return "“" + _short(detokenize(list(tokens)), max_chars) + "”"
        except Exception:  # noqa: BLE001 - a tokenizer that cannot decode a piece: show ids
            pass
    ids = " ".join(map(str, tokens[:max_ids])) + (" …" if len(tokens) > max_ids else "")
    return f"[{ids}]"


def _path_key(all_nodes: Sequence[Any]) -> Any:
    """Sort key of a node dict: the tokens from the root to the end of the node. Siblings then keep
    one order in every frame (a split keeps its first tokens; a dict's insertion order does not),
    so a stepper's nodes never swap places.

    Example: nodes [1 2] -> [3] and [1 2] -> [0 9]: [0 9] is drawn above [3] whatever the order of
    insertion."""
    by_id = {n.id: n for n in all_nodes}

    def path(node_id: int, depth: int = 0) -> tuple:
        n = by_id.get(node_id)
        if n is None or depth > 10_000:
            return ()
        return path(n.parent_id, depth + 1) + tuple(str(t) for t in n.tokens)

    return lambda d: (path(d["id"]), d["id"])


def radix_tree_data(state: RadixState | Any, max_chars: int = 10, detail: bool = True, max_ids: int = 6) -> dict[str, Any]:
    """Nodes and edges of one tree as plain data (``detail=False``: a node's label is one line,
    its text and its token count, without its lock count and last access time; ``max_ids``: the
    token ids a label shows before "…" when there is no detokenizer).

    ``nodes``: list of dicts (``id``, ``name`` in the DOT source (``n<id>``, root ``root``),
    ``label``, ``fill``, ``font``, ``style``, ``kind`` = hit / miss / cached / evicted / root; a node a
    match ends inside (``state.partial``) is a hit with ``matched`` = its tokens matched and ``pieces`` =
    (its tag, matched text, the rest, the count line), drawn with only its matched part green);
    ``edges``: (parent name, child name, colour). Accepts a bare RadixSnapshot too.
    """
    if not isinstance(state, RadixState):
        state = RadixState(state)
    snap, det = state.snapshot, state.detokenize
    nodes = [dict(id=0, name="root", label="root", fill="#ffffff", font="#000000", style="filled,bold",
                  kind="root", parent=None)]
    edges = []
    for n in list(snap.nodes) + [e for e in state.evicted if e.id not in {m.id for m in snap.nodes}]:
        gone = n not in snap.nodes and n in state.evicted
        tag = state.node_labels.get(n.id)
        head = f"[{tag}] " if tag else ""
        k = state.answer_at.get(n.id)
        if k is None or not 0 <= k < len(n.tokens):
            text = _text(n.tokens, det, max_chars, max_ids)
        elif k == 0:
            text = f"answer {_text(n.tokens, det, max_chars, max_ids)}"
        else:  # a question and the answer cached after it: two lines
            q, a = _text(n.tokens[:k], det, max_chars, max_ids), _text(n.tokens[k:], det, max_chars, max_ids)
            text = f"{q}\nanswer {a}"
        m = None if gone else state.partial.get(n.id)
        pieces = None
        count = f"{len(n.tokens)} tok"
        if m:  # a match that ends inside this node: the matched part apart from the rest
            pieces = (head, _text(n.tokens[:m], det, max_chars, max_ids),
                      _text(n.tokens[m:], det, max_chars, max_ids))
            text, count = " ".join(pieces[1:]), f"{m} of {len(n.tokens)} tok matched"
        label = (f"{head}{text}\n{count} · lock {n.lock_ref} · t={n.last_access_time}" if detail
                 else f"{head}{text} · {count}")
        if gone:
            kind, fill, font, style = "evicted", EVICTED, "#9a9a9a", "filled,dotted"
            label += "\n(evicted)"
        elif n.id in state.hit:
            kind, fill, font, style = "hit", HIT, "#ffffff", "filled"
        elif n.id in state.miss:
            kind, fill, font, style = "miss", MISS, "#ffffff", "filled"
        else:
            kind, fill, font, style = "cached", "#ffffff", "#000000", "filled"
        if pieces:  # white, its matched part green (the graph draws it as two cells)
            fill, font = "#ffffff", "#000000"
        if not gone and n.evictable:
            style += ",dashed"
        nodes.append(dict(id=n.id, name=f"n{n.id}", label=label, fill=fill, font=font, style=style, kind=kind,
                          parent=n.parent_id, locked=not gone and n.lock_ref > 0, matched=m,
                          pieces=pieces and (*pieces, label.split("\n", 1)[1] if detail else count)))
    nodes[1:] = sorted(nodes[1:], key=_path_key(list(snap.nodes) + list(state.evicted)))
    names = {d["id"]: d["name"] for d in nodes}
    kinds = {d["id"]: d["kind"] for d in nodes}
    for d in nodes[1:]:
        parent = names.get(d["parent"], "root")
        colour = {"hit": HIT, "miss": MISS, "evicted": "#c8c8c8"}.get(d["kind"], "#555555")
        edges.append((parent, d["name"], colour))
    return {"nodes": nodes, "edges": edges, "kinds": kinds,
            "evictable_size": snap.evictable_size, "protected_size": snap.protected_size}


# The widest a tree may be drawn (points) before it is laid out top-to-bottom instead: an
# output area of about 850 px shows a wider SVG scaled down, and its text with it.
MAX_WIDTH_PT = {False: 880, True: 1000}
LEGEND_GAP_PT = 12  # empty space between the legend and the tree: the legend never reads as part of the top node


def _svg_width_pt(g: Any) -> float:
    m = re.search(r'<svg\b[^>]*\swidth="([\d.]+)pt"', g.pipe(format="svg", encoding="utf-8"))
    return float(m.group(1)) if m else 0.0


def radix_tree_graph(state: RadixState | Any, caption: str = "", source: str = "simulated",
                     max_chars: int = 10, legend: bool = True, rankdir: str | None = None, locks: bool = True,
                     compact: bool = False, detail: bool = True, legend_gap_pt: int = LEGEND_GAP_PT,
                     max_ids: int = 6) -> Any:
    """One tree as a ``graphviz.Digraph`` (``.source`` is the DOT text, ``.pipe('svg')`` the picture).

    The caption is wrapped (about 70 characters a line, 50 in classroom mode) so that it never
    sets the picture's width. ``rankdir``: ``"LR"`` (root on the left) or ``"TB"`` (root on
    top); None: LR unless that is wider than :data:`MAX_WIDTH_PT`, then whichever is narrower,
    so a wide tree keeps its text size when it is fitted to the output width. ``locks=False``
    leaves out the locked (protected) count when it is 0 (a lesson before locks are taught).
    ``compact`` (a stepper's frames): the title and the counts on one line, centred above the
    legend on one row, the ranks closer left to right (a projector's 599 px hold the stepper's
    controls, its caption and the whole tree; the frames, drawn on one canvas width, keep the
    header in place).
    ``detail=False``: each node on one line, without its lock count and last access time.
    ``legend_gap_pt``: the empty space between the legend and the tree. ``max_ids``: see
    :func:`radix_tree_data`.
    """
    if rankdir is None:
        wide = _radix_graph(state, caption, source, max_chars, legend, "LR", locks, compact, detail, legend_gap_pt)
        if _svg_width_pt(wide) <= MAX_WIDTH_PT[theme().high_contrast]:
            return wide
        tall = _radix_graph(state, caption, source, max_chars, legend, "TB", locks, compact, detail, legend_gap_pt)
        return tall if _svg_width_pt(tall) < _svg_width_pt(wide) else wide
    if rankdir not in ("LR", "TB"):
        raise ValueError(f"rankdir must be 'LR', 'TB' or None, got {rankdir!r}")
    return _radix_graph(state, caption, source, max_chars, legend, rankdir, locks, compact, detail, legend_gap_pt)


def _radix_graph(state: RadixState | Any, caption: str, source: str, max_chars: int, legend: bool,
                 rankdir: str, locks: bool = True, compact: bool = False, detail: bool = True,
                 legend_gap_pt: int = LEGEND_GAP_PT, max_ids: int = 6) -> Any:
    import textwrap

    import graphviz

    if not isinstance(state, RadixState):
        state = RadixState(state)
    d = radix_tree_data(state, max_chars, detail, max_ids)
    th = theme()
    fs = str(th.font_size + (4 if th.high_contrast else 0))
    pen = str(th.line_width + (1.5 if th.high_contrast else 0.5))
    wrap = 50 if th.high_contrast else 70
    lines = [f"<b>{html.escape(state.title)} ({source_label(source)})</b>"]
    if caption:
        lines.append('<br align="left"/>'.join(html.escape(x) for x in textwrap.wrap(caption, wrap)) + '<br align="left"/>')
    lines.append(f"evictable {d['evictable_size']} tokens" + (f" · protected (locked) {d['protected_size']} tokens"
                                                            if locks or d["protected_size"] else ""))
    if compact:  # one line: "Radix tree after R2 (simulated):  evictable 110 tokens · ..."
        # a colon in the bold title, then unbreakable spaces: a browser's bold font runs wider than graphviz's
        # estimate of it (a plain space let "(measured)" touch what followed, review r7), and a "·" there read
        # as a stray dot opening the counts (review r9 of 07)
        lines = [lines[0].replace("</b>", ":</b>", 1) + "&#160;&#160;&#160;" + lines[-1], *lines[1:-1]]
    rows = "".join(f'<tr><td align="left" colspan="4">{x}</td></tr>' for x in lines)
    if legend:
        kinds = ({n["kind"] for n in d["nodes"]} | ({"evictable"} if any("dashed" in n["style"] for n in d["nodes"]) else set())
                 | ({"locked"} if any(n.get("locked") for n in d["nodes"]) else set()))
        rows += _legend_row(two_rows=th.high_contrast and not compact, kinds=kinds, font_pt=fs, gap_pt=legend_gap_pt)
    g = graphviz.Digraph("radix", format="svg")
    g.attr(rankdir=rankdir, label=f'<<table border="0" cellspacing="3" cellpadding="2">{rows}</table>>', labelloc="t",
           labeljust="c" if compact else "l", fontsize=str(int(fs) + 1),
           fontname="Helvetica,Arial,Noto Sans CJK SC,sans-serif",
           bgcolor="white", nodesep="0.25", ranksep=_ranksep(rankdir, compact), ordering="out",
           pad="0.12")  # graphviz's 4 pt margin cut a thick border at the canvas edge (review r8 of 07, [F] at step 6)
    g.attr("node", shape="box", fontsize=fs, fontname="Helvetica,Arial,Noto Sans CJK SC,sans-serif",
           penwidth=pen, margin="0.12,0.06")
    g.attr("edge", penwidth=pen, arrowsize="0.7")
    for n in d["nodes"]:
        border = {"hit": "#1b6e1b", "miss": "#0d4a7a", "evicted": "#bdbdbd"}.get(n["kind"], "#444444")
        label = _split_label(*n["pieces"]) if n.get("pieces") else n["label"]
        g.node(n["name"], label, style=n["style"], fillcolor=n["fill"], fontcolor=n["font"], color=border)
    for parent, child, colour in d["edges"]:
        g.edge(parent, child, color=colour, style="dotted" if colour == "#c8c8c8" else "solid")
    return g


def _ranksep(rankdir: str, compact: bool) -> str:
    """Inches between ranks: closer in a stepper's compact frames, except top-to-bottom, where the gap is an
    edge's whole length (the boxes sit above one another) and 0.3 left root -> [A] an arrowhead on [A]'s
    border with no shaft (review r8 of 07, classroom mode)."""
    if not compact:
        return "0.45"
    return "0.42" if rankdir == "TB" else "0.3"


def _split_label(tag: str, matched: str, rest: str, count: str) -> str:
    """A node's label with its matched tokens on green and the rest on white (an HTML-like graphviz label).

    Example: ``_split_label("[node 1] ", "[1 2 3]", "[4 5 6 7 8]", "3 of 8 tok matched · lock 0 · t=3")`` ->
    a table: "[node 1]", a green cell "[1 2 3]", a white "[4 5 6 7 8]", over the count line."""
    def esc(text: str) -> str:  # _short doubled backslashes for DOT's plain labels; an HTML label keeps them
        return html.escape(text.replace("\\\\", "\\"))

    head = f"<td>{esc(tag.strip())}</td>" if tag.strip() else ""
    return (f'<<table border="0" cellborder="0" cellspacing="0" cellpadding="2"><tr>{head}'
            f'<td bgcolor="{HIT}"><font color="#ffffff">{esc(matched)}</font></td><td>{esc(rest)}</td></tr>'
            f'<tr><td colspan="{3 if head else 2}">{esc(count)}</td></tr></table>>')


def _legend_row(two_rows: bool = False, kinds: set[str] | None = None, font_pt: str = "",
                gap_pt: int = LEGEND_GAP_PT) -> str:
    """The legend as table rows: only the entries this picture uses (``kinds``: hit, miss,
    evictable, locked, evicted; None: all five), so "faded: evicted" shows only where a node is evicted.

    Each entry is plain text (in ``font_pt``, the nodes' size), a colour's after a square of it (■),
    in a table of its own, and an empty row of ``gap_pt`` follows: filled boxes the size of nodes,
    right above the tree, looked like nodes attached to its top one (the review r7, lesson 07).
    Example: ``_legend_row(kinds={"hit"})``: one row, a green ■, then "matched (hit, reused)"."""
    # one cell an entry, a coloured square glyph before the words: graphviz stretches the legend's table to
    # the title's width and spreads the slack over its cells (a swatch cell of its own drifted from its text)
    entries = {"hit": (HIT, "matched (hit, reused)"), "miss": (MISS, "prefilled now (miss)"),
               "evictable": ("", "dashed: evictable (unlocked)"),
               "locked": ("", "solid: locked (a running request reads it)"),
               "evicted": (EVICTED, "faded: evicted")}
    sized = (lambda t: f'<font point-size="{font_pt}">{t}</font>') if font_pt else (lambda t: t)
    used = ['<td align="left">' + sized((f'<font color="{colour}">&#9632;</font>&#160;' if colour else "")
                                        + f"{words}&#160;&#160;&#160;") + "</td>"
            for k, (colour, words) in entries.items() if kinds is None or k in kinds]
    if not used:
        return ""
    per_row = 2 if two_rows else len(used)  # classroom mode: two entries a row, so the legend never sets the width
    rows = "".join(f"<tr>{''.join(used[i:i + per_row])}</tr>" for i in range(0, len(used), per_row))
    table = f'<table border="0" cellspacing="0" cellpadding="2">{rows}</table>'
    return (f'<tr><td colspan="4" cellpadding="0">{table}</td></tr>'
            f'<tr><td colspan="4" height="{gap_pt}" cellpadding="0"></td></tr>')


def fit_svg(svg: str, max_height_px: int | None = None) -> str:
    """An SVG that scales down to its container's width (never wider than drawn, never cut off).

    graphviz writes ``width="Wpt" height="Hpt"`` and a viewBox; the fixed width is what an
    output area clips. Here the width becomes 100% up to W pt and the height follows (the XML
    prolog before ``<svg`` is dropped: the result goes inside HTML). ``max_height_px``: no
    taller than that either (a deep tree is drawn smaller, centred, to stay on one screen).

    Example:
        >>> fit_svg('<svg width="620pt" height="80pt" viewBox="0 0 620 80"><g/></svg>')
        '<svg width="100%" style="max-width:620pt;height:auto" viewBox="0 0 620 80"><g/></svg>'
    """
    m = re.search(r'<svg\b[^>]*>', svg)
    if m is None:
        raise ValueError("fit_svg: no <svg> element in the text")
    tag = m.group(0)
    w = re.search(r'\swidth="([^"]+)"', tag)
    new = re.sub(r'\s(width|height)="[^"]*"', "", tag)
    tall = f";max-height:{max_height_px}px" if max_height_px else ""
    new = new.replace("<svg", f'<svg width="100%" style="max-width:{w.group(1) if w else "100%"};height:auto{tall}"', 1)
    return new + svg[m.end():]  # from <svg on: the XML prolog has no place inside HTML


class RadixView:
    """Renders RadixState frames as SVG that fits the output width (graphviz, then :func:`fit_svg`).

    ``canvas``: (width, height) in pt that every frame is drawn on (None: each frame its own
    size; height 0: each frame its own height), so that a stepper's picture keeps one scale from
    frame to frame (:meth:`share_canvas`); each frame's SVG is drawn once and kept."""

    def __init__(self, source: str = "simulated", max_chars: int = 10, captioned: bool = True,
                 rankdir: str | None = None, compact: bool = False, max_ids: int = 6) -> None:
        self.source, self.max_chars, self.max_ids = source_label(source), max_chars, max_ids
        self.captioned = captioned  # False: a live stepper's caption line says it; the graph does not repeat it
        self.rankdir = rankdir      # a stepper's frames share one orientation (None: each frame chooses)
        self.compact = compact      # see radix_tree_graph (a stepper's frames)
        self.canvas: tuple[float, float] | None = None
        self._drawn: dict[tuple[int, str | None], tuple[Any, str]] = {}

    def graph(self, frame: Any) -> Any:
        return radix_tree_graph(frame.snapshot, frame.caption if self.captioned else "", self.source, self.max_chars,
                                rankdir=self.rankdir, compact=self.compact, max_ids=self.max_ids)

    def svg(self, frame: Any) -> str:
        """The frame's SVG as graphviz draws it (its own size), drawn once per orientation."""
        key = (id(frame), self.rankdir)
        kept = self._drawn.get(key)
        if kept is None or kept[0] is not frame:
            kept = self._drawn[key] = (frame, self.graph(frame).pipe(format="svg", encoding="utf-8"))
        return kept[1]

    def share_canvas(self, frames: Sequence[Any], height: bool = False) -> tuple[float, float]:
        """Draw every frame on the canvas of the widest one (one scale when fitted to a width), and
        with ``height`` of the tallest one too; returns it (pt; height 0: each frame its own).

        A stepper shares the width only: its controls and caption sit above the picture, which
        starts at the top of the canvas, so a frame's own height moves nothing above it; the tallest
        frame's height left a blank band of 250 px under step 1's two nodes (review r8 of 07)."""
        sizes = [svg_size_pt(self.svg(f)) for f in frames]
        self.canvas = (max(w for w, _ in sizes), max(h for _, h in sizes) if height else 0.0)
        return self.canvas

    def __call__(self, frame: Any) -> str:
        svg = self.svg(frame)
        return fit_svg(on_canvas(svg, *self.canvas) if self.canvas else svg)


def svg_size_pt(svg: str) -> tuple[float, float]:
    """(width, height) in pt of graphviz's SVG.

    Example:
        >>> svg_size_pt('<svg width="620pt" height="80pt" viewBox="0 0 620 80"><g/></svg>')
        (620.0, 80.0)
    """
    m = re.search(r'<svg\b[^>]*\swidth="([\d.]+)pt"\s+height="([\d.]+)pt"', svg)
    if m is None:
        raise ValueError("svg_size_pt: no <svg width=...pt height=...pt> in the text")
    return float(m.group(1)), float(m.group(2))


def on_canvas(svg: str, width: float, height: float) -> str:
    """graphviz's SVG on a canvas of ``width`` x ``height`` pt (at least its own size): the
    drawing centred left to right, at the top; the rest empty. Frames drawn on one canvas keep
    one scale when :func:`fit_svg` fits them to a width (and one height, unless ``height`` is 0:
    each its own).

    Example:
        >>> on_canvas('<svg width="60pt" height="40pt" viewBox="0.00 0.00 60.00 40.00"><g/></svg>', 100, 50)
        '<svg width="100.00pt" height="50.00pt" viewBox="-20.00 0.00 100.00 50.00"><g/></svg>'
    """
    w, h = svg_size_pt(svg)
    width, height = max(width, w), max(height, h)
    m = re.search(r'<svg\b[^>]*>', svg)
    tag = re.sub(r'\s(width|height|viewBox)="[^"]*"', "", m.group(0))
    tag = tag.replace("<svg", f'<svg width="{width:.2f}pt" height="{height:.2f}pt" '
                              f'viewBox="{(w - width) / 2:.2f} 0.00 {width:.2f} {height:.2f}"', 1)
    return svg[:m.start()] + tag + svg[m.end():]


def common_rankdir(view: RadixView, frames: Sequence[Any]) -> str:
    """One orientation for every frame of a stepper: left-to-right while every tree fits
    :data:`MAX_WIDTH_PT`, else top-to-bottom for all (a tree that flips between frames moves
    every node)."""
    limit, was = MAX_WIDTH_PT[theme().high_contrast], view.rankdir
    view.rankdir = "LR"  # the frames drawn LR are kept: no second drawing when LR is the answer
    fits = all(svg_size_pt(view.svg(f))[0] <= limit for f in frames)
    view.rankdir = was
    return "LR" if fits else "TB"


def radix_stepper(frames: Sequence[Any] | None = None, static: bool | None = None, source: str = "simulated",
                  max_chars: int = 10, max_ids: int = 6) -> Any:
    """A stepper over radix frames (default: the notes' four-request example); ``max_ids``: the token
    ids a node's label shows before "…" (lesson 08: 8, its keys' length)."""
    from .stepper import Stepper

    frames = list(frames) if frames is not None else radix_request_frames()
    live = not is_static(static)  # the live stepper's caption line holds the caption, once
    view = RadixView(source, max_chars, captioned=not live, compact=True, max_ids=max_ids)
    view.rankdir = common_rankdir(view, frames)
    view.share_canvas(frames)  # one scale in every frame; each its own height (no blank band under a small tree)
    return Stepper(frames, view, static=static, title="radix tree")


def radix_graph_at(frames: Sequence[Any], step: int, source: str = "simulated") -> Any:
    """The tree at step ``step`` of a recorded run (frames from :func:`radix_request_frames`
    or :func:`radix_event_frames`), as a graphviz graph; one call."""
    if not 0 <= step < len(frames):
        raise ValueError(f"step {step} is outside 0..{len(frames) - 1}")
    f = frames[step]
    return radix_tree_graph(f.snapshot, f.caption, source)
