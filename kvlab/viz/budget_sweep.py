"""Lesson 11's section-5 control: pick a method and a token budget, and the real model is run at
that budget (memory kept, bytes read per step, perplexity, greedy agreement), beside every budget
measured so far.

The lesson measures every method at one budget (64 tokens); what a student wants to move is the
budget. Each new (method, budget) is measured when it is picked, by the ``measure`` function the
lesson passes (one method on the lesson's prompt, about a second on a laptop CPU), and kept: the
figure draws each method's measured budgets as a line, the one picked ringed, and the full
cache's perplexity as a dashed line. The results the lesson already measured seed it, so building
the control runs nothing.

Mirrors no vLLM or SGLang file (a lesson's view).

Example (a made-up ``measure``, no model):
    >>> from kvlab.compute.kv_measure import MethodResult
    >>> full = MethodResult("full", 100, 8e6, 8e6, 9.0, 1.0, kind="reference")
    >>> fake = lambda method, budget: MethodResult(f"{method} {budget}", 100, budget * 1e4, budget * 1e4,
    ...                                            9.0 + 64 / budget, budget / 128, kind="variant")
    >>> c = BudgetSweep([full], fake, methods=("h2o-block",), budget=64, static=True)
    >>> c.set(budget=128); c.result["row"].label, c.result["seconds"] is not None
    ('h2o-block 128', True)
"""
from __future__ import annotations

import time
from typing import Any, Callable, Sequence

from .control import LiveControl
from .kv_compress_view import METHOD_COLORS, METHOD_MARKERS, _width
from .palette import source_label, theme

__all__ = ["BudgetSweep"]

BUDGET_METHODS = ("streaming", "streaming-orig", "h2o", "h2o-block", "quest", "quest-shared")
METHOD_NAMES = {   # the menu's words; the ids stay in the captions and the figure, as in the lesson's tables
    "streaming": "StreamingLLM (paper)", "streaming-orig": "StreamingLLM, original positions (variant)",
    "h2o": "H2O, per head (paper)", "h2o-block": "H2O, whole blocks (variant)",
    "quest": "Quest, per KV head (paper)", "quest-shared": "Quest, one set for all heads (variant)"}


