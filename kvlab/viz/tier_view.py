"""The tiers and the lifecycle of a KV block, seen: the state diagram, and both pools as a two-row map.

:func:`lifecycle_graph` draws the state machines of ``kvlab.reuse.lifecycle`` with graphviz
(one cluster per machine: device block, host block, node placement), optionally with how often a
run took each edge and the edges of one step in bold. :func:`tier_map_figure` draws a
:class:`~kvlab.reuse.hiradix_cache.TierSnapshot` with plotly: the device pool on the top row,
the host pool on the bottom row, each block's colour its lifecycle state, its label the radix
node holding it. :class:`TierRecorder` records a real run of a ``HiCacheManager`` (a snapshot
and the transitions since the last one, per step); :func:`animate_tiers` plays it (slider,
play/pause, axes fixed across frames) and :func:`tier_stepper` steps through it with the graph.

Colours (from ``kvlab.viz.palette``): free blocks light grey; ``allocated`` (being written by a
prefill or decode) the miss blue; ``cached`` the hit green; ``locked`` (read by a running request)
the highlight red; ``loading`` orange; on the host, ``writing`` light orange, ``backup`` (on both
tiers) light cyan, ``host`` (the only copy) cyan. A node's placement takes the colour of the
block state that is the same fact (device only: green, both: light cyan, host only: cyan; disk
brown), and :func:`tier_tree_figure` colours its pools by block state as the animation does, so a
colour means one thing in every picture. Every figure says simulated or measured.

Mirrors no vLLM or SGLang file (kvlab's pictures).

Example:
    >>> from kvlab.reuse.hicache_manager import HiCacheManager
    >>> cm = HiCacheManager(4, 1, host_ratio=1)
    >>> rec = TierRecorder(cm, "start")
    >>> _ = cm.admit("R1", [1, 2, 3]); rec.snap("R1 admitted")
    >>> d = tier_map_data(rec.snapshots[-1])
    >>> d["device"]["states"], rec.taken[-1]
    (['allocated', 'allocated', 'allocated', 'free'], [('device', 'free', 'allocated', 3)])
    >>> "allocated -> locked" in lifecycle_graph("device").source.replace('"', "")
    False
"""
from __future__ import annotations

import html
import re
from typing import Any, Sequence

from ..reuse.hiradix_node import TierSnapshot
from ..reuse.lifecycle import LEGAL_EDGES, MACHINES
from .palette import FREE, HIGHLIGHT, HIT, MISS, REQUEST_COLORS, source_label, theme

__all__ = ["STATE_COLORS", "state_colour_words", "EDGE_LABELS", "lifecycle_graph", "LifecycleFigure", "TierRecorder", "tier_map_data", "tier_map_figure",
           "tier_tree_figure", "tier_tree_stepper", "majority_labels", "run_labels", "PLACEMENT_WORDS",
           "animate_tiers", "tier_stepper", "drawn_states"]

STATE_COLORS: dict[str, dict[str, str]] = {
    "device": {"free": FREE, "allocated": MISS, "cached": HIT, "locked": HIGHLIGHT, "loading": REQUEST_COLORS[0]},
    "host": {"free": FREE, "writing": REQUEST_COLORS[7], "backup": REQUEST_COLORS[9], "host": REQUEST_COLORS[2]},
    "node": {"new": "#ffffff", "device": HIT, "both": REQUEST_COLORS[9], "host": REQUEST_COLORS[2],
             "disk": REQUEST_COLORS[5], "evicted": "#bdbdbd"},
}
# the legend's words for the block states (not the ids: the review read "host: host")
STATE_WORDS = {"device": {"free": "free", "allocated": "being filled", "cached": "cached", "locked": "in use (locked)",
                          "loading": "loading back"},
               "host": {"free": "free", "writing": "copy in flight", "backup": "copy (also on device)",
                        "host": "only copy"},
               "disk": {"disk": "a page, on disk only"}}
TAKEN = "#7b1fa2"  # an edge taken this step: bold purple (red is the locked state's colour; no state is purple)
COLOUR_WORDS = {FREE: "light grey", MISS: "blue", HIT: "green", HIGHLIGHT: "red", REQUEST_COLORS[0]: "orange",
                REQUEST_COLORS[7]: "light orange", REQUEST_COLORS[9]: "light cyan", REQUEST_COLORS[2]: "cyan",
                REQUEST_COLORS[5]: "brown", "#bdbdbd": "grey", "#ffffff": "white"}


def state_colour_words(machines: Sequence[str] = ("device", "host"), drawn: dict[str, set] | None = None) -> str:
    """The colours of the block states in words, from :data:`STATE_COLORS` (what the pictures draw);
    ``drawn`` (:func:`drawn_states`): only the states a picture draws.

    Example:
        >>> state_colour_words(("host",))
        'host block: free light grey, copy in flight light orange, copy (also on device) light cyan, only copy cyan'
        >>> state_colour_words(("host",), {"host": {"free", "host"}})
        'host block: free light grey, only copy cyan'
    """
    words = "; ".join(f"{m} block: " + ", ".join(f"{STATE_WORDS[m][s]} {COLOUR_WORDS[c]}" for s, c in STATE_COLORS[m].items()
                                                 if drawn is None or s in drawn.get(m, ()))
                      for m in machines)
    disk = COLOUR_WORDS[STATE_COLORS["node"]["disk"]]
    return words + (f"; disk: {STATE_WORDS['disk']['disk']} {disk}" if drawn and drawn.get("disk") else "")


def drawn_states(snapshots: Sequence[TierSnapshot]) -> dict[str, set]:
    """The block states some snapshot of a run has, per pool: a legend lists those only (an entry
    with nothing drawn in its colour is a defect; review r2 of lesson 10 saw 4 of 9).

    Example: a run snapped between requests has no "locked" device block."""
    out = {"device": {st for sn in snapshots for st in sn.device_states},
           "host": {st for sn in snapshots for st in sn.host_states}}
    if any(sn.disk_pages for sn in snapshots):   # a disk row: nodes on disk only (review r7: [D] vanished)
        out["disk"] = {"disk"}
    return out


