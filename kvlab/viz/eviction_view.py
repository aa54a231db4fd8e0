"""Lesson 08's control: the pool size and the eviction policy; the hit rate they give.

A slider for the radix cache's pool (token slots) and a menu of eviction policies in words
("least recently used (LRU)"...). Every policy's hit-rate curve over pool sizes is measured
once when the control is built; each change serves the whole stream again through the real
request cycle at the chosen size (:func:`kvlab.lessons.eviction.served_hit_rate`, a few
hundredths of a second per policy) and marks it on the curves, the chosen policy drawn
thick. The stream is simulated, the tree and its evictions real. Mirrors no vLLM or SGLang
file (SGLang's ``--radix-eviction-policy``).

Example:
    >>> c = HitRateControl(popular_prefix_stream(60, seed=1), sizes=(70, 140), static=True)
    >>> c.set(pool_size=140, policy="lfu")
    >>> sorted(c.result["hit_rate"]) == sorted(POLICY_NAMES)
    True
"""
from __future__ import annotations

from typing import Any, Sequence

from ..lessons.eviction import POLICY_NAMES, popular_prefix_stream, served_hit_rate
from .control import LiveControl
from .palette import HIGHLIGHT, REQUEST_COLORS, source_label, theme

__all__ = ["HitRateControl"]

POLICY_COLORS = dict(zip(POLICY_NAMES, REQUEST_COLORS))


class HitRateControl(LiveControl):
    """Inputs: ``pool_size`` (token slots) and ``policy`` (an id of ``POLICY_NAMES``).
    ``curves``: policy -> hit rate at each of ``sizes`` (measured once); ``result``:
    ``hit_rate`` (policy -> hit rate at ``pool_size``) and ``best`` (the policy that hits most)."""

    css_class = "kvlab-hit-rate"

    def __init__(self, requests: Sequence[tuple[list[int], list[int]]] | None = None,
                 sizes: Sequence[int] = (80, 120, 160, 200, 260, 320, 400), pool_size: int | None = None,
                 policy: str = "lru", static: bool | None = None) -> None:
        self.requests = list(requests) if requests is not None else popular_prefix_stream()
        self.sizes = list(sizes)
        self.pool_size, self.policy = pool_size if pool_size is not None else self.sizes[0], policy
        self.check()
        self.curves = {p: [served_hit_rate(self.requests, s, p) for s in self.sizes] for p in POLICY_NAMES}
        super().__init__(static=static)

    def check(self) -> None:
        if self.policy not in POLICY_NAMES:
            raise ValueError(f"unknown policy {self.policy!r}; choose one of {sorted(POLICY_NAMES)}")
        lo, hi = min(self.sizes), max(self.sizes)
        if isinstance(self.pool_size, bool) or not isinstance(self.pool_size, int) or not lo <= self.pool_size <= hi:
            raise ValueError(f"pool_size must be an int in {lo}..{hi}, got {self.pool_size!r}")

    def site_grid(self) -> dict[str, list[Any]]:
        return {"pool_size": list(self.sizes), "policy": list(POLICY_NAMES)}

    def site_labels(self) -> dict[str, dict[Any, str]]:
        return {"policy": dict(POLICY_NAMES)}

    def update(self) -> None:
        rates = {p: served_hit_rate(self.requests, self.pool_size, p) for p in POLICY_NAMES}
        self.result = dict(hit_rate=rates, best=max(rates, key=rates.get))

    def caption(self) -> str:
        rates, best = self.result["hit_rate"], self.result["best"]
        mine = rates[self.policy]
        if best == self.policy or rates[best] == mine:
            verdict = "the best of the three here"
        else:
            verdict = f"{100 * (rates[best] - mine):.1f} points below {POLICY_NAMES[best]}"
        return (f"A pool of {self.pool_size} token slots, {POLICY_NAMES[self.policy]}: {mine:.1%} of the prompt "
                f"tokens of {len(self.requests)} requests were found in the cache, {verdict}. "
                f"(Real radix tree, simulated stream.)")

    def figure(self) -> Any:
        import plotly.graph_objects as go

        th = theme()
        fig = go.Figure()
        for p, name in POLICY_NAMES.items():
            chosen = p == self.policy
            fig.add_trace(go.Scatter(
                x=self.sizes, y=self.curves[p], name=name, mode="lines+markers",
                line=dict(color=POLICY_COLORS[p], width=(3 if chosen else 1) * th.line_width + 1,
                          dash="solid" if chosen else "dot")))
        rates = self.result["hit_rate"]
        fig.add_trace(go.Scatter(
            x=[self.pool_size] * len(rates), y=list(rates.values()), mode="markers", name="this pool size",
            marker=dict(size=12 + 2 * th.line_width, color=[POLICY_COLORS[p] for p in rates],
                        line=dict(color=HIGHLIGHT, width=2 + th.line_width))))
        fig.add_vline(x=self.pool_size, line=dict(color=HIGHLIGHT, width=th.line_width, dash="dash"))
        fig.update_layout(
            template="none", height=420 if not th.high_contrast else 520,
            width=None if th.autosize else th.grid_width, autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"Prompt-token hit rate vs pool size ({source_label('simulated')} stream, real radix tree)",
                       font=dict(size=th.title_size), y=0.98, yanchor="top"),
            xaxis=dict(title="pool size (token slots)"), yaxis=dict(title="hit rate", tickformat=".0%"),
            legend=dict(orientation="h", y=1.0, yanchor="bottom", x=0),     # above the plot, under the title
            margin=dict(t=140 if th.high_contrast else 110, b=70, l=70, r=20))
        return fig

    def _inputs(self, W: Any) -> list[Any]:
        style = {"description_width": "initial"}
        size = W.IntSlider(value=self.pool_size, min=min(self.sizes), max=max(self.sizes), step=10,
                           description="pool size (token slots)", style=style, continuous_update=False,
                           layout=W.Layout(min_width="420px"))  # at classroom size the track would shrink to nothing
        size.add_class("kvlab-pool-size-slider")
        policy = W.Dropdown(options=[(name, p) for p, name in POLICY_NAMES.items()], value=self.policy,
                            description="eviction policy", style=style, layout=W.Layout(min_width="400px"))
        policy.add_class("kvlab-policy-menu")
        size.observe(lambda ch: self.set(pool_size=ch["new"]), names="value")
        policy.observe(lambda ch: self.set(policy=ch["new"]), names="value")
        return [size, policy]
