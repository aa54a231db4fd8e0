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
    canvas now, so the picture keeps its scale and its height; and it leaves room on a 599 px
    screen for the buttons and the caption."""
    s = viz.radix_stepper(radix_request_frames(four_request_example()), static=False)
    svgs = [s.render(f) for f in s.frames]
    boxes = {_viewbox(svg) for svg in svgs}
    assert len(boxes) == 1, f"the frames are drawn on {len(boxes)} canvases: {sorted(boxes)}"
    assert len({re.search(r'max-width:[^;]+', svg).group(0) for svg in svgs}) == 1
    tallest = max(_viewbox(svg)[1] * _scale(svg) for svg in svgs)
    assert tallest + STEPPER_ROOM_PX <= CLASSROOM_SCREEN_PX, f"the tree is {tallest:.0f} px tall"
    smallest = min(float(x) * _scale(svg) for svg in svgs for x in re.findall(r'font-size="([\d.]+)"', svg))
    assert smallest >= 16, f"text at {smallest:.1f} px on a projector"


def test_frames_on_one_canvas_keep_their_drawing_centred():
    svg = '<svg width="60pt" height="40pt" viewBox="0.00 0.00 60.00 40.00"><g/></svg>'
    assert viz.radix_view.on_canvas(svg, 100, 50) == (
        '<svg width="100.00pt" height="50.00pt" viewBox="-20.00 0.00 100.00 50.00"><g/></svg>')
    assert viz.radix_view.on_canvas(svg, 10, 10) == (   # never smaller than the drawing
        '<svg width="60.00pt" height="40.00pt" viewBox="0.00 0.00 60.00 40.00"><g/></svg>')
