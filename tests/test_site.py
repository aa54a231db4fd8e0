"""The static site (`make site`) in a real browser: every page of site/ served from 127.0.0.1
and opened in headless Chromium at 1280x720.

Builds the site first (scripts/build_site.py) from the lessons' executed copies that this test
session's headless runs made (tests/lesson_runs.py, KVLAB_STATIC=frames, in build/lesson-runs/;
shared with tests/test_lessons_headless.py, each lesson run once per session).
For every page: no console error and no page error, every plotly figure of the lesson's
executed notebook drawn (``.kvlab-plot`` divs with an SVG, counted against the notebook's
plotly outputs), every stepper present as a player, nothing wider than the page (no sideways
scrolling, no output clipped), and no request to anything but 127.0.0.1 (every request is
routed through the test and recorded). One player is played to its last frame; an exercise's
solution is hidden until "show" is clicked. Also: the site is under 40 MB and loads plotly.js
from its own assets, once per page.

Skips (never fails) when Chromium or playwright is missing and CI is not set.
"""
from __future__ import annotations

import functools
import http.server
import json
import os
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest
from browser_utils import CHROMIUM, CHROMIUM_ARGS, ROOT, browser_problems
from lesson_runs import RUNS, executed

pytestmark = pytest.mark.browser

SITE = ROOT / "site"
VIEWPORT = {"width": 1280, "height": 720}
PLOTLY_MIME = "application/vnd.plotly.v1+json"


@pytest.fixture(scope="module")
def site():
    problems = browser_problems()
    if problems:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail("CI=true but the site test cannot run: " + "; ".join(problems))
        pytest.skip("site test skipped outside CI: " + "; ".join(problems))
    sys.path.insert(0, str(ROOT / "scripts"))
    from build_site import build, lesson_files

    # KVLAB_SITE_LESSONS="04 07": build only those (while working on them; the full test needs all)
    selected = os.environ.get("KVLAB_SITE_LESSONS", "").split()
    # The session's headless runs (tests/lesson_runs.py, KVLAB_STATIC=frames), not a run of our own;
    # asked for last lesson first, so a worker running tests/test_lessons_headless.py (first lesson
    # first) runs the other half at the same time.
    for f in reversed(lesson_files(selected)):
        executed(f.stem)
    return build(selected, SITE, stored=False, jobs=2, executed_dir=RUNS)


@pytest.fixture(scope="module")
def server(site):
    handler = functools.partial(_QuietHandler, directory=str(SITE))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):  # keep pytest's output clean
        pass


@pytest.fixture(scope="module")
def browser(server):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


class _Visit:
    """A page at 1280x720 whose console errors and requests are recorded; outside requests are blocked."""

    def __init__(self, browser):
        self.page = browser.new_page(viewport=VIEWPORT)
        self.errors: list[str] = []
        self.outside: list[str] = []
        self.requests: list[str] = []
        self.page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        self.page.route("**/*", self._route)

    def _route(self, route):
        url = route.request.url
        self.requests.append(url)
        if urlparse(url).hostname not in ("127.0.0.1", None) and not url.startswith("data:"):
            self.outside.append(url)
            route.abort()
        else:
            route.continue_()


