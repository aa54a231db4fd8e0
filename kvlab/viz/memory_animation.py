"""A recorded run of the paged pool, frame by frame: stepper frames, a plotly animation, a stepper.

A run recorded with ``BlockManager(record=True)`` keeps one :class:`MemorySnapshot` after
every event of its log (plus the start). :func:`memory_frames` pairs each event with the
snapshot after it (the event's blocks highlighted, its description as the caption);
:func:`animate_memory_map` draws them as one plotly animation (slider, play/pause; no kernel
needed) and :func:`memory_map_stepper` in the stepper widget. Axes, canvas and traces never
change between frames. One memory map is drawn by :mod:`kvlab.viz.memory_map`. Mirrors no
vLLM or SGLang file (kvlab's pictures).

Example:
    >>> from kvlab.memory.block_manager import BlockManager
    >>> m = BlockManager(num_blocks=6, block_size=4, record=True)
    >>> _ = m.add_sequence("R1", 5); _ = m.fork("R1", "R2")
    >>> frames = memory_frames(m.snapshots, m.log)          # one frame per event
    >>> frames[-1].caption, frames[-1].highlight, frames[-1].snapshot.tables
    ('#1 fork R2: P0, P1 parent=R1', (0, 1), {'R1': (0, 1), 'R2': (0, 1)})
"""
from __future__ import annotations

from typing import Any, Sequence

from ..memory.events import Event, EventLog
from ..memory.snapshot import MemorySnapshot
from .memory_map import (_axes, _block_traces, _figure_from_data, _title, event_highlight, grid_layout, memory_map_data,
                         snapshot_ids)
from .palette import assign_colors, source_label, theme

__all__ = ["memory_frames", "animate_memory_map", "MemoryMapView", "memory_map_stepper"]


def memory_frames(
    snapshots: Sequence[MemorySnapshot], log: EventLog | Sequence[Event] | None = None
) -> list["Frame"]:
    """Stepper frames from a recorded run.

    With ``log`` (the run's event log; ``snapshots`` from ``BlockManager(record=True)``,
    one more than there are events: the start state first): one frame per event, the
    snapshot after it, the event's blocks highlighted, its description as caption.
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
    return [Frame(s, e.describe(), event_highlight(e, s)) for e, s in zip(events, snaps[1:])]


def _frame_colors(frames: Sequence["Frame"]) -> dict[str, str]:
    return assign_colors(snapshot_ids(f.snapshot for f in frames))


def animate_memory_map(
    snapshots: Sequence[MemorySnapshot],
    log: EventLog | Sequence[Event] | None = None,
    title: str = "Paged KV pool",
    source: str = "simulated",
    cols: int | None = None,
    mode: str = "auto",
    duration_ms: int = 600,
) -> Any:
    """A plotly animation of a recorded run: one frame per event (see :func:`memory_frames`),
    with a slider and play/pause. Axes, canvas and traces are fixed across frames; runs in
    any plotly front end (also in exported HTML: no kernel needed)."""
    import plotly.graph_objects as go

    frames = memory_frames(snapshots, log)
    colors = _frame_colors(frames)
    lay = grid_layout(frames[0].snapshot.num_blocks, cols, mode)
    datas = [memory_map_data(f.snapshot, f.highlight, colors, lay) for f in frames]
    for d, f in zip(datas, frames):
        d["caption"] = f.caption
    fig = _figure_from_data(datas[0], colors, title, source)
    n_fixed = len(_block_traces(datas[0], colors))
    fig.frames = [
        go.Frame(
            data=_block_traces(d, colors), traces=list(range(n_fixed)), name=str(i),
            layout=dict(title=_title(title, source, d["caption"]), **_axes(lay)),
        )
        for i, d in enumerate(datas)
    ]
    fig.update_layout(**_animation_controls(len(frames), duration_ms, fig.layout))
    return fig


def _animation_controls(n: int, duration_ms: int, base: Any) -> dict[str, Any]:
    """Play/pause and a step slider in a band added under the legend (paper coordinates
    are fractions of the plot height, so the band's offset is computed from pixels)."""
    th = theme()
    play = {"frame": {"duration": duration_ms, "redraw": True}, "fromcurrent": True, "transition": {"duration": 0}}
    pause = {"frame": {"duration": 0, "redraw": False}, "mode": "immediate", "transition": {"duration": 0}}
    band = 100 if th.high_contrast else 80
    plot_h = base.height - base.margin.t - base.margin.b
    y = -(base.margin.b - 10) / plot_h  # top of the band, just under the legend
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
            active=0, x=0.2, len=0.8, y=y, yanchor="top", pad=dict(t=10),
            currentvalue=dict(prefix="step ", font=dict(size=th.font_size)),
            steps=[dict(label=str(i), method="animate",
                        args=[[str(i)], {"frame": {"duration": 0, "redraw": True}, "mode": "immediate",
                                         "transition": {"duration": 0}}]) for i in range(n)],
        )],
    )


class MemoryMapView:
    """Renders stepper frames of one run as memory maps with a fixed layout and palette."""

    def __init__(self, frames: Sequence["Frame"], title: str = "Paged KV pool", source: str = "simulated",
                 cols: int | None = None, mode: str = "auto") -> None:
        source_label(source)
        self.colors = _frame_colors(frames)
        self.layout = grid_layout(frames[0].snapshot.num_blocks, cols, mode)
        self.title, self.source = title, source

    def data(self, frame: "Frame") -> dict[str, Any]:
        d = memory_map_data(frame.snapshot, frame.highlight, self.colors, self.layout)
        d["caption"] = frame.caption
        return d

    def __call__(self, frame: "Frame") -> Any:
        return _figure_from_data(self.data(frame), self.colors, self.title, self.source)


def memory_map_stepper(
    snapshots: Sequence[MemorySnapshot],
    log: EventLog | Sequence[Event] | None = None,
    title: str = "Paged KV pool",
    source: str = "simulated",
    static: bool | None = None,
    cols: int | None = None,
    mode: str = "auto",
) -> "Stepper":
    """A :class:`~kvlab.viz.stepper.Stepper` over a recorded run's memory maps."""
    from .stepper import Stepper

    frames = memory_frames(snapshots, log)
    return Stepper(frames, MemoryMapView(frames, title, source, cols, mode), static=static)
