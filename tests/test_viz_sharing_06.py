"""Lesson 06's fork picture (issue 28 review): a block both shared and changed this step shows BOTH
outlines (the shared outline outside, red inside), and each step's legend lists only what that step
draws (R2 and R3 are not in the legend before they are forked). The figure's height stays the same
from step to step."""
from __future__ import annotations

import pytest

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


def _rows(widths: list[float], area: float, margin: float = 8) -> list[list[int]]:
    """Which sliders share a row when a flex box ``area`` px wide wraps them (``margin`` px each)."""
    rows, used = [[]], 0.0
    for i, w in enumerate(widths):
        if rows[-1] and used + w + margin > area:
            rows.append([])
            used = 0.0
        rows[-1].append(i)
        used += w + margin
    return rows


def test_06_sharing_sliders_fit_two_rows_of_the_output_area():
    """Cell 22's sliders wrapped at random at 1500 x 1000 (a 1068 px output area): each has a width
    (label and readout included). Review r7_06 added block size and new tokens: the five make two
    rows, samples / beam width / new tokens, then block size / prompt tokens."""
    import ipywidgets as W

    from kvlab.viz import SharingControl

    sliders = SharingControl(static=True)._inputs(W)
    names = [s.description for s in sliders]
    assert names == ["samples (n)", "beam width", "new tokens", "block size", "prompt tokens"], names
    rows = _rows([_px(s.layout.width, 1068) for s in sliders], 1068)
    assert rows == [[0, 1, 2], [3, 4]], rows


def _px(width: str, area: int) -> float:
    """``min(Apx, B%)`` in px in an output area ``area`` px wide."""
    import re

    m = re.fullmatch(r"min\((\d+)px, (\d+)%\)", width)
    assert m, width
    return min(int(m.group(1)), int(m.group(2)) * area / 100)


def test_06_classroom_sliders_have_tracks_a_teacher_can_use():
    """Review r5_05_06 (lesson 06, cell 22, classroom mode): the sliders shared one row of the 850 px
    output area and their tracks shrank to about 60 px ("prompt tokens" 8..1000 on 60 px). In
    classroom mode two sliders share a row, prompt tokens has its own, and every track (the width
    less its 18 px label and the readout) is at least 200 px; prompt tokens' at least 500."""
    import ipywidgets as W

    from kvlab.viz import SharingControl, classroom

    classroom(True)
    try:
        sliders = SharingControl(static=True)._inputs(W)
    finally:
        classroom(False)
    area, label_px, readout_px = 850, 0.62 * 18, 70
    widths = [_px(s.layout.width, area) for s in sliders]
    tracks = {s.description: w - label_px * len(s.description) - readout_px for w, s in zip(widths, sliders)}
    assert min(tracks.values()) >= 200 and tracks["prompt tokens"] >= 500, tracks
    assert _rows(widths, area) == [[0, 1], [2, 3], [4]], widths   # three rows


def test_06_block_size_and_new_tokens_sliders_move_the_copies():
    """Review r7_06 (interactivity): block size and new tokens were fixed (16, 24), though they decide
    the lesson's central effect. Both are sliders now; at blocks of 16 a 96-token prompt copies
    nothing and a 100-token one copies its partial block once per sample but the last, as the
    allocator counts (the caption says so)."""
    from kvlab.lessons.sharing import sampling_run
    from kvlab.viz import SharingControl

    c = SharingControl(static=False)
    row = c.widget.children[0]
    assert {"block size", "new tokens"} <= {w.description for w in row.children}, row.children
    find = {cls: w for w in row.children for cls in w.get_state()["_dom_classes"]}
    find["kvlab-block-size-slider"].value = 16
    find["kvlab-prompt-len-slider"].value = 96
    assert c.result["copies"] == 0 and "ends on a block boundary" in c.caption() and "0 copies" in c.caption()
    find["kvlab-prompt-len-slider"].value = 100
    run = sampling_run(100, c.samples, c.new_tokens, 16)
    assert c.result["copies"] == run.copies == c.samples - 1 and f"{run.copies} times" in c.caption()
    find["kvlab-block-size-slider"].value = 4      # 100 = 25 blocks of 4: no copy again
    assert c.result["copies"] == 0 and c.result["shared_prompt_blocks"] == 25, c.result
    find["kvlab-new-tokens-slider"].value = 40
    assert c.new_tokens == 40 and c.result["sampling"] == sampling_run(100, c.samples, 40, 4)[:2]
    assert "40 new tokens each" in c.caption()


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


def test_06_shared_outline_outside_the_red_one():
    """Review r7_06 (steps 4-5, P2): the black shared outline was drawn INSIDE the red "changed this
    step" one, 0.1 of a block in, and boxed in the label "P2 x2". Now the shared outline is the block's
    edge, as on every shared block, and the red one runs just inside it (its line's width away), so
    the label keeps the block's room."""
    st = _stepper()
    frame = st.frames[3]   # R2 copies the shared P2 to P3: P2 still shared (x2) and changed
    assert frame.snapshot.ref_count[2] == 2 and 2 in frame.highlight
    fig = st.render(frame)
    blocks = next(t for t in fig.data if t.name == "blocks")
    ring = next(t for t in fig.data if t.name == "changed inside shared")
    assert blocks.marker.line.color[2] == SHARED_OUTLINE and ring.marker.line.color[2] == HIGHLIGHT
    assert ring.marker.line.width[3] == 0 and blocks.marker.line.color[3] == HIGHLIGHT   # P3: changed, not shared
    inset = ring.base[2] - blocks.base[2]
    assert 0 < inset < 0.06 and blocks.x[2] - ring.x[2] == pytest.approx(2 * inset), inset


def test_06_stepper_choice_swaps_the_run_at_the_same_step():
    """Review r7_06 (cell 8): the stepper replayed one run, a 10-token prompt; a student could not
    step through the no-copy case. Buttons above it swap in the same run with an 8-token prompt (L0
    and L1 full): at the samples' first tokens the 10-token run copies P2, the 8-token run takes a
    free block and copies nothing."""
    from kvlab.viz import StepperChoice

    m10, m8 = _run(), BlockManager(num_blocks=12, block_size=4, record=True)
    m8.add_sequence("R1", 8)
    m8.fork("R1", "R2")
    m8.fork("R1", "R3")
    copies8 = [c for s in ["R2", "R3", "R1"] for c in m8.append(s, 1)]
    assert copies8 == []
    steppers = {label: memory_map_stepper(m.snapshots, m.log, title="fork", cols=12, step_legend=True, static=False)
                for label, m in (("10-token prompt", m10), ("8-token prompt", m8))}
    choice = StepperChoice(steppers, static=False)
    assert choice.widget.children[1] is steppers["10-token prompt"].widget
    steppers["10-token prompt"].go(3)
    assert "copy" in choice.current.caption
    choice._toggle.value = "8-token prompt"    # what a click on the second button does
    assert choice.value == "8-token prompt" and choice.widget.children[1] is steppers["8-token prompt"].widget
    assert choice.current.index == 3 and "copy" not in choice.current.caption.lower(), choice.current.caption
    with pytest.raises(ValueError, match="no option"):
        choice.pick("12-token prompt")
