"""Lesson 04's control: the block size's trade-off, waste against block-table lookups.

Lesson 04 measures, on a real ``BlockManager``, the same 1,000 requests at every block size from
1 to 256 (section 5's table). :class:`BlockSizeControl` draws those rows: the share of the held
memory left empty (it grows with the block) and the block-table lookups per request (one per
block: they grow as blocks shrink), with the block size the slider picks marked on both, and a
caption that compares it with half and double that size. It draws what the lesson measured; it
computes nothing new.

A row is ``(block_size, waste share of the held slots, largest waste of one request in slots,
block-table lookups per request)``.

Example:
    >>> rows = [(8, 0.01, 7, 70.0), (16, 0.02, 15, 35.0), (32, 0.04, 31, 18.0)]
    >>> c = BlockSizeControl(rows, block_size=16, static=True)
    >>> c.caption().split(":")[0]
    'block_size 16'
    >>> c.set(block_size=12)
    Traceback (most recent call last):
    ...
    ValueError: block_size must be one of the measured sizes (8, 16, 32), got 12
"""
from __future__ import annotations

from typing import Any, Sequence

from .control import LiveControl
from .palette import HIGHLIGHT, MISS, source_label, theme

__all__ = ["BlockSizeControl"]

WASTE_COLOR = "#ff7f0e"  # the empty slots (orange), beside the lookups' blue


class BlockSizeControl(LiveControl):
    """Input: ``block_size`` (one of the rows' sizes). ``result``: that row's ``waste``,
    ``max_waste``, ``lookups`` and the next smaller and larger measured rows (``half``, ``double``:
    half and double the size when the rows are powers of two; None at an end)."""

    css_class = "kvlab-block-size-control"
    caption_below = True  # the slider right above the two curves it moves (one projector screen)

    def __init__(self, rows: Sequence[tuple[int, float, int, float]], block_size: int = 16,
                 source: str = "simulated", static: bool | None = None) -> None:
        self.rows = {int(bs): (float(w), int(m), float(n)) for bs, w, m, n in sorted(rows)}
        if not self.rows:
            raise ValueError("BlockSizeControl needs at least one measured row")
        self.source = source
        self.block_size = block_size
        self.check()
        super().__init__(static=static)

    def check(self) -> None:
        if self.block_size not in self.rows:
            raise ValueError(f"block_size must be one of the measured sizes {tuple(self.rows)}, got {self.block_size!r}")

    def update(self) -> None:
        sizes = list(self.rows)
        i = sizes.index(self.block_size)
        row = lambda j: dict(zip(("block_size", "waste", "max_waste", "lookups"), (sizes[j], *self.rows[sizes[j]])))
        self.result = {**row(i), "half": row(i - 1) if i > 0 else None,
                       "double": row(i + 1) if i + 1 < len(sizes) else None}

    def caption(self) -> str:
        r = self.result
        text = (f"block_size {r['block_size']}: {r['waste']:.1%} of the held slots are empty, at most "
                f"{r['max_waste']} in one request (bound {r['block_size'] - 1}), {r['lookups']:.1f} block-table lookups "
                f"per request.")
        for word, other in (("Half", r["half"]), ("Double", r["double"])):
            if other is not None:
                if 2 * min(other["block_size"], r["block_size"]) != max(other["block_size"], r["block_size"]):
                    word = "Next smaller" if word == "Half" else "Next larger"  # rows that are not powers of two
                text += (f" {word} ({other['block_size']}): {other['waste']:.1%} empty, "
                         f"{other['lookups']:.1f} lookups.")
        return text + f" ({source_label(self.source).capitalize()}: the 1,000 requests above, on a BlockManager.)"

    def figure(self) -> Any:
        import plotly.graph_objects as go
        from plotly.subplots import make_subplots

        th, r = theme(), self.result
        sizes = list(self.rows)
        waste = [100 * self.rows[b][0] for b in sizes]
        lookups = [self.rows[b][2] for b in sizes]
        mark = dict(size=20 if th.high_contrast else 14, color="rgba(0,0,0,0)", line=dict(color=HIGHLIGHT, width=3))
        fig = make_subplots(rows=1, cols=2, horizontal_spacing=0.16,
                            subplot_titles=("empty slots (% of held)", "lookups per request (log)"))
        fig.add_trace(go.Scatter(x=sizes, y=waste, mode="lines+markers", name="waste", marker_color=WASTE_COLOR,
                                 line=dict(width=max(2.0, th.line_width))), 1, 1)
        fig.add_trace(go.Scatter(x=sizes, y=lookups, mode="lines+markers", name="lookups", marker_color=MISS,
                                 line=dict(width=max(2.0, th.line_width))), 1, 2)
        fig.add_trace(go.Scatter(x=[r["block_size"]], y=[100 * r["waste"]], mode="markers", marker=mark,
                                 name=f"block_size {r['block_size']}"), 1, 1)
        fig.add_trace(go.Scatter(x=[r["block_size"]], y=[r["lookups"]], mode="markers", marker=mark,
                                 showlegend=False, name=f"block_size {r['block_size']}"), 1, 2)
        ticks = dict(type="log", tickvals=sizes, ticktext=[str(b) for b in sizes], title="block_size (tokens)")
        fig.update_xaxes(**ticks)
        fig.update_yaxes(rangemode="tozero", ticksuffix="%", row=1, col=1)
        lo, hi = min(lookups), max(lookups)   # plotly's own log ticks add small unlabelled-size "2", "5" labels
        marks = [m * 10 ** e for e in range(-1, 7) for m in (1, 2, 5) if lo / 2 <= m * 10 ** e <= hi * 2]
        fig.update_yaxes(type="log", tickvals=marks, ticktext=[f"{m:g}" for m in marks], row=1, col=2)
        fig.update_layout(
            template="none", height=330 if not th.high_contrast else 380,
            width=None if th.autosize else min(th.grid_width, 820), autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"block_size {r['block_size']} (ringed): empty slots against lookups "
                            f"({source_label(self.source)})", font=dict(size=th.title_size)),
            showlegend=False, margin=dict(t=80, b=60, l=60, r=20))  # each panel's title names its curve
        for a in fig.layout.annotations:   # the subplot titles
            a.font = dict(size=th.font_size, color=th.text_color)
        return fig

    def site_grid(self) -> dict[str, list[Any]]:
        return {"block_size": list(self.rows)}

    def _inputs(self, W: Any) -> list[Any]:
        slider = W.SelectionSlider(options=list(self.rows), value=self.block_size, description="block_size (tokens)",
                                   style={"description_width": "initial"},
                                   layout=W.Layout(width="min(460px, 100%)", padding="0 0 0 8px"))
        slider.add_class("kvlab-block-size-choice")
        slider.observe(lambda ch: self.set(block_size=ch["new"]), names="value")
        return [slider]