# Short edge labels for the diagram (the long ones are kvlab.reuse.lifecycle.LEGAL_EDGES).
EDGE_LABELS: dict[str, dict[tuple[str, str], str]] = {
    "device": {("free", "allocated"): "allocate", ("allocated", "free"): "free", ("allocated", "locked"): "cache (runs on)",
               ("allocated", "cached"): "cache (finished)", ("cached", "locked"): "match", ("locked", "cached"): "unlock",
               ("cached", "free"): "evict", ("free", "loading"): "load_back", ("loading", "locked"): "copy done",
               ("loading", "cached"): "copy done", ("loading", "free"): "evict"},
    "host": {("free", "writing"): "write", ("writing", "backup"): "copy done", ("writing", "host"): "copy done\n(device gone)",
             ("writing", "free"): "evict_host", ("backup", "host"): "device evicted", ("host", "backup"): "load_back",
             ("host", "free"): "evict_host"},
    "node": {("new", "device"): "insert", ("new", "both"): "split", ("new", "host"): "split", ("new", "disk"): "split",
             ("device", "both"): "back up", ("both", "host"): "evict", ("host", "both"): "load_back",
             ("host", "disk"): "evict_host (save)", ("disk", "device"): "load_back (fetch)",
             ("device", "evicted"): "evict", ("host", "evicted"): "evict_host", ("disk", "evicted"): "miss"},
}
_TITLES = {"device": "a device (GPU) block", "host": "a host (DRAM) block", "node": "where a radix node's KV lives"}
# The node machine left to right, as a loop with "new" inside it (review: top to bottom it was 420 pt tall and
# its split and evict edges crossed): device above both on the left, disk above host on the right, evicted
# at the far right; device -> both -> host -> disk -> device runs round "new", whose four edges go out to the
# corners, and the evict edges leave the loop on its right. The same layout whatever the counts on the edges
# (review r2: the node machine had its disk on the right in section 3 and on the left in the section 4 stepper). Each rank's nodes listed top to bottom; the edges
# in _BACKWARD are written head first (dir=back), so that dot ranks and orders them as drawn: no two cross.
_LOOP = {"node": (("device", "both"), ("disk", "host"))}
_BACKWARD = {"node": {("new", "device"), ("new", "both"), ("host", "disk"), ("disk", "device"), ("host", "both")}}


def _machine_graph(m: str, counts: dict | None, bold: set, th: Any, font_pt: int | None = None,
                   events: bool = True, compact: bool | None = None, who: dict | None = None) -> Any:
    """One state machine as a top-to-bottom ``graphviz.Digraph`` (narrow: it fits beside the others;
    the node's left to right, a loop with no two edges crossing, :data:`_LOOP`);
    ``font_pt``: its text size (default the theme's, 4 pt more on a projector; given: ranks closer
    too, a compact diagram for a stepper on a projector); ``events=False``: the edges carry their
    counts only, not the event that takes them (a lesson that asks for the events first), and the
    split edges out of "new" do not pull the ranks (they ran across the counts of "back up");
    ``compact``: ranks closer (default: when ``font_pt`` is given); ``who``: ``{(machine, src, dst):
    letters}``, the nodes that took a bold edge, written after its count ("×1 [D]")."""
    import graphviz

    fs = str(font_pt or th.font_size + (4 if th.high_contrast else 0))
    compact = bool(font_pt) if compact is None else compact
    g = graphviz.Digraph(f"lifecycle_{m}", format="svg")
    g.attr(label=f"<<b>{_TITLES[m]}</b>>", labelloc="t", fontsize=fs, fontname="Helvetica,Arial,sans-serif",
           rankdir="LR" if m in _LOOP else "TB", nodesep="0.45" if compact else "0.25", ranksep="0.22" if compact else "0.35", bgcolor="white", margin="0.05")
    g.attr("node", shape="box", style="rounded,filled", fontsize=fs, fontname="Helvetica,Arial,sans-serif",
           **({"height": "0.3", "margin": "0.08,0.03"} if compact else {}))
    g.attr("edge", fontsize=fs, fontname="Helvetica,Arial,sans-serif", arrowsize="0.7")
    for s in MACHINES[m]:
        shape = "circle" if s == "new" else "box"
        g.node(f"{m}_{s}", s, fillcolor=STATE_COLORS[m][s], shape=shape,  # "new" named: exercise 3 uses it
               margin="0.02" if s == "new" else "", fontcolor="white" if s in ("allocated", "locked") else "black")
    for rank in _LOOP.get(m, ()):   # one column each, top to bottom: the same layout always
        with g.subgraph() as col:
            col.attr(rank="same")
            for s in rank:
                col.node(f"{m}_{s}")
    for (src, dst) in LEGAL_EDGES[m]:
        n = (counts or {}).get((m, src, dst))
        text = (EDGE_LABELS[m][(src, dst)] if events else "") + (f" ×{n}" if n else "")
        hot = (m, src, dst) in bold
        if hot and (who or {}).get((m, src, dst)):   # review r7: which node took the purple edge
            text += " " + " ".join(f"[{x}]" for x in who[(m, src, dst)])
        if text:
            # a padded HTML label: graphviz keeps its edges out of the padding, and the text is the letters
            # alone (en and em spaces around it were text that a bending edge still ran through: "copy
            # done", "evict", "free ×1" in the stepper, review r5)
            text = (f'<<table border="0" cellborder="0" cellpadding="4"><tr><td>'
                    f'{html.escape(text.strip()).replace(chr(10), "<br/>")}</td></tr></table>>')
        loose = {} if events or src != "new" or dst == "device" or m in _LOOP else {"constraint": "false"}  # the splits
        ends = (f"{m}_{dst}", f"{m}_{src}") if (src, dst) in _BACKWARD.get(m, ()) else (f"{m}_{src}", f"{m}_{dst}")
        if ends[0] != f"{m}_{src}":
            loose["dir"] = "back"                                # written head first, drawn tail to head
        flat = any(src in r and dst in r for r in _LOOP.get(m, ()))   # up or down a column: its label beside it
        g.edge(*ends, **{"xlabel" if flat else "label": text}, penwidth="3.5" if hot else str(th.line_width), **loose,
               color=TAKEN if hot else ("#444444" if n or counts is None else "#c8c8c8"),
               fontcolor="#000000" if n or counts is None else "#777777")
    return g