def _pages() -> list[str]:
    return ["index.html", "glossary.html"] + sorted(p.stem + ".html" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _notebook_figures(info: dict) -> int:
    nb = nbformat.read(ROOT / info["notebook"], as_version=4) if info.get("notebook") else None
    if nb is None:
        return 0
    return sum(PLOTLY_MIME in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def test_site_is_small_and_complete(site):
    assert site["bytes"] < 40e6, f"the site is {site['bytes'] / 1e6:.1f} MB (limit 40 MB)"
    assert (SITE / "assets" / "plotly.min.js").stat().st_size > 1e6
    lessons = sorted(p.stem + ".html" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert set(lessons) <= set(site["pages"]), "a lesson has no page"
    for name in lessons:
        assert not site["pages"][name]["errors"], f"{name}: a cell failed while building: {site['pages'][name]['errors']}"
        text = (SITE / name).read_text()
        assert text.count("plotly.min.js") == 1, f"{name} loads plotly.js {text.count('plotly.min.js')} times"
        assert "cdn" not in text.lower().split("<main>")[0], f"{name} loads something from a CDN"
        assert "class='banner'" in text and "simulated" in text and "measured" in text, f"{name} has no banner"
        nb = nbformat.read(ROOT / "notebooks" / name.replace(".html", ".ipynb"), as_version=4)
        stubs = sum("exercise-stub" in c.get("metadata", {}).get("tags", []) for c in nb.cells)
        shown = text.count("<details class='solution'>")
        assert shown == stubs, f"{name}: {stubs} exercise stubs, {shown} solutions behind 'show'"
        assert text.count("class='run-locally'") == stubs and (stubs == 0 or "make lab" in text)
    index = (SITE / "index.html").read_text()
    assert all(f"href='{name}'" in index for name in lessons), "the index does not link every lesson"
    assert "RadixAttention" in index and "img/" in index and "glossary.html" in index


@pytest.mark.parametrize("name", _pages())
def test_page_renders_offline_and_fits(site, server, browser, name):
    info = site["pages"].get(name)
    if info is None:
        pytest.fail(f"{name} was not built")
    v = _Visit(browser)
    try:
        v.page.goto(f"{server}/{name}", wait_until="load", timeout=60_000)
        want = _notebook_figures(info)
        assert info["plotly"] == want, f"{name}: the page has {info['plotly']} figures, the notebook {want}"
        if want:
            v.page.wait_for_function("(n) => document.querySelectorAll('.kvlab-plot .main-svg').length >= n",
                                     arg=want, timeout=30_000)
        drawn = v.page.locator(".kvlab-plot.js-plotly-plot").count()
        assert drawn == want, f"{name}: {drawn} plotly figures drawn, the notebook has {want}"
        players = v.page.locator(".kvlab-flipbook").count()
        assert players == info["flipbooks"], f"{name}: {players} players, the notebook has {info['flipbooks']}"
        v.page.wait_for_timeout(300)
        wide = v.page.evaluate("""() => {
            const bad = [], doc = document.documentElement;
            if (doc.scrollWidth > doc.clientWidth + 1) bad.push(`the page scrolls sideways: ${doc.scrollWidth} > ${doc.clientWidth}`);
            const main = document.querySelector('main').getBoundingClientRect();
            document.querySelectorAll('.outputs, .html-output, .kvlab-fb-view, .svg-output').forEach(el => {
                if (el.scrollWidth > el.clientWidth + 2) bad.push(`${el.className} clips ${el.scrollWidth - el.clientWidth} px`);
            });
            document.querySelectorAll('.outputs .main-svg, .outputs svg, .outputs img, .outputs table').forEach(el => {
                const r = el.getBoundingClientRect();
                if (r.width && r.right > main.right + 2) bad.push(`${el.tagName} ends at ${Math.round(r.right)} px, the page at ${Math.round(main.right)}`);
            });
            return bad;
        }""")
        assert not wide, f"{name} at 1280x720:\n" + "\n".join(wide[:10])
        assert not v.errors, f"{name}:\n" + "\n".join(v.errors[:10])
        assert not v.outside, f"{name} asked for {v.outside[:5]}"
        assert any(u.endswith("assets/site.css") for u in v.requests)
    finally:
        v.page.close()


def test_a_player_plays_to_its_last_frame_and_solutions_and_hints_stay_hidden(site, server, browser):
    with_players = [n for n, i in site["pages"].items() if i.get("flipbooks")]
    if not with_players:
        pytest.fail("no page has a stepper player (build with KVLAB_STATIC=frames)")
    v = _Visit(browser)
    try:
        v.page.goto(f"{server}/{with_players[0]}", wait_until="load")
        counts = v.page.eval_on_selector_all(".kvlab-flipbook", "els => els.map(e => +e.dataset.frames)")
        k = counts.index(min(counts))
        box = v.page.locator(".kvlab-flipbook").nth(k)
        box.scroll_into_view_if_needed()
        assert box.get_attribute("data-step") == "1" and "step 1 /" in box.locator(".kvlab-caption").inner_text()
        box.locator(".kvlab-fb-play").click()
        n = counts[k]
        v.page.wait_for_function("([el, n]) => el.dataset.step === String(n)", arg=[box.element_handle(), n],
                                 timeout=2_000 * n + 5_000)
        assert f"step {n} / {n}" in box.locator(".kvlab-caption").inner_text()
        assert box.locator(".kvlab-fb-slider").input_value() == str(n)
        if n > 1:
            box.locator(".kvlab-fb-prev").click()
            assert box.get_attribute("data-step") == str(n - 1)
        assert not v.errors, v.errors
        with_solutions = [n for n in site["pages"] if "<details class='solution'>" in (SITE / n).read_text()]
        assert with_solutions, "no page shows an exercise's solution"
        v.page.goto(f"{server}/{with_solutions[0]}", wait_until="load")
        solution = v.page.locator("details.solution").first
        solution.scroll_into_view_if_needed()
        assert not solution.locator("pre").first.is_visible(), "the solution shows before 'show' is clicked"
        solution.locator("summary").click()
        assert solution.locator("pre").first.is_visible()
        hint = v.page.locator("section.md details").first  # the hints: collapsed too
        assert hint.count() and not hint.evaluate("d => d.open")
    finally:
        v.page.close()


def test_every_lesson_page_links_to_its_neighbours(site):
    lessons = sorted(p.stem + ".html" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    for prev, nxt in zip(lessons, lessons[1:]):
        assert f"href='{nxt}'" in (SITE / prev).read_text(), f"{prev} does not link to {nxt}"
        assert f"href='{prev}'" in (SITE / nxt).read_text(), f"{nxt} does not link back to {prev}"
    assert json.loads((SITE / "manifest.json").read_text())["pages"]
