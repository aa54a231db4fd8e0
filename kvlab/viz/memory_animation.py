"""A recorded run of the paged pool, frame by frame: stepper frames, a plotly animation, a stepper.

A run recorded with ``BlockManager(record=True)`` keeps one :class:`MemorySnapshot` after
every event of its log (plus the start). :func:`memory_frames` pairs each event with the
snapshot after it: the event's blocks highlighted, a copy-on-write drawn as an arc from the
source block to its copy, and the caption one plain sentence (:func:`kvlab.viz.captions.event_sentence`:
"R2 writes into shared block P1: copy it to P6, where the write will go (copy-on-write)").
:func:`animate_memory_map` draws them as one plotly animation (slider, play/pause; no kernel
needed) and :func:`memory_map_stepper` in the stepper widget. Both number the frames the same
way, from 1: the animation's slider and its subtitle say "step 3 / 16" where the stepper says
"step 3 / 16". Axes, canvas and traces never change between frames. One memory map is drawn
by :mod:`kvlab.viz.memory_map`, the block tables by :mod:`kvlab.viz.block_tables`. Mirrors no
vLLM or SGLang file (kvlab's pictures).

Example:
    >>> from kvlab.memory.block_manager import BlockManager
    >>> m = BlockManager(num_blocks=6, block_size=4, record=True)
    >>> _ = m.add_sequence("R1", 5); _ = m.fork("R1", "R2")
    >>> frames = memory_frames(m.snapshots, m.log)          # one frame per event
    >>> frames[-1].caption, frames[-1].highlight, frames[-1].snapshot.tables
    ('R2 forks R1: it shares both blocks P0, P1 (ref count +1 each, nothing copied)', (0, 1), {'R1': (0, 1), 'R2': (0, 1)})
"""
from __future__ import annotations

from typing import Any, Sequence

from ..memory.events import Event, EventLog
from ..memory.snapshot import MemorySnapshot
from .block_tables import frame_traces, map_geometry
from .captions import event_sentence
from .display import is_static
from .memory_map import _figure_from_data, _title, event_highlight, memory_map_data, memory_map_figure, snapshot_ids
from .pool_grid import grid_layout
from .palette import assign_colors, source_label, theme

__all__ = ["memory_frames", "animate_memory_map", "MemoryMapView", "memory_map_stepper", "memory_map_choice",
           "step_caption", "animation_controls", "event_figure"]


def step_caption(i: int, n: int, caption: str) -> str:
    """How every view numbers a frame: ``step_caption(0, 16, "R1 arrives") -> 'step 1 / 16: R1 arrives'``."""
    return f"step {i + 1} / {n}: {caption}" if caption else f"step {i + 1} / {n}"


def memory_frames(
    snapshots: Sequence[MemorySnapshot], log: EventLog | Sequence[Event] | None = None
) -> list["Frame"]:
    """Stepper frames from a recorded run.

    With ``log`` (the run's event log; ``snapshots`` from ``BlockManager(record=True)``,
    one more than there are events: the start state first): one frame per event, the
    snapshot after it, the event's blocks highlighted, a copy-on-write's ``(src, dst)`` in
    ``frame.extra["copies"]``, the event in ``frame.extra["event"]``, and one sentence as caption.
    Without ``log``: one frame per snapshot, its own caption, nothing highlighted.
    """
    from .stepper import Frame

    snaps = list(snapshots)
    if not snaps:
        raise ValueError("memory_frames: no snapshots (use BlockManager(record=True))")
    if log is None:
        return [Frame(s, s.caption) for s in snaps]
    events = list(log)
    if len(snaps) != len(events) + 1:
        raise ValueError(
            f"memory_frames: {len(snaps)} snapshots for {len(events)} events; expected one snapshot per "
            "event plus the start (record the manager from the log's first event)"
        )
    out, shared = [], set()   # shared: blocks held by two tables or more earlier in the run, not freed since
    for e, before, s in zip(events, snaps, snaps[1:]):
        shared = {b for b in shared | {b for b, r in enumerate(before.ref_count) if r > 1} if s.ref_count[b] > 0}
        copies = [(int(e.detail["src"]), int(e.detail["dst"]))] if e.kind == "cow" else []
        out.append(Frame(s, event_sentence(e, s, frozenset(shared)), event_highlight(e, s),
                         {"event": e, "copies": copies}))
    return out


