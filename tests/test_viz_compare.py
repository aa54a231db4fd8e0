"""Tests of the contiguous-versus-paged view: both runs, their slot colours, the bars."""
from __future__ import annotations

import dataclasses

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab.viz as viz  # noqa: E402
from kvlab.viz.compare import STRANDED, BAR_KINDS  # noqa: E402
from kvlab.viz.palette import FREE  # noqa: E402


def test_notes_example_contiguous_fails_paged_fits():
    steps = viz.run_compare(viz.notes_trace(), capacity=48, block_size=4)
    assert len(steps) == 5
    for s in steps:
        s.check_integrity()
    d = steps[-1]
    assert not d.contiguous_ok and d.paged_ok
    assert "contiguous FAILS" in d.caption and "paged fits" in d.caption
    assert d.contiguous["free"] == 24 and d.contiguous["free_usable"] == 16
    assert d.contiguous["external_fragmentation"] == 8 and d.paged["external_fragmentation"] == 0
    assert d.paged["free"] == 0 and sorted(d.paged_snapshot.tables) == ["B", "C", "D'"]
    assert "admit D' (24 tokens)" in d.caption  # issue 21 [8]: the scaled D' is not the notes' D (32 here)


def test_slot_colours_show_free_stranded_and_owners():
    steps = viz.run_compare(viz.notes_trace(), capacity=48, block_size=4)
    colors = viz.assign_colors(["A", "B", "C", "D'"])
    data = viz.compare_data(steps[3], colors)  # after A finished
    cc = data["contiguous_color"]
    assert cc[0:16] == [FREE] * 16  # A's old range: the largest hole, usable
    assert cc[16:24] == [colors["B"]] * 8 and cc[24:40] == [colors["C"]] * 16
    assert cc[40:48] == [STRANDED] * 8  # the 8-slot tail hole: external fragmentation
    assert data["bars"]["contiguous"] == [24, 0, 8, 16]
    assert data["bars"]["paged"] == [24, 0, 0, 24]
    last = viz.compare_data(steps[4], colors)
    assert last["paged_color"].count(colors["D'"]) == 24  # D' has 6 blocks: A's old 4 + the free 2
    assert len(BAR_KINDS) == 4


def test_growth_copies_bytes_contiguous_only():
    steps = viz.run_compare(viz.growth_trace(), capacity=64, block_size=4, policy="pow2", bytes_per_token=2)
    moved = [s for s in steps if "copying" in s.caption]
    assert moved, "pow2 growth must move some request"
    copied = [int(s.caption.split("copying ")[1].split()[0]) for s in moved]
    assert copied[0] == 3 * 2  # R1 moves with its 5 - 2 = 3 tokens, 2 bytes each
    assert steps[-1].contiguous["bytes_copied"] == sum(copied)
    assert steps[-1].contiguous["moves"] == len(moved)
    assert all(s.paged["bytes_copied"] == 0 for s in steps)
    tint = viz.compare_data(steps[0])["paged_color"][3]  # R1 has 3 tokens in a 4-slot block
    assert tint not in (FREE, viz.request_color("R1"))


def test_figure_and_animation_fixed_axes():
    steps = viz.run_compare(viz.notes_trace())
    fig = viz.animate_compare(steps)
    assert len(fig.frames) == len(steps)
    assert "(simulated)" in fig.layout.title.text
    for fr in fig.frames:
        assert list(fr.layout.xaxis.range) == list(fig.layout.xaxis.range)
        assert list(fr.layout.yaxis2.range) == list(fig.layout.yaxis2.range)
        assert list(fr.layout.yaxis3.range) == list(fig.layout.yaxis3.range)
    assert list(fig.frames[3].data[2].y) == [24, 0, 8, 16]
    assert "token slots copied on growth: 0" in fig.frames[0].layout.title.subtitle.text


def test_stepper_and_errors():
    s = viz.compare_stepper(static=False)
    s.go(4)
    assert "contiguous FAILS" in s._caption.value and s.error is None
    bad = dataclasses.replace(s.frame.snapshot, reservations=(("B", 16, 8, 8), ("C", 20, 16, 16)))
    with pytest.raises(AssertionError, match="overlaps"):
        bad.check_integrity()
    with pytest.raises(ValueError, match="multiple"):
        viz.run_compare(viz.notes_trace(), capacity=50, block_size=4)
    with pytest.raises(ValueError, match="'shrink'"):
        viz.run_compare([("shrink", "A")])


