"""Lesson 10's control: a host-pool size and a write policy, and what they do to a simulated chat.

:class:`TierControls` re-runs a small tiered simulation (``run(host_ratio, write_policy)`` ->
a row with ``hit_rate``, ``prefill_tokens`` and ``ttft_mean_s``, e.g. one
:class:`kvlab.sim.tiers.TierRow`) whenever the student moves the slider or picks a policy, and
draws three bars beside the device-only run: the prefix hit rate, the prompt tokens computed
(prefill) and the mean time to first token. Every number is simulated, and the caption says so.

Without a widget front end (``static=True``: nbval, exported HTML) it shows the figure of its
current state; ``update()`` changes that state (tests drive it so).

Example:
    >>> from types import SimpleNamespace as NS
    >>> run = lambda r, p: NS(hit_rate=0.2 + 0.1 * r, prefill_tokens=1000 - 100 * r, ttft_mean_s=0.05 - 0.01 * r)
    >>> c = TierControls(run, host_ratio=2)
    >>> c.caption.split(":")[0]
    'host pool 2x the device pool, write-back (copy on eviction)'
"""
from __future__ import annotations

import html
from typing import Any, Callable, Sequence

from .palette import theme

__all__ = ["TierControls", "POLICY_WORDS"]

BASE_COLOR, TIER_COLOR = "#616161", "#bcbd22"  # dark grey, olive: no block state's colour (grey is evicted, green a hit)
TIER_WORDS = "dark grey: the device pool alone · olive: with the host tier"

POLICY_WORDS = {"write_through": "write-through (copy at once)",
                "write_through_selective": "selective write-through (after repeated hits)",
                "write_back": "write-back (copy on eviction)"}


