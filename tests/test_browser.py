"""The lessons in a real browser: JupyterLab in headless Chromium, driven by Playwright.

One module-scoped JupyterLab server serves copies of the lessons with their outputs stripped
(tests/browser_utils.py, shared with `make screenshots`). Every lesson runs twice, one after
the other, each kernel shut down after its run:

- normal, on a 1500x1000 screen, and in classroom mode (``viz.classroom(True)`` inserted after
  the first code cell) on a 1280x720 projector with the file browser open. In both: Run All
  Cells, no cell shows an error, plotly figures and widgets render, and the layout check finds
  nothing: no output wider than its output area, no visible text in an output under 12 px
  (16 px in classroom mode) (SVG and plotly text, HTML tables, widget labels, printed text).
  The picture checks (text crossed by a line or cut by its figure's edge, a step counter shown
  twice, a legend entry drawn nowhere, a control and its figure taller than the screen) warn;
  with KVLAB_PICTURES_STRICT=1 they fail.
  Every finding goes to tests/_artifacts/browser_layout.json as well as into the failure.
- lesson 04 in classroom mode: the widget controls are larger, the translation widget's position
  slider, moved to 4 (L1 -> P7) and back to 9, shows L2, offset 1 and P1, and the memory-map
  stepper's Next button moves its caption, numbered "step k / N";
- lesson 02: the plotly bar chart renders; lesson 07: the radix stepper's Next button changes
  the caption and the tree.

One server and one browser for all 22 runs; the time is the lessons' own run time: measured
16.5 minutes on a shared 2-core machine at load ~10 (lesson 09 alone about 2 minutes a mode),
so about 5 to 8 minutes on a quiet one.

Screenshots go to tests/_artifacts/ (git-ignored). With KVLAB_UPDATE_SCREENSHOTS=1 the two for
the README are also copied to docs/img/ (memory_map.png, radix_tree.png).

Skips (never fails) only when Debian's Chromium (/usr/bin/chromium) or Playwright is missing
and CI is not set; with CI=true a missing browser is a failure. Never runs `playwright install`.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import warnings
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest
from browser_utils import (
    ARTIFACTS, ROOT, browser_problems, cell_errors, chromium, format_report, jupyter_lab, layout_report,
    lesson_names, lesson_page, page_chunks, prepare_folder,
)

pytestmark = pytest.mark.browser

IN_CI = os.environ.get("CI", "").lower() == "true"
CLASSROOM_LESSON = "04_paging.ipynb"  # its widgets are driven in classroom mode, on a projector-sized screen
LAYOUT_LOG = ARTIFACTS / "browser_layout.json"


def _require_browser():
    problems = browser_problems()
    if problems:
        msg = "; ".join(problems)
        if IN_CI:
            pytest.fail(f"CI=true but the browser test cannot run: {msg}")
        pytest.skip(f"browser test skipped outside CI: {msg}")


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base_url, token, folder) of a JupyterLab server over stripped lesson copies (both modes)."""
    _require_browser()
    folder = tmp_path_factory.mktemp("lab")
    prepare_folder(folder, lesson_names())
    LAYOUT_LOG.unlink(missing_ok=True)
    try:
        with jupyter_lab(folder) as server:
            yield server
    except RuntimeError as e:
        pytest.fail(str(e))


@pytest.fixture(scope="module")
def browser(lab):
    with chromium() as b:
        yield b


def _log_layout(entries: list[dict]) -> None:
    """Append to tests/_artifacts/browser_layout.json (what the lead routes to lesson owners)."""
    old = json.loads(LAYOUT_LOG.read_text()) if LAYOUT_LOG.exists() else []
    LAYOUT_LOG.write_text(json.dumps(old + entries, indent=1, ensure_ascii=False))


FIT_KINDS = ("overflow", "small-text")  # always a failure
# The picture checks of issue 28 (crossed-text, clipped-text, step-counter, legend-undrawn,
# tall-control) are logged and reported as warnings; with KVLAB_PICTURES_STRICT=1 they fail too
# (the default once every lesson passes them).
PICTURES_STRICT = os.environ.get("KVLAB_PICTURES_STRICT") == "1"