class BudgetSweep(LiveControl):
    """A method menu and a budget slider over the real model (see the module doc).

    ``rows``: the lesson's measured results, ``rows[0]`` the full cache; ``measure(method, budget)``
    returns one :class:`~kvlab.compute.kv_measure.MethodResult`. ``result``: ``row`` (the picked
    result), ``seconds`` (how long measuring it took now; None when it was measured before).
    """

    css_class = "kvlab-budget-sweep"

    def __init__(self, rows: Sequence[Any], measure: Callable[[str, int], Any], methods: Sequence[str] = BUDGET_METHODS,
                 method: str | None = None, budget: int = 64, budgets: tuple[int, int, int] = (16, 192, 16),
                 static: bool | None = None) -> None:
        if not rows or rows[0].label != "full":
            raise ValueError("rows[0] must be the full cache's result (label 'full')")
        if not methods or any(m not in BUDGET_METHODS for m in methods):
            raise ValueError(f"methods must be some of {BUDGET_METHODS}, got {methods!r}")
        self.full, self.measure, self.methods, self.budgets = rows[0], measure, tuple(methods), budgets
        self.measured: dict[tuple[str, int], Any] = {}
        for r in rows[1:]:
            name, _, size = r.label.partition(" ")
            if name in self.methods and size.isdigit():
                self.measured[(name, int(size))] = r
        self.method = method if method is not None else self.methods[0]
        self.budget = budget
        self.check()
        super().__init__(static=static)

    def check(self) -> None:
        lo, hi, step = self.budgets
        if self.method not in self.methods:
            raise ValueError(f"method {self.method!r} is not one of {self.methods}")
        if isinstance(self.budget, bool) or not isinstance(self.budget, int) or not lo <= self.budget <= hi \
                or (self.budget - lo) % step:
            raise ValueError(f"budget {self.budget!r} is not one of {lo}, {lo + step}, ..., {hi} tokens")

    def update(self) -> None:
        key, seconds = (self.method, self.budget), None
        if key not in self.measured:
            t0 = time.perf_counter()
            self.measured[key] = self.measure(*key)
            seconds = time.perf_counter() - t0
        self.result = {"row": self.measured[key], "seconds": seconds}

    def caption(self) -> str:
        r, full = self.result["row"], self.full
        when = (f"measured now in {self.result['seconds']:.1f} s" if self.result["seconds"] is not None
                else "measured earlier in this run")
        return (f"{r.label} ({r.kind}): {r.kv_bytes / full.kv_bytes:.0%} of the full cache's KV memory kept, "
                f"{r.read_bytes_per_step / full.read_bytes_per_step:.0%} of its bytes read per step; perplexity "
                f"{r.ppl:.2f} (full cache {full.ppl:.2f}), {r.agreement:.0%} of {r.greedy_tokens} greedy tokens "
                f"equal to the full cache's ({when}).")

    def figure(self) -> Any:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        th, hc = theme(), theme().high_contrast
        fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.14,
                            subplot_titles=("perplexity (lower is better)", "% greedy tokens = full cache"))
        for method in self.methods:
            pts = sorted((b, r) for (m, b), r in self.measured.items() if m == method)
            if not pts:
                continue
            symbol, size = METHOD_MARKERS[method]
            style = dict(mode="lines+markers", name=method, legendgroup=method,
                         opacity=1.0 if method == self.method else 0.35,   # the picked method stands out
                         line=dict(color=METHOD_COLORS[method], width=th.line_width,
                                   dash="dot" if method.endswith(("-orig", "-block", "-shared")) else "solid"),
                         marker=dict(symbol=symbol, size=min(size, 14), color=METHOD_COLORS[method], line=dict(width=2)))
            xs = [b for b, _ in pts]
            fig.add_trace(go.Scatter(x=xs, y=[r.ppl for _, r in pts], **style), 1, 1)
            fig.add_trace(go.Scatter(x=xs, y=[100 * r.agreement for _, r in pts], showlegend=False, **style), 1, 2)
        r = self.result["row"]
        ring = dict(mode="markers", hoverinfo="skip", showlegend=False, cliponaxis=False,   # whole at an axis's end
                    marker=dict(symbol="circle-open", size=26, color=th.text_color, line=dict(width=3)))
        fig.add_trace(go.Scatter(x=[self.budget], y=[r.ppl], **ring), 1, 1)
        fig.add_trace(go.Scatter(x=[self.budget], y=[100 * r.agreement], **ring), 1, 2)
        fig.add_hline(y=self.full.ppl, line=dict(color=METHOD_COLORS["full"], dash="dash", width=th.line_width),
                      row=1, col=1)
        lo, hi, _ = self.budgets
        fig.update_xaxes(title_text="budget (tokens)", range=[0, hi + lo])
        fig.update_yaxes(range=[0, 108], row=1, col=2)
        fig.update_yaxes(**self._ppl_axis(), row=1, col=1)
        fig.update_layout(title=dict(text=f"Each budget you pick, run on the model ({source_label('measured')}; "
                                          f"dashed: the full cache)", font=dict(size=th.title_size)),
                          height=440 if hc else 380, width=_width(th), autosize=th.autosize, template="plotly_white",
                          font=dict(size=th.font_size), margin=dict(l=55, r=20, t=70 if hc else 80, b=160 if hc else 110),
                          # under the axis titles (classroom: 18 px titles took the legend's first row)
                          legend=dict(orientation="h", x=0, y=-0.4 if hc else -0.3, yanchor="top",
                                      font=dict(size=th.font_size)))
        for a in fig.layout.annotations[:2]:   # the subtitles
            a.font = dict(size=th.font_size)
        return fig

    def _ppl_axis(self) -> dict[str, Any]:
        """The perplexity axis: every point and the full cache's line inside, off the axis's edges;
        a log axis when a budget breaks a method (its perplexity 8x the best or more)."""
        import math

        ppl = [r.ppl for r in self.measured.values()] + [self.full.ppl]
        lo, hi = min(ppl), max(ppl)
        if hi > 8 * lo:
            pad = 0.06 * (math.log10(hi) - math.log10(lo))
            return dict(type="log", dtick=1, range=[math.log10(lo) - pad, math.log10(hi) + pad])
        pad = 0.08 * max(hi - lo, 0.05 * hi)
        return dict(range=[lo - pad, hi + pad])

    def _inputs(self, W: Any) -> list[Any]:
        th = theme()
        lo, hi, step = self.budgets
        menu = W.Dropdown(options=[(METHOD_NAMES[m], m) for m in self.methods], value=self.method, description="method",
                          layout=W.Layout(width="auto"))
        menu.add_class("kvlab-sweep-method")
        slider = W.IntSlider(value=self.budget, min=lo, max=hi, step=step, description="budget (tokens)",
                             continuous_update=False, style={"description_width": "initial"},
                             layout=W.Layout(width="min(420px, 100%)"))
        slider.add_class("kvlab-sweep-budget")
        menu.observe(lambda ch: self._pick(method=ch["new"]), names="value")
        slider.observe(lambda ch: self._pick(budget=ch["new"]), names="value")
        if th.high_contrast:
            menu.style.font_size = f"{th.control_px}px"
        return [menu, slider]

    def _pick(self, **values: Any) -> None:
        """A widget's change: say "measuring" while the model runs (about a second), then redraw."""
        key = (values.get("method", self.method), values.get("budget", self.budget))
        if self.widget is not None and key not in self.measured:
            self._caption.value = self.caption_html(f"measuring {key[0]} at {key[1]} tokens on the model ...")
        self.set(**values)