def test_animation_numbers_frames_as_the_stepper():
    """Issue 16: steppers and animations number frames the same way (1..N, "step k / N")."""
    steps = viz.run_compare(viz.notes_trace())
    fig = viz.animate_compare(steps)
    n = len(steps)
    assert [s.label for s in fig.layout.sliders[0].steps] == [str(i) for i in range(1, n + 1)]
    assert fig.layout.sliders[0].currentvalue.suffix == f" / {n}"
    for i, fr in enumerate(fig.frames):
        assert fr.name == str(i + 1) and fr.layout.title.subtitle.text.startswith(f"step {i + 1} / {n}: ")
    s = viz.compare_stepper(static=False)
    s.go(2)
    assert f"step 3 / {n}:" in s._caption.value


def test_stepper_states_its_caption_once():
    """Round 2 review: the stepper's line says "step k / N: caption"; the figure's subtitle must not
    repeat the caption (it keeps the copy counter); a figure on its own still carries its caption."""
    s = viz.compare_stepper(static=False)
    s.go(3)
    sub = s.render(s.frame).layout.title.subtitle.text
    assert s.caption in s._caption.value and s.caption not in sub and "token slots copied on growth" in sub
    step = viz.run_compare(viz.notes_trace())[3]
    assert viz.compare_figure(step).layout.title.subtitle.text.startswith(step.caption)


def test_classroom_compare_takes_the_output_width():
    viz.classroom(True)
    try:
        fig = viz.compare_figure(viz.run_compare(viz.notes_trace())[-1])
        assert fig.layout.width is None and fig.layout.autosize is True
        assert fig.layout.margin.t >= 140  # title and two subtitle lines above the first map
    finally:
        viz.classroom(False)
    assert viz.compare_figure(viz.run_compare(viz.notes_trace())[-1]).layout.width == viz.theme().grid_width + 40


def test_block_size_1_keeps_the_row_and_labels_each_run_once():
    """Issue 28 [6]: at block size 1 (the policy widget's minimum) the paged map wrapped into rows
    of 12 slots with a label on every slot, printed over each other and cut at the edge."""
    from kvlab.viz.policy_widget import policy_state
    from kvlab.viz.compare import compare_data

    one, four = (compare_data(policy_state("max", "notes", bs)["steps"][-1]) for bs in (1, 4))
    assert one["cols"] == four["cols"] == 48
    labels = [t for t in one["paged_label"] if t]
    assert len(labels) == len(set(labels)) <= 6, labels  # one label where each run of a table starts


def test_a_request_is_never_drawn_in_a_tint_of_another():
    """Issue 28 [6]: lesson 03 drew D' in light cyan, which reads as C's "reserved" tint."""
    from kvlab.viz.policy_widget import policy_state
    from kvlab.viz.compare import compare_data
    from kvlab.viz.palette import STRONG_COLORS

    from kvlab.viz.compare import TRACE_COLORS

    d = compare_data(policy_state("max", "notes", 4)["steps"][-1])
    assert set(d["legend"].values()) <= set(STRONG_COLORS) | set(TRACE_COLORS.values()), d["legend"]
    tints = {viz.palette.tint(c) for c in TRACE_COLORS.values()}
    assert not tints & set(TRACE_COLORS.values()), "a request's colour is another's reserved tint"


def _slot_colours(fig) -> dict[str, set[str]]:
    """Request id -> the full (token) colours its labelled slots have in a compare figure's two maps."""
    out: dict[str, set[str]] = {}
    for tr in fig.data[:2]:
        for label, colour in zip(tr.text, tr.marker.color):
            if label and " " not in label.split(" L")[0]:
                out.setdefault(label.split(" L")[0], set()).add(colour)
    return out


def test_lesson_03_figures_colour_each_request_the_same_way():
    """Review: a request's colour changed between lesson 03's figures. The compare stepper and the
    policy widget (its figure of the last step) now read one map, TRACE_COLORS, for every request."""
    from kvlab.viz.compare import CompareView, TRACE_COLORS
    from kvlab.viz.policy_widget import PolicyWidget

    ids = [op[1] for op in viz.notes_trace() + viz.growth_trace()]
    assert set(ids) <= TRACE_COLORS.keys()
    colours = [TRACE_COLORS[i] for i in dict.fromkeys(ids)]
    assert len(set(colours)) == len(colours), "two requests of the lesson share a colour"
    assert not {FREE, STRANDED} & set(colours)
    for trace, name, policy in ((viz.notes_trace(), "notes", "exact"), (viz.growth_trace(), "growth", "pow2")):
        steps = viz.run_compare(trace, 48, 4, policy)
        view = CompareView(steps)
        stepper = {}
        for st in steps:
            for rid, cs in _slot_colours(view(type("F", (), {"snapshot": st})())).items():
                stepper.setdefault(rid, set()).update(cs)
        for pol in ("max", "pow2", "exact"):
            widget = _slot_colours(PolicyWidget(policy=pol, trace=name, block_size=4).figure())
            assert widget, (name, pol)
            for rid, cs in widget.items():
                assert cs == {TRACE_COLORS[rid]} == stepper[rid], (name, pol, rid, cs, stepper[rid])