def _assert_fits(page, name: str, classroom: bool) -> None:
    """Scroll the whole lesson (plotly draws figures in view), then: nothing wider than its
    output area, no text under the minimum; the picture checks warn (or, strict, fail)."""
    page_chunks(page)
    entries = layout_report(page, name[:2], classroom)
    _log_layout(entries)
    mode = "classroom mode at 1280x720" if classroom else "1500x1000"
    fit = [e for e in entries if e["kind"] in FIT_KINDS]
    pictures = [e for e in entries if e["kind"] not in FIT_KINDS]
    assert not fit, f"lesson {name[:2]} ({mode}): outputs that do not fit or text too small:\n" + format_report(fit)
    if pictures and PICTURES_STRICT:
        pytest.fail(f"lesson {name[:2]} ({mode}): pictures a student trips over:\n" + format_report(pictures))
    if pictures:
        warnings.warn(f"lesson {name[:2]} ({mode}): pictures a student trips over:\n" + format_report(pictures))


@contextmanager
def _lesson(browser, lab, name: str, classroom: bool = False):
    """Open and run a lesson, check it shows no error, yield the page; screenshot and close it after."""
    if not (lab[2] / name).exists():
        pytest.fail(f"notebooks/{name} is missing")
    mode = "classroom" if classroom else "normal"
    with lesson_page(browser, lab, name, classroom) as page:
        try:
            errors = cell_errors(page)
            assert not errors, f"{name[:2]} ({mode}): a cell shows an error:\n{errors[0][:1500]}"
            yield page
        finally:
            page.screenshot(path=str(ARTIFACTS / f"{name[:2]}_{mode}_page.png"))


def _shot(page, locator, filename: str) -> Path:
    out = ARTIFACTS / filename
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(out))
    if os.environ.get("KVLAB_UPDATE_SCREENSHOTS") == "1" and filename in ("memory_map.png", "radix_tree.png"):
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        shutil.copy(out, ROOT / "docs" / "img" / filename)
    return out


def _stored_kinds(name: str) -> set[str]:
    """What the built notebook's stored outputs contain: 'plotly' and/or 'widget'."""
    kinds = set()
    for cell in nbformat.read(ROOT / "notebooks" / name, as_version=4).cells:
        for out in cell.get("outputs", []):
            data = out.get("data", {})
            if "application/vnd.plotly.v1+json" in data:
                kinds.add("plotly")
            if "application/vnd.jupyter.widget-view+json" in data:
                kinds.add("widget")
    return kinds


def _wait_for_figures(page, name: str) -> None:
    kinds = _stored_kinds(name)
    if "widget" in kinds:
        page.wait_for_selector(".jupyter-widgets", timeout=20_000)
    if "plotly" in kinds or "widget" in kinds:  # kvlab's widgets hold plotly figures or SVG
        page.wait_for_selector(".js-plotly-plot .main-svg, .kvlab-svg svg", timeout=20_000)


# Lessons with their own test below (in that mode); every other run is checked here.
_LESSONS = lesson_names()
_NORMAL = [n for n in _LESSONS if n not in ("02_how_big.ipynb", "07_radix.ipynb")]
_CLASSROOM = [n for n in _LESSONS if n != CLASSROOM_LESSON]


@pytest.mark.parametrize("name", _NORMAL)
def test_lesson_runs_clean_and_fits(browser, lab, name):
    with _lesson(browser, lab, name) as page:
        _wait_for_figures(page, name)
        _assert_fits(page, name, classroom=False)


@pytest.mark.parametrize("name", _CLASSROOM)
def test_lesson_fits_in_classroom_mode(browser, lab, name):
    """At 1280x720 with the file browser open, after viz.classroom(True): runs clean, nothing
    wider than its output area, no text under 16 px."""
    with _lesson(browser, lab, name, classroom=True) as page:
        _wait_for_figures(page, name)
        _assert_fits(page, name, classroom=True)


def test_lesson_02_plotly(browser, lab):
    with _lesson(browser, lab, "02_how_big.ipynb") as page:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)
        assert page.locator(".js-plotly-plot").count() >= 1
        _shot(page, page.locator(".js-plotly-plot").first, "02_kv_sizes.png")
        _assert_fits(page, "02_how_big.ipynb", classroom=False)


def _set_slider(page, slider_class: str, value: int):
    readout = page.locator(f".{slider_class} .widget-readout").first
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")


