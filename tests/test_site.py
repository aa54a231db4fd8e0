"""The static site (`make site`) in a real browser: every page of site/ served from 127.0.0.1
and opened in headless Chromium at 1280, 768 and 390 px wide (a laptop, a tablet, a phone).

Builds the site first (scripts/build_site.py) from the lessons' executed copies that this test
session's runs made (tests/lesson_runs.py: the browser test's runs, with each drawing cell's
KVLAB_STATIC=frames outputs recorded, or headless runs; in build/lesson-runs/; shared with
tests/test_lessons_headless.py, each lesson run once per session).
For every page: no console error and no page error, every plotly figure of the lesson's
executed notebook drawn (``.kvlab-plot`` divs with an SVG, counted against the notebook's
plotly outputs), every stepper present as a player, nothing wider than the page (no sideways
scrolling, no output clipped), and no request to anything but 127.0.0.1 (every request is
routed through the test and recorded). At every width: no sideways scrolling of the page, no
player or precomputed control cropped (a figure too dense for the width scrolls inside its own
box, with a note), figure text at least 12 px. One player is played to its last frame; an
exercise's solution is hidden until "show" is clicked; a precomputed control changes state.

Without a browser: the site is under 15 MB and loads plotly.js from its own assets, once per page;
the index has the thesis sentence whole, one summary line per lesson (never "What you will
learn"), enlargeable pictures and the glossary as a link; every lesson page has a contents list,
a banner naming the CPU and its cores, a notebook to download; no FAIL anywhere (each exercise
shows the checker's PASS on its solution), solutions without unused imports; every "Try it"
passage has its control on the page or says the live lesson has it; every lesson with a live
control has at least one precomputed one.

Skips (never fails) when Chromium or playwright is missing and CI is not set.
"""
from __future__ import annotations

import functools
import html
import http.server
import re
import json
import os
import sys
import threading
from pathlib import Path
from urllib.parse import urlparse

import nbformat
import pytest
from browser_utils import CHROMIUM, CHROMIUM_ARGS, ROOT, browser_problems
from lesson_runs import RUNS, executed, hold, release, run_id

pytestmark = pytest.mark.browser

SITE = ROOT / "site"
VIEWPORT = {"width": 1280, "height": 720}
WIDTHS = {1280: 720, 768: 1024, 390: 844}
THESIS = ("PagedAttention decides how KV memory is laid out (the physical layer); RadixAttention decides which "
          "cached KV can be reused across requests (the logical layer); RadixAttention is built on top of paged "
          "allocation.")
WITH_CONTROL = {f"{n:02d}" for n in range(12)}  # every lesson has a live control, and a precomputed copy
APPENDICES: set[str] = set()  # appendices without a control of their own (09's has its scenario menu, issue 28)
MIN_PX = 12
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
    # The session's runs of the lessons (tests/lesson_runs.py: the browser test's, with the site's
    # outputs recorded with KVLAB_STATIC=frames, or headless), not a run of our own: each waits for
    # the worker that holds the lesson's lock.
    for f in lesson_files(selected):
        executed(f.stem)
    # The site's pages are checked by several pytest-xdist workers at once (tests/conftest.py
    # site_unit): the first to get here builds the site, the others wait and read its manifest.
    stamp = RUNS / "site.run_id"
    want = f"{run_id()} {' '.join(selected)}"
    lock = hold("site")
    try:
        if stamp.exists() and stamp.read_text() == want and (SITE / "manifest.json").exists():
            return json.loads((SITE / "manifest.json").read_text())
        stamp.unlink(missing_ok=True)
        manifest = build(selected, SITE, stored=False, jobs=2, executed_dir=RUNS)
        stamp.write_text(want)
        return manifest
    finally:
        release(lock)


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

    def __init__(self, browser, viewport: dict | None = None):
        self.page = browser.new_page(viewport=viewport or VIEWPORT)
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


@pytest.fixture(scope="module")
def visit(browser):
    """One page for every page-and-width item of the module: each item sets the width and loads its
    page afresh (a new document: the check sees what a first load at that width shows), and gets
    the errors and requests of that load only (a new page per item cost ~0.2 s)."""
    v = _Visit(browser)

    def load(url: str, viewport: dict) -> _Visit:
        v.page.goto("about:blank")
        v.errors.clear(), v.outside.clear(), v.requests.clear()
        v.page.set_viewport_size(viewport)
        v.page.goto(url, wait_until="load", timeout=60_000)
        return v

    yield load
    v.page.close()


