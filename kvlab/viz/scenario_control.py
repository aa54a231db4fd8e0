"""Lesson 09 appendix's control: pick one of the scenarios already simulated, see every system's bar move.

The appendix reruns Fig. 13's four systems under other choices the paper does not publish (the
step time 20% shorter or longer, another length shape). This control takes those results
(``scenarios``: label -> system -> value, one of them the ``baseline``) and draws, for the
scenario picked in a menu, each system's value beside the baseline's and the published one, on
one y scale for every scenario (the bars move, the axis does not); the caption says how far each
bar moved and whether it is within the tolerance of the published value. Nothing is simulated
when the menu changes (the runs are done), so it redraws at once; the static site precomputes
every choice (``site_grid``).

Mirrors no vLLM or SGLang file.

Example:
    >>> c = ScenarioControl({"x1": {"a": 10.0, "b": 5.0}, "x2": {"a": 20.0, "b": 5.0}}, {"a": 11.0, "b": 5.0},
    ...                     names={"a": "A", "b": "B"}, baseline="x1", static=True)
    >>> c.set(scenario="x2"); c.result["moved"]
    {'a': 1.0, 'b': 0.0}
    >>> c.caption()
    'x2 (simulated), against x1: A 20.0 (+100%, outside 15% of the published 11.0). Under 1%: B.'
"""
from __future__ import annotations

from typing import Any, Mapping

from .control import LiveControl
from .palette import source_label, theme

__all__ = ["ScenarioControl"]

PUBLISHED_STYLE = dict(color="#ffffff", line=dict(color="#000000", width=1.5))   # as kvlab.sim.plots.compare_bars
BASELINE_COLOR, CHOSEN_COLOR = "#404040", "#969696"


class ScenarioControl(LiveControl):
    """Input: ``scenario`` (one of ``scenarios``' labels). ``result``: ``values`` (system -> the
    scenario's value), ``moved`` (system -> relative change against the baseline) and
    ``within`` (system -> inside ``tolerance`` of the published value, or None if none is published)."""

    css_class = "kvlab-scenario"

    def __init__(self, scenarios: Mapping[str, Mapping[str, float]], published: Mapping[str, float],
                 names: Mapping[str, str] | None = None, baseline: str | None = None, tolerance: float = 0.15,
                 quantity: str = "mean batched requests", title: str = "Fig. 13a under other choices",
                 static: bool | None = None) -> None:
        if not scenarios:
            raise ValueError("ScenarioControl needs at least one scenario")
        self.scenarios = {k: dict(v) for k, v in scenarios.items()}
        self.systems = list(next(iter(self.scenarios.values())))
        for label, values in self.scenarios.items():
            if list(values) != self.systems:
                raise ValueError(f"scenario {label!r} has systems {list(values)}, not {self.systems}")
        self.baseline = baseline if baseline is not None else next(iter(self.scenarios))
        if self.baseline not in self.scenarios:
            raise ValueError(f"baseline {self.baseline!r} is not one of {list(self.scenarios)}")
        self.published, self.tolerance = dict(published), tolerance
        self.names = {p: (names or {}).get(p, p) for p in self.systems}
        self.quantity, self.title = quantity, title
        self.scenario = self.baseline
        every = [v for vals in self.scenarios.values() for v in vals.values()] + list(self.published.values())
        self.top = 1.25 * max(every)                     # one scale for every choice
        super().__init__(static=static)

    def check(self) -> None:
        if self.scenario not in self.scenarios:
            raise ValueError(f"scenario must be one of {list(self.scenarios)}, got {self.scenario!r}")

    def site_grid(self) -> dict[str, list[Any]]:
        return {"scenario": list(self.scenarios)}

    def update(self) -> None:
        vals, base = self.scenarios[self.scenario], self.scenarios[self.baseline]
        within = {p: (abs(vals[p] / self.published[p] - 1) <= self.tolerance if self.published.get(p) else None)
                  for p in self.systems}
        self.result = dict(values=dict(vals), moved={p: vals[p] / base[p] - 1 for p in self.systems}, within=within)

    def caption(self) -> str:
        """The bars that moved (by 1% or more) against the baseline, each with its published verdict;
        the others named together."""
        r, tol = self.result, f"{self.tolerance:.0%}"
        ok = sum(bool(v) for v in r["within"].values())
        judged = sum(v is not None for v in r["within"].values())
        if self.scenario == self.baseline:
            return (f"{self.scenario} ({source_label('simulated')}): {ok} of {judged} systems within {tol} of the "
                    "published bars. Pick another scenario to see which bars move.")
        moved = [p for p in self.systems if abs(r["moved"][p]) >= 0.01]
        parts = []
        for p in moved:
            pub = self.published.get(p)
            verdict = "" if pub is None else (f", {'within' if r['within'][p] else 'outside'} {tol} of the "
                                              f"published {pub:.1f}")
            parts.append(f"{self.names[p]} {r['values'][p]:.1f} ({r['moved'][p]:+.0%}{verdict})")
        still = [self.names[p] for p in self.systems if p not in moved]
        return (f"{self.scenario} ({source_label('simulated')}), against {self.baseline}: "
                + ("; ".join(parts) if parts else "no bar moved by 1% or more")
                + (f". Under 1%: {', '.join(still)}." if still and parts else "."))

    def figure(self) -> Any:
        import plotly.graph_objects as go

        th = theme()
        x = [self.names[p] for p in self.systems]
        base, vals = self.scenarios[self.baseline], self.result["values"]
        bars = [("published", [self.published.get(p) for p in self.systems], dict(PUBLISHED_STYLE), "#000000"),
                (f"{self.baseline} (simulated)", [base[p] for p in self.systems], dict(color=BASELINE_COLOR), "#ffffff")]
        if self.scenario != self.baseline:
            bars.append((f"{self.scenario} (simulated)", [vals[p] for p in self.systems],
                         dict(color=CHOSEN_COLOR, pattern=dict(shape="/")), "#000000"))
        fig = go.Figure([go.Bar(name=name, x=x, y=y, marker=marker, texttemplate="%{y:.1f}", textposition="outside",
                                cliponaxis=False, textfont=dict(color="#000000")) for name, y, marker, _ink in bars])
        fig.update_layout(
            barmode="group", template="plotly_white", height=400 if th.high_contrast else 360,
            width=None if th.autosize else min(th.grid_width, 840), autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"{self.title} ({source_label('simulated')} beside published)", font=dict(size=th.title_size),
                       x=0.01),
            yaxis=dict(title=self.quantity, range=[0, self.top]), legend=dict(orientation="h", y=-0.15, x=0),
            uniformtext=dict(minsize=max(12, th.font_size), mode="show"), margin=dict(l=60, r=20, t=60, b=60))
        return fig

    def _inputs(self, W: Any) -> list[Any]:
        menu = W.Dropdown(options=list(self.scenarios), value=self.scenario, description="scenario",
                          style={"description_width": "initial"}, layout=W.Layout(width="max-content"))
        menu.add_class("kvlab-scenario-menu")
        menu.observe(lambda ch: self.set(scenario=ch["new"]), names="value")
        return [menu]