def event_figure(snapshots: Sequence[MemorySnapshot], log: EventLog | Sequence[Event], step: int = -1,
                 title: str = "Paged KV pool", source: str = "simulated", cols: int | None = None,
                 tables: bool | None = None) -> Any:
    """One step of a recorded run as a static figure, drawn as the run's stepper draws it: the
    snapshot after event ``step`` (default: the last), the blocks it changed outlined red, its
    sentence as the subtitle, each sequence in the colour it has in the whole run's stepper (a
    sequence that has finished keeps its colour away from the others).

    >>> import kvlab
    >>> m = kvlab.BlockManager(num_blocks=4, block_size=2, record=True)
    >>> _ = m.add_sequence("R1", 3), m.fork("R1", "R2"), m.free("R2")
    >>> event_figure(m.snapshots, m.log).layout.title.text.split("<br>")[0]
    'Paged KV pool (simulated)'
    """
    from dataclasses import replace

    from .kernel_view import _wrap

    frames = memory_frames(snapshots, log)
    f = frames[step]
    fig = memory_map_figure(replace(f.snapshot, caption=f.caption), f.highlight, title, source,
                            colors=_frame_colors(frames), cols=cols, tables=tables, copies=_copies(f))
    th = theme()
    chars = 76 if th.high_contrast else 110      # plotly does not wrap a subtitle: lines of about even length
    lines = _wrap(f.caption, min(chars, -(-len(f.caption) // -(-len(f.caption) // chars)) + 6))
    extra = int(1.9 * th.font_size) * lines.count("<br>")
    fig.update_layout(height=fig.layout.height + extra, margin=dict(t=fig.layout.margin.t + extra))
    fig.layout.title.subtitle.text = lines
    return fig


def _frame_colors(frames: Sequence["Frame"]) -> dict[str, str]:
    return assign_colors(snapshot_ids(f.snapshot for f in frames))


def _copies(frame: "Frame") -> list[tuple[int, int]]:
    return list(frame.extra.get("copies", ())) if frame.extra else []


class MemoryMapView:
    """Renders stepper frames of one run as memory maps with one layout, geometry and palette."""

    def __init__(self, frames: Sequence["Frame"], title: str = "Paged KV pool", source: str = "simulated",
                 cols: int | None = None, mode: str = "auto", tables: bool | None = None,
                 numbered: bool = True, step_legend: bool = False, tight: bool = False) -> None:
        source_label(source)
        self.tight = tight  # True: no empty room above the map (an empty subtitle) or under the legend
        self.height = 0  # > 0: every figure is padded (blank under its legend) to this height in px
        self.step_legend = step_legend  # True: each frame's legend lists only what that frame draws
        self.numbered = numbered  # False: a live stepper's caption line numbers the frame, the figure does not
        self.frames = list(frames)
        self.colors = _frame_colors(self.frames)
        self.layout = grid_layout(self.frames[0].snapshot.num_blocks, cols, mode)
        self.geometry = map_geometry(self.layout, [f.snapshot for f in self.frames], tables,
                                     copies=any(_copies(f) for f in self.frames))
        self.title, self.source = title, source
        self._index = {id(f): i for i, f in enumerate(self.frames)}
        # the legend lists the shared outline only when some frame of the run shares a block
        self.any_shared = any(max(f.snapshot.ref_count, default=0) > 1 for f in self.frames)

    def data(self, frame: "Frame") -> dict[str, Any]:
        """The frame's memory-map data; its caption numbered as the stepper numbers it ("step 3 / 16: ...")."""
        d = memory_map_data(frame.snapshot, frame.highlight, self.colors, self.layout, _copies(frame))
        i = self._index.get(id(frame))
        if not self.numbered:
            d["caption"] = ""  # the live stepper's caption line says "step k / N: ..." (once)
        else:
            d["caption"] = step_caption(i, len(self.frames), frame.caption) if i is not None else frame.caption
        return d

    def __call__(self, frame: "Frame") -> Any:
        fig = _figure_from_data(self.data(frame), self.colors, self.title, self.source, self.geometry,
                                shared_legend=self.any_shared, drawn_only=self.step_legend)
        if self.tight and not self.numbered:
            _trim_empty_bands(fig, self.geometry.margin[3])
        if self.height > fig.layout.height:   # the same height as the other runs it is shown beside
            fig.update_layout(height=self.height, margin=dict(b=fig.layout.margin.b + self.height - fig.layout.height))
        return fig


TIGHT_BOTTOM_PX = 8  # a tight stepper's figure: what stays under its legend


def _trim_empty_bands(fig: Any, base_bottom: int) -> None:
    """Cut a live stepper figure's two empty bands (review: about 50 px blank in lesson 04's stepper):
    the subtitle's room under the title (the stepper's caption line says the step, the subtitle is
    empty) and the base bottom margin under the legend (the legend rows keep their own room).

    Example: lesson 04's classroom stepper figure, 246 px tall (t 80, b 80), becomes 177 px (t 53, b 38)."""
    th = theme()
    top_cut = int(1.55 * th.font_size)  # one subtitle line
    bottom_cut = max(0, base_bottom - TIGHT_BOTTOM_PX)
    m = fig.layout.margin
    fig.update_layout(height=fig.layout.height - top_cut - bottom_cut,
                      margin=dict(t=m.t - top_cut, b=m.b - bottom_cut))


def animate_memory_map(
    snapshots: Sequence[MemorySnapshot],
    log: EventLog | Sequence[Event] | None = None,
    title: str = "Paged KV pool",
    source: str = "simulated",
    cols: int | None = None,
    mode: str = "auto",
    duration_ms: int = 600,
    tables: bool | None = None,
) -> Any:
    """A plotly animation of a recorded run: one frame per event (see :func:`memory_frames`),
    with a slider and play/pause, numbered from 1 as the stepper numbers them. Axes, canvas and
    traces are fixed across frames; runs in any plotly front end (also in exported HTML: no
    kernel needed)."""
    import plotly.graph_objects as go

    frames = memory_frames(snapshots, log)
    view = MemoryMapView(frames, title, source, cols, mode, tables)
    n = len(frames)
    datas = [view.data(f) for f in frames]
    fig = _figure_from_data(datas[0], view.colors, title, source, view.geometry, shared_legend=view.any_shared)
    n_fixed = len(frame_traces(datas[0], view.colors, view.geometry))
    keys, legend_idx = _legend_keys(fig, n_fixed, datas)
    fig.frames = [
        go.Frame(data=frame_traces(d, view.colors, view.geometry) + _frame_legend(fig, legend_idx, keys, d),
                 traces=list(range(n_fixed)) + legend_idx, name=str(i + 1),
                 layout=dict(title=_title(title, source, d["caption"]), xaxis=fig.layout.xaxis, yaxis=fig.layout.yaxis))
        for i, d in enumerate(datas)
    ]
    for i, t in zip(legend_idx, _frame_legend(fig, legend_idx, keys, datas[0])):
        fig.data[i].showlegend = t.showlegend
    fig.update_layout(**animation_controls(n, duration_ms, fig.layout))
    fig.layout.sliders[0].currentvalue.visible = False  # the subtitle says "step k / N" already: once is enough
    return fig


def _drawn(data: dict[str, Any]) -> set[str]:
    return set(data["tables"]) | set(data["legend"]) | set(data.get("legend_extra", {}))


def _legend_keys(fig: Any, n_fixed: int, datas: Sequence[dict[str, Any]]) -> tuple[set[str], list[int]]:
    """(the run's request names, the indices of the figure's legend traces): the entries a frame
    may hide. Example: ``keys, idx = _legend_keys(fig, n_fixed, datas)``."""
    keys = set().union(*(_drawn(d) for d in datas))
    idx = [i for i, t in enumerate(fig.data) if i >= n_fixed and t.showlegend is not False and t.name
           and tuple(t.x or ()) == (None,)]
    return keys, idx


def _frame_legend(fig: Any, legend_idx: list[int], keys: set[str], data: dict[str, Any]) -> list[Any]:
    """One frame's legend traces: a request's entry shows only in the frames that draw it (as the
    stepper's legend), free and the outlines always. Example: ``_frame_legend(fig, idx, keys, datas[0])``."""
    import plotly.graph_objects as go

    drawn = _drawn(data)
    return [go.Scatter(showlegend=fig.data[i].name not in keys or fig.data[i].name in drawn) for i in legend_idx]


def animation_controls(n: int, duration_ms: int, base: Any) -> dict[str, Any]:
    """Play/pause and a step slider (steps 1..n, as the stepper counts) in a band added under
    the legend (paper coordinates are fractions of the plot height, so the band's offset is
    computed from pixels). Frames must be named "1".."n". Returns layout keys for
    ``fig.update_layout`` (used by every plotly animation in kvlab.viz).

    Example: ``fig.update_layout(**animation_controls(len(fig.frames), 600, fig.layout))``."""
    th = theme()
    play = {"frame": {"duration": duration_ms, "redraw": True}, "fromcurrent": True, "transition": {"duration": 0}}
    pause = {"frame": {"duration": 0, "redraw": False}, "mode": "immediate", "transition": {"duration": 0}}
    band = 100 if th.high_contrast else 80
    plot_h = base.height - base.margin.t - base.margin.b
    y = -(base.margin.b - 10) / plot_h  # top of the band, just under the legend
    plot_w = max((base.width or th.grid_width) - base.margin.l - base.margin.r, 1)
    buttons_px = sum(0.6 * th.font_size * len(label) + 24 for label in ("play", "pause"))  # text + plotly's padding
    x0 = min(0.5, (buttons_px + 16) / plot_w)  # the slider starts right of the buttons (they covered its "1")
    return dict(
        height=base.height + band,
        margin=dict(l=base.margin.l, r=base.margin.r, t=base.margin.t, b=base.margin.b + band),
        updatemenus=[dict(
            type="buttons", direction="left", x=0, y=y, yanchor="top", xanchor="left", showactive=False,
            pad=dict(t=30), font=dict(size=th.font_size),
            buttons=[dict(label="play", method="animate", args=[None, play]),
                     dict(label="pause", method="animate", args=[[None], pause])],
        )],
        sliders=[dict(
            active=0, x=x0, len=1 - x0, y=y, yanchor="top", pad=dict(t=10),
            currentvalue=dict(prefix="step ", suffix=f" / {n}", font=dict(size=th.font_size)),
            steps=[dict(label=str(i), method="animate",
                        args=[[str(i)], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate",
                                         "transition": {"duration": 0}}]) for i in range(1, n + 1)],
        )],
    )


def memory_map_stepper(
    snapshots: Sequence[MemorySnapshot],
    log: EventLog | Sequence[Event] | None = None,
    title: str = "Paged KV pool",
    source: str = "simulated",
    static: bool | None = None,
    cols: int | None = None,
    mode: str = "auto",
    tables: bool | None = None,
    step_legend: bool = False,
    free_queue: bool = False,
    tight: bool = False,
) -> "Stepper":
    """A :class:`~kvlab.viz.stepper.Stepper` over a recorded run's memory maps (numbered from 1).
    ``step_legend``: each step's legend lists only the sequences and outlines that step draws (the
    figure keeps the whole run's legend height, so it does not jump between steps).
    ``free_queue``: each caption ends with the free queue, front (next handed out) first, and
    keeps two lines' height. ``tight``: a live stepper's figure drops its empty subtitle room and
    the blank under its legend.

    >>> import kvlab
    >>> m = kvlab.BlockManager(num_blocks=3, block_size=2, record=True)
    >>> _ = m.add_sequence("R1", 3), m.free("R1")
    >>> memory_map_stepper(m.snapshots, m.log, static=True, free_queue=True).frames[-1].caption[-35:]
    'free queue, front first: P2, P0, P1'
    """
    from .stepper import Frame, Stepper

    frames = memory_frames(snapshots, log)
    if free_queue:
        frames = [Frame(f.snapshot, f"{f.caption} · free queue, front first: "
                        + (", ".join(f"P{b}" for b in f.snapshot.free_block_ids) or "empty"), f.highlight, f.extra)
                  for f in frames]
    live = not is_static(static)  # a live stepper numbers and captions each frame in its own line
    return Stepper(frames, MemoryMapView(frames, title, source, cols, mode, tables, numbered=not live,
                                              step_legend=step_legend, tight=tight), static=static,
                   caption_lines=2 if free_queue else 0)


def memory_map_choice(
    runs: dict[str, Any],
    title: str = "Paged KV pool",
    source: str = "simulated",
    static: bool | None = None,
    caption_lines: int = 2,
    **view: Any,
) -> "StepperChoice":
    """Toggle buttons over several recorded runs (each with ``snapshots`` and ``log``, e.g. a
    ``BlockManager(record=True)``), one stepper a run, that never jump: every run's figure has the
    tallest run's height, and every caption keeps ``caption_lines`` lines' height. ``view``: what
    :func:`memory_map_stepper` passes to :class:`MemoryMapView` (``cols``, ``mode``, ``tables``,
    ``step_legend``, ``tight``).

    >>> import kvlab
    >>> a = kvlab.BlockManager(num_blocks=4, block_size=2, record=True); _ = a.add_sequence("R1", 3)
    >>> b = kvlab.BlockManager(num_blocks=4, block_size=2, record=True); _ = b.add_sequence("R1", 2)
    >>> memory_map_choice({"3 tokens": a, "2 tokens": b}, static=True).current.caption
    'R1 arrives with 3 tokens: it takes P0, P1 (P1 has 1 of 2 slots used)'
    """
    from .stepper import Stepper, StepperChoice

    numbered = is_static(static)
    made = {}
    for label, run in runs.items():
        frames = memory_frames(run.snapshots, run.log)
        made[label] = (frames, MemoryMapView(frames, title, source, numbered=numbered, **view))
    tallest = max(v(frames[0]).layout.height for frames, v in made.values())
    for _, v in made.values():
        v.height = tallest
    return StepperChoice({label: Stepper(frames, v, static=static, caption_lines=caption_lines)
                          for label, (frames, v) in made.items()}, static=static)