def _pages() -> list[str]:
    return ["index.html", "glossary.html"] + sorted(p.stem + ".html" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _notebook_figures(info: dict) -> int:
    nb = nbformat.read(ROOT / info["notebook"], as_version=4) if info.get("notebook") else None
    if nb is None:
        return 0
    return sum(PLOTLY_MIME in o.get("data", {}) for c in nb.cells for o in c.get("outputs", []))


def _lessons() -> list[str]:
    return sorted(p.stem + ".html" for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _built_lessons(site) -> list[str]:
    return [n for n in _lessons() if n in site["pages"]]


def _text(html_text: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<script.*?</script>", " ", html_text, flags=re.S))).split())


def test_site_is_small_and_complete(site):
    assert site["bytes"] < 15e6, f"the site is {site['bytes'] / 1e6:.1f} MB (limit 15 MB)"
    assert (SITE / "assets" / "plotly.min.js").stat().st_size > 1e6
    lessons = _built_lessons(site)
    assert lessons, "no lesson page was built"
    for name in lessons:
        info = site["pages"][name]
        assert not info["errors"], f"{name}: a cell failed while building: {info['errors']}"
        text = (SITE / name).read_text()
        assert text.count("plotly.min.js") == 1, f"{name} loads plotly.js {text.count('plotly.min.js')} times"
        assert "cdn" not in text.lower().split("<main>")[0], f"{name} loads something from a CDN"
        assert "class='banner'" in text and "simulated" in text and "measured" in text, f"{name} has no banner"
        assert "counted" in text and "published" in text and " cores" in text, f"{name}: the banner's labels or CPU"
        assert "class='toc'" in text, f"{name} has no table of contents"
        nb = nbformat.read(ROOT / "notebooks" / name.replace(".html", ".ipynb"), as_version=4)
        stubs = sum("exercise-stub" in c.get("metadata", {}).get("tags", []) for c in nb.cells)
        shown = text.count("<details class='solution'>")
        assert shown == stubs, f"{name}: {stubs} exercise stubs, {shown} solutions behind 'show'"
        assert text.count("class='run-locally'") == stubs and (stubs == 0 or "make lab" in text)
        assert len(info["verdicts"]) >= stubs and all(v.endswith("PASS") for v in info["verdicts"]), info["verdicts"]
        assert text.count("<details class='verdict'>") == stubs, f"{name}: an exercise without the checker's verdict"
        shown_outputs = _text(re.sub(r"<section class='md'>.*?</section>", " ", text, flags=re.S))  # not the prose
        assert "FAIL" not in shown_outputs, f"{name} shows a FAIL: {shown_outputs[shown_outputs.find('FAIL') - 200:][:400]}"
        download = SITE / info["download"]
        assert f"href='{info['download']}'" in text and download.exists(), f"{name}: no notebook to download"
        dl = nbformat.read(download, as_version=4)
        assert not any(c.get("outputs") for c in dl.cells if c.cell_type == "code"), f"{download} keeps outputs"
        if name[:2] in WITH_CONTROL and Path(name).stem not in APPENDICES:
            assert info["explorers"] >= 1, f"{name}: its live control has no precomputed copy on the page"
            assert "precomputed at build time" in text
        _assert_try_it_passages(name, text)
        _assert_solutions_use_their_imports(name, text)
    index = (SITE / "index.html").read_text()
    words = _text(index)
    assert THESIS in words, "the index does not carry the thesis sentence whole"
    assert all(f"href='{name}'" in index for name in lessons), "the index does not link every lesson"
    series = index.split("id='series'")[1].split("</table>")[0]
    assert "what you will learn" not in series.lower(), "a lesson is summarised as 'What you will learn'"
    assert series.count("<tr>") == len(lessons) + 1 and "Who it is for" in words and "Where to start" in words
    assert "img/" in index and "target='_blank'" in index and "href='glossary.html'" in index
    assert "id='glossary'" not in index, "the glossary is repeated on the index (link it)"
    assert "kvlab 0." in words and "make lab" in words


def _assert_try_it_passages(name: str, text: str) -> None:
    text = re.sub(r"<details class='(?:toc|banner)'.*?</details>", " ", text, flags=re.S)
    for section in re.findall(r"<section class='md'>(.*?)</section>", text, re.S):
        if re.search(r"\btry it\b|\bmove (?:a|the) slider|\btype a question", _text(section), re.I):
            assert "class='try-here'" in section or "class='live-only'" in section, \
                f"{name}: a 'Try it' passage says neither where its control is nor that it needs the live lesson"
    for rest in text.split("class='try-here'")[1:]:  # the control said to be here comes before the next prose
        head = rest.split("<section class='md'>")[0]
        assert any(m in head for m in ("kvlab-explorer", "kvlab-flipbook", "sliders", "updatemenus")), \
            f"{name}: a passage says its control is on the page, and none follows"


def _assert_solutions_use_their_imports(name: str, text: str) -> None:
    import ast

    for block in re.findall(r"<details class='solution'><summary>show the solution</summary>(.*?)<details", text, re.S):
        tree = ast.parse(html.unescape(re.sub(r"<[^>]+>", "", block)))
        imported = {(a.asname or a.name).split(".")[0] for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))
                    for a in n.names}
        used = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
        assert imported <= used, f"{name}: a solution imports {sorted(imported - used)} and never uses it"


_FIT_JS = """(minPx) => {
    const bad = [], doc = document.documentElement;
    if (doc.scrollWidth > doc.clientWidth + 1) bad.push(`the page scrolls sideways: ${doc.scrollWidth} > ${doc.clientWidth}`);
    const main = document.querySelector('main').getBoundingClientRect();
    const scrolls = el => { for (let e = el; e && e !== document.body; e = e.parentElement) {
        const o = getComputedStyle(e).overflowX; if (o === 'auto' || o === 'scroll') return e; } return null; };
    document.querySelectorAll('.outputs, .html-output, .kvlab-fb-view, .svg-output, .kvlab-explorer, .kvlab-flipbook').forEach(el => {
        if (el.scrollWidth > el.clientWidth + 2 && !scrolls(el)) bad.push(`${el.className} crops ${el.scrollWidth - el.clientWidth} px`);
    });
    document.querySelectorAll('.outputs .main-svg, .outputs svg, .outputs img, .outputs table').forEach(el => {
        const r = el.getBoundingClientRect(), box = scrolls(el);
        if (r.width && r.right > main.right + 2 && !box) bad.push(`${el.tagName}.${el.getAttribute('class') || ''} ends at ${Math.round(r.right)} px, the page at ${Math.round(main.right)}`);
    });
    document.querySelectorAll('.kvlab-wide').forEach(el => {
        const note = el.previousElementSibling;
        if (!note || !note.classList.contains('kvlab-wide-note')) bad.push('a figure scrolls inside itself without saying so');
    });
    document.querySelectorAll('.kvlab-plot .main-svg text, .kvlab-fb-view .main-svg text, .kvlab-ex-plot .main-svg text').forEach(t => {
        const px = parseFloat(getComputedStyle(t).fontSize);
        if (t.textContent.trim() && px < minPx - 0.5) bad.push(`text '${t.textContent.slice(0, 30)}' at ${px} px`);
    });
    return bad;
}"""


# Before the fit check: the fonts loaded and two frames drawn after the last figure's SVG (plotly
# sizes a figure in the frame after it draws it); a fixed 300 ms wait cost ~14 s over 48 items.
_SETTLED_JS = """async () => {
    await document.fonts.ready;
    for (let i = 0; i < 2; i++) await new Promise(r => requestAnimationFrame(() => r()));
}"""


@pytest.mark.parametrize("width", sorted(WIDTHS, reverse=True))
@pytest.mark.parametrize("name", _pages())
def test_page_renders_offline_and_fits(site, server, visit, name, width):
    info = site["pages"].get(name)
    if info is None:
        if os.environ.get("KVLAB_SITE_LESSONS"):
            pytest.skip(f"{name} not in KVLAB_SITE_LESSONS")
        pytest.fail(f"{name} was not built")
    v = visit(f"{server}/{name}", {"width": width, "height": WIDTHS[width]})
    want = _notebook_figures(info)
    assert info["plotly"] == want, f"{name}: the page has {info['plotly']} figures, the notebook {want}"
    if want:
        v.page.wait_for_function("(n) => document.querySelectorAll('.kvlab-plot .main-svg').length >= n",
                                 arg=want, timeout=30_000)
    drawn = v.page.locator(".kvlab-plot.js-plotly-plot").count()
    assert drawn == want, f"{name}: {drawn} plotly figures drawn, the notebook has {want}"
    players = v.page.locator(".kvlab-flipbook").count()
    assert players == info["flipbooks"], f"{name}: {players} players, the notebook has {info['flipbooks']}"
    assert v.page.locator(".kvlab-explorer").count() == info.get("explorers", 0)
    v.page.evaluate(_SETTLED_JS)
    wide = v.page.evaluate(_FIT_JS, MIN_PX)
    assert not wide, f"{name} at {width} px:\n" + "\n".join(wide[:10])
    assert not v.errors, f"{name}:\n" + "\n".join(v.errors[:10])
    assert not v.outside, f"{name} asked for {v.outside[:5]}"
    assert any(u.endswith("assets/site.css") for u in v.requests)


def test_a_precomputed_control_changes_state(site, server, browser):
    with_controls = [n for n, i in site["pages"].items() if i.get("explorers")]
    if not with_controls:
        pytest.fail("no page has a precomputed control")
    v = _Visit(browser, {"width": 390, "height": 844})
    try:
        v.page.goto(f"{server}/{with_controls[0]}", wait_until="load")
        box = v.page.locator(".kvlab-explorer").first
        box.scroll_into_view_if_needed()
        before, caption = box.get_attribute("data-state"), box.locator(".kvlab-ex-html").inner_html()
        assert "precomputed at build time" in box.inner_text()
        inp = box.locator(".kvlab-ex-input").first
        n = int(inp.get_attribute("max") or 0) if inp.get_attribute("type") == "range" else inp.locator("option").count() - 1
        target = "0" if inp.input_value() != "0" else str(n)
        if inp.get_attribute("type") == "range":
            inp.evaluate("(el, v) => { el.value = v; el.dispatchEvent(new Event('input')); }", target)
        else:
            inp.select_option(target)
        assert box.get_attribute("data-state") != before
        assert box.locator(".kvlab-ex-html").inner_html() != caption or box.locator(".kvlab-ex-plot .main-svg").count()
        assert not v.errors, v.errors
    finally:
        v.page.close()


def test_a_player_plays_to_its_last_frame_and_solutions_and_hints_stay_hidden(site, server, browser):
    with_players = [n for n, i in site["pages"].items() if i.get("flipbooks")]
    if not with_players:
        pytest.fail("no page has a stepper player (build with KVLAB_STATIC=frames)")
    v = _Visit(browser)
    try:
        v.page.clock.install()  # the player's own setInterval, run on a fake clock: no 900 ms per frame
        v.page.goto(f"{server}/{with_players[0]}", wait_until="load")
        counts = v.page.eval_on_selector_all(".kvlab-flipbook", "els => els.map(e => +e.dataset.frames)")
        k = counts.index(min(counts))
        box = v.page.locator(".kvlab-flipbook").nth(k)
        box.scroll_into_view_if_needed()
        assert box.get_attribute("data-step") == "1" and "step 1 /" in box.locator(".kvlab-caption").inner_text()
        box.locator(".kvlab-fb-play").click()
        n = counts[k]
        interval = v.page.evaluate("el => JSON.parse(el.querySelector('script.kvlab-fb-data').textContent).interval",
                                   box.element_handle())
        v.page.clock.run_for(interval * n + 100)  # fires the player's timer n times (it stops at n)
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
        solution.locator("summary").first.click()
        assert solution.locator("pre").first.is_visible()
        verdict = solution.locator("details.verdict")  # behind the solution: the checker's verdict on it
        assert not verdict.locator("pre").first.is_visible()
        verdict.locator("summary").click()
        assert "PASS" in verdict.locator("pre").first.inner_text()
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
