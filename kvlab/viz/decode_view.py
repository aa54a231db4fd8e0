"""Lesson 01's decode stepper: one decode step a frame, without a cache and with one.

Each frame is a :class:`kvlab.compute.decode_trace.DecodeStep` of a real run. The picture has
two rows of cells, one cell per token position (positions from 0, the token written under its
column), and the FLOPs so far below them:

- **no cache**: every position up to the newest is recomputed this step (red);
- **KV cache**: the positions written at earlier steps are read back (light blue), only the
  newest is computed and written (blue); the prefill (step 1) writes the whole prompt;

each cell carries one number of that position's K (layer 0, KV head 0), from the cache in the
cache row and from the step's own recomputation in the naive row: the same number, step after step.
Positions the sequence has not reached are empty (grey); the token the step produces is named
under the next column ("new"). The bars below add up the counted FLOPs of the steps so far, on one
scale for every frame (the whole run's naive total). Axes and canvas never move between frames.

:func:`decode_view_data` is the pure data (tests check it); :func:`decode_figure` draws it;
:func:`decode_stepper` puts the frames in a :class:`kvlab.viz.Stepper` (in the static site, a
player). Mirrors no vLLM or SGLang file.

Example (no model needed: a hand-made step):
    >>> from kvlab.compute.decode_trace import DecodeStep
    >>> s = DecodeStep(1, 2, (5, 6, 7), 8, (2, 3), 30, 10, 50, 30, (0.5, 0.25, 1.0), (0.5, 0.25, 1.0), 0.0)
    >>> d = decode_view_data(s, ["a", "b", "c", "d", "e"], columns=5, total=100)
    >>> [c["state"] for c in d["cells"] if c["row"] == "cache"]
    ['read', 'read', 'written', 'empty', 'empty']
    >>> d["ticks"][3], d["produced"]
    ('d', 3)
"""
from __future__ import annotations

import html
from typing import Any, Sequence

from .palette import FREE, HIGHLIGHT, MISS, source_label, theme
from .stepper import Frame, Stepper
from .translate_widget import fits

__all__ = ["STATES", "decode_view_data", "decode_figure", "decode_caption", "decode_frames", "decode_stepper",
           "token_text", "flops_text"]

# state -> (fill, text colour, legend name): red is the naive path's colour in lesson 01, blue the cache's
STATES = {
    "recomputed": (HIGHLIGHT, "#ffffff", "recomputed this step (no cache)"),
    "written": (MISS, "#ffffff", "computed and written this step"),
    "read": ("#aec7e8", "#000000", "read from the cache"),
    "empty": (FREE, "#000000", "not reached yet"),
}
ROWS = (("naive", "no cache"), ("cache", "KV cache"))


def token_text(piece: str) -> str:
    """A token as a column label: a newline as ↵, a leading space kept as a visible ␣ only when
    the token is nothing but spaces. Example: ``token_text("\\n") -> '↵'``, ``token_text(" the") -> ' the'``."""
    return piece.replace("\n", "↵").replace("\t", "⇥") if piece.strip() or "\n" in piece else "␣" * max(1, len(piece))


