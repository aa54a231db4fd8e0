"""Lesson 07's pictures as a student sees them (the review of ede928d, classroom mode at 1280x720).

Geometry from the SVG the views hand the browser (no browser here: tests/test_browser.py measures
the page); an output area is 848 px wide in classroom mode, 599 px of notebook are visible.
"""
from __future__ import annotations

import re

import pytest

import kvlab.viz as viz
from kvlab.lessons import four_request_example
from kvlab.viz.radix_frames import radix_request_frames

CLASSROOM_AREA_PX = 848      # the output area's width at 1280x720 with the file browser open
CLASSROOM_SCREEN_PX = 599    # the notebook visible on a projector
STEPPER_ROOM_PX = 140        # the stepper's buttons and a caption of three lines above the picture


@pytest.fixture
def classroom():
    viz.classroom(True)
    yield
    viz.classroom(False)


def _viewbox(svg: str) -> tuple[float, float]:
    w, h = re.search(r'<svg\b[^>]*viewBox="[-\d.]+ [-\d.]+ ([\d.]+) ([\d.]+)"', svg).groups()
    return float(w), float(h)


def _scale(svg: str, area_px: float = CLASSROOM_AREA_PX) -> float:
    """px per pt as the browser draws ``fit_svg``'s SVG: 100% of the area, at most its own width."""
    w, _ = _viewbox(svg)
    max_w = float(re.search(r'max-width:([\d.]+)pt', svg).group(1)) * 4 / 3
    return min(area_px, max_w) / w


def test_the_radix_stepper_keeps_one_scale_and_one_height(classroom):
    """Review: cell 10's tree rescaled every frame (step 3, two nodes wide, was drawn larger than
    step 5, three wide) and the stepper was 757 px tall at step 3. Every frame is drawn on one
    canvas width now, so the picture keeps its scale; and it leaves room on a 599 px screen for
    the buttons and the caption. Review r8: each frame keeps its own height (the tallest one's left
    about 250 px blank under step 1's two nodes), its drawing from the top of the canvas."""
    s = viz.radix_stepper(radix_request_frames(four_request_example(), running=("R4",)), static=False)
    svgs = [s.render(f) for f in s.frames]
    widths = {_viewbox(svg)[0] for svg in svgs}
    assert len(widths) == 1, f"the frames are drawn on {len(widths)} canvas widths: {sorted(widths)}"
    assert len({re.search(r'max-width:[^;]+', svg).group(0) for svg in svgs}) == 1
    own = [viz.radix_view.svg_size_pt(s.render.svg(f))[1] for f in s.frames]
    assert [_viewbox(svg)[1] for svg in svgs] == own, "a frame is drawn taller than itself: a blank band under it"
    assert own[0] < own[-1] / 2, f"step 1's two nodes are as tall as the whole tree: {own}"
    tallest = max(_viewbox(svg)[1] * _scale(svg) for svg in svgs)
    assert tallest + STEPPER_ROOM_PX <= CLASSROOM_SCREEN_PX, f"the tree is {tallest:.0f} px tall"
    smallest = min(float(x) * _scale(svg) for svg in svgs for x in re.findall(r'font-size="([\d.]+)"', svg))
    assert smallest >= 16, f"text at {smallest:.1f} px on a projector"


def test_top_to_bottom_arrows_have_a_shaft(classroom):
    """Review r8: in classroom mode (top to bottom) root -> [A] was a few px long, its head on [A]'s
    border. The ranks of a top-to-bottom stepper frame are 0.42 in apart (0.3 left to right)."""
    fr = radix_request_frames(four_request_example())
    g = viz.radix_tree_graph(fr[0].snapshot, rankdir="TB", compact=True)
    assert 'ranksep=0.42' in g.source
    svg = g.pipe(format="svg", encoding="utf-8")
    ys = [float(y) for y in re.findall(r'<path[^>]*d="M[-\d.]+,([-\d.]+)C', svg)]
    heads = [float(y) for y in re.findall(r'<polygon fill="#1f77b4" stroke="#1f77b4"[^>]*points="[-\d.]+,([-\d.]+)', svg)]
    assert ys and heads, "no edge drawn"
    assert abs(heads[0] - ys[0]) >= 14, f"the root -> [A] edge runs {abs(heads[0] - ys[0]):.1f} pt before its head"


def test_a_frame_while_r4_runs_shows_its_locks():
    """Review r8: every frame was the tree after its request, so every node read lock 0. The frame
    while R4 runs is the real cache between admit and finish: [A], [B], [C] locked, 88 tokens protected."""
    fr = radix_request_frames(four_request_example(), running=("R4",))
    assert [f.caption.split(":")[0].split(" (")[0] for f in fr] == ["warm-up", "R1", "R2", "R3", "R4 running", "R4"]
    run = fr[4].snapshot
    locked = {run.node_labels[n.id]: n.lock_ref for n in run.snapshot.nodes if n.lock_ref}
    assert locked == {"A": 1, "B": 1, "C": 1} and run.snapshot.protected_size == 88
    assert "18 new blocks (for 人工呢, then its answer)" in fr[4].caption
    assert "protected (locked) 88 tokens" in viz.radix_tree_graph(run, compact=True).source
    assert "solid: locked" in viz.radix_tree_graph(run).source
    assert fr[5].snapshot.snapshot.protected_size == 0 and fr[5].caption.endswith("its path unlocked")
    assert len(radix_request_frames(four_request_example())) == 5  # without running=: one frame a request


def test_frames_on_one_canvas_keep_their_drawing_centred():
    svg = '<svg width="60pt" height="40pt" viewBox="0.00 0.00 60.00 40.00"><g/></svg>'
    assert viz.radix_view.on_canvas(svg, 100, 50) == (
        '<svg width="100.00pt" height="50.00pt" viewBox="-20.00 0.00 100.00 50.00"><g/></svg>')
    assert viz.radix_view.on_canvas(svg, 10, 10) == (   # never smaller than the drawing
        '<svg width="60.00pt" height="40.00pt" viewBox="0.00 0.00 60.00 40.00"><g/></svg>')