class LifecycleFigure:
    """The three state machines side by side, each its own graph (the node's left to right), in a row that
    wraps: at 850 px the device and host machines share a row and the node machine takes the
    next, each SVG at its drawn size (text never below 12 px) and never wider than the output
    (``max-width: 100%``). ``source`` is the DOT of all three (tests read it); ``html()`` the
    markup a notebook shows."""

    def __init__(self, graphs: list, title: str) -> None:
        self.graphs, self.title = graphs, title

    @property
    def source(self) -> str:
        return "\n".join(g.source for g in self.graphs)

    def svgs(self) -> list[tuple[float, str]]:
        """Each machine's (drawn width in pt, SVG made to scale down to its container: ``radix_view.fit_svg``)."""
        from .radix_view import fit_svg

        out = []
        for g in self.graphs:
            svg = g.pipe(format="svg", encoding="utf-8")
            w = re.search(r'<svg\b[^>]*\swidth="([0-9.]+)pt"', svg)
            out.append((float(w.group(1)) if w else 300.0, fit_svg(svg)))
        return out

    def html(self) -> str:
        th = theme()
        # each cell is as wide as its graph was drawn (never scaled up), and at most the output's width
        cells = "".join(f"<div style='flex:0 1 {w:.0f}pt;width:{w:.0f}pt;max-width:100%'>{svg}</div>"
                        for w, svg in self.svgs())
        return (f"<div class='kvlab-lifecycle' style='max-width:100%'>"
                f"<div style='font-size:{th.title_size}px;color:{th.text_color};overflow-wrap:anywhere'>{self.title}</div>"
                f"<div style='display:flex;flex-wrap:wrap;gap:8px 18px;align-items:flex-start;max-width:100%'>{cells}"
                "</div></div>")

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict[str, str]:
        return {"text/html": self.html(), "text/plain": f"<lifecycle graphs: {', '.join(g.name for g in self.graphs)}>"}


def lifecycle_graph(machine: str = "all", counts: dict | None = None, taken: Sequence = (), caption: str = "",
                    source: str = "simulated", unnamed: Sequence[str] = (), taken_words: str = "the last step's edges",
                    static: bool | None = None) -> Any:
    """The state machine(s). ``machine``: "device", "host" or "node" (a ``graphviz.Digraph``,
    top to bottom) or "all" (a :class:`LifecycleFigure`: the three side by side, wrapping; on a
    projector a stepper with one machine a frame, so that each fits one 599 px screen with its
    control: stacked, the three were 1,697 px tall); ``counts``: ``{(machine, src, dst): n}`` (a
    tracker's ``counts``) written on the edges; ``taken``: edges ``(machine, src, dst, ...)`` drawn
    bold purple, ``taken_words`` saying which in the legend; ``unnamed``: machines whose edges do not
    say which event takes them (lesson 10's exercise 3 asks for the node's)."""
    names = list(MACHINES) if machine == "all" else [machine]
    if any(m not in MACHINES for m in names):
        raise ValueError(f"machine must be one of {sorted(MACHINES)} or 'all', got {machine!r}")
    th = theme()
    bold = {tuple(t[:3]) for t in taken}
    one_a_frame = machine == "all" and th.high_contrast
    # one a frame: 14 pt text, ranks closer (each machine and the stepper fit 599 px), but the device's as far
    # apart as in the notebook: closer, "copy done x3" touched the loading edge (402 px, the tallest)
    graphs = [_machine_graph(m, counts, bold, th, 14 if one_a_frame else None, events=m not in unnamed,
                             compact=None) for m in names]
    if machine != "all":
        return graphs[0]
    title = "<b>The lifecycle of a KV block</b>" + (f": {html.escape(caption)}" if caption else "")
    if counts is not None or bold:   # the edges are the machine's; the counts and purple edges come from a run
        title += f" ({source_label(source)} run)"
    if counts is not None:  # what the edges' two greys mean (the pictures draw both)
        title += ("<br><span style='font-size:smaller'>dark edge ×n: the run took it n times · light grey edge: "
                  "legal, but this run never took it" + (f" · bold purple: {html.escape(taken_words)}" if bold else "")
                  + "</span>")
    if not one_a_frame:
        return LifecycleFigure(graphs, title)
    from .stepper import Frame, Stepper

    frames = [Frame(None, _TITLES[m], extra={"graph": g}) for m, g in zip(names, graphs)]
    return Stepper(frames, lambda f: LifecycleFigure([f.extra["graph"]], title).html(), static=static,
                   title="state machine")


class TierRecorder:
    """Records a run of a HiCacheManager: ``snap(caption)`` keeps a TierSnapshot and the
    transitions logged since the previous snap (``taken``: ``(machine, src, dst, how many)``)."""

    def __init__(self, cm, caption: str = "start") -> None:
        if not hasattr(cm, "snapshot_tiers"):
            raise TypeError(f"TierRecorder needs a HiCacheManager, got {type(cm).__name__}")
        self.cm = cm
        self.snapshots: list[TierSnapshot] = []
        self.trees: list = []  # the radix tree (RadixSnapshot) at each snap, host-only nodes included
        self.taken: list[list[tuple[str, str, str, int]]] = []
        self.movers: list[dict[tuple[str, str, str], list[int]]] = []   # per snap: a node edge -> the nodes that took it
        # per snap: (pool, block) -> (node id, the page's index in the node): a block's own tokens
        self.pages: list[dict[tuple[str, int], tuple[int, int]]] = []
        self._seen = len(cm.log)
        self.snap(caption)

    def snap(self, caption: str) -> None:
        log = self.cm.log
        moves: dict[tuple[str, str, str], int] = {}
        movers: dict[tuple[str, str, str], list[int]] = {}
        for i in range(self._seen, len(log)):
            e = log[i]
            if e.kind == "transition":
                k = (e.detail["machine"], e.detail["src"], e.detail["dst"])
                moves[k] = moves.get(k, 0) + (1 if k[0] == "node" else len(e.block_ids))
                if k[0] == "node":
                    movers.setdefault(k, []).append(e.detail["node"])
        self.movers.append(movers)
        self._seen = len(log)
        self.snapshots.append(self.cm.snapshot_tiers(caption))
        self.trees.append(self.cm.tree.snapshot())
        self.taken.append([(*k, n) for k, n in moves.items()])
        tree, pages = self.cm.tree, {}
        for n in tree.iter_nodes():
            for pool, blocks in (("device", n.value), ("host", tree.host_value.get(n.id, ()))):
                pages.update({(pool, b): (n.id, j) for j, b in enumerate(blocks)})
        self.pages.append(pages)


