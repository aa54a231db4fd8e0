"""Lesson 04's pictures as the lesson draws them (issue 28 student review of ede928d): the
animation's pause button covered its slider's first label ("1"), the stepper's block-table arrows
crossed each other and squeezed down the gaps of the upper pool row, and its legend still listed
R1 after R1 had finished."""
from __future__ import annotations

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab
import kvlab.viz as viz


def _run() -> kvlab.BlockManager:
    """Lesson 04 cell 11's recording."""
    m = kvlab.BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 6)
    m.add_sequence("R2", 3)
    for _ in range(6):
        m.append("R1", 1)
        m.append("R2", 1)
    m.free("R1")
    m.add_sequence("R3", 9)
    return m


@pytest.mark.parametrize("classroom", [False, True])
def test_animation_slider_starts_right_of_its_buttons(classroom):
    from kvlab.viz.palette import theme

    viz.classroom(classroom)
    try:
        m = _run()
        fig = viz.animate_memory_map(m.snapshots, m.log, cols=12 if classroom else 6, tables=False)
        th = theme()
        plot_w = (fig.layout.width or th.grid_width) - fig.layout.margin.l - fig.layout.margin.r
        menu, slider = fig.layout.updatemenus[0], fig.layout.sliders[0]
        buttons_px = sum(0.6 * th.font_size * len(b.label) + 24 for b in menu.buttons)
        assert menu.x == 0 and slider.x * plot_w >= buttons_px + 8, (slider.x, plot_w, buttons_px)
        assert abs(slider.x + slider.len - 1) < 1e-9  # and still ends at the plot's right edge
    finally:
        viz.classroom(False)


def test_lesson04_stepper_draws_no_arrows_and_names_every_block():
    """No table, no arrow to cross; each used block names its request and logical block instead."""
    from pathlib import Path

    src = (Path(__file__).resolve().parent.parent / "notebooks" / "src" / "04_paging.py").read_text()
    call = src[src.index("viz.memory_map_stepper(m.snapshots"):]
    assert "tables=False" in call[:call.index("\n\n")] and "step_legend=True" in call[:call.index("\n\n")]
    m = _run()
    from kvlab.viz.memory_animation import MemoryMapView, memory_frames

    frames = memory_frames(m.snapshots, m.log)
    view = MemoryMapView(frames, cols=6, tables=False, step_legend=True)
    assert len(frames) == len(m.snapshots) - 1  # one frame per event, after it
    for k, (frame, snap) in enumerate(zip(frames, m.snapshots[1:])):
        fig = view(frame)
        assert not [t for t in fig.data if t.name and t.name.endswith(" arrows")]
        labels = next(t for t in fig.data if t.name == "labels").text
        for seq, table in snap.tables.items():
            for i, b in enumerate(table):
                assert f"{seq} L{i}" in labels[b], (k, b, labels[b])
        legend = {t.name for t in fig.data if t.showlegend is not False}
        assert {s for s in ("R1", "R2", "R3") if s in legend} == set(snap.tables), (k, legend)


@pytest.mark.parametrize("room", [False, True])
def test_tight_stepper_drops_the_empty_bands(room):
    """Review: lesson 04's stepper had an empty band of about 50 px (the empty subtitle's room and
    the base margin under the legend). ``tight=True`` cuts both; the legend keeps its rows."""
    m = kvlab.BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 6)
    m.append("R1", 3)
    viz.classroom(room)
    try:
        steppers = [viz.memory_map_stepper(m.snapshots, m.log, cols=12, tables=False, step_legend=True,
                                           free_queue=True, static=False, tight=t) for t in (False, True)]
        figs = [s.render(s.frames[0]) for s in steppers]
    finally:
        viz.classroom(False)
    loose, tight = (f.layout for f in figs)
    assert loose.height - tight.height >= 45, (loose.height, tight.height)
    assert tight.height - tight.margin.t - tight.margin.b == loose.height - loose.margin.t - loose.margin.b  # same drawing
    assert tight.margin.b >= (30 if room else 22), "the legend's row must keep its room"
    assert tight.title.subtitle.text == ""
