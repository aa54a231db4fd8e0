"""Lesson 08's controls: the pool size and the eviction policy (or the queue order); the hit rate they give.

A slider for the radix cache's pool (token slots) and a menu of eviction policies in words
("least recently used (LRU)"...). Every policy's hit-rate curve is measured once when the
control is built, at every size the slider offers (the whole stream through the real request
cycle, :func:`kvlab.lessons.eviction.served_hit_rate`: under a hundredth of a second a run on
the lesson's stream, so 33 sizes x 3 policies take about half a second), so a move only
redraws, and the markers at the chosen size lie on the curves. The chosen policy is drawn
thick. The stream is simulated, the tree and its evictions real. Mirrors no vLLM or SGLang
file (SGLang's ``--radix-eviction-policy``).

Both charts of lesson 08 show no plotly mode bar (``displayModeBar: False``): it sat on their
titles whenever the pointer was over the figure, and neither chart needs zoom.

Example:
    >>> c = HitRateControl(popular_prefix_stream(60, seed=1), sizes=(70, 140), static=True)
    >>> c.set(pool_size=140, policy="lfu")
    >>> sorted(c.result["hit_rate"]) == sorted(POLICY_NAMES)
    True
"""
from __future__ import annotations

import math

from typing import Any, Sequence

from ..lessons.eviction import POLICY_NAMES, popular_prefix_stream, served_hit_rate
from .control import LiveControl
from .palette import HIGHLIGHT, REQUEST_COLORS, source_label, theme

__all__ = ["HitRateControl", "SchedulingControl"]

ORDER_NAMES = {"fcfs": "first come, first served (FCFS)", "cache-aware": "cache-aware (lpm: longest match first)"}
ORDER_SHORT = {"fcfs": "FCFS", "cache-aware": "cache-aware order"}     # in a sentence, where the full name is above
# One colour map for both of lesson 08's charts: a colour names one policy or one order, never both.
CHART_COLORS = dict(zip(["lru", "lfu", "fewest_tokens", *ORDER_NAMES], REQUEST_COLORS))
POLICY_COLORS = {p: CHART_COLORS[p] for p in POLICY_NAMES}
ORDER_COLORS = {o: CHART_COLORS[o] for o in ORDER_NAMES}
NEUTRAL = "#555555"  # the best-possible line and the legend's "this pool size" marker: no policy's colour
MARKERS = ("circle", "diamond", "square")  # one shape per policy, drawn large to small: coinciding rates all show


NO_MODE_BAR = {"displayModeBar": False}  # the mode bar covered the charts' titles (review r2_02_08)


def _curve_line(color: str, chosen: bool, th: Any) -> dict:
    """A curve's line: thick and solid for the chosen policy or order, thin and dotted for the others."""
    return dict(color=color, width=(3 if chosen else 1) * th.line_width + 1, dash="solid" if chosen else "dot")


def _rate_markers(fig: Any, x: int, rates: dict[str, float], colors: dict[str, str], names: dict[str, str],
                  th: Any, chosen: str) -> None:
    """Each line's rate at the chosen size ``x`` as a large marker on it, drawn large to small (one shape
    each), so rates that coincide all show. These traces carry the legend (the curves do not): a
    one-point trace drawn as "lines+markers" shows only its marker on the plot, and in the legend
    the curve's line with the marker's shape on it.

    Example: ``_rate_markers(fig, 120, {"lru": 0.14, "lfu": 0.2}, ...)`` adds a circle at (120, 0.14)
    and a smaller diamond at (120, 0.2)."""
    import plotly.graph_objects as go

    for k, (key, rate) in enumerate(rates.items()):
        fig.add_trace(go.Scatter(
            x=[x], y=[rate], mode="lines+markers", name=names[key], legendgroup=key, legendrank=k + 1,
            line=_curve_line(colors[key], key == chosen, th),
            marker=dict(size=20 - 5 * k + 2 * th.line_width, color=colors[key], symbol=MARKERS[k % len(MARKERS)],
                        line=dict(color=HIGHLIGHT, width=1 + th.line_width))))


