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
tiers) light cyan, ``host`` (the only copy) cyan. Every figure says simulated or measured.

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
from typing import Any, Sequence

from ..reuse.hiradix_node import TierSnapshot
from ..reuse.lifecycle import LEGAL_EDGES, MACHINES
from .palette import FREE, HIGHLIGHT, HIT, MISS, REQUEST_COLORS, source_label, theme

__all__ = ["STATE_COLORS", "EDGE_LABELS", "lifecycle_graph", "TierRecorder", "tier_map_data", "tier_map_figure",
           "animate_tiers", "tier_stepper"]

STATE_COLORS: dict[str, dict[str, str]] = {
    "device": {"free": FREE, "allocated": MISS, "cached": HIT, "locked": HIGHLIGHT, "loading": REQUEST_COLORS[0]},
    "host": {"free": FREE, "writing": REQUEST_COLORS[7], "backup": REQUEST_COLORS[9], "host": REQUEST_COLORS[2]},
    "node": {"new": "#ffffff", "device": HIT, "both": REQUEST_COLORS[9], "host": REQUEST_COLORS[2],
             "disk": REQUEST_COLORS[5], "evicted": "#bdbdbd"},
}
# Short edge labels for the diagram (the long ones are kvlab.reuse.lifecycle.LEGAL_EDGES).
EDGE_LABELS: dict[str, dict[tuple[str, str], str]] = {
    "device": {("free", "allocated"): "allocate", ("allocated", "free"): "free", ("allocated", "locked"): "cache (runs on)",
               ("allocated", "cached"): "cache (finished)", ("cached", "locked"): "match", ("locked", "cached"): "unlock",
               ("cached", "free"): "evict", ("free", "loading"): "load_back", ("loading", "locked"): "copy done",
               ("loading", "cached"): "copy done", ("loading", "free"): "evict"},
    "host": {("free", "writing"): "write", ("writing", "backup"): "copy done", ("writing", "host"): "device evicted",
             ("writing", "free"): "evict_host", ("backup", "host"): "device evicted", ("host", "backup"): "load_back",
             ("host", "free"): "evict_host"},
    "node": {("new", "device"): "insert", ("new", "both"): "split", ("new", "host"): "split", ("new", "disk"): "split",
             ("device", "both"): "write (back up)", ("both", "host"): "evict", ("host", "both"): "load_back",
             ("host", "disk"): "evict_host (save)", ("disk", "device"): "load_back (fetch)",
             ("device", "evicted"): "evict", ("host", "evicted"): "evict_host", ("disk", "evicted"): "miss"},
}
_TITLES = {"device": "a device (GPU) block", "host": "a host (DRAM) block", "node": "a radix node's KV (placement)"}


def lifecycle_graph(machine: str = "all", counts: dict | None = None, taken: Sequence = (), caption: str = "",
                    source: str = "simulated") -> Any:
    """The state machine(s) as a ``graphviz.Digraph``. ``machine``: "device", "host", "node" or
    "all"; ``counts``: ``{(machine, src, dst): n}`` (a tracker's ``counts``) written on the edges;
    ``taken``: edges ``(machine, src, dst, ...)`` drawn bold (one step of a run)."""
    import graphviz

    names = list(MACHINES) if machine == "all" else [machine]
    if any(m not in MACHINES for m in names):
        raise ValueError(f"machine must be one of {sorted(MACHINES)} or 'all', got {machine!r}")
    th = theme()
    fs = str(th.font_size + (4 if th.high_contrast else 0))
    bold = {tuple(t[:3]) for t in taken}
    g = graphviz.Digraph("lifecycle", format="svg")
    label = f"<b>the lifecycle of a KV block ({source_label(source)})</b>" + (f"<br/>{html.escape(caption)}" if caption else "")
    g.attr(label=f"<{label}>", labelloc="t", fontsize=str(int(fs) + 1), fontname="Helvetica,Arial,sans-serif",
           rankdir="LR", nodesep="0.3", ranksep="0.5", bgcolor="white")
    g.attr("node", shape="box", style="rounded,filled", fontsize=fs, fontname="Helvetica,Arial,sans-serif")
    g.attr("edge", fontsize=str(int(fs) - 2), fontname="Helvetica,Arial,sans-serif", arrowsize="0.7")
    for m in names:
        with g.subgraph(name=f"cluster_{m}") as c:
            c.attr(label=_TITLES[m], style="dashed", color="#999999")
            for s in MACHINES[m]:
                shape = "circle" if s == "new" else "box"
                c.node(f"{m}_{s}", "" if s == "new" else s, fillcolor=STATE_COLORS[m][s], shape=shape,
                       width="0.25" if s == "new" else "", fontcolor="white" if s in ("allocated", "locked") else "black")
            for (src, dst) in LEGAL_EDGES[m]:
                n = (counts or {}).get((m, src, dst))
                text = EDGE_LABELS[m][(src, dst)] + (f" ×{n}" if n else "")
                hot = (m, src, dst) in bold
                c.edge(f"{m}_{src}", f"{m}_{dst}", label=text, penwidth="3.5" if hot else str(th.line_width),
                       color=HIGHLIGHT if hot else ("#444444" if n or counts is None else "#c8c8c8"))
    return g