def flops_text(flops: int) -> str:
    """``12_646_400 -> '12.6 MFLOP'`` (three significant figures)."""
    for div, unit in ((1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP")):
        if flops >= div:
            return f"{flops / div:.3g} {unit}"
    return f"{flops} FLOP"


def decode_view_data(step: Any, labels: Sequence[str], columns: int, total: int) -> dict[str, Any]:
    """What one frame draws: ``cells`` (row, x, state, text), ``ticks`` (one label per column: the
    tokens known so far, the produced one included), ``produced`` (its column or None), the bars
    (``naive_total``, ``cached_total``) and their scale ``total``. ``labels``: the run's tokens as
    text, ``columns``: the positions drawn (the same in every frame)."""
    step.check_integrity()
    rows, (start, _end) = step.rows, step.written
    if not rows <= columns <= len(labels) + 1 or total < step.naive_total:
        raise ValueError(f"{columns} columns / {len(labels)} labels / scale {total} cannot draw step {step.step} "
                         f"({rows} rows, naive total {step.naive_total})")
    cells = []
    for x in range(columns):
        reached = x < rows
        cells.append(dict(row="naive", x=x, state="recomputed" if reached else "empty",
                          text=f"{step.k_naive[x]:.2f}" if reached else ""))
        state = "empty" if not reached else ("written" if x >= start else "read")
        cells.append(dict(row="cache", x=x, state=state, text=f"{step.k_cache[x]:.2f}" if reached else ""))
    produced = rows if rows < columns else None
    ticks = [token_text(labels[x]) if x <= rows and x < len(labels) else "" for x in range(columns)]
    return dict(cells=cells, ticks=ticks, produced=produced, naive_total=step.naive_total,
                cached_total=step.cached_total, total=total, step=step.step)


def decode_figure(data: dict[str, Any], source: str = "measured") -> Any:
    """The frame of :func:`decode_view_data` as a plotly figure (two cell rows over two bars)."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    th = theme()
    columns = len(data["ticks"])
    fig = make_subplots(rows=2, cols=1, row_heights=[0.58, 0.42], vertical_spacing=0.29,
                        subplot_titles=("K and V of each position this step: one number of its K a cell (layer 0)",
                                        "FLOPs so far (counted)"))
    width = 880 if th.autosize else 860
    room = (width - 150) / columns                          # px per column (the y labels take about 150)
    font = th.label_size if all(fits(t, room, th.label_size) for t in data["ticks"] + ["-0.00"]) else th.min_text_px
    y_of = {key: i for i, (key, _name) in enumerate(ROWS)}
    shapes, notes = [], []                                   # built as plain dicts, set once (add_shape: 5 ms each)
    for c in data["cells"]:
        fill, ink, _ = STATES[c["state"]]
        y = y_of[c["row"]]
        shapes.append(dict(type="rect", x0=c["x"] - 0.46, x1=c["x"] + 0.46, y0=y - 0.42, y1=y + 0.42, xref="x",
                           yref="y", fillcolor=fill, line=dict(width=0), layer="below"))
        if c["text"]:
            notes.append(dict(x=c["x"], y=y, xref="x", yref="y", text=c["text"], showarrow=False,
                              font=dict(size=font, color=ink)))
    for state, (fill, _ink, name) in STATES.items():         # the legend: one square per state
        fig.add_trace(go.Scatter(x=[None], y=[None], mode="markers", name=name,
                                 marker=dict(symbol="square", size=14, color=fill)), 1, 1)
    ticks = [f"<b>{html.escape(t)}</b><br><i>new</i>" if x == data["produced"] else html.escape(t)
             for x, t in enumerate(data["ticks"])]   # the token this step produced, under the next column
    fig.update_xaxes(range=[-0.55, columns - 0.45], tickvals=list(range(columns)), ticktext=ticks, showgrid=False,
                     zeroline=False, tickfont=dict(size=font), row=1, col=1)
    fig.update_yaxes(range=[1.6, -0.6], tickvals=[0, 1], ticktext=[name for _k, name in ROWS], showgrid=False,
                     zeroline=False, row=1, col=1)
    bars = [("no cache", data["naive_total"], HIGHLIGHT), ("KV cache", data["cached_total"], MISS)]
    fig.add_trace(go.Bar(y=[b[0] for b in bars], x=[b[1] for b in bars], orientation="h",
                         marker_color=[b[2] for b in bars], text=[flops_text(b[1]) for b in bars],
                         textposition="outside", cliponaxis=False, showlegend=False, hoverinfo="x"), 2, 1)
    fig.update_xaxes(range=[0, data["total"] * 1.3], showticklabels=False, showgrid=False, zeroline=False, row=2, col=1)
    fig.update_yaxes(autorange="reversed", ticklabelstandoff=8, row=2, col=1)   # the labels clear of their bars
    for a in fig.layout.annotations[:2]:                     # the two panel titles (make_subplots adds them first)
        a.font = dict(size=th.font_size, color=th.text_color)
    fig.update_layout(shapes=shapes, annotations=[*fig.layout.annotations, *notes])
    fig.update_layout(
        template="none", height=400 if th.high_contrast else 360, width=None if th.autosize else width,
        autosize=th.autosize, font=dict(size=th.font_size, color=th.text_color),
        title=dict(text=f"Decoding the bundled model, one step a frame ({source_label(source)})",
                   font=dict(size=th.title_size)),
        legend=dict(orientation="h", y=-0.08, x=0, font=dict(size=th.font_size)),
        margin=dict(t=70, b=70, l=110, r=20))
    return fig


def decode_caption(step: Any, labels: Sequence[str]) -> str:
    """One frame's sentence: what the step produced, what each path computed and read, the cost so far.
    Positions count from 0, as in vLLM and SGLang (the prompt of 3 tokens is positions 0-2); steps
    count from 1 (the stepper says "step 1" for the prefill). Example: step 4 of a 3-token prompt ->
    "Produces ' to' at position 6. No cache: recompute the K and V of all 6 tokens, positions 0-5 ..."."""
    rows, (start, end) = step.rows, step.written
    made = repr(labels[rows]) if rows < len(labels) else "a token"
    same = f"the recomputed K and V equal the cached ones (largest difference {step.max_diff:.0e})"
    if step.step == 0:
        return (f"Prefill: both paths run the {rows}-token prompt (positions 0-{rows - 1}) once and produce {made} at "
                f"position {rows}; the cache now holds the K and V of positions 0-{rows - 1} "
                f"({flops_text(step.cached_flops)} each path).")
    ratio = step.naive_total / step.cached_total
    read = "position 0" if start == 1 else f"positions 0-{start - 1}"
    return (f"Produces {made} at position {rows}. No cache: recompute the K and V of all {rows} tokens, positions "
            f"0-{rows - 1} ({flops_text(step.naive_flops)}). KV cache: compute only position {end - 1}'s "
            f"({labels[end - 1]!r}), write it, read {read} back ({flops_text(step.cached_flops)}); {same}. So far "
            f"{ratio:.1f}x the FLOPs without the cache.")


def decode_frames(steps: Sequence[Any], labels: Sequence[str]) -> list[Frame]:
    """One :class:`Frame` per step; the snapshot is the step itself (its ``check_integrity`` runs on every move)."""
    return [Frame(s, decode_caption(s, labels)) for s in steps]


class DecodeView:
    """``render(frame)`` for the stepper: every frame on the same columns and the same bar scale."""

    def __init__(self, steps: Sequence[Any], labels: Sequence[str], source: str = "measured") -> None:
        self.labels, self.source = list(labels), source
        self.columns = min(len(self.labels), steps[-1].rows + 1)
        self.total = steps[-1].naive_total

        self._drawn: dict[tuple, Any] = {}

    def __call__(self, frame: Frame) -> Any:
        """The frame's figure, drawn once per theme (a step back, or play's second loop, is a lookup)."""
        key = (theme(), frame.snapshot.step)
        if key not in self._drawn:
            self._drawn[key] = decode_figure(decode_view_data(frame.snapshot, self.labels, self.columns, self.total),
                                             self.source)
        return self._drawn[key]


def decode_stepper(steps: Sequence[Any], tokenizer: Any, static: bool | None = None) -> Stepper:
    """The stepper over :func:`kvlab.compute.decode_trace.trace_decode`'s steps; ``tokenizer``
    (with ``decode(ids)``) names the tokens."""
    if not steps:
        raise ValueError("decode_stepper needs at least one step")
    last = steps[-1]
    labels = [tokenizer.decode([i]) for i in (*last.token_ids, last.new_token)]
    frames, view = decode_frames(steps, labels), DecodeView(steps, labels)
    for f in frames:   # every frame drawn now (about 0.1 s each): a button's answer is then a lookup
        try:
            view(f)
        except Exception:  # noqa: BLE001 - a broken step: the stepper shows its error when it comes to it
            pass
    return Stepper(frames, view, static=static, title="decode")