def tier_map_data(snap: TierSnapshot, names: dict[int, str] | None = None,
                  blocks: dict[tuple[str, int], str] | None = None) -> dict[str, Any]:
    """Plain data for one map: per row ("device", "host") the states, colours, labels: each block's
    own letter in ``blocks`` ((pool, block) -> letter, :func:`run_labels`), else its node's in
    ``names`` (node id -> letter, :func:`majority_labels`), else ``n<id>``."""
    names, blocks = names or {}, blocks or {}
    out: dict[str, Any] = {"caption": snap.caption}
    for row, states, nodes in (("device", snap.device_states, snap.device_nodes),
                               ("host", snap.host_states, snap.host_nodes)):
        out[row] = {"states": list(states), "colors": [STATE_COLORS[row][s] for s in states],
                    "labels": [blocks.get((row, b), names.get(n, f"n{n}")) if n else "" for b, n in enumerate(nodes)],
                    "hover": [f"{row} block {b}: {s}" + (f", node {n} ({snap.placements.get(n, '?')})" if n else "")
                              for b, (s, n) in enumerate(zip(states, nodes))]}
    pages = [(n, j, k) for n, k in snap.disk_pages for j in range(k)]   # one square a page of each disk-only node
    out["disk"] = {"states": ["disk"] * len(pages), "colors": [STATE_COLORS["node"]["disk"]] * len(pages),
                   "labels": [names.get(n, f"n{n}") for n, _, _ in pages],
                   "hover": [f"disk: node {n}, page {j + 1} of {k} (on disk only)" for n, j, k in pages]}
    return out


def _title(title: str, source: str, caption: str) -> str:
    """A figure title and its caption on a second line at the body font size (a ``<sub>`` would
    shrink it under 12 px)."""
    if not caption:
        return f"{title} ({source})"
    return f"{title} ({source})<br><span style='font-size:{theme().font_size}px'>{html.escape(caption)}</span>"


def _width() -> int | None:
    """Figure width: the output's (classroom mode), else 840 px (fits an 850 px output area)."""
    th = theme()
    return None if th.autosize else min(th.grid_width, 840)


_LEGEND_PER_ROW = 5  # at most this many legend entries a row; fewer when the labels are long
_LEGEND_MARGINS = 90  # tier_map_figure's left + right margins, px


