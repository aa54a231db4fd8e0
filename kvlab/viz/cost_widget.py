"""What one decode step costs at a given context length, with and without a KV cache (lesson 01).

Without a cache, the step at context ``L`` runs all ``L`` tokens through the model again:
``sum(flops_per_token(i) for i in 1..L)``. With a cache it runs one token that attends to ``L``:
``flops_per_token(L)``. :func:`cost_state` computes both (counted from the model's shapes, no
run), their ratio, and, when the lesson passes the lines it fitted to its measured step times,
the time each step would take on this machine (an estimate, labelled so). :func:`cost_figure`
draws both curves against the context on **log-log axes** (the cached curve is thousands of
times lower: on a linear axis it lies flat on zero), with the chosen context marked.

:class:`CostWidget` puts a **context length** slider (16 to 32,768 tokens, doubling) and a
**model** menu over them; each change recomputes in a few milliseconds (the per-position sums are
computed once per model).

Example:
    >>> f = lambda c: 1000 + 10 * c            # a model whose step costs 1,000 FLOPs + 10 per token attended
    >>> s = cost_state({"toy": CostModel(f)}, "toy", 64)
    >>> s["naive_flops"], s["cached_flops"], round(s["ratio"], 1)
    (84800, 1640, 51.7)
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Any, Callable

from .control import renew_slider
from .display import display_control, is_static
from .palette import classroom_css, theme

__all__ = ["CostModel", "CONTEXTS", "cost_state", "cost_figure", "CostWidget", "NAIVE_COLOR", "CACHED_COLOR"]

CONTEXTS = tuple(2 ** k for k in range(4, 16))  # 16 .. 32,768 tokens
NAIVE_COLOR, CACHED_COLOR = "#d62728", "#1f77b4"  # as lesson 01's plots


@dataclass
class CostModel:
    """One model's ``flops_per_token(context_len)`` and, optionally, the straight lines
    ``(intercept_ms, ms_per_token)`` fitted to its measured naive and cached step times, and
    ``measured_from``, the shortest context those times were measured at: below it the lines
    give no estimate (a fitted line says nothing below its first point; its intercept can
    even be negative). ``note``: a sentence the widget adds after the model's numbers (e.g.
    where, if anywhere, its steps were timed); ``context_window``: the longest context the model
    takes (its ``max_position_embeddings``): the curves and the widget's slider stop there (None:
    the whole of :data:`CONTEXTS`); ``measured``: ``{context: (naive_ms, cached_ms)}``, the step times
    measured at exactly those contexts: there the widget says the measured times, not the line's."""

    flops_per_token: Callable[[int], int]
    naive_fit: tuple[float, float] | None = None
    cached_fit: tuple[float, float] | None = None
    measured_from: int = 1
    note: str = ""
    context_window: int | None = None
    measured: dict[int, tuple[float, float]] = field(default_factory=dict)
    _cum: list[int] = field(default_factory=list, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.measured_from, bool) or not isinstance(self.measured_from, int) or self.measured_from < 1:
            raise ValueError(f"measured_from must be an int >= 1 (the shortest context timed), got {self.measured_from!r}")
        w = self.context_window
        if w is not None and (isinstance(w, bool) or not isinstance(w, int) or w < CONTEXTS[0]):
            raise ValueError(f"context_window must be None or an int >= {CONTEXTS[0]}, got {w!r}")

    def contexts(self) -> list[int]:
        """The slider's context lengths: :data:`CONTEXTS` up to the context window (the window included)."""
        w = self.context_window
        return list(CONTEXTS) if w is None else sorted({c for c in CONTEXTS if c <= w} | {w})

    def naive_step(self, context: int) -> int:
        """FLOPs of a step without a cache: all ``context`` tokens, the i-th attending to i."""
        if len(self._cum) <= context:
            cum = self._cum or [0]
            for i in range(len(cum), max(context, CONTEXTS[-1]) + 1):
                cum.append(cum[-1] + int(self.flops_per_token(i)))
            self._cum = cum
        return self._cum[context]

    def cached_step(self, context: int) -> int:
        return int(self.flops_per_token(context))


def _ms(fit: tuple[float, float] | None, context: int, measured_from: int = 1) -> float | None:
    """The fitted line at ``context``; None without a fit or below the shortest context timed."""
    return None if fit is None or context < measured_from else fit[0] + fit[1] * context


def _fmt(flops: float) -> str:
    for unit, scale in (("TFLOPs", 1e12), ("GFLOPs", 1e9), ("MFLOPs", 1e6), ("kFLOPs", 1e3)):
        if flops >= scale:
            return f"{flops / scale:.3g} {unit}"
    return f"{flops:.0f} FLOPs"