def _gap_note(fig: Any, x: int, rate: float, best: float, th: Any, left: bool = False) -> None:
    """The chosen order's distance to the best possible hit rate at ``x``, as a bracket from its marker up
    to the best-possible line and a label beside it (a gap of a few points is a few pixels on a 0-85% axis);
    ``left``: the label on the bracket's left (at the right end of the axis)."""
    import plotly.graph_objects as go

    fig.add_trace(go.Scatter(x=[x, x], y=[rate, best], mode="lines", showlegend=False, hoverinfo="skip",
                             line=dict(color=NEUTRAL, width=2 * th.line_width)))
    gap = 100 * (best - rate)
    text = f"{abs(gap):.1f} points {'under' if gap >= 0 else 'above'} the best possible"
    fig.add_annotation(x=math.log10(x), y=min(rate, best), text=text, showarrow=False, yanchor="top",
                       xanchor="right" if left else "left", xshift=-16 if left else 16, yshift=-4, bgcolor="rgba(255,255,255,0.85)",
                       font=dict(size=th.font_size, color=th.text_color))


def _pool_line(fig: Any, x: int, y_range: tuple[float, float], th: Any, name: str) -> None:
    """The chosen pool size as a red dashed vertical line that has its own legend entry."""
    import plotly.graph_objects as go

    fig.add_trace(go.Scatter(x=[x, x], y=list(y_range), mode="lines", name=name, hoverinfo="skip",
                             line=dict(color=HIGHLIGHT, width=th.line_width, dash="dash")))


class HitRateControl(LiveControl):
    """Inputs: ``pool_size`` (token slots, one of ``sizes``: the slider's positions) and ``policy`` (an id
    of ``POLICY_NAMES``). ``curves``: policy -> hit rate at each of ``sizes`` (measured once);
    ``result``: ``hit_rate`` (policy -> hit rate at ``pool_size``, read off the curves) and ``best``
    (the policy that hits most)."""

    css_class = "kvlab-hit-rate"
    plotly_config = NO_MODE_BAR

    def __init__(self, requests: Sequence[tuple[list[int], list[int]]] | None = None,
                 sizes: Sequence[int] = range(80, 401, 10), pool_size: int | None = None,
                 policy: str = "lru", static: bool | None = None) -> None:
        self.requests = list(requests) if requests is not None else popular_prefix_stream()
        self.sizes = sorted(set(sizes))
        self.pool_size, self.policy = pool_size if pool_size is not None else self.sizes[0], policy
        self.check()
        self.curves = {p: [served_hit_rate(self.requests, s, p) for s in self.sizes] for p in POLICY_NAMES}
        super().__init__(static=static)

    def check(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {sorted(POLICY_NAMES)}")
        if isinstance(self.pool_size, bool) or self.pool_size not in self.sizes:
            raise ValueError(f"pool_size must be one of the sizes the curves were measured at ({self.sizes[0]}.."
                             f"{self.sizes[-1]}, {len(self.sizes)} sizes), got {self.pool_size!r}")

    def site_grid(self) -> dict[str, list[Any]]:
        every = max(1, len(self.sizes) // 8)   # the static site: about 9 sizes, not every slider position
        return {"pool_size": sorted({*self.sizes[::every], self.sizes[-1]}), "policy": list(POLICY_NAMES)}

    def site_labels(self) -> dict[str, dict[Any, str]]:
        return {"policy": dict(POLICY_NAMES)}

    def update(self) -> None:
        i = self.sizes.index(self.pool_size)
        rates = {p: self.curves[p][i] for p in POLICY_NAMES}
        self.result = dict(hit_rate=rates, best=max(rates, key=rates.get))

    def caption(self) -> str:
        rates, best = self.result["hit_rate"], self.result["best"]
        mine = rates[self.policy]
        if best == self.policy or rates[best] == mine:
            verdict = "the best of the three here"
        else:
            verdict = f"{100 * (rates[best] - mine):.1f} points below {POLICY_NAMES[best]}"
        return (f"A pool of {self.pool_size} token slots, {POLICY_NAMES[self.policy]}: {mine:.1%} of the prompt "
                f"tokens of {len(self.requests)} requests were found in the cache, {verdict}; the markers on "
                f"the dashed line are each policy's rate at this size. (Real radix tree, simulated stream.)")

    def figure(self) -> Any:
        import plotly.graph_objects as go

        th = theme()
        fig = go.Figure()
        for p, name in POLICY_NAMES.items():
            chosen = p == self.policy
            fig.add_trace(go.Scatter(   # a point at every slider position: no marker on each (33 of them)
                x=self.sizes, y=self.curves[p], name=name, mode="lines" if len(self.sizes) > 12 else "lines+markers",
                showlegend=False, legendgroup=p, line=_curve_line(POLICY_COLORS[p], chosen, th)))
        every = [r for c in self.curves.values() for r in c]
        # a short name: the legend's entries then sit two a row, under the title even in classroom mode
        _pool_line(fig, self.pool_size, (min(every), max(every)), th, "the pool size you picked")
        _rate_markers(fig, self.pool_size, self.result["hit_rate"], POLICY_COLORS, POLICY_NAMES, th, self.policy)
        fig.update_layout(
            template="none", height=420 if not th.high_contrast else 440,   # classroom: slider, caption + figure in 599 px
            width=None if th.autosize else th.grid_width, autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"Prompt-token hit rate vs pool size ({source_label('simulated')} stream, real radix tree)",
                       font=dict(size=th.title_size), y=0.98, yanchor="top"),
            xaxis=dict(title="pool size (token slots)"), yaxis=dict(title="hit rate", tickformat=".0%"),
            legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, itemsizing="constant"),  # under the title
            margin=dict(t=104 if th.high_contrast else 78, b=70, l=70, r=20))   # the legend right under the title
        return fig

    def _inputs(self, W: Any) -> list[Any]:
        style = {"description_width": "initial"}
        size = W.SelectionSlider(options=self.sizes, value=self.pool_size,   # only the sizes the curves hold
                                 description="pool size (token slots)", style=style, continuous_update=False,
                                 layout=W.Layout(min_width="420px"))  # at classroom size the track would shrink to nothing
        size.add_class("kvlab-pool-size-slider")
        policy = W.Dropdown(options=[(name, p) for p, name in POLICY_NAMES.items()], value=self.policy,
                            description="eviction policy", style=style, layout=W.Layout(min_width="400px"))
        policy.add_class("kvlab-policy-menu")
        size.observe(lambda ch: self.set(pool_size=ch["new"]), names="value")
        policy.observe(lambda ch: self.set(policy=ch["new"]), names="value")
        return [size, policy]