def _legend_per_row(labels: Sequence[str]) -> int:
    """Entries per legend row such that each entry's slot (a fraction of the plot's width) holds
    its swatch and its widest label: a label estimated at 0.6 em a character, plus 40 px for the
    swatch and the gap (the review saw "host: copy (also on device)" run under the next swatch at
    5 a row). 3 at classroom size, where the figure takes the output's width.

    Example: at 12 px in an 840 px figure, "host: copy (also on device)" (27 characters) needs
    about 234 px, so 3 entries a row (250 px each)."""
    th = theme()
    if th.high_contrast or _width() is None:
        return 3
    widest = max(len(t) for t in labels) * 0.6 * th.font_size + 40
    return max(1, min(_LEGEND_PER_ROW, int((_width() - _LEGEND_MARGINS) // widest)))


def _marker_size(n: int) -> int:
    """Square markers that fit ``n`` columns in the theme's canvas width; on a projector 0.92 of a
    column (0.8 left 20 px boxes under 18 px letters, review r2: the letters overflowed them)."""
    th = theme()
    return max(6, min(26, int((th.grid_width - 150) / max(n, 1) * (0.92 if th.high_contrast else 0.8))))


def _traces(d: dict[str, Any], disk: bool = False) -> list:
    """One trace a row: the device pool (y 1), the host pool (y 0) and, with ``disk``, the pages
    of the nodes on disk only (y -1; a disk tier has no pool of blocks to draw). A block's letter
    is black or white, whichever reads better on its fill (review r7: dark grey on green)."""
    import plotly.graph_objects as go

    from .victims_view import _ink

    th = theme()
    size = _marker_size(max(len(d["device"]["states"]), len(d["host"]["states"])))
    traces = []
    for y, row in ((1, "device"), (0, "host"), (-1, "disk"))[:3 if disk else 2]:
        r = d[row]
        n = len(r["states"])
        traces.append(go.Scatter(x=list(range(n)), y=[y] * n, mode="markers+text", text=r["labels"],
                                 textfont=dict(size=th.label_size, color=[_ink(c) for c in r["colors"]]),
                                 hovertext=r["hover"], hoverinfo="text",
                                 marker=dict(symbol="square", size=size, color=r["colors"], line=dict(width=1, color="#666")),
                                 showlegend=False, name=row))
    return traces


def tier_map_figure(snap: TierSnapshot, title: str = "Device and host pools", source: str = "simulated",
                    width: int | None = None, names: dict[int, str] | None = None,
                    blocks: dict[tuple[str, int], str] | None = None, drawn: dict[str, set] | None = None) -> Any:
    """Both pools of one snapshot as a plotly figure (device row on top, host row below); ``names``,
    ``blocks``: as in :func:`tier_map_data`; ``drawn``: the states the legend lists (default: this
    snapshot's, :func:`drawn_states`)."""
    import plotly.graph_objects as go

    source_label(source)
    th = theme()
    d = tier_map_data(snap, names, blocks)
    n = max(len(snap.device_states), len(snap.host_states))
    drawn = drawn or drawn_states([snap])
    disk = bool(drawn.get("disk"))
    fig = go.Figure(_traces(d, disk))
    entries = [(row, s, STATE_WORDS[row][s], c) for row in ("device", "host") for s, c in STATE_COLORS[row].items()]
    entries += [("disk", "disk", STATE_WORDS["disk"]["disk"], STATE_COLORS["node"]["disk"])]
    for row, s, words, c in entries:  # the legend: one entry per state drawn, fixed
        if s in drawn.get(row, ()):
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"{row}: {words}",
                                     marker=dict(symbol="square", size=12, color=c, line=dict(width=1, color="#666"))))
    per_row = _legend_per_row([t.name for t in fig.data if t.showlegend is not False])
    rows = -(-sum(len(v) for v in drawn.values()) // per_row)
    legend_h = rows * (th.font_size + 12)
    top = 62 + (14 if th.high_contrast else 0) + legend_h
    plot_h = 250 if disk else 190
    bottom = 2 * th.font_size + 34   # the tick labels and "block id" above the slider (review r7: squeezed)
    fig.update_layout(
        title=dict(text=_title(title, source, snap.caption), font=dict(size=th.title_size),
                   yref="container", y=1, yanchor="top", pad=dict(t=12 + th.title_size)),
        width=width or _width(), autosize=theme().autosize and not width, height=plot_h + top + bottom, margin=dict(l=70, r=20, t=top, b=bottom),
        xaxis=dict(range=[-0.7, n - 0.3], showgrid=False, zeroline=False, title="block id" + (" (the disk row: pages, node by node)" if disk else ""),
                   dtick=1 if n <= 16 else None),
        yaxis=dict(range=[-1.6 if disk else -0.6, 1.6], tickvals=[1, 0, -1][:3 if disk else 2],
                   ticktext=["device", "host", "disk<br>pages"][:3 if disk else 2], showgrid=False, zeroline=False),
        plot_bgcolor="white", font=dict(size=th.font_size),
        # the legend sits ABOVE the plot, under the title: the play/pause buttons and the slider
        # that animate_tiers adds go below it, so the two never overlap
        legend=dict(orientation="h", x=0, xanchor="left", y=1.02, yanchor="bottom", font=dict(size=th.font_size),
                    entrywidth=1 / per_row, entrywidthmode="fraction", maxheight=legend_h + 40))
    return fig


def animate_tiers(snapshots: Sequence[TierSnapshot], title: str = "Device and host pools", source: str = "simulated",
                  duration_ms: int = 700, labels: Sequence[dict[int, str]] | None = None,
                  block_labels: Sequence[dict[tuple[str, int], str]] | None = None) -> Any:
    """A plotly animation over a recorded run, one frame per snapshot (slider, play/pause).
    ``labels``: per snapshot, node id -> the letter its blocks carry (:func:`majority_labels` of
    that moment's tree, as :func:`tier_tree_figure` names them); None: node ids, ``n<id>``;
    ``block_labels``: per snapshot, (pool, block) -> its own letter (:func:`run_labels`), first.
    The legend lists the states some frame draws (:func:`drawn_states`)."""
    import plotly.graph_objects as go

    from .memory_animation import animation_controls

    snaps = list(snapshots)
    if not snaps:
        raise ValueError("animate_tiers: no snapshots (record a run with TierRecorder)")
    names = list(labels) if labels is not None else [{}] * len(snaps)
    if len(names) != len(snaps):
        raise ValueError(f"animate_tiers: {len(names)} label maps for {len(snaps)} snapshots")
    own = list(block_labels) if block_labels is not None else [{}] * len(snaps)
    drawn = drawn_states(snaps)
    disk = bool(drawn.get("disk"))
    fig = tier_map_figure(snaps[0], title, source, names=names[0], blocks=own[0], drawn=drawn)
    fig.frames = [go.Frame(data=_traces(tier_map_data(s, names[i], own[i]), disk), traces=[0, 1, 2][:3 if disk else 2],
                           name=str(i + 1),
                           # the slider already reads "step i / n": the title carries the words only
                           layout=dict(title=dict(text=_title(title, source, s.caption))))
                  for i, s in enumerate(snaps)]
    fig.update_layout(**animation_controls(len(snaps), duration_ms, fig.layout))
    return fig


def _stepper_graph(m: str, counts: dict, bold: set, th: Any, unnamed: Sequence[str], who: dict | None = None) -> Any:
    """One machine as :func:`tier_stepper` draws it (each frame as tall as its own diagram):
    14 pt text and closer ranks on a projector; ``who``: as in :func:`_machine_graph`."""
    return _machine_graph(m, counts, bold, th, 14 if th.high_contrast else None, events=m not in unnamed, who=who)


def _movers(rec: TierRecorder, i: int, names: Sequence[dict[int, str]]) -> dict[tuple[str, str, str], list[str]]:
    """Step ``i``'s node edges -> the letters of the nodes that took them (a node gone from the tree
    at step ``i`` keeps the letter it had last; ``n<id>`` if it never had one).

    Example: a step where node 7, lettered "D", went host -> disk gives ``{("node", "host", "disk"): ["D"]}``."""
    def letter(n: int) -> str:
        return next((m[n] for m in reversed(names[:i + 1]) if n in m), f"n{n}")

    return {k: sorted({letter(n) for n in ids}) for k, ids in rec.movers[i].items()}


def tier_stepper(rec: TierRecorder, static: bool | None = None, source: str = "simulated",
                 graph: bool = False, unnamed: Sequence[str] = (), names: Sequence[dict[int, str]] | None = None) -> Any:
    """A stepper over a recorded run: the two-row map per step, or (``graph=True``) the state
    diagram of the machines that step changed, its transitions bold purple, the run's counts so far.
    Each machine a step changed is a frame of its own (three machines drawn at once were about
    1,000 px tall at 1500x1000), drawn with ranks closer on a projector (classroom mode, 14 pt =
    18.7 px text), so that the stepper and its diagram fit one 599 px screen. ``unnamed``: as in
    :func:`lifecycle_graph`; ``names``: per snapshot, node id -> letter (:func:`run_labels`): a bold
    node edge then names the nodes that took it."""
    from .stepper import Frame, Stepper

    # the Stepper writes "step i / n:" before the caption itself: the frame's caption is the words only
    split = graph  # one machine a frame: the stepper and its diagram fit one screen
    frames = []
    for i, (s, t) in enumerate(zip(rec.snapshots, rec.taken)):
        touched = [m for m in MACHINES if any(x[0] == m for x in t)]
        if split and not touched:   # a step that changed nothing (the start) has no diagram: no frame (review r5)
            continue
        for ms in ([[m] for m in touched] if split else [touched]):
            what = f" · {_TITLES[ms[0]]}" if split and len(touched) > 1 else ""
            frames.append(Frame(s, s.caption + what, extra={"taken": t, "i": i, "machines": ms}))
    if not frames:   # a run that changed nothing: one frame that says so
        frames.append(Frame(rec.snapshots[0], rec.snapshots[0].caption, extra={"taken": [], "i": 0, "machines": []}))

    def render(f: Frame) -> Any:
        if not graph:
            return tier_map_figure(f.snapshot, source=source)
        if not f.extra["machines"]:
            return "<div>no block and no node changed state at this step: nothing to draw</div>"
        counts: dict = {}
        for step in rec.taken[:f.extra["i"] + 1]:
            for m, s, d, n in step:
                counts[(m, s, d)] = counts.get((m, s, d), 0) + n
        who = _movers(rec, f.extra["i"], names) if names is not None else None
        graphs = [_stepper_graph(m, counts, {tuple(t[:3]) for t in f.extra["taken"]}, theme(), unnamed, who)
                  for m in f.extra["machines"]]
        # the legal edges are no simulation: what the run did (its counts, its purple edges) is (review r7)
        title = ("<b>The lifecycle of a KV block</b>: the machines this step changed, its edges bold purple, "
                 f"the counts so far ({source_label(source)} run)")
        # one screen: only what the step touched, as tall as its own diagram (review r8: a box as tall as
        # the tallest machine left half of a node-machine frame blank); the buttons sit above it and stay put
        return LifecycleFigure(graphs, title).html()

    return Stepper(frames, render, static=static)   # "step i / n: R1 done ..." (review r7: "tiers:" read internal)


# ------------------------------------------------------------------ the tree beside the pools
PLACEMENT_WORDS = {"device": "device only", "both": "device + host copy", "host": "host only", "disk": "disk only"}


def majority_labels(tree: Any, spans: Sequence[tuple[Sequence[int], Sequence[tuple[str, int, int]]]]) -> dict[int, str]:
    """Name each node of a RadixSnapshot by the labelled part that holds most of its tokens.

    ``spans``: per request, ``(its tokens, [(label, start, end), ...])``. With pages of 4 tokens
    a node rarely starts exactly where a part does (the tree splits on page boundaries), so a
    node is named by the part that holds most of it; a node no span covers is "?".

    Example:
        >>> from kvlab.reuse.radix_cache import RadixCache
        >>> from kvlab.memory.block_pool import BlockAllocator
        >>> t = RadixCache(BlockAllocator(8, 1))
        >>> _ = t.insert([1, 2, 3, 4], t.allocator.allocate(4))
        >>> majority_labels(t.snapshot(), [([1, 2, 3, 4], [("A", 0, 3), ("B", 3, 4)])])
        {1: 'A'}
    """
    return {nid: _most(parts, a, b) for nid, (a, b, parts) in _node_parts(tree, spans).items()}


def _node_parts(tree: Any, spans: Sequence) -> dict[int, tuple[int, int, Sequence[tuple[str, int, int]]]]:
    """Per node of a RadixSnapshot: (its first token's position, its end, the labelled parts of the
    first request in ``spans`` whose tokens its path is; () when none is)."""
    paths: dict[int, tuple[int, ...]] = {}
    out: dict[int, tuple[int, int, Sequence[tuple[str, int, int]]]] = {}
    for n in tree.nodes:  # parents come first
        paths[n.id] = paths.get(n.parent_id, ()) + tuple(n.tokens)
        a, b = n.start, n.start + len(n.tokens)
        out[n.id] = (a, b, next((parts for tokens, parts in spans if tuple(tokens[:b]) == paths[n.id]), ()))
    return out


def _most(parts: Sequence[tuple[str, int, int]], a: int, b: int) -> str:
    """The label of the part that holds most of the tokens [a, b); "?" when none does."""
    return max([(min(b, e0) - max(a, s0), label) for label, s0, e0 in parts] + [(0, "?")])[1]


def run_labels(rec: TierRecorder, spans: Sequence) -> tuple[list[dict[int, str]], list[dict[tuple[str, int], str]]]:
    """One naming for every picture of a recorded run, frame by frame: per snap, node id -> the
    letters of the parts that hold at least a page of it, joined by "+" ("B+C": R1's turn before
    a later request splits it from the few-shot examples it follows), and (pool, block) -> the
    letter of the part that holds most of that block's own page of tokens. ``spans``: as in
    :func:`majority_labels`.

    Example:
        >>> from kvlab.reuse.hicache_manager import HiCacheManager
        >>> rec = TierRecorder(HiCacheManager(4, 2, host_ratio=1), "start")
        >>> _ = rec.cm.admit("R1", [1, 2, 3, 4]); _ = rec.cm.cache_finished_req("R1", [1, 2, 3, 4]); rec.snap("R1")
        >>> nodes, blocks = run_labels(rec, [([1, 2, 3, 4], [("A", 0, 2), ("B", 2, 4)])])
        >>> list(nodes[-1].values()), sorted(blocks[-1].items())   # two pages, each on the device and the host
        (['A+B'], [(('device', 0), 'A'), (('device', 1), 'B'), (('host', 0), 'A'), (('host', 1), 'B')])
    """
    nodes_out, blocks_out = [], []
    for tree, pages in zip(rec.trees, rec.pages):
        ps, found = tree.page_size, _node_parts(tree, spans)
        names = {}
        for nid, (a, b, parts) in found.items():
            big = [label for label, s0, e0 in sorted(parts, key=lambda p: p[1]) if min(b, e0) - max(a, s0) >= min(ps, b - a)]
            names[nid] = "+".join(dict.fromkeys(big)) or _most(parts, a, b)
        nodes_out.append(names)
        blocks_out.append({key: _most(found[nid][2], found[nid][0] + j * ps, min(found[nid][0] + (j + 1) * ps, found[nid][1]))
                           for key, (nid, j) in pages.items() if nid in found})
    return nodes_out, blocks_out


def _tree_layout(tree: Any) -> dict[int, tuple[float, float]]:
    """Leaves at consecutive x, a parent over the middle of its children, y = -depth (root 0)."""
    kids: dict[int, list[int]] = {}
    for n in tree.nodes:
        kids.setdefault(n.parent_id, []).append(n.id)
    pos: dict[int, tuple[float, float]] = {}
    nxt = [0.0]

    def place(i: int, depth: int) -> float:
        ch = kids.get(i, [])
        x = sum(place(c, depth + 1) for c in ch) / len(ch) if ch else nxt[0]
        if not ch:
            nxt[0] += 1
        pos[i] = (x, -depth)
        return x

    place(0, 0)
    return pos


def _tree_box_px(th: Any) -> int:
    """A tree node's box in px: two lines of label ("[A]", "24 tok") at the theme's font size
    (a little tighter on a projector, where the stepper and its figure share 599 px)."""
    return int(th.font_size * (3.6 if th.high_contrast else 4))


_LEVEL = 1.2  # a level of the tree: a box and a fifth of one between two levels (the boxes never merge)


_TREE_LEGEND_ROWS = 2  # tier_tree_figure's legend on a projector: free, disk, green on one row, the two cyans on the next


def _tree_plot(tree_depth: float, th: Any) -> tuple[int, int, int]:
    """(top margin, bottom margin, figure height) in px for a tree ``tree_depth`` levels deep
    (root 0). On a projector the legend goes under the plot, so the title alone sits on top."""
    rows = _TREE_LEGEND_ROWS  # projector: the legend's rows under the plot, the title alone on top
    top, bottom = (40, 16 + int(rows * 1.5 * th.font_size)) if th.high_contrast else (110, 10)
    plot = int((tree_depth + 1.1) * _tree_box_px(th) * _LEVEL)
    return top, bottom, max(420, top + bottom + plot)


def _edge_points(pos: dict, parent: int, child: int, half_box: tuple[float, float]) -> tuple[list, list]:
    """An edge from the border of the parent's box to the border of the child's (``half_box``: 0.45
    of a box, in x and y units): it ends just inside each box, under its edge (the boxes are drawn
    over the ends), so it touches both and never runs through a label.

    Example: a child one unit below and one unit right, boxes 0.2 units across in both axes:
        >>> _edge_points({0: (0, 0), 1: (1, -1)}, 0, 1, (0.1, 0.1))
        ([0.1, 0.9, None], [-0.1, -0.9, None])
    """
    (x0, y0), (x1, y1) = pos[parent], pos[child]
    dx, dy = x1 - x0, y1 - y0
    t = min(0.45, half_box[0] / max(abs(dx), 1e-9), half_box[1] / max(abs(dy), 1e-9))  # the first border it meets
    return [x0 + dx * t, x1 - dx * t, None], [y0 + dy * t, y1 - dy * t, None]


# a node's placement takes the colour of the block state that is the same fact (a node on the
# device only: its blocks are cached there; on both: its host blocks are copies of device KV; on
# the host only: its host blocks are the only copy), so each colour means one thing in every picture
_SAME_FACT = {"device": ("device", "cached"), "both": ("host", "backup"), "host": ("host", "host")}


def _tree_legend() -> list[tuple[str, str]]:
    """One legend entry a colour for :func:`tier_tree_figure`, in the animation's words (the pool
    rows' ``device: cached``...), with the node placement drawn in the same colour after a dot."""
    entries: dict[str, list[str]] = {FREE: ["free block"]}
    for row in ("device", "host"):
        for st, color in STATE_COLORS[row].items():
            if st != "free":
                entries.setdefault(color, []).append(f"{row}: {STATE_WORDS[row][st]}")
    for place, words in PLACEMENT_WORDS.items():
        color = STATE_COLORS["node"][place]
        assert place not in _SAME_FACT or STATE_COLORS[_SAME_FACT[place][0]][_SAME_FACT[place][1]] == color, place
        entries.setdefault(color, []).append(f"node: {'both' if place == 'both' else words}")  # the lesson's word
    first = (FREE, STATE_COLORS["node"]["disk"])  # the short entries first: two rows on a projector
    order = [c for c in first if c in entries] + [c for c in entries if c not in first]
    return [(c, " · ".join(entries[c])) for c in order]


def tier_tree_figure(tree: Any, snap: TierSnapshot, labels: dict[int, str] | None = None, title: str = "Where each node's KV lives",
                     source: str = "simulated", cols: int = 7, caption: bool = True,
                     blocks: dict[tuple[str, int], str] | None = None) -> Any:
    """The radix tree (left), each node coloured by where its KV lives (device only, device +
    host copy, host only, disk only), beside the device and host pools (right) as grids whose
    blocks carry their node's letter and colour. ``tree``: a RadixSnapshot of the tiered tree
    (``cm.tree.snapshot()``); ``snap``: the same moment's TierSnapshot; ``labels``: node id ->
    letter (:func:`majority_labels`); ``caption``: the snapshot's caption under the title (a
    stepper, which prints it above its view, passes False); ``blocks``: (pool, block) -> the
    block's own letter (:func:`run_labels`), else its node's."""
    import plotly.graph_objects as go

    source_label(source)
    th = theme()
    labels = labels or {}
    colors = STATE_COLORS["node"]
    pos = _tree_layout(tree)
    name = {n.id: f"[{labels.get(n.id, n.id)}]" for n in tree.nodes}
    fig = go.Figure()
    depth = -min(y for _, y in pos.values())
    m_top, m_bottom, height = _tree_plot(depth, th)
    if caption and snap.caption and th.high_contrast:   # the caption's line under the title
        m_top, height = m_top + int(1.5 * th.font_size), height + int(1.5 * th.font_size)
    leaves = max(x for x, _ in pos.values()) + 1
    plot_w = ((_width() or th.grid_width) - 20) * 0.5 / (leaves + 0.4)    # px per x unit: domain [0, 0.5], range leaves + 0.4
    plot_h = (height - m_top - m_bottom) / (depth + 1.1)                    # px per y unit
    half_box = (0.45 * _tree_box_px(th) / plot_w, 0.45 * _tree_box_px(th) / plot_h)  # just inside a box's border
    ex, ey = [], []
    for n in tree.nodes:
        xs, ys = _edge_points(pos, n.parent_id, n.id, half_box)
        ex += xs
        ey += ys
    fig.add_trace(go.Scatter(x=ex, y=ey, mode="lines", line=dict(color="#888", width=th.line_width), hoverinfo="skip",
                             showlegend=False, xaxis="x", yaxis="y"))
    ids = [0] + [n.id for n in tree.nodes]
    fill = ["#ffffff"] + [colors[snap.placements.get(i, "device")] for i in ids[1:]]  # the root: white (grey is a free block)
    text = ["root"] + [f"{name[n.id]}<br>{len(n.tokens)} tok" for n in tree.nodes]
    hover = ["root"] + [f"node {name[n.id]}: {len(n.tokens)} tokens, {PLACEMENT_WORDS[snap.placements.get(n.id, 'device')]}"
                        for n in tree.nodes]
    fig.add_trace(go.Scatter(x=[pos[i][0] for i in ids], y=[pos[i][1] for i in ids], mode="markers+text", text=text,
                             textfont=dict(size=th.font_size, color="black"), hovertext=hover, hoverinfo="text",
                             marker=dict(symbol="square", size=_tree_box_px(th), color=fill, line=dict(width=1, color="#444")),
                             showlegend=False, xaxis="x", yaxis="y"))
    # the pools: device grid on top, host grid under it, a gap row between
    dev_rows = -(-len(snap.device_states) // cols)
    gx, gy, gc, gt, gh = [], [], [], [], []
    for row, states, nodes, top in (("device", snap.device_states, snap.device_nodes, 0),
                                    ("host", snap.host_states, snap.host_nodes, dev_rows + 1.2)):
        for b, (st, nd) in enumerate(zip(states, nodes)):
            gx.append(b % cols)
            gy.append(-(top + b // cols))
            place = snap.placements.get(nd) if nd else None
            gc.append(STATE_COLORS[row][st])      # the block's own state, as in the animation (one colour a state)
            gt.append((blocks or {}).get((row, b), str(labels.get(nd, nd))) if nd else "")
            gh.append(f"{row} block {b}: {STATE_WORDS[row][st]}"
                      + (f", node {name.get(nd, nd)} ({PLACEMENT_WORDS.get(place, place)})" if nd else ""))
    fig.add_trace(go.Scatter(x=gx, y=gy, mode="markers+text", text=gt, textfont=dict(size=th.font_size), hovertext=gh,
                             hoverinfo="text", showlegend=False, xaxis="x2", yaxis="y2",
                             marker=dict(symbol="square", size=th.font_size * 2.3, color=gc, line=dict(width=1, color="#666"))))
    drawn = set(gc) | set(fill[1:])
    for color, words in _tree_legend():
        if color in drawn:
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=words, xaxis="x", yaxis="y",
                                     marker=dict(symbol="square", size=14, color=color, line=dict(width=1, color="#444"))))
    host_rows = -(-len(snap.host_states) // cols)
    fig.update_layout(
        title=dict(text=_title(title, source, snap.caption if caption else ""), font=dict(size=th.title_size),
                   yref="container", y=1, yanchor="top", pad=dict(t=8 if th.high_contrast else 12 + th.title_size)),
        width=_width(), height=height,
        margin=dict(l=10, r=10, t=m_top, b=m_bottom), plot_bgcolor="white",
        font=dict(size=th.font_size), showlegend=True,
        # on a projector the legend sits in the bottom margin, under every box (it covered [F] and a host row)
        legend=dict(orientation="h", x=0, xanchor="left", y=0 if th.high_contrast else 1.02,
                    yref="container" if th.high_contrast else "paper",
                    yanchor="bottom", font=dict(size=th.font_size)),
        xaxis=dict(domain=[0, 0.5], range=[-0.7, leaves - 0.3], visible=False),
        yaxis=dict(range=[-depth - 0.6, 0.5], visible=False),
        xaxis2=dict(domain=[0.56, 1], range=[-1.9, cols + 1.1], visible=False),
        yaxis2=dict(range=[-(dev_rows + 1.2 + host_rows) + 0.3, 0.6], visible=False),
        annotations=[dict(x=-0.6, y=-(r0 + (n - 1) / 2), xref="x2", yref="y2", text=f"{row}<br>pool", showarrow=False,
                          xanchor="right", font=dict(size=th.font_size))
                     for row, r0, n in (("device", 0, dev_rows), ("host", dev_rows + 1.2, host_rows))]
        + _row_ids(cols, ((len(snap.device_states), 0), (len(snap.host_states), dev_rows + 1.2)), th.font_size))
    return fig


def _row_ids(cols: int, pools: Sequence[tuple[int, float]], font_px: int) -> list[dict]:
    """The block ids of each grid row, written at its right end (``"7-13"``), so a block of the
    grid is found by the id the animation's one-row pools give it (review r5: the grid had no ids).
    ``pools``: per pool, (its number of blocks, the y row its grid starts at).

    Example: ``[a["text"] for a in _row_ids(7, [(16, 0)], 12)]`` -> ``['0-6', '7-13', '14-15']``."""
    out = []
    for n, r0 in pools:
        for r in range(-(-n // cols)):
            first, last = r * cols, min(n, (r + 1) * cols) - 1
            out.append(dict(x=cols - 0.45, y=-(r0 + r), xref="x2", yref="y2", text=f"{first}-{last}", showarrow=False,
                            xanchor="left", font=dict(size=font_px, color="#444")))
    return out


def tier_tree_stepper(rec: TierRecorder, labels: dict[int, str] | Sequence[dict[int, str]] | None = None,
                      static: bool | None = None, source: str = "simulated",
                      blocks: Sequence[dict[tuple[str, int], str]] | None = None) -> Any:
    """A stepper over a recorded run: per step, :func:`tier_tree_figure` (the tree coloured by
    where each node's KV lives, beside both pools). ``labels``: one map for every step, or one
    per step; ``blocks``: per step, the blocks' own letters (both from :func:`run_labels`, which
    names a run as :func:`animate_tiers` does)."""
    from .stepper import Frame, Stepper

    per_step = list(labels) if isinstance(labels, (list, tuple)) else [labels] * len(rec.trees)
    own = list(blocks) if blocks is not None else [None] * len(rec.trees)
    frames = [Frame((t, s, per_step[i], own[i]), s.caption) for i, (t, s) in enumerate(zip(rec.trees, rec.snapshots))]
    return Stepper(frames, lambda f: tier_tree_figure(f.snapshot[0], f.snapshot[1], f.snapshot[2], source=source,
                                                      caption=False, blocks=f.snapshot[3]),
                   static=static, title="tree and pools")