def cost_state(models: dict[str, CostModel], model: str, context: int) -> dict[str, Any]:
    """The numbers for one (model, context): ``naive_flops``, ``cached_flops``, ``ratio``, the
    curves over :data:`CONTEXTS` (``xs``, ``naive``, ``cached``), the estimated times in ms
    (``naive_ms``/``cached_ms``, None without a fit) and ``sentence``."""
    if model not in models:
        raise ValueError(f"model must be one of {list(models)}, got {model!r}")
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise ValueError(f"context must be an int >= 1, got {context!r}")
    m = models[model]
    naive, cached = m.naive_step(context), m.cached_step(context)
    n_ms, c_ms = _ms(m.naive_fit, context, m.measured_from), _ms(m.cached_fit, context, m.measured_from)
    timed = m.measured.get(context)
    sentence = (f"At {context:,} tokens of context ({model}): without a cache the step runs all {context:,} tokens again, "
                f"{_fmt(naive)}; with the cache it runs one token, {_fmt(cached)}: {naive / cached:,.0f}x less work.")
    if timed is not None:
        n_ms, c_ms = timed
        sentence += f" Measured here at this length: {n_ms:,.2f} ms against {c_ms:,.2f} ms a step."
    elif n_ms is not None and c_ms is not None:
        sentence += (f" On this CPU that is about {n_ms:,.0f} ms against {c_ms:,.1f} ms per step (estimated from the "
                     "lines fitted to the measured times above).")
    elif m.naive_fit is not None and context < m.measured_from:
        sentence += (f" No time estimate here: the steps were timed from {m.measured_from:,} tokens up, and a line "
                     "fitted there says nothing about shorter contexts.")
    if m.context_window is not None and context > m.context_window:
        sentence = (f"This is past {model}'s context window of {m.context_window:,} tokens: the model cannot attend "
                    f"that far; the counts are what its shapes would give. " + sentence)
    if m.note:
        sentence += " " + m.note
    xs = m.contexts()
    return {"model": model, "context": context, "naive_flops": naive, "cached_flops": cached, "ratio": naive / cached,
            "naive_ms": n_ms, "cached_ms": c_ms, "measured": timed is not None, "xs": xs,
            "naive": [m.naive_step(x) for x in xs], "cached": [m.cached_step(x) for x in xs], "sentence": sentence,
            "factors": _factors(m), "context_window": m.context_window}


def _factors(m: CostModel) -> str:
    """How much a step's FLOPs grow over the slider's whole range for the model ``m`` (the menu names
    it). Example (FLOPs 1,000 + 10 per token attended, a 2,048-token window): 'From 16 to 2,048
    tokens (128x), counted: no cache x..., KV cache x...'."""
    lo, hi = m.contexts()[0], m.contexts()[-1]
    return (f"From {lo:,} to {hi:,} tokens ({hi // lo:,}x), counted: no cache "
            f"x{m.naive_step(hi) / m.naive_step(lo):,.0f}, KV cache x{m.cached_step(hi) / m.cached_step(lo):,.1f}")


