"""The lessons in a real browser: JupyterLab in headless Chromium, driven by Playwright.

One module-scoped JupyterLab server (127.0.0.1, a free port, a random token) serves copies of
lessons with their outputs stripped, in a temporary folder (stale stored outputs cannot fool
the checks). For each lesson opened: Run > Run All Cells, wait until every cell has run, then
check that no cell shows an error, that plotly figures and widgets render, and drive widgets:

- lesson 04, in classroom mode on a 1280x720 screen with the file browser open (a projector):
  no figure or widget is wider than its output area, the widget controls are larger, the
  translation widget's position slider, moved to 4 (L1 -> P7) and back to 9, shows L2, offset 1
  and P1, and the memory-map stepper's Next button moves its caption, numbered "step k / N";
- lesson 02: the plotly bar chart renders;
- lesson 07 (when it exists): the radix stepper's Next button changes the caption and the tree;
- every other lesson: runs clean, and its widgets and plotly figures render.
Each lesson's kernel is shut down after its test. The whole file takes about 2 minutes (one
JupyterLab server and one browser for every lesson).

Screenshots go to tests/_artifacts/ (git-ignored). With KVLAB_UPDATE_SCREENSHOTS=1 the two for
the README are also copied to docs/img/ (memory_map.png, radix_tree.png).

Skips (never fails) only when Debian's Chromium (/usr/bin/chromium) or Playwright is missing
and CI is not set; with CI=true a missing browser is a failure. Never runs `playwright install`.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import nbformat
import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "_artifacts"
CHROMIUM = Path(os.environ.get("KVLAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
IN_CI = os.environ.get("CI", "").lower() == "true"
RUN_TIMEOUT_MS = 90_000


def _require_browser():
    problems = []
    if not CHROMIUM.exists():
        problems.append(f"{CHROMIUM} not found (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the playwright Python package is missing (pip install playwright; never `playwright install`)")
    if problems:
        msg = "; ".join(problems)
        if IN_CI:
            pytest.fail(f"CI=true but the browser test cannot run: {msg}")
        pytest.skip(f"browser test skipped outside CI: {msg}")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLASSROOM_LESSON = "04_paging.ipynb"  # run in classroom mode, on a projector-sized screen
CLASSROOM_VIEWPORT = {"width": 1280, "height": 720}
CLASSROOM_CELL = "import kvlab.viz as viz\nviz.classroom(True)  # inserted by tests/test_browser.py: a projector"


def _stripped_copy(name: str, dest: Path, classroom: bool = False) -> bool:
    """A copy without outputs; with ``classroom``, a cell turning classroom mode on after the self-test."""
    src = ROOT / "notebooks" / name
    if not src.exists():
        return False
    nb = nbformat.read(src, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if classroom:
        first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        cell = nbformat.v4.new_code_cell(CLASSROOM_CELL)
        cell.id = "classroom"
        nb.cells.insert(first + 1, cell)
    nbformat.write(nb, dest / name)
    return True


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """(base_url, token, folder) of a JupyterLab server over stripped lesson copies."""
    _require_browser()
    folder = tmp_path_factory.mktemp("lab")
    for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"):
        _stripped_copy(p.name, folder, classroom=p.name == CLASSROOM_LESSON)
    shutil.copy(ROOT / "notebooks" / "glossary.md", folder / "glossary.md")
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("KVLAB_STATIC", "KVLAB_CHECK_STRICT")}
    env["JUPYTER_RUNTIME_DIR"] = str(folder / ".runtime")
    # Render every cell (JupyterLab 4 otherwise renders only the cells in view), no news popups.
    settings = folder / ".settings"
    (settings / "@jupyterlab" / "notebook-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "notebook-extension" / "tracker.jupyterlab-settings").write_text(
        '{"windowingMode": "none", "recordTiming": false}')
    (settings / "@jupyterlab" / "apputils-extension").mkdir(parents=True)
    (settings / "@jupyterlab" / "apputils-extension" / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}')
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--ServerApp.root_dir={folder}",
           f"--LabApp.workspaces_dir={folder / '.workspaces'}", f"--LabApp.user_settings_dir={settings}",
           "--ServerApp.port_retries=0"]
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = open(ARTIFACTS / "jupyterlab.log", "w")
    env = dict(env, JUPYTER_TOKEN=token)  # as scripts/lab.sh: never on the command line (visible in ps)
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                if r.status == 200:
                    break
        except OSError:
            pass
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            log.close()
            pytest.fail(f"JupyterLab did not start (exit {proc.poll()}); see {ARTIFACTS / 'jupyterlab.log'}")
        time.sleep(0.3)
    yield base, token, folder
    os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
    log.close()


@pytest.fixture(scope="module")
def browser(lab):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        yield b
        b.close()


def _open_and_run_all(browser, lab, name: str, viewport: dict | None = None):
    """Open a lesson, Run All Cells, wait until every code cell has run; return the page."""
    base, token, folder = lab
    page = browser.new_page(viewport=viewport or {"width": 1800, "height": 1000})
    try:
        _run_all(page, base, token, folder, name)
    except Exception:
        page.screenshot(path=str(ARTIFACTS / f"{name[:2]}_failed.png"))
        page.close()
        raise
    return page


def _run_all(page, base, token, folder, name):
    page.goto(f"{base}/lab/tree/{name}?token={token}&reset", timeout=60_000)
    # The kernel is ready when the status bar says "Idle" (the execution indicator says idle too early).
    page.wait_for_function(
        """() => /Python 3.*\\|\\s*Idle/.test(document.querySelector('.jp-StatusBar-Widget, #jp-main-statusbar')?.textContent || '')""",
        timeout=60_000, polling=300,
    )
    started = False
    for _attempt in range(3):  # a Run All sent while the kernel still connects can be dropped: send it again
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.wait_for_function(
                "() => [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')].some(p => /\\[(\\*|\\d+)\\]/.test(p.textContent))",
                timeout=10_000, polling=300,
            )
            started = True
            break
        except Exception:
            continue
    assert started, f"{name}: Run All Cells did not start any cell"
    n_code = sum(1 for c in nbformat.read(folder / name, as_version=4).cells if c.cell_type == "code")
    # every code cell's prompt shows a number (not "[ ]" or "[*]") once the kernel has run it
    page.wait_for_function(
        """(n) => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
            const done = prompts.filter(p => /\\[\\d+\\]/.test(p.textContent));
            return prompts.length >= n && done.length >= n;
        }""",
        arg=n_code, timeout=RUN_TIMEOUT_MS, polling=500,
    )
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=30_000)


def _assert_no_errors(page, name: str):
    errors = page.evaluate(
        """() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
                 .map(e => e.textContent).filter(t => /Traceback|\\w+Error:|Exception:/.test(t))"""
    )
    assert not errors, f"{name}: a cell shows an error:\n{errors[0][:1500]}"
    broken = page.locator(".jupyter-widgets .jp-RenderedText:has-text('Error displaying widget')").count()
    assert broken == 0, f"{name}: a widget failed to render"


def _shot(page, locator, filename: str) -> Path:
    out = ARTIFACTS / filename
    locator.scroll_into_view_if_needed()
    locator.screenshot(path=str(out))
    if os.environ.get("KVLAB_UPDATE_SCREENSHOTS") == "1" and filename in ("memory_map.png", "radix_tree.png"):
        (ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        shutil.copy(out, ROOT / "docs" / "img" / filename)
    return out


@contextmanager
def _lesson(browser, lab, name: str, viewport: dict | None = None):
    """Open and run a lesson, check it shows no error, yield the page; screenshot and close it after."""
    if not (lab[2] / name).exists():
        pytest.fail(f"notebooks/{name} is missing")
    page = _open_and_run_all(browser, lab, name, viewport)
    try:
        _assert_no_errors(page, name[:2])
        yield page
    finally:
        page.screenshot(path=str(ARTIFACTS / f"{name[:2]}_page.png"))
        page.close()
        _shutdown_kernels(lab)


def _shutdown_kernels(lab) -> None:
    """Stop every kernel of the server (each lesson's kernel holds torch; CI has little memory)."""
    base, token, _ = lab
    try:
        with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
            kernels = json.load(r)
        for k in kernels:
            req = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE")
            urllib.request.urlopen(req, timeout=10).close()
    except OSError:
        pass  # the server is going away anyway


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


# Lessons with their own test below; every other lesson is run clean here.
_DEDICATED = {"02_how_big.ipynb", CLASSROOM_LESSON, "07_radix.ipynb"}
_OTHERS = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb") if p.name not in _DEDICATED)


@pytest.mark.parametrize("name", _OTHERS)
def test_lesson_runs_clean(browser, lab, name):
    with _lesson(browser, lab, name) as page:
        kinds = _stored_kinds(name)
        if "widget" in kinds:
            page.wait_for_selector(".jupyter-widgets", timeout=20_000)
        if "plotly" in kinds or "widget" in kinds:  # kvlab's widgets hold plotly figures or SVG
            page.wait_for_selector(".js-plotly-plot .main-svg, .kvlab-svg svg", timeout=20_000)


def test_lesson_02_plotly(browser, lab):
    with _lesson(browser, lab, "02_how_big.ipynb") as page:
        page.wait_for_selector(".js-plotly-plot .main-svg", timeout=20_000)
        assert page.locator(".js-plotly-plot").count() >= 1
        _shot(page, page.locator(".js-plotly-plot").first, "02_kv_sizes.png")


def _set_slider(page, slider_class: str, value: int):
    readout = page.locator(f".{slider_class} .widget-readout").first
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type(str(value))
    page.keyboard.press("Enter")


def _ensure_file_browser_open(page) -> None:
    """The left sidebar's file browser shown (as a teacher has it), whatever the restored layout."""
    if not page.evaluate("() => (document.querySelector('#filebrowser')?.offsetWidth || 0) > 100"):
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='filebrowser']").first.click()
        page.wait_for_function("() => (document.querySelector('#filebrowser')?.offsetWidth || 0) > 100", timeout=10_000)


