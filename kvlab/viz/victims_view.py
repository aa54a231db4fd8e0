"""Lesson 08's first picture: one radix tree, and which node each eviction policy takes from it.

:func:`victims_graph` draws the tree the lesson's section 1 builds (graphviz, root on the left),
each node with what a policy looks at: its tokens, its token count, its last access time ``t``
(the tree's logical clock) and its ``hits`` (how many matches used it). Under each node, one cell
per policy: filled in that policy's colour (the colours of the lesson's hit-rate chart) with the
order it evicts the node in ("1st", "2nd"), or "kept". So the three answers of the printed lines
sit side by side on the one tree they came from, with the numbers that decided each.

Everything drawn comes from the arguments (a snapshot taken before evicting, and each policy's
``EvictResult.node_ids`` on a copy of the tree): nothing is recomputed here. Mirrors no vLLM or
SGLang file (SGLang's ``--radix-eviction-policy`` picks one of these orders).

:func:`victims_svg` is the same picture as SVG that scales down to the output's width (lesson 08
shows it with ``IPython.display.HTML``).

Example:
    >>> from kvlab.reuse import CacheManager, serve_request
    >>> cm = CacheManager(num_blocks=8, block_size=1)
    >>> _ = serve_request(cm, [1, 2, 3], rid="A"); _ = serve_request(cm, [1, 2, 9], rid="B")
    >>> [(n.id, n.tokens) for n in cm.tree.snapshot().nodes]
    [(2, (1, 2)), (1, (3,)), (3, (9,))]
    >>> g = victims_graph(cm.tree.snapshot(), {"lru": [1]}, need=1, names={"lru": "LRU"})
    >>> "LRU 1st" in g.source and g.source.count("LRU kept") == 2
    True
"""
from __future__ import annotations

import html
from typing import Any, Mapping, Sequence

from .eviction_view import POLICY_COLORS
from .palette import source_label, theme

__all__ = ["victims_graph", "victims_svg", "ORDINALS"]

ORDINALS = ("1st", "2nd", "3rd", "4th", "5th", "6th", "7th", "8th")
FONT = "Helvetica,Arial,Noto Sans CJK SC,sans-serif"


def _ordinal(i: int) -> str:
    """``_ordinal(0) -> '1st'``; past :data:`ORDINALS`, ``'9th'``, ``'10th'`` ..."""
    return ORDINALS[i] if i < len(ORDINALS) else f"{i + 1}th"


def _ink(fill: str) -> str:
    """Black or white text, whichever reads better on ``fill`` (WCAG relative luminance).

    >>> _ink("#17becf"), _ink("#1f77b4")
    ('#000000', '#ffffff')
    """
    def lin(c: int) -> float:
        c /= 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (int(fill[i:i + 2], 16) for i in (1, 3, 5))
    lum = 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)
    return "#000000" if (lum + 0.05) / 0.05 > 1.05 / (lum + 0.05) else "#ffffff"


def _node_label(n: Any, victims: Mapping[str, Sequence[int]], names: Mapping[str, str], two_rows: bool) -> str:
    """One node as an HTML-like graphviz label: its tokens, its numbers, then a cell per policy."""
    cells = []
    for p, order in victims.items():
        name = html.escape(names.get(p, p))
        if n.id in order:
            fill = POLICY_COLORS.get(p, "#444444")
            cells.append(f'<td bgcolor="{fill}"><font color="{_ink(fill)}"><b>{name} '
                         f"{_ordinal(list(order).index(n.id))}</b></font></td>")
        else:
            cells.append(f'<td border="1" color="#9e9e9e"><font color="#444444">{name} kept</font></td>')
    per_row = 2 if two_rows else len(cells)
    rows = "".join(f"<tr>{''.join(cells[i:i + per_row])}</tr>" for i in range(0, len(cells), per_row))
    span = max(1, min(per_row, len(cells)))
    tokens = html.escape(" ".join(map(str, n.tokens)))
    facts = f"{len(n.tokens)} tok · t={n.last_access_time} · hits {n.hit_count}"
    return (f'<<table border="0" cellborder="0" cellspacing="3" cellpadding="3">'
            f'<tr><td colspan="{span}"><b>[{tokens}]</b></td></tr><tr><td colspan="{span}">{facts}</td></tr>'
            f"{rows}</table>>")


def victims_graph(snapshot: Any, victims: Mapping[str, Sequence[int]], need: int,
                  names: Mapping[str, str] | None = None, source: str = "simulated") -> Any:
    """The tree of ``snapshot`` (a :class:`~kvlab.reuse.radix_snapshot.RadixSnapshot`, before any
    eviction) with, in every node, one cell per policy of ``victims`` (policy id -> the node ids it
    evicted, in order, to free ``need`` tokens): the order it went in, or "kept" (a
    ``graphviz.Digraph``). ``names``: how the text names each policy (default: its id). In
    classroom mode the cells go two a row, so the picture keeps its text size in an 850 px output."""
    import graphviz

    names = dict(names or {})
    known = {n.id for n in snapshot.nodes}
    missing = sorted({i for order in victims.values() for i in order} - known)
    if missing:
        raise ValueError(f"victims name node(s) {missing} that the snapshot does not hold")
    th = theme()
    fs = str(th.font_size + (4 if th.high_contrast else 0))
    pen = str(th.line_width + (1.5 if th.high_contrast else 0.5))
    g = graphviz.Digraph("victims", format="svg")
    title = (f"<b>Which nodes each policy evicts to free {need} tokens ({html.escape(source_label(source))})</b>"
             '<br align="left"/>t: last access on the tree\'s clock · hits: matches that used the node<br align="left"/>')
    g.attr(rankdir="LR", label=f"<{title}>", labelloc="t", labeljust="l", fontsize=str(int(fs) + 1), fontname=FONT,
           bgcolor="white", nodesep="0.2", ranksep="0.35", ordering="out")
    g.attr("node", shape="box", fontsize=fs, fontname=FONT, penwidth=pen, margin="0.06,0.04", color="#444444")
    g.attr("edge", penwidth=pen, arrowsize="0.7", color="#444444")
    g.node("n0", "root", shape="ellipse")
    for n in snapshot.nodes:
        g.node(f"n{n.id}", _node_label(n, victims, names, th.high_contrast))
        g.edge(f"n{n.parent_id if n.parent_id in known else 0}", f"n{n.id}")
    return g


def victims_svg(snapshot: Any, victims: Mapping[str, Sequence[int]], need: int,
                names: Mapping[str, str] | None = None, source: str = "simulated") -> str:
    """:func:`victims_graph` as an SVG string that fits the output's width (:func:`~kvlab.viz.radix_view.fit_svg`),
    wrapped in a ``kvlab-svg`` div."""
    from .radix_view import fit_svg

    svg = victims_graph(snapshot, victims, need, names, source).pipe(format="svg", encoding="utf-8")
    return f'<div class="kvlab-svg kvlab-victims">{fit_svg(svg)}</div>'
