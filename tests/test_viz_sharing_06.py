"""Lesson 06's fork picture (issue 28 review): a block both shared and changed this step shows BOTH
outlines (red outside, the shared outline inside), and each step's legend lists only what that step
draws (R2 and R3 are not in the legend before they are forked). The figure's height stays the same
from step to step."""
from __future__ import annotations

from kvlab import BlockManager
from kvlab.viz import memory_map_stepper
from kvlab.viz.palette import HIGHLIGHT, SHARED_OUTLINE


def _run() -> BlockManager:
    """Lesson 06's run: one prompt, two forks, each sample's first token (copy-on-write)."""
    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 10)
    m.fork("R1", "R2")
    m.fork("R1", "R3")
    for seq in ["R2", "R3", "R1"]:
        m.append(seq, 1)
    return m


def _stepper():
    m = _run()
    return memory_map_stepper(m.snapshots, m.log, title="fork", source="simulated", cols=12, step_legend=True)


def _outlines(fig, block: int) -> set[str]:
    """The outline colours drawn around ``block`` (by every bar trace of the pool, any line width > 0)."""
    out = set()
    for t in fig.data:
        if t.type != "bar" or t.marker.line.color is None or isinstance(t.marker.line.color, str):
            continue
        widths = t.marker.line.width
        w = widths[block] if isinstance(widths, (list, tuple)) else widths
        if w and w > 0:
            out.add(t.marker.line.color[block])
    return out


def _legend(fig) -> list[str]:
    return [t.name for t in fig.data if t.showlegend is not False]


def test_06_shared_and_changed_block_shows_both_outlines():
    st = _stepper()
    frame = st.frames[2]   # the second fork: P0..P2 shared x3 and changed this step
    assert frame.snapshot.ref_count[0] == 3 and 0 in frame.highlight
    fig = st.render(frame)
    assert {HIGHLIGHT, SHARED_OUTLINE} <= _outlines(fig, 0), _outlines(fig, 0)
    assert SHARED_OUTLINE not in _outlines(st.render(st.frames[0]), 0)   # step 1: nothing shared yet


def test_06_legend_lists_only_what_the_step_draws():
    st = _stepper()
    first, last = st.render(st.frames[0]), st.render(st.frames[-1])
    assert "R1" in _legend(first) and "R2" not in _legend(first) and "R3" not in _legend(first), _legend(first)
    assert "shared (xN = ref count)" not in _legend(first)
    assert {"R1", "R2", "R3", "shared (xN = ref count)"} <= set(_legend(last)), _legend(last)
    assert first.layout.height == last.layout.height   # no jump between steps


def test_06_sharing_sliders_fit_one_row_of_the_output_area():
    """Cell 22's three sliders wrapped onto two lines at 1500 x 1000 (a 1068 px output area): each
    now has a width (label and readout included) and the three fit one row, 4 px margins each."""
    import re

    import ipywidgets as W

    from kvlab.viz import SharingControl

    sliders = SharingControl(static=True)._inputs(W)
    widths = [s.layout.width for s in sliders]
    assert all(w and re.fullmatch(r"min\(\d+px, \d+%\)", w) for w in widths), widths
    px = [int(re.search(r"(\d+)px", w).group(1)) for w in widths]
    pct = [int(re.search(r"(\d+)%", w).group(1)) for w in widths]
    assert sum(px) + 8 * len(px) <= 1068 and sum(pct) < 100, widths


def _px(width: str, area: int) -> float:
    """``min(Apx, B%)`` in px in an output area ``area`` px wide."""
    import re

    m = re.fullmatch(r"min\((\d+)px, (\d+)%\)", width)
    assert m, width
    return min(int(m.group(1)), int(m.group(2)) * area / 100)


def test_06_classroom_sliders_have_tracks_a_teacher_can_use():
    """Review r5_05_06 (lesson 06, cell 22, classroom mode): the three sliders shared one row of the
    850 px output area and their tracks shrank to about 60 px ("prompt tokens" 8..1000 on 60 px). In
    classroom mode samples and beam width share a row, prompt tokens has its own, and every track
    (the width less its 18 px label and the readout) is at least 200 px; prompt tokens' at least 500."""
    import ipywidgets as W

    from kvlab.viz import SharingControl, classroom

    classroom(True)
    try:
        sliders = SharingControl(static=True)._inputs(W)
    finally:
        classroom(False)
    area, label_px, readout_px = 850, 0.62 * 18, 70
    widths = [_px(s.layout.width, area) for s in sliders]
    tracks = [w - label_px * len(s.description) - readout_px for w, s in zip(widths, sliders)]
    assert min(tracks) >= 200 and tracks[2] >= 500, dict(zip([s.description for s in sliders], tracks))
    assert widths[0] + widths[1] + 16 <= area < widths[0] + widths[1] + widths[2] + 24, widths  # two rows


def test_06_the_free_of_r2_has_a_picture():
    """Review r5_05_06 (lesson 06, section 3): freeing R2, the step where reference counts matter
    most, was only text. ``event_figure`` draws it as the stepper draws a step: R2's table gone,
    P3 back in the pool and outlined red, P0 and P1 down to x2, R1 and R3 in their stepper colours;
    the lesson shows it under the free."""
    import re

    from kvlab.viz import event_figure

    m = _run()
    st = _stepper()
    before = st.render(st.frames[-1])
    m.free("R2")
    fig = event_figure(m.snapshots, m.log, cols=12)
    assert fig.layout.title.text.startswith("Paged KV pool (simulated)")
    assert fig.layout.title.subtitle.text.replace("<br>", " ").startswith(
        "R2 finishes: P3 goes back to the free queue; 2 shared blocks stay")
    names = {t.name for t in fig.data if t.name}
    assert {"R1 arrows", "R3 arrows"} <= names and "R2 arrows" not in names, names
    assert HIGHLIGHT in _outlines(fig, 3) and SHARED_OUTLINE in _outlines(fig, 0)
    labels = " ".join(str(a.text) for a in fig.layout.annotations) + " ".join(
        " ".join(map(str, t.text)) for t in fig.data if t.text is not None and not isinstance(t.text, str))
    assert re.search(r"P0 x2", labels) and re.search(r"P1 x2", labels), labels[:400]
    colour = {t.name: t.marker.color for t in fig.data if t.name in ("R1", "R3") and t.showlegend is not False}
    colour_before = {t.name: t.marker.color for t in before.data if t.name in ("R1", "R3") and t.showlegend is not False}
    assert colour == colour_before and len(colour) == 2, (colour, colour_before)
    from pathlib import Path

    src = (Path(__file__).resolve().parent.parent / "notebooks/src/06_sharing.py").read_text()
    section3 = src[src.index("## 3. Freeing shared blocks"):src.index("## 4. ")]
    assert "event_figure(m.snapshots, m.log" in section3