def _overflowing_outputs(page) -> list[str]:
    """Every output area whose figure or widget is wider than the area itself (it would be cut off
    or scroll sideways on the projector)."""
    return page.evaluate("""() => {
        const bad = [];
        document.querySelectorAll('.jp-OutputArea-output').forEach((out, i) => {
            const box = out.getBoundingClientRect();
            if (box.width === 0) return;
            const inner = out.querySelectorAll('.js-plotly-plot, .main-svg, .jupyter-widgets, .kvlab-svg svg, .widget-hbox, img');
            let right = box.right;
            inner.forEach(el => { right = Math.max(right, el.getBoundingClientRect().right); });
            if (right > box.right + 2 || out.scrollWidth > out.clientWidth + 2)
                bad.push(`output ${i}: content ends at ${Math.round(right)} px, the area at ${Math.round(box.right)} px ` +
                         `(scrollWidth ${out.scrollWidth}, clientWidth ${out.clientWidth})`);
        });
        return bad;
    }""")


def test_lesson_04_in_classroom_mode_on_a_projector(browser, lab):
    """Lesson 04 at 1280x720, classroom mode, file browser open: nothing overflows, the controls
    grow, and the widgets respond."""
    with _lesson(browser, lab, CLASSROOM_LESSON, CLASSROOM_VIEWPORT) as page:
        _ensure_file_browser_open(page)
        page.wait_for_selector(".jupyter-widgets", timeout=20_000)
        page.wait_for_selector(".kvlab-translation .js-plotly-plot", timeout=20_000)
        page.wait_for_selector(".kvlab-stepper .js-plotly-plot .main-svg", timeout=20_000)
        figures = page.locator(".jp-RenderedPlotly")
        assert figures.count() >= 3, f"lesson 04 shows {figures.count()} figures, expected the widget's, the stepper's, the animation"
        for i in range(figures.count()):  # plotly draws a figure when it comes into view: visit each one
            figures.nth(i).scroll_into_view_if_needed()
            figures.nth(i).locator(".main-svg").first.wait_for(timeout=20_000)
        page.wait_for_timeout(500)  # let plotly finish sizing the figures to their areas
        bad = _overflowing_outputs(page)
        assert not bad, "classroom mode at 1280x720: figures wider than their output area:\n" + "\n".join(bad)
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
        assert not _overflowing_outputs(page)
        _shot(page, stepper, "memory_map.png")


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
