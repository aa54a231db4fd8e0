"""Lesson 11's pictures: attention mass against bytes read by position, what a token budget keeps,
and bytes against quality for every method. They draw measurements; they change nothing.

    attention_figure(profile)       heatmap (layer x position) of attention mass, and below it
                                    the mass averaged over layers beside the bytes read per step
    kept_blocks(profile, ...)       which positions StreamingLLM / H2O keep at a budget, and the
                                    share of the measured attention mass they cover (plain data)
    budget_explorer(profile, ...)   a widget: method, budget and sinks -> the kept positions
    tradeoff_figure(rows)           KV bytes kept and read against perplexity and agreement

Example:
    >>> import torch
    >>> from kvlab.compute.kv_measure import Profile
    >>> p = Profile(torch.tensor([[0.4, 0.1, 0.1, 0.1, 0.1, 0.2]]), [8.0] * 6, sinks=1, recent=2)
    >>> k = kept_blocks(p, "streaming", budget_tokens=4, sink_tokens=2, block_size=2)
    >>> k["kept"], round(k["mass_kept"], 2)
    ([0, 1, 4, 5], 0.8)
"""
from __future__ import annotations

from typing import Any, Sequence

from .display import is_static, static_frames
from .palette import FREE, classroom_css, source_label, theme

__all__ = ["attention_figure", "kept_blocks", "budget_explorer", "tradeoff_figure", "results_table"]

# a paper's method and its variant share a colour; the variant (and only it) is drawn open, as the legend says
METHOD_COLORS = {"full": "#333333", "streaming": "#1f77b4", "streaming-orig": "#1f77b4", "h2o": "#ff7f0e",
                 "h2o-block": "#ff7f0e", "quest": "#2ca02c", "quest-shared": "#2ca02c",
                 "int8": "#9467bd", "fp8": "#8c564b"}
# open and filled shapes of different sizes: two methods at the same point stay visible
METHOD_MARKERS = {"full": ("circle", 12), "streaming": ("square", 11), "streaming-orig": ("square-open", 20),
                  "h2o": ("diamond", 10), "h2o-block": ("diamond-open", 18), "quest": ("triangle-up", 13),
                  "quest-shared": ("triangle-up-open", 20), "int8": ("circle", 16), "fp8": ("x", 10)}
MAX_WIDTH = 840   # every figure fits an 850 px output area


def _width(th) -> int | None:
    return None if th.autosize else min(th.grid_width, MAX_WIDTH)


def attention_figure(profile: Any, title: str = "Where decode attention goes, and what each step reads") -> Any:
    """Two rows (measured): the attention mass each position received from the decode queries, per
    layer (log colour scale); below, averaged over layers (log axis) beside the K/V bytes read per
    decode step for that position (flat: dense attention reads everything)."""
    import plotly.graph_objects as go
    import torch
    from plotly.subplots import make_subplots

    th = theme()
    mass = profile.layer_mass                                               # (layers, T)
    T = mass.shape[1]
    x = list(range(T))
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.07, row_heights=[0.5, 0.33, 0.17])
    fig.add_trace(go.Heatmap(z=torch.log10(mass.clamp_min(1e-6)).tolist(), x=x, colorscale="Viridis",
                             colorbar=dict(title="log10 mass", len=0.5, y=0.78, thickness=12),
                             hovertemplate="layer %{y}, position %{x}: log10 mass %{z:.2f}<extra></extra>"), 1, 1)
    fig.add_trace(go.Scatter(x=x, y=profile.mass.tolist(), name="attention mass (mean over layers)",
                             line=dict(color="#d62728", width=th.line_width)), 2, 1)
    fig.add_trace(go.Scatter(x=x[:len(profile.reads)], y=[r / 1e3 for r in profile.reads],
                             name="K/V KB read per decode step", line=dict(color="#555555", width=th.line_width,
                                                                            dash="dash")), 3, 1)
    decades = _decades(profile.mass.clamp_min(1e-6).tolist())
    fig.update_yaxes(title_text="layer", row=1, col=1)
    fig.update_yaxes(title_text="mass (log)", type="log", tickvals=decades, ticktext=[_plain(v) for v in decades],
                     row=2, col=1)                       # decades only, as 0.0001 (not 100μ)
    fig.update_yaxes(title_text="KB read", rangemode="tozero", nticks=3, row=3, col=1)
    fig.update_xaxes(title_text="token position", row=3, col=1)
    fig.update_layout(title=dict(text=f"{title} ({source_label('measured')})", font=dict(size=th.title_size)),
                      height=560, width=_width(th), autosize=th.autosize, template="plotly_white",
                      font=dict(size=th.font_size), margin=dict(l=60, r=20, t=60, b=50),
                      legend=dict(orientation="h", y=-0.14, x=0))
    return fig