class TierRecorder:
    """Records a run of a HiCacheManager: ``snap(caption)`` keeps a TierSnapshot and the
    transitions logged since the previous snap (``taken``: ``(machine, src, dst, how many)``)."""

    def __init__(self, cm, caption: str = "start") -> None:
        if not hasattr(cm, "snapshot_tiers"):
            raise TypeError(f"TierRecorder needs a HiCacheManager, got {type(cm).__name__}")
        self.cm = cm
        self.snapshots: list[TierSnapshot] = []
        self.taken: list[list[tuple[str, str, str, int]]] = []
        self._seen = len(cm.log)
        self.snap(caption)

    def snap(self, caption: str) -> None:
        log = self.cm.log
        moves: dict[tuple[str, str, str], int] = {}
        for i in range(self._seen, len(log)):
            e = log[i]
            if e.kind == "transition":
                k = (e.detail["machine"], e.detail["src"], e.detail["dst"])
                moves[k] = moves.get(k, 0) + (1 if k[0] == "node" else len(e.block_ids))
        self._seen = len(log)
        self.snapshots.append(self.cm.snapshot_tiers(caption))
        self.taken.append([(*k, n) for k, n in moves.items()])


def tier_map_data(snap: TierSnapshot) -> dict[str, Any]:
    """Plain data for one map: per row ("device", "host") the states, colours, labels (node ids)."""
    out: dict[str, Any] = {"caption": snap.caption}
    for row, states, nodes in (("device", snap.device_states, snap.device_nodes),
                               ("host", snap.host_states, snap.host_nodes)):
        out[row] = {"states": list(states), "colors": [STATE_COLORS[row][s] for s in states],
                    "labels": [f"n{n}" if n else "" for n in nodes],
                    "hover": [f"{row} block {b}: {s}" + (f", node {n} ({snap.placements.get(n, '?')})" if n else "")
                              for b, (s, n) in enumerate(zip(states, nodes))]}
    return out


def _marker_size(n: int) -> int:
    """Square markers that fit ``n`` columns in the theme's canvas width."""
    return max(6, min(26, int((theme().grid_width - 150) / max(n, 1) * 0.8)))


def _traces(d: dict[str, Any]) -> list:
    import plotly.graph_objects as go

    th = theme()
    size = _marker_size(max(len(d["device"]["states"]), len(d["host"]["states"])))
    traces = []
    for y, row in ((1, "device"), (0, "host")):
        r = d[row]
        n = len(r["states"])
        traces.append(go.Scatter(x=list(range(n)), y=[y] * n, mode="markers+text", text=r["labels"],
                                 textfont=dict(size=th.label_size), hovertext=r["hover"], hoverinfo="text",
                                 marker=dict(symbol="square", size=size, color=r["colors"], line=dict(width=1, color="#666")),
                                 showlegend=False, name=row))
    return traces


def tier_map_figure(snap: TierSnapshot, title: str = "Device and host pools", source: str = "simulated",
                    width: int | None = None) -> Any:
    """Both pools of one snapshot as a plotly figure (device row on top, host row below)."""
    import plotly.graph_objects as go

    source_label(source)
    th = theme()
    d = tier_map_data(snap)
    n = max(len(snap.device_states), len(snap.host_states))
    fig = go.Figure(_traces(d))
    for row in ("device", "host"):  # the legend: one entry per state, fixed
        for s, c in STATE_COLORS[row].items():
            fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=f"{row}: {s}",
                                     marker=dict(symbol="square", size=12, color=c, line=dict(width=1, color="#666"))))
    fig.update_layout(
        title=dict(text=f"{title} ({source})<br><sub>{html.escape(snap.caption)}</sub>", font=dict(size=th.title_size)),
        width=width or (None if th.autosize else th.grid_width), autosize=th.autosize and not width, height=300, margin=dict(l=70, r=20, t=70, b=40),
        xaxis=dict(range=[-0.7, n - 0.3], showgrid=False, zeroline=False, title="block id", dtick=1 if n <= 16 else None),
        yaxis=dict(range=[-0.6, 1.6], tickvals=[1, 0], ticktext=["device", "host"], showgrid=False, zeroline=False),
        plot_bgcolor="white", font=dict(size=th.font_size), legend=dict(orientation="h", y=-0.25, font=dict(size=th.font_size)))
    return fig


def animate_tiers(snapshots: Sequence[TierSnapshot], title: str = "Device and host pools", source: str = "simulated",
                  duration_ms: int = 700) -> Any:
    """A plotly animation over a recorded run, one frame per snapshot (slider, play/pause)."""
    import plotly.graph_objects as go

    from .memory_animation import _animation_controls

    snaps = list(snapshots)
    if not snaps:
        raise ValueError("animate_tiers: no snapshots (record a run with TierRecorder)")
    fig = tier_map_figure(snaps[0], title, source)
    fig.frames = [go.Frame(data=_traces(tier_map_data(s)), traces=[0, 1], name=str(i + 1),
                           layout=dict(title=dict(text=f"{title} ({source})<br><sub>step {i + 1} / {len(snaps)}: "
                                                       f"{html.escape(s.caption)}</sub>")))
                  for i, s in enumerate(snaps)]
    fig.update_layout(**_animation_controls(len(snaps), duration_ms, fig.layout))
    return fig


def tier_stepper(rec: TierRecorder, static: bool | None = None, source: str = "simulated",
                 graph: bool = False) -> Any:
    """A stepper over a recorded run: the two-row map per step, or (``graph=True``) the state
    diagram with that step's transitions in bold and the run's counts so far."""
    from .stepper import Frame, Stepper

    frames = [Frame(s, f"step {i + 1} / {len(rec.snapshots)}: {s.caption}", extra={"taken": t, "i": i})
              for i, (s, t) in enumerate(zip(rec.snapshots, rec.taken))]

    def render(f: Frame) -> Any:
        if not graph:
            return tier_map_figure(f.snapshot, source=source)
        counts: dict = {}
        for step in rec.taken[:f.extra["i"] + 1]:
            for m, s, d, n in step:
                counts[(m, s, d)] = counts.get((m, s, d), 0) + n
        return lifecycle_graph("all", counts, f.extra["taken"], f.caption, source)

    return Stepper(frames, render, static=static, title="tiers")