def test_lesson_04_in_classroom_mode_on_a_projector(browser, lab):
    """Lesson 04 at 1280x720, classroom mode, file browser open: nothing overflows, the controls
    grow, and the widgets respond."""
    with _lesson(browser, lab, CLASSROOM_LESSON, classroom=True) as page:
        page.wait_for_selector(".jupyter-widgets", timeout=20_000)
        page.wait_for_selector(".kvlab-translation .js-plotly-plot", timeout=20_000)
        page.wait_for_selector(".kvlab-stepper .js-plotly-plot .main-svg", timeout=20_000)
        figures = page.locator(".jp-RenderedPlotly")
        assert figures.count() >= 3, f"lesson 04 shows {figures.count()} figures, expected the widget's, the stepper's, the animation"
        for i in range(figures.count()):  # plotly draws a figure when it comes into view: visit each one
            figures.nth(i).scroll_into_view_if_needed()
            figures.nth(i).locator(".main-svg").first.wait_for(timeout=20_000)
        page.wait_for_timeout(500)  # let plotly finish sizing the figures to their areas
        px = page.evaluate("() => parseFloat(getComputedStyle(document.querySelector('.kvlab-stepper button.kvlab-next')).fontSize)")
        assert px >= 17, f"classroom mode: the stepper's buttons are {px}px, not enlarged"
        _shot(page, page.locator(".kvlab-translation").first, "classroom_translation.png")

        chain = page.locator(".kvlab-translation .kvlab-chain").first
        _set_slider(page, "kvlab-pos-slider", 4)
        page.wait_for_function("() => { const c = document.querySelector('.kvlab-translation .kvlab-chain');"
                               " return c && /P7/.test(c.textContent) && /L1/.test(c.textContent); }", timeout=10_000)
        _set_slider(page, "kvlab-pos-slider", 9)
        page.wait_for_function("() => { const c = document.querySelector('.kvlab-translation .kvlab-chain');"
                               " return c && /L2/.test(c.textContent) && /P1\\b/.test(c.textContent); }", timeout=10_000)
        text = chain.text_content()
        assert "L2" in text and "P1" in text and "offset" in text.lower() and "1" in text, text
        assert "P7" not in text, f"chain still shows pos 4's block: {text}"

        stepper = page.locator(".kvlab-stepper").first
        stepper.scroll_into_view_if_needed()
        caption = stepper.locator(".kvlab-caption").first
        before = caption.text_content()
        assert re.search(r"step 1 / \d+:", before), before
        stepper.locator("button.kvlab-next").first.click()
        page.wait_for_function("([el, old]) => el.textContent !== old", arg=[caption.element_handle(), before], timeout=10_000)
        assert re.search(r"step 2 / \d+:", caption.text_content())
        for _ in range(30):  # step by step to where R1 finishes (its blocks go back to the pool)
            now = caption.text_content()
            if "R1 finishes" in now:
                break
            stepper.locator("button.kvlab-next").first.click()  # one click, then wait for its caption
            page.wait_for_function("([el, old]) => el.textContent !== old", arg=[caption.element_handle(), now],
                                   timeout=10_000)
        assert "R1 finishes" in caption.text_content(), caption.text_content()
        page.wait_for_selector(".kvlab-stepper .js-plotly-plot .main-svg", timeout=20_000)
        _shot(page, stepper, "memory_map.png")
        _assert_fits(page, CLASSROOM_LESSON, classroom=True)


def test_lesson_07_radix_stepper(browser, lab):
    base, token, folder = lab
    if not (folder / "07_radix.ipynb").exists():
        pytest.skip("notebooks/07_radix.ipynb does not exist yet (lesson 07 is written by lessons engineer B)")
    with _lesson(browser, lab, "07_radix.ipynb") as page:
        steppers = page.locator(".kvlab-stepper:has(.kvlab-svg)")
        if steppers.count() == 0:
            pytest.fail("lesson 07 shows no radix stepper (.kvlab-stepper with a .kvlab-svg view)")
        stepper = steppers.first
        stepper.scroll_into_view_if_needed()
        caption = stepper.locator(".kvlab-caption").first
        svg = stepper.locator(".kvlab-svg").first
        before_caption, before_svg = caption.text_content(), svg.inner_html()
        stepper.locator("button.kvlab-next").first.click()
        page.wait_for_function("([el, old]) => el.textContent !== old", arg=[caption.element_handle(), before_caption],
                               timeout=10_000)
        page.wait_for_function("([el, old]) => el.innerHTML !== old", arg=[svg.element_handle(), before_svg], timeout=10_000)
        assert svg.locator("svg").count() >= 1, "the radix view holds no SVG"
        for _ in range(3):
            stepper.locator("button.kvlab-next").first.click()
            page.wait_for_timeout(300)
        _shot(page, stepper, "radix_tree.png")
        _assert_fits(page, "07_radix.ipynb", classroom=False)
