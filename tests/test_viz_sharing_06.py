"""Lesson 06's fork picture (issue 28 review): a block both shared and changed this step shows BOTH
outlines (red outside, the shared outline inside), and each step's legend lists only what that step
draws (R2 and R3 are not in the legend before they are forked). The figure's height stays the same
from step to step."""
from __future__ import annotations

from kvlab import BlockManager
from kvlab.viz import memory_map_stepper
from kvlab.viz.palette import HIGHLIGHT, SHARED_OUTLINE


def _stepper():
    m = BlockManager(num_blocks=12, block_size=4, record=True)
    m.add_sequence("R1", 10)
    m.fork("R1", "R2")
    m.fork("R1", "R3")
    for seq in ["R2", "R3", "R1"]:
        m.append(seq, 1)
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
