"""The browser test's picture checks (tests/browser_utils._PICTURE_JS) on a planted page, without
JupyterLab: each kind is found where it is drawn and nowhere else (a check that cannot fail is a
defect). Chromium starts once; the page is a notebook's output DOM with three SVG figures."""
from __future__ import annotations

import pytest

from browser_utils import _PICTURE_JS, chromium

PAGE = """<html><body style='margin:0;font:16px sans-serif'>
<div class='jp-NotebookPanel'><div class='jp-Notebook'>
 <div class='jp-Cell'><div class='jp-OutputArea-output'>
  <svg width='400' height='120'><text x='20' y='40' font-size='16'>block_size (tokens)</text>
   <text x='40' y='44' font-size='16'>lookups</text></svg></div></div>
 <div class='jp-Cell'><div class='jp-OutputArea-output'>
  <svg width='400' height='120'><text x='20' y='40' font-size='16'>crossed label</text>
   <line x1='10' y1='35' x2='200' y2='35' stroke='black' stroke-width='2'/></svg></div></div>
 <div class='jp-Cell'><div class='jp-OutputArea-output'>
  <svg width='400' height='120'><text x='20' y='40' font-size='16'>left label</text>
   <text x='220' y='40' font-size='16'>right label</text><text x='20' y='90' font-size='16'>below</text></svg>
 </div></div>
</div></div></body></html>"""


@pytest.fixture(scope="module")
def found():
    with chromium() as b:
        page = b.new_page(viewport={"width": 800, "height": 600})
        page.set_content(PAGE)
        return page.evaluate(_PICTURE_JS, [599])


def test_text_over_text_is_found_once_in_its_cell(found):
    over = [f for f in found if f["kind"] == "overlapping-text"]
    assert [(f["cell"], f["text"]) for f in over] == [(0, "block_size (tokens) / lookups")], found


def test_a_line_through_a_label_is_found_and_apart_labels_are_not(found):
    assert [(f["kind"], f["cell"]) for f in found if f["kind"] == "crossed-text"] == [("crossed-text", 1)], found
    assert not [f for f in found if f["cell"] == 2], found