def cost_figure(state: dict[str, Any]) -> Any:
    """Both curves on log-log axes, the chosen context marked (plotly)."""
    import plotly.graph_objects as go

    th = theme()
    fig = go.Figure()
    xs = state["xs"]
    # Both curves rise to the right, so above-left and below-right of a point are clear of them;
    # the label points into the plot: right of a point in the left half, left of it in the right half.
    side = "bottom right" if state["context"] < xs[len(xs) // 2] else "top left"
    for key, name, color in (("naive", "no cache: rerun every token", NAIVE_COLOR), ("cached", "KV cache: one token", CACHED_COLOR)):
        fig.add_trace(go.Scatter(x=xs, y=state[key], name=name, mode="lines+markers",
                                 line=dict(color=color, width=th.line_width + 1)))
        fig.add_trace(go.Scatter(x=[state["context"]], y=[state[f"{key}_flops"]], mode="markers+text",
                                 marker=dict(color=color, size=14, line=dict(color="#000000", width=1)),
                                 text=[_fmt(state[f"{key}_flops"])], textposition=side, cliponaxis=False,
                                 textfont=dict(size=th.font_size, color=color), showlegend=False, hoverinfo="skip"))
    lo = math.log10(min(state["cached"] + [state["cached_flops"]])) - 0.6  # room for a label below the lowest point
    hi = math.log10(max(state["naive"] + [state["naive_flops"]])) + 0.6   # and above the highest
    fig.add_vline(x=state["context"], line=dict(color="#777777", dash="dot", width=1))
    window = state.get("context_window")
    if window is not None and state["context"] > window:  # only set() or the site's grid get here: mark it
        fig.add_vline(x=window, line=dict(color="#000000", dash="dash", width=1))
        fig.add_annotation(x=math.log10(window), y=1, yref="paper", yanchor="bottom", xanchor="right",
                           text=f"context window {window:,}", showarrow=False, font=dict(size=th.font_size))
    fig.update_layout(
        title=dict(text="FLOPs of one decode step (counted, not measured)", x=0.01, font=dict(size=th.title_size)),
        xaxis=dict(type="log", title="context length (tokens), log scale", tickvals=state["xs"][1::2],
                   ticktext=[f"{x:,}" for x in state["xs"][1::2]]),  # every other one, the last (32,768) included
        yaxis=dict(type="log", title="FLOPs per step, log scale", exponentformat="SI", dtick=1,  # powers of 10 only
                   range=[lo, hi]),
        height=400,  # classroom too: slider, two lines of text and the figure in 599 px
        width=None if th.autosize else 760, autosize=th.autosize,
        legend=dict(orientation="h", y=-0.25, x=0), margin=dict(l=70, r=20, t=60, b=40),
        font=dict(size=th.font_size), template="plotly_white",
    )
    return fig


class CostWidget:
    """A context-length slider and a model menu over :func:`cost_figure` (see module doc).

    ``w.state`` is the current :func:`cost_state`; ``w.set(context=..., model=...)`` moves the
    controls (or, in static mode, only the state)."""

    def __init__(self, models: dict[str, CostModel], model: str | None = None, context: int = 1024,
                 static: bool | None = None) -> None:
        if not models:
            raise ValueError("CostWidget needs at least one model")
        self.models = models
        self.static = is_static(static)
        self.widget: Any = None
        self.state = cost_state(models, model or next(iter(models)), context)
        if not self.static:
            self._build()

    def set(self, **kw: Any) -> None:
        unknown = set(kw) - {"context", "model"}
        if unknown:
            raise TypeError(f"set() got unknown argument(s) {sorted(unknown)}")
        if self.widget is None:
            self.state = cost_state(self.models, kw.get("model", self.state["model"]), kw.get("context", self.state["context"]))
            return
        if "model" in kw:
            self._model.value = kw["model"]
        if "context" in kw:
            self._context.value = kw["context"]

    def _build(self) -> None:
        import ipywidgets as W

        style = {"description_width": "initial"}
        self._context = W.SelectionSlider(options=self._options(self.state["model"]), value=self.state["context"],
                                          description="context length (tokens)", style=style,
                                          layout=W.Layout(width="min(460px, 100%)"))
        self._context.add_class("kvlab-context-slider")
        self._model = W.Dropdown(options=list(self.models), value=self.state["model"], description="model", style=style,
                                 layout=W.Layout(width="min(360px, 100%)"))
        self._model.add_class("kvlab-model-menu")
        self._text = W.HTML()
        self._out = W.Output()
        self._out.add_class("kvlab-figure")
        for w in (self._context, self._model):
            w.observe(self._changed, names="value")
        parts = [W.HBox([self._context, self._model], layout=W.Layout(flex_flow="row wrap", max_width="100%")),
                 self._text, self._out]
        css = classroom_css("kvlab-cost")
        if css:
            parts.insert(0, W.HTML(css))
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-cost")
        self._redraw()

    def _options(self, model: str) -> list[tuple[str, int]]:
        """The slider's (label, context) pairs for ``model``: up to its context window; the current
        context too when it is within it."""
        m, now = self.models[model], self.state["context"]
        keep = m.context_window is None or now <= m.context_window
        return [(f"{c:,}", c) for c in sorted(set(m.contexts()) | ({now} if keep else set()))]

    def _changed(self, change: dict[str, Any]) -> None:
        if change.get("owner") is self._model:  # another model: the slider stops at its window
            window = self.models[self._model.value].context_window
            want = min(self.state["context"], window or self.state["context"])   # the length the student chose
            self.state = dict(self.state, context=want)
            # a NEW slider: the browser's End and Home keys keep the range a slider was made with
            self._context = renew_slider(self.widget, self._context, self._options(self._model.value), self._changed,
                                         value=want)
        self.state = cost_state(self.models, self._model.value, self._context.value)
        self._redraw()

    def _html(self) -> str:
        px = max(theme().font_size + 1, theme().control_px)
        return (f"<p style='font-size:{px}px;line-height:1.45;margin:4px 0'>{html.escape(self.state['factors'])}"
                f"<br>{html.escape(self.state['sentence'])}</p>")

    def _redraw(self) -> None:
        from .stepper import figure_output

        self._text.value = self._html()
        self._out.outputs = (figure_output(cost_figure(self.state)),)

    def __repr__(self) -> str:
        s = self.state
        return f"<CostWidget {s['model']} at {s['context']:,} tokens: {s['ratio']:,.0f}x less work with the cache>"

    def _ipython_display_(self) -> None:
        display_control(self.widget, lambda: [self._html(), cost_figure(self.state)], self._explore)

    def _explore(self) -> str:
        """The site's grid: every context length of the slider, each model."""
        from .explorer import explorer_html

        s = self.state
        axes = {"context": sorted(set(CONTEXTS) | {s["context"]}), "model": list(self.models)}
        return explorer_html(self.set, lambda: [self._html(), cost_figure(self.state)], axes,
                             {"context": s["context"], "model": s["model"]}, {"context": {c: f"{c:,}" for c in axes["context"]}})
