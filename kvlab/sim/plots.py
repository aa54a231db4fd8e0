"""Plotly figures of the simulator's results (pure data -> figure), for lesson 09 and the bench.

Every figure's title says **simulated** beside the simulator's numbers, and every published bar
says where it comes from (figure, page, "read off the figure's bar labels"). plotly and
ipywidgets are imported inside the functions: ``import kvlab.sim`` does not need them.

    compare_bars(rep)              published vs simulated per row of a Reproduction, 95% intervals
    memory_breakdown_bars(rep)     Fig. 2: stacked shares per system, published beside simulated
    batch_vs_rate_figure(rows)     mean batch against request rate, memory-bound points filled
    memory_timeline_figure(res)    where the budget is over one run (stacked areas)
    buddy_layout_figure(buddy)     a buddy allocator's runs, one bar each
    RateWidget(...)                rate and policy sliders that re-run a small simulation

``theme``: any object with ``font_size``, ``title_size``, ``grid_width`` and ``autosize``
(``kvlab.viz.theme()``; the simulator does not import kvlab.viz, the layer above it).

Mirrors no vLLM or SGLang file (pictures of the paper's Figs. 2, 12 and 13).

Example:
    >>> from kvlab.sim.reproductions import Reproduction, Row, interval
    >>> rep = Reproduction("t", "src", "setup", [Row("vLLM", 30.42, 31.0, "", interval([30.0, 31.0, 32.0]))], "")
    >>> fig = compare_bars(rep, "Mean batch")
    >>> [t.name for t in fig.data], "simulated" in fig.layout.title.text
    (['published', 'simulated (mean of 3 seeds, 95% interval)'], True)
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence

__all__ = ["compare_bars", "log_tickvals", "memory_breakdown_bars", "batch_vs_rate_figure", "memory_timeline_figure",
           "buddy_layout_figure", "RateWidget", "COLORS", "SYSTEM_COLORS", "colour_key_html"]

# every figure's plotly config, as kvlab.viz.display.PLOTLY_CONFIG (the simulator does not import kvlab.viz;
# tests/test_viz.py checks the two agree): no logo, no "Share chart" (Plotly Cloud) button
PLOTLY_CONFIG = {"displaylogo": False, "showSendToCloud": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}

# the memory categories (Fig. 2's colours: states green, reservation amber, waste red shades, free grey)
COLORS = {"token_states": "#2ca02c", "reservation": "#ffbf00", "internal_fragmentation": "#d62728",
          "rounding": "#ff9896", "external_fragmentation": "#8c564b", "ext_others": "#c49c94", "cached": "#393b79",
          "free": "#d9d9d9"}
# one colour a system in every figure; none of them is a memory category's colour above
SYSTEM_COLORS = {"orca-max": "#7b4173", "orca-pow2": "#bcbd22", "orca-oracle": "#17becf", "vllm": "#1f77b4",
                 "paged": "#1f77b4", "radix": "#e377c2"}   # paged IS vLLM's paging: one blue in every figure
# the paper's one 'external frag. & others' is drawn hatched (brown crosses on white): a solid rosy brown beside
# the salmon of buddy rounding and the brown of external frag. blurred on a projector (review r2)
EXT_OTHERS_HATCH = dict(shape="x", fgcolor="#8c564b", bgcolor="#ffffff", size=8, solidity=0.3)
REQUEST_COLOR = "#9c9ede"  # a request's blocks in the buddy picture: no category's, no system's colour
LABELS = {"token_states": "token states", "reservation": "reservation", "internal_fragmentation": "internal frag.",
          "rounding": "buddy rounding", "external_fragmentation": "external frag.",
          "ext_others": "the paper's 'external frag. & others'",
          "cached": "cached", "free": "free"}


def colour_key_html(systems: Sequence[str] = ("orca-max", "orca-pow2", "orca-oracle", "vllm", "radix"),
                    names: dict | None = None, font_px: int | None = None) -> str:
    """One line of swatches per kind: each colour of lesson 09's figures and its one meaning
    (``font_px``: the text size, e.g. the theme's controls' size in classroom mode).

    Example:
        >>> "#2ca02c" in colour_key_html() and "token states" in colour_key_html()
        True
    """
    def sw(color: str, text: str, edge: str = "#ffffff") -> str:
        if color == "hatch":   # the paper's 'external frag. & others', as its bars draw it
            color = ("repeating-linear-gradient(45deg,#8c564b 0 1.5px,#ffffff 1.5px 5px),"
                     "repeating-linear-gradient(-45deg,#8c564b 0 1.5px,#ffffff 1.5px 5px)")
        return (f'<span style="display:inline-block;white-space:nowrap;margin-right:14px"><span style="display:'
                f'inline-block;width:1em;height:1em;vertical-align:-0.15em;background:{color};border:1px solid '
                f'{edge}"></span> {text}</span>')

    names = names or {}
    rows = [("systems", [sw(SYSTEM_COLORS[p], names.get(p, p)) for p in systems]),
            ("memory", [sw("hatch" if c == "ext_others" else COLORS[c], LABELS[c], "#999999") for c in (
                "token_states", "reservation", "internal_fragmentation", "rounding", "external_fragmentation", "free",
                "ext_others")]),
            ("bars", [sw("#ffffff", "published", "#000000"), sw("#404040", "simulated"),
                      sw("#969696", "range of a sensitivity run"), sw(REQUEST_COLOR, "a request's blocks (buddy picture)")])]
    size = f' style="font-size:{font_px}px;line-height:1.5"' if font_px else ""
    return f"<div{size}>" + "".join(f"<div><b>{k}:</b> {' '.join(v)}</div>" for k, v in rows) + "</div>"


class _Theme:
    font_size, title_size, grid_width, autosize = 12, 15, 860, False


def _layout(fig: Any, title: str, theme: Any, height: int = 420, text_mode: str = "show", **kw) -> Any:
    """Title, size, fonts; bar texts never under 12 px (``text_mode`` "hide": a label that does
    not fit its bar at that size is left out, "show": it is drawn anyway)."""
    th = theme or _Theme()
    fig.update_layout(uniformtext=dict(minsize=max(12, th.font_size), mode=text_mode))
    fig.update_layout(title=dict(text=title, font=dict(size=th.title_size), x=0.01), height=height,
                      width=None if th.autosize else min(th.grid_width, 840), autosize=th.autosize, template="plotly_white",
                      font=dict(size=th.font_size), margin=dict(l=60, r=20, t=80, b=60), **kw)
    return fig


def compare_bars(rep: Any, yaxis: str, percent: bool = False, theme: Any = None, rows: Sequence[int] | None = None,
                 spread: Sequence[tuple[float, float]] | None = None, spread_name: str = "") -> Any:
    """Grouped bars: the published value (grey) beside the simulated mean (blue) with its 95%
    interval as an error bar, one group per row of ``rep`` (``rows``: which, default all).
    ``spread``: per shown row, a (low, high) range drawn as a floating bar beside the simulated
    one (e.g. the same runs with the step time 20% shorter and longer), named ``spread_name``; a
    range of (nearly) no width is a thin band labelled "no change" (:func:`spread_bands`)."""
    import plotly.graph_objects as go

    picked = [rep.rows[i] for i in (rows if rows is not None else range(len(rep.rows)))]
    picked = [r for r in picked if isinstance(r.simulated, (int, float))]
    x = [r.label.split(" = ")[0] for r in picked]
    scale = 100 if percent else 1
    pub = [r.published * scale if isinstance(r.published, (int, float)) else None for r in picked]
    sim = [r.simulated * scale for r in picked]
    lo = [(r.simulated - r.interval.lo) * scale if r.interval else 0 for r in picked]
    hi = [(r.interval.hi - r.simulated) * scale if r.interval else 0 for r in picked]
    n = max((len(r.interval.values) for r in picked if r.interval), default=1)
    fmt = "%{y:.1f}%" if percent else "%{y:.2f}"
    fig = go.Figure([
        # published white with a black edge, simulated dark grey: neither is a system's colour nor the free grey
        go.Bar(name="published", x=x, y=pub, marker=dict(color="#ffffff", line=dict(color="#000000", width=1.5)),
               texttemplate=fmt, textposition="outside"),
        # the label inside the bar, at its foot: outside, it sat under the error bar's whisker (issue 28)
        # one seed has no spread to show: then no error bar, and the legend says one seed
        go.Bar(name=f"simulated (mean of {n} seeds, 95% interval)" if n > 1 else "simulated (one seed: no interval)",
               x=x, y=sim, marker_color="#404040", texttemplate=fmt,
               error_y=dict(type="data", symmetric=False, array=hi, arrayminus=lo, visible=n > 1),
               textposition="inside", insidetextanchor="start", textfont=dict(color="#ffffff"),
               textangle=0)])   # never turned 90 degrees in a narrow bar (review r2, classroom mode)
    if spread is not None:
        if len(spread) != len(picked):
            raise ValueError(f"spread has {len(spread)} ranges for {len(picked)} bars")
        base, height, text = spread_bands(spread, scale, top=max([v for v in pub + sim if v is not None] +
                                                                 [max(a, b) * scale for a, b in spread]))
        fig.add_trace(go.Bar(name=spread_name or "range", x=x, base=base, y=height, text=text, textposition="outside",
                             marker=dict(color="#969696", line=dict(color="#000000", width=1), pattern=dict(shape="/"))))
    return _layout(fig, f"{rep.name} (simulated beside published)<br><sup>published: {rep.source}</sup>", theme,
                   barmode="group", yaxis_title=yaxis + (" (%)" if percent else ""),
                   legend=dict(orientation="h", y=-0.15))


def spread_bands(spread: Sequence[tuple[float, float]], scale: float = 1, top: float = 0,
                 thinnest: float = 0.012) -> tuple[list[float], list[float], list[str]]:
    """(base, height, label) of each (low, high) range bar. A range narrower than ``thinnest`` of
    the axis (``top``), one run or runs that agree, would be a bar of no height, drawn as nothing:
    it becomes a thin band of that height centred on its value, labelled "no change" (issue 28).

    >>> spread_bands([(7.0, 7.0), (20.0, 30.0)], top=40)
    ([6.76, 20.0], [0.48, 10.0], ['7.0<br>no change', '20.0-30.0'])
    """
    band = thinnest * top
    base, height, text = [], [], []
    for a, b in spread:
        lo, hi = min(a, b) * scale, max(a, b) * scale
        if hi - lo < band:
            mid = (lo + hi) / 2
            base.append(round(mid - band / 2, 6))
            height.append(round(band, 6))
            # two short lines, not one long one: beside the published label it crowded the next bar (review r12)
            text.append(f"{mid:.1f}<br>no change" if f"{lo:.1f}" == f"{hi:.1f}" else f"{lo:.1f}-{hi:.1f}")
        else:
            base.append(lo)
            height.append(hi - lo)
            text.append(f"{lo:.1f}-{hi:.1f}")
    return base, height, text


def memory_breakdown_bars(rep: Any, theme: Any = None) -> Any:
    """Fig. 2 as stacked bars: for each system the published shares (the figure's bar labels)
    beside the simulated ones, in the paper's four categories (kvlab's rounding, external
    fragmentation and others, which the paper folds into one); kvlab's buddy rounding, external
    fragmentation and free slots have their own colours (the paper counts all three under its one
    'external fragmentation & others', drawn in a colour of its own)."""
    import plotly.graph_objects as go

    from .reproductions import PUBLISHED

    cats = ["token_states", "reservation", "internal_fragmentation", "rounding", "external_fragmentation", "free",
            "ext_others"]
    systems = list(PUBLISHED["fig2"])
    x = [[], []]
    vals: dict[str, list[float]] = {c: [] for c in cats}
    runs = rep.results["runs"]
    for p in systems:
        from .reproductions import PAPER_NAMES

        pub = PUBLISHED["fig2"][p]
        sims = [r[p].breakdown(loaded=False) for r in runs]
        sim = {c: sum(b[c] for b in sims) / len(sims) for c in sims[0]}
        sim["ext_others"] = 0.0  # the paper's one number; kvlab's parts of it (rounding, external frag., free) apart
        pub_full = {c: pub.get(c, 0.0) for c in cats}
        if "ext_others" not in pub:
            pub_full["ext_others"] = 1 - pub["token_states"]
        for src, d in (("published", pub_full), ("simulated", sim)):
            x[0].append(PAPER_NAMES[p])
            x[1].append(src)
            for c in cats:
                vals[c].append(100 * d[c])
    fig = go.Figure([go.Bar(name=LABELS[c], x=x, y=vals[c], texttemplate="%{y:.1f}", textposition="inside",
                            marker=dict(color="#ffffff", pattern=EXT_OTHERS_HATCH, line=dict(color="#8c564b", width=1))
                            if c == "ext_others" else dict(color=COLORS[c])) for c in cats if any(vals[c])])
    # a short axis title: "share of the 15,728 slots (%)" ran taller than the plot in classroom mode, into the subtitle
    return _layout(fig, "Where the KV memory goes (simulated beside published)<br><sup>shares of the 15,728 slots; "
                   "published: Fig. 2, p. 2, read off the bar labels (vLLM's 'others': 100% - 96.3%)</sup>", theme,
                   height=460, text_mode="hide", barmode="stack", yaxis_title="budget (%)",
                   legend=dict(orientation="h", y=-0.22))


def batch_vs_rate_figure(rows: Sequence[dict], theme: Any = None, published: dict | None = None,
                         paper_rate: float = 2.0, seed: int | None = None) -> Any:
    """Mean batch against request rate, one line per system; a filled marker where the system
    is memory-bound (requests waiting) in over half its iterations, an open one where it keeps
    up; the published Fig. 13 bars as stars at ``paper_rate``."""
    import plotly.graph_objects as go

    from .reproductions import PAPER_NAMES

    fig = go.Figure()
    for p in dict.fromkeys(r["policy"] for r in rows):
        pts = [r for r in rows if r["policy"] == p]
        fig.add_trace(go.Scatter(
            x=[r["rate"] for r in pts], y=[r["mean_batch"] for r in pts], name=f"{PAPER_NAMES.get(p, p)} (simulated)",
            mode="lines+markers", line=dict(color=SYSTEM_COLORS.get(p)),
            marker=dict(size=10, symbol=["circle" if r["memory_bound"] > 0.5 else "circle-open" for r in pts]),
            customdata=[100 * r["memory_bound"] for r in pts],
            hovertemplate="%{x} req/s: %{y:.1f} requests, memory-bound %{customdata:.0f}% of iterations"))
    if published:
        fig.add_trace(go.Scatter(x=[paper_rate] * len(published), y=list(published.values()), mode="markers",
                                 name="published, Fig. 13a p. 10 (bar labels)",
                                 marker=dict(symbol="star", size=13, color="#000000")))
    one = "" if seed is None else f", seed {seed}"   # a single-seed figure says which seed
    return _layout(fig, f"Mean batched requests against request rate, ShareGPT, OPT-13B (simulated{one})<br><sup>filled: "
                   "memory-bound (requests waiting) in over half the iterations; open: keeping up with arrivals</sup>",
                   theme, xaxis_title="request rate (req/s)", yaxis_title="mean batched requests",
                   legend=dict(orientation="h", y=-0.2))


def _whole_step(top: float, ticks: int = 5) -> int:
    """A round whole-number tick step (1, 2 or 5 times a power of ten) giving at most about
    ``ticks`` ticks up to ``top``. Example: ``_whole_step(7.4) -> 2``, ``_whole_step(65) -> 20``."""
    want, e = max(1.0, top / ticks), 0
    while True:
        for m in (1, 2, 5):
            if m * 10 ** e >= want:
                return m * 10 ** e
        e += 1


def memory_timeline_figure(res: Any, theme: Any = None, title: str | None = None) -> Any:
    """Where the budget is during one run (stacked areas over simulated time, top panel) and how
    many requests run and wait (lines in a panel of their own underneath, whole-number ticks), from
    ``SimResult.timeline_rows()``. Free slots are one colour whether or not a request waits: they
    strand a request (external fragmentation) exactly while the waiting line is above zero."""
    import plotly.graph_objects as go

    rows = [dict(r) for r in res.timeline_rows()]
    for r in rows:  # one colour, one meaning: every free slot is "free" (issue 28: it was grey or brown)
        r["free"], r["external_fragmentation"] = r["free"] + r["external_fragmentation"], 0
    t = [r["time"] for r in rows]
    cats = [c for c in ("token_states", "reservation", "internal_fragmentation", "rounding", "cached", "free")
            if any(r[c] for r in rows)]
    # the grey is every free slot: while requests wait it is external fragmentation, and the legend says so
    names = {**LABELS, "free": "free (ext. frag. while waiting)"}
    fig = go.Figure([go.Scatter(x=t, y=[100 * r[c] / res.capacity for r in rows], name=names[c], stackgroup="m",
                                mode="none", fillcolor=COLORS[c]) for c in cats])
    top = max((r["running"] for r in rows), default=1)
    # the lower panel: hatched where requests wait (the free slots above strand them then), the running line on top
    fig.add_trace(go.Scatter(x=t, y=[1 if r["waiting"] else 0 for r in rows], yaxis="y3", name="requests waiting",
                             mode="lines", line=dict(width=0, shape="hv"), fill="tozeroy", fillcolor="rgba(0,0,0,0)",
                             fillpattern=dict(shape="/", fgcolor="#969696", bgcolor="rgba(0,0,0,0)", size=8),
                             customdata=[r["waiting"] for r in rows], hovertemplate="%{customdata} waiting<extra></extra>"))
    fig.add_trace(go.Scatter(x=t, y=[r["running"] for r in rows], name="requests running", yaxis="y2",
                             line=dict(color="#000000", width=1.5)))
    th = theme or _Theme()
    big = bool(getattr(th, "high_contrast", False))  # classroom: the legend beside the panels, to keep them tall
    legend = (dict(orientation="v", x=1.02, y=1, yanchor="top") if big else
              dict(orientation="h", x=0, y=-0.2, yanchor="top"))
    # two panels, one x axis: the request counts no longer run over the stacked areas (issue 28 review of 09)
    low = [0.0, 0.25] if big else [0.0, 0.32]   # the requests' panel; the memory's starts 0.1 above it
    return _layout(fig, title or f"{res.policy}: KV memory over one run (simulated)", theme, height=440 if big else 500,
                   xaxis=dict(title="simulated time (s)", anchor="y2"),
                   yaxis=dict(title="budget (%)", range=[0, 100], domain=[low[1] + 0.1, 1.0], dtick=25),
                   yaxis2=dict(title="requests", domain=low, rangemode="tozero", range=[0, top * 1.1],
                               tickmode="linear", tick0=0, dtick=_whole_step(top, 3 if big else 4), showgrid=True),
                   yaxis3=dict(domain=low, range=[0, 1], visible=False, overlaying="y2", fixedrange=True),
                   legend=legend).update_layout(margin=dict(l=70, r=20, t=50, b=60 if big else 100))


def log_tickvals(values: Sequence[float]) -> list[float]:
    """Ticks at 1, 2 and 5 times the powers of ten from below the smallest value to above the
    largest, for a log axis that spans less than a few decades (``dtick=1`` gives such an axis a
    single tick). Example: ``log_tickvals([1.3, 7.9]) -> [1, 2, 5, 10]``."""
    vals = [v for v in values if v and v > 0]
    if not vals:
        raise ValueError(f"log_tickvals needs a positive value, got {list(values)!r}")
    lo, hi = min(vals), max(vals)
    out, e = [], math.floor(math.log10(lo))
    while True:
        for m in (1, 2, 5):
            t = m * 10 ** e
            if t > hi:
                return [*out, t] if not out or out[-1] < hi else out
            if t * (2.5 if m == 2 else 2) > lo:
                out.append(int(t) if t >= 1 else t)
        e += 1


def request_name(owner: str) -> str:
    """A simulator's sequence id as a student reads it: "r18.0" (request 18, its sequence 0) -> "request 18".

    Example:
        >>> request_name("r18.0"), request_name("r3.2"), request_name("A")
        ('request 18', 'request 3, sequence 2', 'A')
    """
    import re

    m = re.fullmatch(r"r(\d+)(?:\.(\d+))?", str(owner))
    if not m:
        return str(owner)
    return f"request {m[1]}" + (f", sequence {m[2]}" if m[2] and m[2] != "0" else "")


def buddy_layout_figure(buddy: Any, theme: Any = None, title: str = "A buddy allocator's runs (simulated)") -> Any:
    """The runs of ``buddy`` (a BuddyAllocator) along the block axis, in address order: the blocks
    each request asked for in its colour, the rounding up to a power of two hatched, free runs grey,
    and each request's run outlined in black (four traces, one bar per run; the hover names the
    request and its run)."""
    import plotly.graph_objects as go

    layout = buddy.layout()
    # one colour for every request's blocks (the black outlines part the runs; the hover names the request): a
    # palette reused the colours of token states, the reservation and the systems (issue 28: one colour, one meaning)
    free = [(s, n) for s, n, o, _ in layout if o is None]
    runs = [(s, n, request_name(o), r) for s, n, o, r in layout if o is not None]
    used = [(s, r) for s, _, _, r in runs]
    extra = [(s + r, n - r) for s, n, _, r in runs if n > r]

    def bars(rows, name, marker, text=None):
        return go.Bar(x=[r[1] for r in rows], base=[r[0] for r in rows], y=["pool"] * len(rows), orientation="h",
                      name=name, marker=marker, hovertext=text, hoverinfo="text" if text else "skip")

    fig = go.Figure([
        bars(free, "free run", dict(color=COLORS["free"]), [f"free run of {n} blocks at block {s}" for s, n in free]),
        bars(used, "asked for", dict(color=REQUEST_COLOR)),
        bars(extra, "rounding", dict(color=COLORS["rounding"], pattern_shape="/")),
        bars([(s, n) for s, n, _, _ in runs], "one request's run", dict(color="rgba(0,0,0,0)",
             line=dict(color="#000000", width=1.5)),
             [f"{o}: a run of {n} blocks at block {s} ({r} asked for, +{n - r} of rounding)" for s, n, o, r in runs])])
    # the legend at the canvas's foot, under the axis title (at y=-0.5 the four entries ran into "block")
    fig = _layout(fig, title + "<br><sup>colour: blocks a request asked for; hatched: rounding up to a power of two; "
                  "grey: free; outlined: one request's run</sup>", theme, height=270, barmode="overlay",
                  xaxis_title="block", yaxis=dict(visible=False),
                  legend=dict(orientation="h", x=0, yref="container", y=0, yanchor="bottom"))
    return fig.update_layout(margin=dict(b=110))


def _figure_output(fig: Any) -> dict:
    """A plotly figure as one ``display_data`` output for an Output widget's ``outputs`` (as
    ``kvlab.viz.stepper.figure_output``; the simulator does not import kvlab.viz). Setting
    ``outputs`` directly, not ``with out: fig.show()``, works without a front end."""
    import json

    import plotly.io as pio

    spec = json.loads(pio.to_json(fig, validate=False))
    return {"output_type": "display_data", "metadata": {},
            "data": {"application/vnd.plotly.v1+json": {**spec, "config": dict(PLOTLY_CONFIG)},
                     "text/plain": f"<plotly figure: {fig.layout.title.text}>"}}


def _rounded(obj: Any) -> Any:
    """Floats to 4 significant digits (what a figure shows), in nested lists and dicts.

    >>> _rounded({"y": [0.123456789, 2, "a"]})
    {'y': [0.1235, 2, 'a']}
    """
    if isinstance(obj, float):
        return float(f"{obj:.4g}")
    if isinstance(obj, list):
        return [_rounded(v) for v in obj]
    if isinstance(obj, dict):
        return {k: _rounded(v) for k, v in obj.items()}
    return obj


class RateWidget:
    """A rate slider and a policy menu that re-run a small simulation (``run(rate, policy)`` ->
    SimResult) and redraw its memory timeline with the mean batch in the caption. With
    ``step_times=(lo, hi, step)`` a third slider scales the cost model's step time and the run is
    ``run(rate, policy, step_time)``: ``RateWidget(run, ["vllm"], step_times=(0.6, 1.6, 0.1))``.

    ``static=True`` (nbval, exported HTML): no widgets, ``show()`` returns the figure of the
    current state. ``w.result`` and ``w.caption`` are the current state (for tests).
    """

    def __init__(self, run: Callable[[float, str], Any], policies: Sequence[str], rate: float = 2.0,
                 rates: tuple[float, float, float] = (0.5, 4.0, 0.25), static: bool = True, theme: Any = None,
                 labels: dict[str, str] | None = None, step_times: tuple[float, float, float] | None = None) -> None:
        if not policies:
            raise ValueError("give at least one policy")
        lo, hi, step = rates
        if not (0 < lo <= rate <= hi and step > 0) or math.isinf(hi):
            raise ValueError(f"rate {rate} must lie in [{lo}, {hi}] with step {step} > 0")
        self._run, self.policies, self.theme, self._rates = run, list(policies), theme, rates
        self.labels = {p: (labels or {}).get(p, p) for p in self.policies}  # menu names a student reads
        self.rate, self.policy, self.static = rate, self.policies[0], static
        if step_times is not None and not (0 < step_times[0] <= 1.0 <= step_times[1] and step_times[2] > 0):
            raise ValueError(f"step_times {step_times} must be (lo, hi, step) with 0 < lo <= 1 <= hi and step > 0")
        self.step_times, self.step_time = step_times, 1.0
        self.result: Any = None
        self.caption = ""
        self.widget: Any = None
        self.update(rate, self.policy)
        if not static:
            import ipywidgets as W

            self._rate = W.FloatSlider(value=rate, min=lo, max=hi, step=step, description="request rate (req/s)",
                                       continuous_update=False, style={"description_width": "initial"},
                                       layout=W.Layout(min_width="400px"))   # classroom size: the track keeps its length
            self._pol = W.Dropdown(options=[(self.labels[p], p) for p in self.policies], value=self.policy,
                                   description="system", layout=W.Layout(min_width="300px"))
            self._cap = W.HTML(self._caption_html())
            self._out = W.Output()
            self._out.add_class("kvlab-figure")
            self._rate.observe(lambda ch: self._redraw(rate=ch["new"]), names="value")
            self._pol.observe(lambda ch: self._redraw(policy=ch["new"]), names="value")
            controls = [self._rate, self._pol]
            if step_times is not None:
                lo, hi, step = step_times
                self._step = W.FloatSlider(value=1.0, min=lo, max=hi, step=step, continuous_update=False,
                                           description="step time (x the cost model)", style={"description_width": "initial"},
                                           layout=W.Layout(min_width="460px"))
                self._step.observe(lambda ch: self._redraw(step_time=ch["new"]), names="value")
                controls.append(self._step)
            self._out.outputs = (_figure_output(self.figure()),)
            self.widget = W.VBox([W.HBox(controls, layout=W.Layout(flex_flow="row wrap")), self._cap, self._out])
            self.widget.add_class("kvlab-rate-widget")

    def update(self, rate: float | None = None, policy: str | None = None, step_time: float | None = None) -> Any:
        """Re-run at ``rate``, ``policy`` and ``step_time`` (each may stay as it is); returns the result."""
        if policy is not None and policy not in self.policies:
            raise ValueError(f"unknown policy {policy!r}; choose one of: {', '.join(self.policies)}")
        if step_time is not None and (self.step_times is None or not 0 < step_time):
            raise ValueError(f"step_time {step_time} needs step_times=(lo, hi, step) and a value above 0")
        self.rate = self.rate if rate is None else float(rate)
        self.policy = policy or self.policy
        self.step_time = self.step_time if step_time is None else float(step_time)
        if self.step_times is None:
            self.result = r = self._run(self.rate, self.policy)
        else:
            self.result = r = self._run(self.rate, self.policy, self.step_time)
        m = r.metrics
        bound = m.loaded_iterations / m.iterations if m.iterations else 0.0
        at = f" with step time x{self.step_time:g}" if self.step_times is not None else ""
        self.caption = (f"{self.labels[self.policy]} at {self.rate:g} req/s{at}: {r.mean_batch:.1f} requests in the batch on average; "
                        f"requests wait in {100 * bound:.0f}% of iterations; token states "
                        f"{100 * r.breakdown(loaded=False)['token_states']:.1f}% of the budget (simulated)")
        return r

    def figure(self) -> Any:
        at = f", step time x{self.step_time:g}" if self.step_times is not None else ""
        return memory_timeline_figure(self.result, self.theme, f"{self.labels[self.policy]} at {self.rate:g} req/s{at}: memory "
                                      f"(top), requests (bottom), simulated")

    def _caption_html(self) -> str:
        import html

        return f"<b>{html.escape(self.caption)}</b>"

    def _redraw(self, **kw) -> None:
        self.update(**kw)
        self._cap.value = self._caption_html()
        self._out.outputs = (_figure_output(self.figure()),)

    def show(self) -> Any:
        """The widget (live) or the current figure (static)."""
        return self.figure() if self.static else self.widget

    def site_grid(self) -> dict[str, list[Any]]:
        """The settings the static site precomputes: three rates, every system, step time x1 and x2."""
        lo, hi, _ = self._rates
        grid: dict[str, list[Any]] = {"rate": sorted({r for r in (1.0, 2.0, 4.0, self.rate) if lo <= r <= hi}),
                                      "policy": list(self.policies)}
        if self.step_times is not None:
            grid["step_time"] = sorted({1.0, min(2.0, self.step_times[1]), self.step_time})
        return grid

    def site_states(self) -> dict[str, Any]:
        """Every combination of :meth:`site_grid`, run now, as data for the static site (one
        ``application/vnd.kvlab.explorer+json`` output, drawn by ``kvlab.viz.explorer``; the
        simulator does not import kvlab.viz). The widget is left as it was."""
        import itertools
        import json

        import plotly.io as pio

        grid, start = self.site_grid(), {"rate": self.rate, "policy": self.policy, "step_time": self.step_time}
        states = []
        try:
            for combo in itertools.product(*grid.values()):
                self.update(**dict(zip(grid, combo)))
                fig = json.loads(pio.to_json(self.figure(), validate=False))
                states.append({"html": self._caption_html(), "fig": {"data": _rounded(fig.get("data", [])),
                                                                     "layout": fig.get("layout", {})}})
        finally:
            self.update(**{k: start[k] for k in grid})
        labels = {"rate": lambda r: f"{r:g} req/s", "policy": lambda p: self.labels[p], "step_time": lambda s: f"x{s:g}"}
        return {"title": "Try it here", "start": {k: start[k] for k in grid}, "states": states,
                "axes": [[k, v, [labels[k](x) for x in v]] for k, v in grid.items()]}

    def _ipython_display_(self) -> None:
        import os

        from IPython.display import display

        if self.static and os.environ.get("KVLAB_STATIC", "").strip().lower() == "frames":  # the static site
            display({"application/vnd.kvlab.explorer+json": self.site_states(),
                     "text/plain": f"<RateWidget: {self.caption}>"}, raw=True)
            return
        display(self.show())