def _decades(values: Sequence[float]) -> list[float]:
    """The powers of ten from below the smallest value to above the largest.

        >>> _decades([0.0003, 0.02])
        [0.0001, 0.001, 0.01, 0.1]
    """
    import math

    lo, hi = math.floor(math.log10(min(values))), math.ceil(math.log10(max(values)))
    return [10.0 ** e if e >= 0 else float(f"1e{e}") for e in range(lo, max(hi, lo + 1) + 1)]


def _plain(v: float) -> str:
    """A decade as a plain decimal: 0.0001, 1, 10 (plotly's log axis says 100μ).

        >>> [_plain(v) for v in (0.0001, 1.0, 10.0)]
        ['0.0001', '1', '10']
    """
    import math

    e = round(math.log10(v))
    return f"{v:.{max(0, -e)}f}"


def kept_blocks(profile: Any, method: str, budget_tokens: int, sink_tokens: int, block_size: int) -> dict:
    """Which positions a method keeps under ``budget_tokens`` (whole blocks), judged by the
    profile's measured attention: {"kept": positions, "mass_kept": share of the mass they got,
    "tokens_kept": share of the tokens, "sink_blocks": StreamingLLM's sink blocks (whole blocks, at
    most the budget less the newest block: none at a budget of one block)}. H2O ranks blocks by that
    mass (the heavy hitters; kvlab's block-level adaptation, what the paged table can drop)."""
    from ..compute.kv_compress import h2o_drop, streaming_drop

    mass = profile.mass
    T = mass.shape[0]
    nb, full = -(-T // block_size), T // block_size
    budget = max(1, -(-budget_tokens // block_size))
    sinks = 0
    if method == "streaming":
        sinks = min(-(-sink_tokens // block_size), budget - 1)
        drop = streaming_drop(nb, full, sinks, budget - sinks) if nb > budget else []
    elif method == "h2o":
        scores = [float(mass[b * block_size:(b + 1) * block_size].sum()) for b in range(nb)]
        drop = h2o_drop(scores, full, budget, max(1, budget // 2)) if nb > budget else []
    else:
        raise ValueError(f"method must be 'streaming' or 'h2o', got {method!r}")
    gone = set(drop)
    kept = [p for p in range(T) if p // block_size not in gone]
    return {"kept": kept, "mass_kept": float(mass[kept].sum() / mass.sum()), "tokens_kept": len(kept) / T,
            "sink_blocks": sinks, "method": method}


def _kept_figure(profile: Any, k: dict, caption: str) -> Any:
    import plotly.graph_objects as go

    th = theme()
    keep = set(k["kept"])
    mass = profile.mass.tolist()
    decades = _decades([max(v, 1e-6) for v in mass])
    method = k.get("method", "streaming")        # the method's colour of the trade-off figure: one meaning a colour
    kept_colour, colour_name = METHOD_COLORS[method], {"streaming": "blue", "h2o": "orange"}[method]
    fig = go.Figure(go.Bar(x=list(range(len(mass))), y=mass, marker_color=[
        kept_colour if p in keep else FREE for p in range(len(mass))], hovertemplate="position %{x}: %{y:.4f}"))
    fig.update_layout(title=dict(text=caption or f"Attention mass by position (measured); {colour_name}: kept",
                                 font=dict(size=th.font_size + 1)), height=300, width=_width(th),
                      autosize=th.autosize, template="plotly_white", font=dict(size=th.font_size),
                      yaxis=dict(type="log", title="attention mass", tickvals=decades,   # one format: 0.0001, not 100μ
                                 ticktext=[_plain(v) for v in decades]),
                      xaxis_title=f"token position ({colour_name}: kept, grey: dropped)",
                      margin=dict(l=60, r=20, t=60, b=50), showlegend=False)
    return fig


def _share(f: float) -> str:
    """A share as a percentage that never reads 100% (or 0%) when it is not exactly that.

        >>> _share(0.42), _share(0.9987), _share(0.99999), _share(1.0), _share(0.003)
        ('42%', '99.9%', '>99.9%', '100%', '0.3%')
    """
    text = f"{f:.0%}"
    if (text == "100%" and f < 1) or (text == "0%" and f > 0):
        text = f"{f:.1%}"
    if text == "100.0%" and f < 1:
        text = ">99.9%"
    return text


def _partial_note(kept: Sequence[int], num_tokens: int, block_size: int) -> str:
    """Why the kept tokens fall short of the kept blocks' slots: the newest block is partly full.

        >>> _partial_note(list(range(48)) + list(range(96, 107)), 107, 16)
        '<br>59 tokens in 4 blocks (64 slots): the newest block holds 11 of its 16'
        >>> _partial_note(list(range(32)), 32, 16)
        ''
    """
    blocks = len({p // block_size for p in kept})
    if not kept or len(kept) == blocks * block_size:
        return ""
    unit = "block" if blocks == 1 else "blocks"
    return (f"<br>{len(kept)} tokens in {blocks} {unit} ({blocks * block_size} slots): the newest block holds "
            f"{num_tokens - (num_tokens - 1) // block_size * block_size} of its {block_size}")


def results_table(rows: Sequence[Any]) -> Any:
    """``kvlab.compute.kv_measure.format_results`` as an HTML table (its text is the plain-text
    form): the browser fits the columns, so a row never wraps on a projector.

        >>> from kvlab.compute.kv_measure import MethodResult
        >>> t = results_table([MethodResult("full", 96, 1e6, 1e6, 9.5, 1.0, kind="reference", pool_bytes=1e6)])
        >>> t._repr_html_().count("<tr>"), repr(t).startswith("method")
        (3, True)
    """
    from ..compute.kv_measure import format_results

    return _ResultsTable(list(rows), format_results(rows))


class _ResultsTable:
    """An HTML table of measured rows, with the fixed-width text as its plain form."""

    HEAD = ("method", "kind", "bytes<br>/ token", "KV kept<br>MB / %", "pool<br>MB", "read / step<br>MB / %",
            "perplexity", "% tokens<br>= full")   # two lines a header: the columns stay narrow (848 px, classroom)

    def __init__(self, rows: list[Any], text: str) -> None:
        self.rows, self.text = rows, text

    def __repr__(self) -> str:
        return self.text

    def _repr_html_(self) -> str:
        import html

        full = self.rows[0]
        cell = "<td style='text-align:{};padding:1px 3px{}'>{}</td>"   # the method's name never wraps (classroom too)
        head = "".join(f"<th style='text-align:left;padding:1px 3px'>{h}</th>" for h in self.HEAD)
        nb = "\u00a0/\u00a0"                                         # "2.58 / 23%" stays on one line
        body = "".join("<tr>" + "".join(cell.format(a, ";white-space:nowrap" if i == 0 else "", html.escape(str(v)))
                                        for i, (a, v) in enumerate(zip("llrrrrrr", (
            r.label, r.kind, f"{r.bytes_per_token:,}", f"{r.kv_bytes / 1e6:.2f}{nb}{r.kv_bytes / full.kv_bytes:.0%}",
            f"{r.pool_bytes / 1e6:.2f}", f"{r.read_bytes_per_step / 1e6:.2f}{nb}"
            f"{r.read_bytes_per_step / full.read_bytes_per_step:.0%}", f"{r.ppl:.2f}", f"{r.agreement:.0%}")))) +
            "</tr>" for r in self.rows)
        sample = html.escape(self.text.splitlines()[-1])
        return (f"<table style='border-collapse:collapse;font-size:inherit;max-width:100%'><tr>{head}</tr>{body}"
                f"<tr><td colspan='8' style='text-align:left;padding:4px 5px'>{sample}</td></tr></table>")


def budget_explorer(profile: Any, block_size: int = 16, budget_tokens: int = 64, sink_tokens: int = 16) -> Any:
    """A widget: pick StreamingLLM or H2O, a budget and the sinks; see which positions stay (in the method's colour)
    and what share of the measured attention mass they got. Static figure when widgets are off."""
    T = profile.mass.shape[0]

    def caption(k: dict, method: str, budget: int, sink: int = 0) -> str:
        blocks, num_blocks = len({p // block_size for p in k["kept"]}), -(-T // block_size)
        text = (f"{method}, budget {budget} tokens: keeps {len(k['kept'])} of {T} tokens "
                f"({_share(k['tokens_kept'])}) in {blocks} of {num_blocks} blocks ({_share(blocks / num_blocks)} of "
                f"the KV memory) and {_share(k['mass_kept'])} of the attention mass (measured)")
        text += _partial_note(k["kept"], T, block_size)
        if method != "StreamingLLM":
            return text
        if sink and budget <= block_size:
            return text + "<br>no sink: a budget of one block holds only the newest block"
        return text + f"<br>{k['sink_blocks']} sink block(s): sinks are kept as whole blocks of {block_size}"

    k = kept_blocks(profile, "streaming", budget_tokens, sink_tokens, block_size)
    if static_frames():  # the static site: every budget, both methods, the sinks as given
        from IPython.display import HTML

        from .explorer import explorer_html

        choice = {"method": "streaming", "budget": budget_tokens}

        def parts() -> list[Any]:
            kk = kept_blocks(profile, choice["method"], choice["budget"], sink_tokens, block_size)
            names = {"streaming": "StreamingLLM", "h2o": "H2O"}
            return [_kept_figure(profile, kk, caption(kk, names[choice["method"]], choice["budget"]))]

        axes = {"method": ["streaming", "h2o"], "budget": list(range(block_size, max(block_size, T) + 1, block_size))}
        return HTML(explorer_html(lambda **kw: choice.update(kw), parts, axes, dict(choice),
                                  {"method": {"streaming": "StreamingLLM", "h2o": "H2O"}},
                                  title=f"Try it here ({sink_tokens} sink tokens for StreamingLLM)"))
    if is_static():
        return _kept_figure(profile, k, caption(k, "StreamingLLM", budget_tokens, sink_tokens))
    import html as _html
    import ipywidgets as w

    from .stepper import figure_output

    method = w.ToggleButtons(options=[("StreamingLLM", "streaming"), ("H2O", "h2o")], value="streaming",
                             description="method", style={"button_width": "auto"})   # classroom cut "StreamingL..."
    budget = w.IntSlider(value=budget_tokens, min=block_size, max=max(block_size, T), step=block_size,
                         description="budget (tokens)", continuous_update=False, style={"description_width": "initial"},
                         layout=w.Layout(min_width="360px"))     # whole labels, and a track that keeps its length
    sinks = w.IntSlider(value=sink_tokens, min=0, max=4 * block_size, step=block_size,   # whole blocks
                        description="sinks (StreamingLLM)", continuous_update=False,
                        style={"description_width": "initial"}, layout=w.Layout(min_width="400px"))
    words = w.HTML()        # the caption above the figure, wrapped by the page (a plotly title is cut at its width)
    words.add_class("kvlab-control-caption")
    out = w.Output()
    out.add_class("kvlab-figure")
    drawn: dict[tuple, tuple[str, dict]] = {}   # (method, budget, sinks) -> (caption, figure output): a move back is free

    def redraw(_=None) -> None:
        sinks.disabled = method.value != "streaming"   # H2O keeps no sinks: a slider that changes nothing is off
        key = (method.value, budget.value, sinks.value if method.value == "streaming" else 0)
        if key not in drawn:
            kk = kept_blocks(profile, method.value, budget.value, sinks.value, block_size)
            name = "StreamingLLM" if method.value == "streaming" else "H2O"
            text = caption(kk, name, budget.value, sinks.value)
            drawn[key] = (text, figure_output(_kept_figure(profile, kk, "")))
        text, fig = drawn[key]
        th = theme()
        words.value = (f"<div style='font-size:{max(th.font_size + 2, th.control_px)}px;line-height:1.35;"
                       f"overflow-wrap:anywhere'>{_html.escape(text).replace('&lt;br&gt;', '<br>')}</div>")
        out.outputs = (fig,)   # replace the output in place: no clear-and-redisplay round trip

    for c in (method, budget, sinks):
        c.observe(redraw, names="value")
    redraw()
    box = w.VBox([w.HTML(classroom_css("kvlab-budget")), method, w.HBox([budget, sinks],
                  layout=w.Layout(flex_flow="row wrap")), words, out],
                 layout=w.Layout(padding="0 0 0 8px"))   # the labels off the output's left edge
    box.add_class("kvlab-budget")
    return box


def tradeoff_figure(rows: Sequence[Any], title: str = "Bytes against quality, every method, same prompts") -> Any:
    """Two panels (measured): KV bytes kept per sequence against perplexity, and K/V bytes read per
    decode step against the share of greedy tokens equal to the full cache's."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    th = theme()
    br = "<br>" if th.high_contrast else " "   # classroom: the right subtitle stayed inside the figure on two lines
    fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.13,
                        subplot_titles=(f"memory kept vs perplexity{br}(lower is better)",
                                        f"bytes read per step{br}vs greedy agreement"))
    size_of = {r.label: METHOD_MARKERS.get(r.label.split()[0], ("circle", 12))[1] for r in rows}
    kept_x, read_x = (lambda r: (r.kv_bytes / 1e6, r.ppl)), (lambda r: (r.read_bytes_per_step / 1e6, 100 * r.agreement))
    shift = [_side_by_side(rows, kept_x), _side_by_side(rows, read_x)]   # label -> x offset: every mark visible
    for rank, r in sorted(enumerate(rows), key=lambda ir: -size_of[ir[1].label]):   # large first: small on top
        kind = r.label.split()[0]
        symbol, size = METHOD_MARKERS.get(kind, ("circle", 12))
        marker = dict(size=size, color=METHOD_COLORS.get(kind, "#555555"), symbol=symbol, line=dict(width=2))
        common = dict(mode="markers", name=r.label, legendgroup=r.label, legendrank=rank + 1, marker=marker)
        for col, point in ((1, kept_x), (2, read_x)):
            u, v = point(r)
            fig.add_trace(go.Scatter(x=[u + shift[col - 1].get(r.label, 0.0)], y=[v], showlegend=col == 1,
                                     customdata=[u], hovertemplate=f"{r.label}: %{{customdata:.2f}} MB, %{{y:.2f}}"
                                     "<extra></extra>", **common), 1, col)
    fig.update_xaxes(title_text="KV MB kept (one sequence)", rangemode="tozero", row=1, col=1)
    fig.update_xaxes(title_text="K/V MB read per decode step", rangemode="tozero", row=1, col=2)
    fig.update_yaxes(title_text="perplexity", row=1, col=1)
    fig.update_yaxes(title_text="% tokens = full cache", range=[0, 108], tickvals=list(range(0, 101, 20)), row=1, col=2)
    for col, point in ((1, kept_x), (2, read_x)):
        spots = _same_spots(rows, point)   # methods drawn on one spot: named where the note covers no mark
        if spots:
            _spot_note(fig, col, [point(r) for r in rows], spots, th)
    hc = th.high_contrast   # classroom: bigger text, so the legend starts lower under the axis titles
    fig.update_layout(title=dict(text=f"{title} ({source_label('measured')})", font=dict(size=th.title_size)),
                      height=560 if hc else 480, width=_width(th), autosize=th.autosize, template="plotly_white",
                      font=dict(size=th.font_size), margin=dict(l=60, r=30, t=110 if hc else 90, b=170 if hc else 120),
                      legend=dict(orientation="h", x=0, xanchor="left", y=-0.3 if hc else -0.22, yanchor="top",
                                  font=dict(size=th.font_size), title=_legend_title(hc)))
    for a in fig.layout.annotations[:2]:   # the subtitles
        a.font = dict(size=th.font_size)
    return fig


def _legend_title(classroom: bool) -> dict[str, str]:
    """The trade-off legend's title: beside the entries, or in classroom mode above them (plotly wraps a
    horizontal legend's entries at the plot's width without counting a title at their side, so the
    last entry ran to the output's right edge).

        >>> _legend_title(True)["side"], _legend_title(False)["side"]
        ('top', 'left')
    """
    if classroom:
        return dict(text="method (open: kvlab's variant):", side="top")
    return dict(text="method<br>(open: kvlab's<br>variant):", side="left")


def _spot_note(fig: Any, col: int, points: list[tuple[float, float]], spots: list, th: Any) -> None:
    """Name the methods drawn on one spot in the panel's corner that the note leaves every mark
    visible; where every corner would cover one (a wide note in classroom mode), the y axis gets
    headroom above the marks and the note goes there."""
    size = max(th.min_text_px, th.font_size - 2)
    lines = ["on one spot (drawn side by side):", *_wrapped_spots(spots, _panel_chars(size, th))]
    box = _note_box(lines, size, th, height=560 if th.high_contrast else 480)
    zero_y = col == 2
    u, v = _emptiest_corner(points, zero_y=zero_y, box=box)
    hidden = _covered((u, v), _normalised(points, zero_y), box)
    if hidden:   # headroom: the marks in the lower part of the axis, the note above them
        ys = [y for _, y in points]
        lo = 0.0 if zero_y else min(ys) - 0.08 * max(1e-9, max(ys) - min(ys))
        top = (108.0 if zero_y else max(ys) + 0.08 * max(1e-9, max(ys) - min(ys)))
        fig.update_yaxes(range=[lo, lo + (top - lo) / max(0.3, 1 - box[1] - 0.08)], row=1, col=col)
        u, v = 0.04, 0.98
    fig.add_annotation(x=u, y=v, xref=f"x{col} domain".replace("x1", "x"), yref=f"y{col} domain".replace("y1", "y"),
                       showarrow=False, xanchor="right" if u > 0.5 else "left", yanchor="top" if v > 0.5 else "bottom",
                       align="left", text="<br>".join(lines), font=dict(size=size), bgcolor="rgba(255,255,255,0.9)")


def _panel_chars(size: int, th: Any) -> int:
    """How many characters of text ``size`` px fit across one panel (as ``_note_box`` measures them)."""
    width = _width(th) or th.grid_width
    return max(12, int((width - 90) * 0.45 / (0.55 * size)) - 2)


def _wrapped_spots(spots: Sequence[tuple[list[str], Any]], max_chars: int) -> list[str]:
    """One line per group of methods on one spot ("a = b = c"), broken before an "=" where a line
    would run past ``max_chars`` (classroom mode: a long line crossed the axis' tick labels).

        >>> _wrapped_spots([(["streaming 64", "streaming-orig 64", "h2o-block 64"], None)], 32)
        ['streaming 64 = streaming-orig 64', '  = h2o-block 64']
    """
    lines: list[str] = []
    for names, _ in spots:
        line = names[0]
        for name in names[1:]:
            if len(line) + 3 + len(name) > max_chars:
                lines.append(line)
                line = "  = " + name
            else:
                line += " = " + name
        lines.append(line)
    return lines


def _note_box(lines: Sequence[str], size: int, th: Any, height: int) -> tuple[float, float]:
    """A rough (width, height) of a note in one panel's domain units: about 0.55 em a character,
    1.3 em a line; a panel is a little under half the figure's width (margins and the gap out)."""
    width = _width(th) or th.grid_width
    panel_w, panel_h = max(1.0, (width - 90) * 0.45), max(1.0, height - (280 if th.high_contrast else 210))
    return (max(map(len, lines)) * 0.55 * size / panel_w, len(lines) * 1.3 * size / panel_h)


def _normalised(points: Sequence[tuple[float, float]], zero_y: bool) -> list[tuple[float, float]]:
    """Points in a panel's domain units (0..1 each way); the x axis starts at 0 (the y axis too with ``zero_y``)."""
    xs, ys = zip(*points)
    x0, y0 = 0.0, 0.0 if zero_y else min(ys)
    sx, sy = max(1e-9, max(xs) - x0), max(1e-9, max(ys) - y0)
    return [((x - x0) / sx, (y - y0) / sy) for x, y in points]


def _covered(corner: tuple[float, float], norm: Sequence[tuple[float, float]], box: tuple[float, float]) -> int:
    """How many points a note of size ``box`` anchored at ``corner`` (growing inward) lies over."""
    pad = 0.05
    ux, vx = (corner[0] - box[0], corner[0]) if corner[0] > 0.5 else (corner[0], corner[0] + box[0])
    uy, vy = (corner[1] - box[1], corner[1]) if corner[1] > 0.5 else (corner[1], corner[1] + box[1])
    return sum(ux - pad <= u <= vx + pad and uy - pad <= v <= vy + pad for u, v in norm)


def _emptiest_corner(points: Sequence[tuple[float, float]], zero_y: bool = False,
                     box: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The corner of a panel (domain coordinates, a little inside) where a note of size ``box``
    covers the fewest points, the farthest from every point among those.

        >>> _emptiest_corner([(0.2, 1.0), (0.25, 0.0), (1.0, 0.0)], box=(0.5, 0.3))
        (0.96, 0.96)
    """
    norm = _normalised(points, zero_y)
    corners = [(0.04, 0.06), (0.96, 0.06), (0.04, 0.96), (0.96, 0.96)]   # inset: off the axes' tick labels
    return max(corners, key=lambda c: (-_covered(c, norm, box), min((c[0] - u) ** 2 + (c[1] - v) ** 2 for u, v in norm)))


def _side_by_side(rows: Sequence[Any], point: Any, step: float = 0.035) -> dict[str, float]:
    """x offsets (a share ``step`` of the x span apart) for the methods of each group on one spot, so
    that every mark shows beside the others; methods alone get none."""
    xs = [point(r)[0] for r in rows]
    span = max(1e-9, max(xs) - min(0.0, min(xs)))
    return {name: (i - (len(names) - 1) / 2) * step * span for names, _ in _same_spots(rows, point)
            for i, name in enumerate(names)}


def _same_spots(rows: Sequence[Any], point: Any, close: float = 0.02) -> list[tuple[list[str], tuple[float, float]]]:
    """Groups of two or more methods whose points lie within ``close`` of each axis's span of one
    another, each with the group's first point (where the figure names them)."""
    pts = [(r.label, *point(r)) for r in rows]
    span = [max(1e-9, max(p[i] for p in pts) - min(p[i] for p in pts)) for i in (1, 2)]
    groups: list[list[tuple[str, float, float]]] = []
    for p in pts:
        g = next((g for g in groups if abs(g[0][1] - p[1]) <= close * span[0] and abs(g[0][2] - p[2]) <= close * span[1]),
                 None)
        groups.append([p]) if g is None else g.append(p)
    return [([n for n, _, _ in g], (g[0][1], g[0][2])) for g in groups if len(g) > 1]
