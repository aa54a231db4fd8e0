"""Lesson 07's control: the radix tree's page size, on the notes' four requests.

A radix cache that stores whole pages of KV (SGLang's ``page_size``, one block of the pool) can
only match whole pages: a prefix match stops at the last page both prompts fill completely, and
the tokens after it are prefilled again. :class:`PageSizeControl` re-runs the source notes' four
customer-service requests (:func:`~kvlab.lessons.four_requests.four_request_example`, a real
``CacheManager``, one token a character) with the **page size** the slider picks, in a few
milliseconds, and shows per request how many prompt tokens the tree matched and how many were
prefilled, beside the same run with 1-token pages.

Example:
    >>> c = PageSizeControl(page_size=16, static=True)
    >>> c.result["matched"]["R2"], c.result["matched_1"]["R2"]
    (48, 57)
"""
from __future__ import annotations

from typing import Any

from ..lessons.four_requests import four_request_example
from .control import LiveControl
from .palette import HIT, MISS, source_label, theme

__all__ = ["PageSizeControl", "PAGE_SIZES"]

PAGE_SIZES = (1, 2, 4, 8, 16, 32)


def _run(page_size: int) -> dict[str, dict[str, int]]:
    reqs = [r for r in four_request_example(page_size=page_size) if r.name != "warm-up"]
    return {"matched": {r.name: r.matched_len for r in reqs}, "prefilled": {r.name: r.prefill_len for r in reqs},
            "prompt": {r.name: len(r.prompt_tokens) for r in reqs}}


class PageSizeControl(LiveControl):
    """Input: ``page_size`` (one of :data:`PAGE_SIZES`). ``result``: ``matched``, ``prefilled``,
    ``prompt`` (request -> tokens) at that page size, and ``matched_1`` (1-token pages)."""

    css_class = "kvlab-page-size"

    def __init__(self, page_size: int = 16, static: bool | None = None) -> None:
        self.page_size = page_size
        self.check()
        self._one = _run(1)["matched"]
        super().__init__(static=static)

    def check(self) -> None:
        if self.page_size not in PAGE_SIZES:
            raise ValueError(f"page_size must be one of {PAGE_SIZES}, got {self.page_size!r}")

    def update(self) -> None:
        self.result = {**_run(self.page_size), "matched_1": dict(self._one)}

    def caption(self) -> str:
        r, p = self.result, self.page_size
        total, reused, reused_1 = sum(r["prompt"].values()), sum(r["matched"].values()), sum(r["matched_1"].values())
        lost = {n: r["matched_1"][n] - r["matched"][n] for n in r["matched"] if r["matched_1"][n] > r["matched"][n]}
        words = (", ".join(f"{n} {k}" for n, k in lost.items()) + " tokens") if lost else "nothing"
        head = (f"Pages of {p} token{'s' if p != 1 else ''}: the tree matched {reused} of the {total} prompt tokens of "
                f"R1-R4 ({reused / total:.0%})")
        if p == 1:  # nothing to compare with: a match may stop at any token
            body = ". With 1-token pages a match may stop at any token."
        else:
            body = (f", against {reused_1} with 1-token pages. A match stops at the last page both prompts fill "
                    f"completely; here that costs {words} of prefill again.")
        return head + body + " (Simulated: a real CacheManager, one token a character.)"

    def figure(self) -> Any:
        import plotly.graph_objects as go

        th, r = theme(), self.result
        names = list(r["matched"])
        fig = go.Figure([
            go.Bar(x=names, y=[r["matched"][n] for n in names], name="matched in the tree (reused)", marker_color=HIT,
                   text=[str(r["matched"][n]) if r["matched"][n] else "" for n in names], textposition="inside",
                   textangle=0, insidetextanchor="middle"),
            go.Bar(x=names, y=[r["prefilled"][n] for n in names], name="prefilled now", marker_color=MISS,
                   text=[str(r["prefilled"][n]) for n in names], textposition="outside", textangle=0,
                   cliponaxis=False),   # on top of the stack: a segment too thin for its number still has it
        ])
        top = max(r["prompt"].values())
        fig.update_layout(
            barmode="stack", template="none", height=300 if not th.high_contrast else 380,
            width=None if th.autosize else min(th.grid_width, 760), autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"Prompt tokens per request, pages of {self.page_size} ({source_label('simulated')})",
                       font=dict(size=th.title_size)),
            yaxis=dict(title="prompt tokens", range=[0, 1.18 * top]), legend=dict(orientation="h", y=-0.18, x=0),
            margin=dict(t=60, b=70, l=60, r=20))
        return fig

    def _inputs(self, W: Any) -> list[Any]:
        slider = W.SelectionSlider(options=list(PAGE_SIZES), value=self.page_size, description="page size (tokens)",
                                   style={"description_width": "initial"},
                                   layout=W.Layout(width="min(420px, 100%)", padding="0 0 0 8px"))  # off the left edge
        slider.add_class("kvlab-page-size-slider")
        slider.observe(lambda ch: self.set(page_size=ch["new"]), names="value")
        return [slider]