class SchedulingControl(LiveControl):
    """Lesson 08 section 5: a pool size and a queue order; the simulated hit rate and throughput.

    Every (pool size, order) of ``sizes`` x :data:`ORDER_NAMES` is simulated once when the control
    is built (``kvlab.sim.simulate`` with the radix policy, about a tenth of a second each on the
    default trace), so a move only redraws. ``result``: ``hit_rate`` and ``throughput`` (order ->
    value at ``pool_size``), ``best`` (the trace's one-pass optimum).

    Example:
        >>> c = SchedulingControl(sizes=(1024, 4096), static=True)
        >>> c.set(pool_size=4096, order="fcfs")
        >>> c.result["hit_rate"]["cache-aware"] >= c.result["hit_rate"]["fcfs"]
        True
    """

    css_class = "kvlab-scheduling"
    plotly_config = NO_MODE_BAR

    def __init__(self, trace: Any = None, sizes: Sequence[int] = (512, 768, 1024, 1536, 2048, 4096),
                 pool_size: int = 1024, order: str = "cache-aware", static: bool | None = None) -> None:
        from .. import sim

        self.trace = trace if trace is not None else sim.shared_prefix(
            100, rate=float("inf"), seed=0, num_prefixes=8, prefix_len=200, question_mean=20, output_mean=20)
        self.sizes, self.pool_size, self.order = list(sizes), pool_size, order
        self.check()
        self.optimum = sim.optimal_hit_rate(self.trace)
        self.runs = {(s, o): sim.simulate(self.trace, "radix", capacity=s, order=o) for s in self.sizes for o in ORDER_NAMES}
        super().__init__(static=static)

    def check(self) -> None:
        if self.order not in ORDER_NAMES:
            raise ValueError(f"unknown order {self.order!r}; choose one of {sorted(ORDER_NAMES)}")
        if self.pool_size not in self.sizes:
            raise ValueError(f"pool_size must be one of {self.sizes}, got {self.pool_size!r}")

    def site_grid(self) -> dict[str, list[Any]]:
        return {"pool_size": list(self.sizes), "order": list(ORDER_NAMES)}

    def site_labels(self) -> dict[str, dict[Any, str]]:
        return {"order": dict(ORDER_NAMES)}

    def update(self) -> None:
        runs = {o: self.runs[self.pool_size, o] for o in ORDER_NAMES}
        self.result = dict(hit_rate={o: r.hit_rate for o, r in runs.items()},
                           throughput={o: r.throughput for o, r in runs.items()}, best=self.optimum)

    def caption(self) -> str:
        hr, tp = self.result["hit_rate"], self.result["throughput"]
        other = next(o for o in ORDER_NAMES if o != self.order)
        return (f"{len(self.trace)} requests waiting at once, a pool of {self.pool_size} token slots, "
                f"{ORDER_NAMES[self.order]}: {hr[self.order]:.1%} of the prompt tokens hit the cache "
                f"({hr[other]:.1%} with {ORDER_SHORT[other]}; the best possible is {self.optimum:.1%}), "
                f"{tp[self.order]:.0f} tokens/s against {tp[other]:.0f}. (Simulated.)")

    def figure(self) -> Any:
        import plotly.graph_objects as go

        th = theme()
        fig = go.Figure()
        for o, name in ORDER_NAMES.items():
            chosen = o == self.order
            fig.add_trace(go.Scatter(
                x=self.sizes, y=[self.runs[s, o].hit_rate for s in self.sizes], name=name, mode="lines+markers",
                showlegend=False, legendgroup=o, line=_curve_line(ORDER_COLORS[o], chosen, th)))
        fig.add_trace(go.Scatter(x=[self.sizes[0], self.sizes[-1]], y=[self.optimum] * 2, mode="lines", hoverinfo="skip",
                                 name=f"best possible ({self.optimum:.1%})",
                                 line=dict(color=NEUTRAL, width=th.line_width, dash="dash")))
        top = max(self.optimum, *self.result["hit_rate"].values())   # a re-prefill may hit above the optimum
        _pool_line(fig, self.pool_size, (0, top), th, "the pool size you picked")
        _rate_markers(fig, self.pool_size, self.result["hit_rate"], ORDER_COLORS, ORDER_NAMES, th, self.order)
        _gap_note(fig, self.pool_size, self.result["hit_rate"][self.order], self.optimum, th,
                  left=self.sizes.index(self.pool_size) >= len(self.sizes) / 2)
        fig.update_layout(
            template="none", height=380 if not th.high_contrast else 440,
            width=None if th.autosize else th.grid_width, autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"Hit rate vs pool size, two queue orders ({source_label('simulated')})",
                       font=dict(size=th.title_size), y=0.98, yanchor="top"),
            xaxis=dict(title="pool size (token slots, log scale)", type="log", tickvals=self.sizes),
            yaxis=dict(title="hit rate", tickformat=".0%", rangemode="tozero"),
            legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0, itemsizing="constant"),
            margin=dict(t=104 if th.high_contrast else 78, b=70, l=70, r=20))   # the legend right under the title
        return fig

    def _inputs(self, W: Any) -> list[Any]:
        style = {"description_width": "initial"}
        size = W.SelectionSlider(options=self.sizes, value=self.pool_size, description="pool size (token slots)",
                                 style=style, continuous_update=False, layout=W.Layout(min_width="420px"))
        size.add_class("kvlab-scheduling-size")
        order = W.Dropdown(options=[(name, o) for o, name in ORDER_NAMES.items()], value=self.order,
                           description="queue order", style=style, layout=W.Layout(min_width="540px"))
        order.add_class("kvlab-scheduling-order")
        size.observe(lambda ch: self.set(pool_size=ch["new"]), names="value")
        order.observe(lambda ch: self.set(order=ch["new"]), names="value")
        return [size, order]