class TierControls:
    """A host-ratio slider and a write-policy menu over ``run(host_ratio, write_policy)``.

    ``precompute``: run every (host ratio, policy) of the grid at once, so that each move of a
    control is a lookup; otherwise each setting runs the first time it is chosen.
    """

    def __init__(self, run: Callable[[float, str], Any], host_ratio: float = 2.0,
                 ratios: Sequence[float] = (0.5, 1, 1.5, 2, 3, 4), policy: str = "write_back",
                 static: bool = True, source: str = "simulated", precompute: bool = False) -> None:
        if policy not in POLICY_WORDS:
            raise ValueError(f"unknown write policy {policy!r}; choose one of: {', '.join(POLICY_WORDS)}")
        if host_ratio not in ratios:
            raise ValueError(f"host_ratio {host_ratio!r} must be one of {list(ratios)}")
        self._run, self.ratios, self.static, self.source = run, list(ratios), static, source
        self._rows: dict[tuple[float, str], Any] = {}   # (host_ratio, policy) -> its run: a value seen again is instant
        self.base = run(0, policy)  # the device pool alone (no host tier: the policy does not matter)
        if precompute:                   # review r7: every move a lookup (a run took 1.1-1.6 s on a loaded machine)
            for key in ((r, p) for p in POLICY_WORDS for r in self.ratios):
                self._rows[key] = run(*key)
        self.host_ratio, self.policy = host_ratio, policy
        self.row: Any = None
        self.caption = ""
        self.widget: Any = None
        self.update(host_ratio, policy)
        if not static:
            import ipywidgets as W

            self._ratio = W.SelectionSlider(options=[(f"{r:g}x", r) for r in self.ratios], value=host_ratio,
                                            description="host pool (x device pool)", continuous_update=False,
                                            style={"description_width": "initial"},
                                            layout=W.Layout(width="420px", max_width="100%"))
            self._pol = W.Dropdown(options=[(w, p) for p, w in POLICY_WORDS.items()], value=policy,
                                   description="write policy", style={"description_width": "initial"},
                                   layout=W.Layout(width="auto", max_width="100%"))  # its longest option shown whole
            self._cap = W.HTML(self._caption_html())
            self._out = W.Output()
            self._out.add_class("kvlab-figure")
            self._ratio.observe(lambda ch: self._redraw(host_ratio=ch["new"]), names="value")
            self._pol.observe(lambda ch: self._redraw(policy=ch["new"]), names="value")
            self._show_figure()
            self.widget = W.VBox([W.HBox([self._ratio, self._pol], layout=W.Layout(flex_flow="row wrap")), self._cap,
                                  self._out], layout=W.Layout(max_width="100%"))
            self.widget.add_class("kvlab-tier-controls")

    def update(self, host_ratio: float | None = None, policy: str | None = None) -> Any:
        """Re-run with ``host_ratio`` and ``policy`` (either may stay as it is); returns the row."""
        if policy is not None and policy not in POLICY_WORDS:
            raise ValueError(f"unknown write policy {policy!r}; choose one of: {', '.join(POLICY_WORDS)}")
        if host_ratio is not None and host_ratio not in self.ratios:
            raise ValueError(f"host_ratio {host_ratio!r} must be one of {self.ratios}")
        self.host_ratio = self.host_ratio if host_ratio is None else host_ratio
        self.policy = policy or self.policy
        key = (self.host_ratio, self.policy)
        if key not in self._rows:        # review r6: keys pressed fast queued one re-simulation each
            self._rows[key] = self._run(*key)
        self.row = r = self._rows[key]
        b = self.base
        saved = 1 - r.prefill_tokens / b.prefill_tokens if b.prefill_tokens else 0.0
        faster = b.ttft_mean_s / r.ttft_mean_s if r.ttft_mean_s else float("inf")
        self.caption = (f"host pool {self.host_ratio:g}x the device pool, {POLICY_WORDS[self.policy]}: hit rate "
                        f"{100 * r.hit_rate:.0f}% (device only {100 * b.hit_rate:.0f}%), prefill {r.prefill_tokens:,} "
                        f"tokens ({100 * saved:.0f}% fewer), mean time to first token (TTFT) {1e3 * r.ttft_mean_s:.0f} ms "
                        + _speed_words(faster) + f" ({self.source})")
        return r

    def figure(self) -> Any:
        """Three bar pairs: device only (dark grey) beside the chosen tier (olive)."""
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        th = theme()
        b, r = self.base, self.row
        names = ["hit rate (%)", "prefill tokens", "mean TTFT (ms)"]   # review r7: the long title ran to 6 px of the edge
        fig = make_subplots(rows=1, cols=3, subplot_titles=names, horizontal_spacing=0.12)
        label = f"host {self.host_ratio:g}x"
        for i, (v0, v1) in enumerate(((100 * b.hit_rate, 100 * r.hit_rate), (b.prefill_tokens, r.prefill_tokens),
                                      (1e3 * b.ttft_mean_s, 1e3 * r.ttft_mean_s))):
            fig.add_trace(go.Bar(x=["device only", label], y=[v0, v1], marker_color=[BASE_COLOR, TIER_COLOR],
                                 text=[f"{v0:,.0f}", f"{v1:,.0f}"], textposition="outside", showlegend=False,
                                 cliponaxis=False), row=1, col=i + 1)
        for ann in fig.layout.annotations:
            ann.font = dict(size=th.font_size)
        # the title's two lines from the top, then the subplot titles under them (they collided on a projector)
        top = max(100, int(28 + 2 * th.title_size + 3 * th.font_size))
        fig.update_layout(title=dict(text=f"A host tier under the radix tree ({self.source})<br><span style='font-size:"
                                          f"{th.font_size}px'>{TIER_WORDS}</span>", font=dict(size=th.title_size),
                                     yref="container", y=1, yanchor="top", pad=dict(t=12 + th.title_size)),
                          height=230 + top, width=None if th.autosize else min(th.grid_width, 840), template="plotly_white",
                          font=dict(size=th.font_size), margin=dict(l=50, r=20, t=top, b=40))
        fig.update_yaxes(rangemode="tozero")
        # the hit rate on a fixed 0-100% axis (and room for the value over a bar): it rescaled, 40 -> 100, as the
        # slider moved, which hid how big the jump is (review r2)
        fig.update_yaxes(range=[0, 115], tickvals=[0, 25, 50, 75, 100], row=1, col=1)
        return fig

    def _caption_html(self) -> str:
        return f"<div style='font-size:{max(theme().font_size + 1, 13)}px'><b>{html.escape(self.caption)}</b></div>"

    def _show_figure(self) -> None:
        from .stepper import figure_output

        self._out.outputs = (figure_output(self.figure()),)

    def _redraw(self, **kw) -> None:
        self.update(**kw)
        self._cap.value = self._caption_html()
        self._show_figure()

    def show(self) -> Any:
        """The widget (live) or the current figure (static)."""
        return self.figure() if self.static else self.widget

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        from .display import static_frames

        if self.static and static_frames():
            display(HTML(self._explore()))
            return
        if self.static:
            display(html_caption(self.caption))
        display(self.show())

    def _explore(self) -> str:
        """The site's grid: every host ratio of the slider, each write policy (one run each)."""
        from .explorer import explorer_html

        start = {"host_ratio": self.host_ratio, "policy": self.policy}
        axes = {"host_ratio": list(self.ratios), "policy": list(POLICY_WORDS)}
        labels = {"host_ratio": {r: f"{r:g}x the device pool" for r in self.ratios}, "policy": dict(POLICY_WORDS)}
        return explorer_html(lambda **kw: self.update(**kw), lambda: [self._caption_html(), self.figure()], axes,
                             start, labels)


def _speed_words(faster: float) -> str:
    """The time-to-first-token ratio in words; within 5% of 1: "the same" (never "1.0x faster").

    Example:
        >>> _speed_words(1.02), _speed_words(1.5), _speed_words(0.5)
        ('(about the same as device only)', '(1.5x faster)', '(2.0x slower)')
    """
    if abs(faster - 1) < 0.05:
        return "(about the same as device only)"
    return f"({faster:.1f}x faster)" if faster > 1 else f"({1 / faster:.1f}x slower)"


def html_caption(text: str) -> Any:
    """The caption as an HTML display object (static mode shows it above the figure)."""
    from IPython.display import HTML

    return HTML(f"<b>{html.escape(text)}</b>")
