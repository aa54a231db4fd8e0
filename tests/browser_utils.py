"""JupyterLab + headless Chromium, shared by tests/test_browser.py and scripts/screenshots.py.

One JupyterLab server (127.0.0.1, a free port, a random token passed through the environment)
serves copies of the lessons with their outputs stripped (stale stored outputs cannot fool a
check); a page opens a lesson, runs Run > Run All Cells and waits until every code cell has
run. Then :func:`layout_report` measures what a student would see: every output wider than its
output area, and every visible text in an output smaller than the minimum (12 px, or 16 px in
classroom mode, where :data:`CLASSROOM_CELL` is inserted after the first code cell); and what a
reviewer's eye catches: text crossed by a drawn line or arrow, text over text, text cut by its figure's edge, a
step counter shown twice, a legend entry drawn nowhere, a control and its figure taller than
the visible notebook (599 px in classroom mode).

Example (what scripts/screenshots.py does for one lesson):
    >>> with jupyter_lab(folder) as lab, chromium() as browser:             # doctest: +SKIP
    ...     page = open_and_run_all(browser, lab, "04_paging.ipynb", NORMAL_VIEWPORT)
    ...     layout_report(page, "04", classroom=False)   # [] when everything fits
    []

Needs Debian's Chromium (/usr/bin/chromium, or $KVLAB_CHROMIUM) and the playwright package;
never runs `playwright install` (it downloads a browser).
"""
from __future__ import annotations

import json
import os
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
from typing import Any, Iterator

import nbformat

ROOT = Path(__file__).resolve().parent.parent
ARTIFACTS = ROOT / "tests" / "_artifacts"
CHROMIUM = Path(os.environ.get("KVLAB_CHROMIUM", "/usr/bin/chromium"))
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
RUN_TIMEOUT_MS = 240_000  # lesson 09 ran 100 s on a loaded 2-core machine
NORMAL_VIEWPORT = {"width": 1500, "height": 1000}
CLASSROOM_VIEWPORT = {"width": 1280, "height": 720}  # a projector, with the file browser open
CLASSROOM_CELL = "import kvlab.viz as viz\nviz.classroom(True)  # inserted by the browser check: a projector"
MIN_TEXT_PX = {False: 12, True: 16}  # normal, classroom


def lesson_names(selected: list[str] | None = None) -> list[str]:
    """The lesson notebooks (``NN_*.ipynb``), all or those whose number is in ``selected``.

    Example: ``lesson_names(["4", "07"]) -> ['04_paging.ipynb', '07_radix.ipynb']``.
    """
    names = sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    if not selected:
        return names
    wanted = {s.zfill(2)[:2] for s in selected}
    unknown = wanted - {n[:2] for n in names}
    if unknown:
        raise ValueError(f"no lesson numbered {sorted(unknown)} in notebooks/ (have {[n[:2] for n in names]})")
    return [n for n in names if n[:2] in wanted]


def browser_problems() -> list[str]:
    """What is missing to run Chromium under playwright (empty when both are there)."""
    problems = []
    if not CHROMIUM.exists():
        problems.append(f"{CHROMIUM} not found (apt-get install -y chromium)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        problems.append("the playwright Python package is missing (pip install playwright; never `playwright install`)")
    return problems


def classroom_name(name: str) -> str:
    """The file name of a lesson's classroom copy: ``04_paging.ipynb -> 04_paging.classroom.ipynb``."""
    return name.replace(".ipynb", ".classroom.ipynb")


def stripped_copy(name: str, dest: Path, classroom: bool = False) -> Path:
    """Copy ``notebooks/<name>`` into ``dest`` without outputs; with ``classroom``, as
    :func:`classroom_name` with :data:`CLASSROOM_CELL` inserted after the first code cell."""
    nb = nbformat.read(ROOT / "notebooks" / name, as_version=4)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    if classroom:
        first = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        cell = nbformat.v4.new_code_cell(CLASSROOM_CELL)
        cell.id = "classroom"
        nb.cells.insert(first + 1, cell)
        name = classroom_name(name)
    nbformat.write(nb, dest / name)
    return dest / name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyter_lab(folder: Path, log_path: Path | None = None) -> Iterator[tuple[str, str, Path]]:
    """A JupyterLab server over ``folder``; yields ``(base_url, token, folder)``.

    Every cell renders (no windowing), no news popups, kernels import this checkout's kvlab
    (PYTHONPATH), and KVLAB_STATIC / KVLAB_CHECK_STRICT are dropped (live widgets). Raises
    RuntimeError, naming the log, when the server does not answer within 60 s.
    """
    port, token = _free_port(), secrets.token_hex(16)
    env = {k: v for k, v in os.environ.items() if k not in ("KVLAB_STATIC", "KVLAB_CHECK_STRICT")}
    env["JUPYTER_RUNTIME_DIR"] = str(folder / ".runtime")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)
    env.setdefault("OMP_NUM_THREADS", "1")
    env["JUPYTER_TOKEN"] = token  # as scripts/lab.sh: never on the command line (visible in ps)
    settings = folder / ".settings"
    for ext, text in (("notebook-extension/tracker", '{"windowingMode": "none", "recordTiming": false, '
                                                    '"codeCellConfig": {"lineWrap": true}}'),
                      ("apputils-extension/notification", '{"fetchNews": "false", "checkForUpdates": false}')):
        path = settings / "@jupyterlab" / f"{ext}.jupyterlab-settings"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    cmd = [sys.executable, "-m", "jupyter", "lab", "--no-browser", "--ip=127.0.0.1", f"--port={port}",
           f"--ServerApp.root_dir={folder}", f"--LabApp.workspaces_dir={folder / '.workspaces'}",
           f"--LabApp.user_settings_dir={settings}", "--ServerApp.port_retries=0",
           "--LabApp.expose_app_in_browser=True"]  # window.jupyterapp: tests/test_browser.py re-runs cells
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    log_path = log_path or ARTIFACTS / "jupyterlab.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "w")
    proc = subprocess.Popen(cmd, cwd=folder, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.time() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"JupyterLab did not start (exit {proc.poll()}); see {log_path}")
            time.sleep(0.3)
        yield base, token, folder
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium under playwright, headless (a playwright Browser)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield b
        finally:
            b.close()


_EXECUTE_JS = """async (codes) => {
    const kernel = window.jupyterapp.shell.currentWidget.sessionContext.session.kernel;
    const results = [];
    for (const code of codes) {
        const outputs = [];
        const future = kernel.requestExecute({code, store_history: false});
        future.onIOPub = (msg) => {
            const kind = msg.header.msg_type;
            if (['stream', 'display_data', 'execute_result', 'error'].includes(kind)) {
                const o = {output_type: kind, ...msg.content};
                delete o.transient;
                outputs.push(o);
            }
        };
        await future.done;
        results.push(outputs);
    }
    return results;
}"""


def kernel_execute(page, codes: list[str]) -> list[list[dict]]:
    """Run each of ``codes`` in the kernel of the page's notebook, in order, as no cell (nothing
    shows on the page, the cells' numbers do not move); per code its outputs (nbformat dicts).
    Needs ``--LabApp.expose_app_in_browser`` (:func:`jupyter_lab` sets it)."""
    return page.evaluate(_EXECUTE_JS, codes)


def open_lesson(page, lab: tuple[str, str, Path], name: str) -> None:
    """Load JupyterLab in ``page`` with ``name`` open (its kernel starts): returns once the page has
    loaded; JupyterLab goes on starting in the browser (:func:`run_all` waits for its kernel)."""
    base, token, _ = lab
    page.goto(f"{base}/lab/tree/{name}?token={token}&reset", timeout=60_000)


def run_all(page, lab: tuple[str, str, Path], name: str, before: str | None = None, opened: bool = False) -> None:
    """Open ``name`` in ``page`` (``opened``: :func:`open_lesson` already did), Run All Cells, wait
    until every code cell shows a number. ``before``: code run in the kernel first, as no cell
    (:func:`kernel_execute`); it must not fail."""
    _, _, folder = lab
    t0 = time.monotonic()
    if not opened:
        open_lesson(page, lab, name)
    RUN_TIMES["loaded"] = round(time.monotonic() - t0, 2)
    # The kernel is ready when the status bar says "Idle" (the execution indicator says idle too early).
    page.wait_for_function(
        """() => /Python 3.*\\|\\s*Idle/.test(document.querySelector('.jp-StatusBar-Widget, #jp-main-statusbar')?.textContent || '')""",
        timeout=60_000, polling=300,
    )
    RUN_TIMES["kernel_idle"] = round(time.monotonic() - t0, 2)
    if before is not None:
        errors = [o for o in kernel_execute(page, [before])[0] if o["output_type"] == "error"]
        if errors:
            raise AssertionError(f"{name}: the code run before the lesson failed: {errors[0]['ename']}: {errors[0]['evalue']}")
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
    if not started:
        raise AssertionError(f"{name}: Run All Cells did not start any cell")
    RUN_TIMES["started"] = round(time.monotonic() - t0, 2)
    n_code = sum(1 for c in nbformat.read(folder / name, as_version=4).cells if c.cell_type == "code")
    page.wait_for_function(  # every code cell's prompt shows a number (not "[ ]" or "[*]")
        """(n) => {
            const prompts = [...document.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')];
            return prompts.length >= n && prompts.filter(p => /\\[\\d+\\]/.test(p.textContent)).length >= n;
        }""",
        arg=n_code, timeout=RUN_TIMEOUT_MS, polling=500,
    )
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=30_000)
    RUN_TIMES["done"] = round(time.monotonic() - t0, 2)


RUN_TIMES: dict = {}   # the last run_all's seconds from goto: loaded, kernel_idle, started, done


def open_and_run_all(browser, lab, name: str, viewport: dict, failed_shot: Path | None = None,
                     before: str | None = None, page=None):
    """A new page at ``viewport`` with ``name`` run top to bottom (see :func:`run_all`); or
    ``page``, where :func:`open_lesson` opened ``name`` already."""
    opened = page is not None
    page = page or browser.new_page(viewport=viewport)
    try:
        run_all(page, lab, name, before=before, opened=opened)
    except Exception:
        if failed_shot is not None:
            failed_shot.parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(failed_shot))
        page.close()
        raise
    return page


def prepare_folder(folder: Path, names: list[str]) -> None:
    """Stripped copies of ``names`` into ``folder``, each also as its classroom copy, and the glossary."""
    for name in names:
        stripped_copy(name, folder)
        stripped_copy(name, folder, classroom=True)
    shutil.copy(ROOT / "notebooks" / "glossary.md", folder / "glossary.md")


@contextmanager
def lesson_page(browser, lab, name: str, classroom: bool = False, viewport: dict | None = None):
    """A page with lesson ``name`` run top to bottom: at 1500x1000, or in classroom mode (its
    classroom copy) at 1280x720 with the file browser open. Closed after, with every kernel."""
    file = classroom_name(name) if classroom else name
    viewport = viewport or (CLASSROOM_VIEWPORT if classroom else NORMAL_VIEWPORT)
    mode = "classroom" if classroom else "normal"
    page = open_and_run_all(browser, lab, file, viewport, failed_shot=ARTIFACTS / f"{name[:2]}_{mode}_failed.png")
    try:
        if classroom:
            ensure_file_browser_open(page)
        yield page
    finally:
        page.close()
        shutdown_kernels(lab)


def cell_errors(page) -> list[str]:
    """The tracebacks shown in the page's outputs, and widgets that failed to render."""
    errors = page.evaluate(
        """() => [...document.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]')]
                 .map(e => e.textContent).filter(t => /Traceback|\\w+Error:|Exception:/.test(t))"""
    )
    if page.locator(".jupyter-widgets .jp-RenderedText:has-text('Error displaying widget')").count():
        errors.append("a widget failed to render (Error displaying widget)")
    return errors


def shutdown_kernels(lab, path: str | None = None) -> None:
    """Stop every kernel of the server (each lesson's kernel holds torch; CI has little memory), or
    only those of notebook ``path``'s sessions."""
    base, token, _ = lab
    try:
        if path is None:
            with urllib.request.urlopen(f"{base}/api/kernels?token={token}", timeout=10) as r:
                kernels = json.load(r)
        else:
            with urllib.request.urlopen(f"{base}/api/sessions?token={token}", timeout=10) as r:
                kernels = [s["kernel"] for s in json.load(r) if s.get("path") == path and s.get("kernel")]
        for k in kernels:
            req = urllib.request.Request(f"{base}/api/kernels/{k['id']}?token={token}", method="DELETE")
            urllib.request.urlopen(req, timeout=10).close()
    except OSError:
        pass  # the server is going away anyway


def ensure_file_browser_open(page) -> None:
    """The left sidebar's file browser shown (as a teacher has it), whatever the restored layout."""
    if not page.evaluate("() => (document.querySelector('#filebrowser')?.offsetWidth || 0) > 100"):
        page.locator(".jp-SideBar.jp-mod-left .lm-TabBar-tab[data-id='filebrowser']").first.click()
        page.wait_for_function("() => (document.querySelector('#filebrowser')?.offsetWidth || 0) > 100", timeout=10_000)


_SCROLLER = "document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-WindowedPanel-outer')"


_DRAWN_IN_VIEW_JS = """async () => {
    const frame = () => new Promise(r => requestAnimationFrame(() => r()));
    const inView = el => { const r = el.getBoundingClientRect();
        return r.width > 0 && r.height > 0 && r.bottom > 0 && r.top < window.innerHeight; };
    const t0 = performance.now();
    await frame(); await frame();
    while (performance.now() - t0 < 2000) {
        const pending = [...document.querySelectorAll('.jp-RenderedPlotly, .js-plotly-plot')]
            .filter(el => inView(el) && !el.querySelector('.main-svg'));
        if (!pending.length) return true;
        await new Promise(r => setTimeout(r, 30));
    }
    return false;
}"""


def page_chunks(page, out_dir: Path | None = None, prefix: str = "", max_chunks: int = 60) -> list[Path]:
    """Scroll the notebook from top to bottom one screen at a time (plotly draws a figure only
    once it comes into view); with ``out_dir``, save each screen as ``<prefix>_NN.png``."""
    paths: list[Path] = []
    page.evaluate(f"() => {{ const s = {_SCROLLER}; if (s) s.scrollTop = 0; }}")
    for i in range(max_chunks):
        if out_dir is not None:
            page.wait_for_timeout(250)
        else:   # until every figure in view is drawn (two frames at least, at most 2 s)
            page.evaluate(_DRAWN_IN_VIEW_JS)
        if out_dir is not None:
            path = out_dir / f"{prefix}_{i:02d}.png"
            page.screenshot(path=str(path))
            paths.append(path)
        moved = page.evaluate(f"""() => {{
            const s = {_SCROLLER};
            if (!s) return false;
            const before = s.scrollTop;
            s.scrollTop = before + Math.round(s.clientHeight * 0.9);
            return s.scrollTop > before;
        }}""")
        if not moved:
            break
    if out_dir is None:  # plotly sizes a figure in the frames after it draws it: two more frames, at
        page.evaluate(_DRAWN_IN_VIEW_JS)  # least (a fixed 500 ms cost ~13 s per run over 26 passes)
    else:
        page.wait_for_timeout(500)  # screenshots: let plotly finish sizing the last figures
    return paths


_LAYOUT_JS = """([minPx, wordCut]) => {
    const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')];
    const found = [];
    const describe = el => {
        const cls = (typeof el.className === 'string' ? el.className : el.className.baseVal || '')
            .split(/\\s+/).filter(c => c && !c.startsWith('lm-')).slice(0, 3).join('.');
        return el.tagName.toLowerCase() + (cls ? '.' + cls : '');
    };
    const visible = el => {
        const r = el.getBoundingClientRect();
        if (r.width < 1 || r.height < 1) return false;
        const st = getComputedStyle(el);
        return st.visibility !== 'hidden' && st.display !== 'none' && parseFloat(st.opacity || '1') > 0.05;
    };
    const ownText = el => [...el.childNodes].filter(n => n.nodeType === 3).map(n => n.textContent).join('').trim();
    cells.forEach((cell, index) => {
        cell.querySelectorAll('.jp-OutputArea-output').forEach(out => {
            const box = out.getBoundingClientRect();
            if (box.width === 0) return;
            // 1. wider than the output area: content past its right edge, or an element scrolling sideways
            let widest = null, right = box.right;
            out.querySelectorAll('.js-plotly-plot, .main-svg, .jupyter-widgets, svg, img, table, canvas, pre').forEach(el => {
                const r = el.getBoundingClientRect();
                if (r.width > 0 && r.right > right) { right = r.right; widest = el; }
            });
            if (right > box.right + 2)
                found.push({kind: 'overflow', cell: index, element: describe(widest),
                            content_px: Math.round(right - box.left), area_px: Math.round(box.width)});
            [out, ...out.querySelectorAll('*')].forEach(el => {
                if (el.tagName === 'svg' || el.closest('svg')) return;
                const ox = getComputedStyle(el).overflowX;
                if ((ox === 'auto' || ox === 'scroll') && el.scrollWidth > el.clientWidth + 2 && el.clientWidth > 0)
                    found.push({kind: 'overflow', cell: index, element: describe(el) + ' (scrolls sideways)',
                                content_px: el.scrollWidth, area_px: el.clientWidth});
            });
            // 1b. printed text wrapped inside a word: a line wider than its <pre> while the
            // <pre> breaks anywhere (JupyterLab's word-break: break-all) is cut mid-word on screen
            if (wordCut) out.querySelectorAll('pre').forEach(pre => {
                const st = getComputedStyle(pre);
                if (st.whiteSpace === 'pre' || st.wordBreak !== 'break-all' || !visible(pre)) return;
                const was = pre.style.whiteSpace;
                pre.style.whiteSpace = 'pre';
                const wide = pre.scrollWidth > pre.clientWidth + 1;
                const longest = pre.textContent.split('\\n').reduce((a, l) => l.length > a.length ? l : a, '');
                pre.style.whiteSpace = was;
                if (wide) found.push({kind: 'word-cut', cell: index, element: describe(pre), text: longest.slice(0, 60)});
            });
            // 2. text under the minimum size, as drawn (an SVG's scale counts)
            out.querySelectorAll('text, tspan').forEach(el => {
                if (el.tagName === 'tspan' && el.parentElement.closest('text')) return;  // counted with its <text>
                if (!el.textContent.trim() || !visible(el)) return;
                const m = el.getScreenCTM();
                const scale = m ? Math.sqrt(Math.abs(m.a * m.d - m.b * m.c)) : 1;
                const px = parseFloat(getComputedStyle(el).fontSize) * scale;
                if (px < minPx - 0.05)
                    found.push({kind: 'small-text', cell: index, element: describe(el.closest('svg') || el) + ' text',
                                px: Math.round(px * 10) / 10, text: el.textContent.trim().slice(0, 60)});
            });
            out.querySelectorAll('*').forEach(el => {
                if (el.closest('svg') || el.tagName === 'STYLE' || el.tagName === 'SCRIPT') return;
                const t = ownText(el);
                if (!t || !visible(el)) return;
                const px = parseFloat(getComputedStyle(el).fontSize);
                if (px < minPx - 0.05)
                    found.push({kind: 'small-text', cell: index, element: describe(el), px: Math.round(px * 10) / 10,
                                text: t.slice(0, 60)});
            });
        });
    });
    return found;
}"""


_PICTURE_JS = """([windowPx]) => {
    const cells = [...document.querySelectorAll('.jp-NotebookPanel:not(.lm-mod-hidden) .jp-Notebook .jp-Cell')];
    const found = [];
    const visible = (el, thin = false) => {  // thin: a flat or upright line (its box is 0 px one way) counts
        const r = el.getBoundingClientRect();
        if (thin ? (r.width < 1 && r.height < 1) : (r.width < 1 || r.height < 1)) return false;
        const st = getComputedStyle(el);
        return st.visibility !== 'hidden' && st.display !== 'none' && parseFloat(st.opacity || '1') > 0.05
            && !el.closest('defs, clipPath, mask, .hoverlayer, .modebar');
    };
    const clip = (t, max = 40) => t.replace(/\\s+/g, ' ').trim().slice(0, max);
    // a text's ink box: the glyph box less the room above and below the letters
    const inkBox = r => ({left: r.left + 1, right: r.right - 1, top: r.top + r.height * 0.2, bottom: r.bottom - r.height * 0.2});
    const inside = (p, b) => p.x > b.left && p.x < b.right && p.y > b.top && p.y < b.bottom;
    const meets = (a, b) => a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    const colour = c => (!c || c === 'none' || /rgba\\(.*,\\s*0\\)$/.test(c) || c === 'transparent' || c.startsWith('url(')) ? null : c.replace(/\\s+/g, '');  // a pattern is not a colour
    const WHITE = 'rgb(255,255,255)';
    // strokes that are lines or arrows (not boxes, grids, axes or legend swatches)
    const isLine = el => {
        if (el.closest('.gridlayer, .zerolinelayer, .legend, .infolayer .rangeslider-container, g.node, g.cluster')) return false;
        if (/\\b(xline|yline|crisp|grid|zeroline|tick)/.test(el.getAttribute('class') || '')) return false;
        if (el.closest('.legendpoints, .point') || el.classList.contains('point')) return false;  // bar shapes and markers (error bars are lines)
        const st = getComputedStyle(el);
        if (!colour(st.stroke) || parseFloat(st.strokeWidth || '1') <= 0 || parseFloat(st.strokeOpacity || '1') < 0.1) return false;
        if (el.tagName === 'line' || el.tagName === 'polyline') return true;
        if (el.tagName !== 'path') return false;
        return !colour(st.fill) || parseFloat(st.fillOpacity || '1') < 0.1 || el.closest('g.edge') !== null
            || !/[zZ]/.test(el.getAttribute('d') || 'z');  // an open path has no inside: a line (error bars, whiskers)
    };
    const screenPoints = el => {  // points along a line, in page pixels (every ~2 px)
        const m = el.getScreenCTM();
        if (!m) return [];
        const at = (x, y) => ({x: m.a * x + m.c * y + m.e, y: m.b * x + m.d * y + m.f});
        const pts = [];
        const seg = (x0, y0, x1, y1) => {
            const a = at(x0, y0), b = at(x1, y1);
            const n = Math.max(1, Math.ceil(Math.hypot(b.x - a.x, b.y - a.y) / 2));
            for (let k = 0; k <= n; k++) pts.push({x: a.x + (b.x - a.x) * k / n, y: a.y + (b.y - a.y) * k / n});
        };
        if (el.tagName === 'line') {
            seg(el.x1.baseVal.value, el.y1.baseVal.value, el.x2.baseVal.value, el.y2.baseVal.value);
        } else if (el.tagName === 'polyline') {
            const p = [...el.points];
            for (let k = 1; k < p.length; k++) seg(p[k - 1].x, p[k - 1].y, p[k].x, p[k].y);
        } else {
            const len = el.getTotalLength();
            const n = Math.min(3000, Math.max(2, Math.ceil(len / 1.5)));
            for (let k = 0; k <= n; k++) { const q = el.getPointAtLength(len * k / n); pts.push(at(q.x, q.y)); }
        }
        return pts;
    };
    const rootSvg = el => { let s = el.ownerSVGElement; while (s && s.parentElement && s.parentElement.closest('svg')) s = s.parentElement.closest('svg'); return s; };
    const clipBox = (el, out) => {  // where a text can be seen: its figure, its clip paths, clipping boxes
        const svg = rootSvg(el);
        let b = svg.getBoundingClientRect();
        b = {left: b.left, right: b.right, top: b.top, bottom: b.bottom};
        const cut = r => { b = {left: Math.max(b.left, r.left), right: Math.min(b.right, r.right),
                                top: Math.max(b.top, r.top), bottom: Math.min(b.bottom, r.bottom)}; };
        for (let a = el; a && a !== svg; a = a.parentElement) {
            const ref = a.getAttribute && a.getAttribute('clip-path');
            const id = ref && (ref.match(/url\\(["']?#([^"')]+)["']?\\)/) || [])[1];
            const cp = id && (svg.ownerDocument.getElementById(id));
            const shape = cp && cp.querySelector('rect, path, polygon, circle');
            const m = a.getScreenCTM && a.getScreenCTM();
            if (shape && m && shape.getBBox) {
                const bb = shape.getBBox();
                const xs = [bb.x, bb.x + bb.width].map(x => [bb.y, bb.y + bb.height].map(y => m.a * x + m.c * y + m.e)).flat();
                const ys = [bb.x, bb.x + bb.width].map(x => [bb.y, bb.y + bb.height].map(y => m.b * x + m.d * y + m.f)).flat();
                cut({left: Math.min(...xs), right: Math.max(...xs), top: Math.min(...ys), bottom: Math.max(...ys)});
            }
        }
        for (let a = svg.parentElement; a && a !== out.parentElement; a = a.parentElement) {
            const st = getComputedStyle(a);
            if (st.overflowX !== 'visible' || st.overflowY !== 'visible') cut(a.getBoundingClientRect());
        }
        return b;
    };
    cells.forEach((cell, index) => {
        cell.querySelectorAll('.jp-OutputArea-output').forEach(out => {
            if (out.getBoundingClientRect().width === 0) return;
            const texts = [...out.querySelectorAll('svg text')].filter(t => t.textContent.trim() && visible(t)
                && !(t.parentElement.closest('text')));
            // 1. text crossed by a drawn line or arrow
            const boxes = texts.map(t => ({t, b: inkBox(t.getBoundingClientRect())})).filter(x => x.b.right > x.b.left && x.b.bottom > x.b.top);
            const crossed = new Set();
            out.querySelectorAll('svg line, svg polyline, svg path').forEach(el => {
                if (!boxes.length || !visible(el, true) || !isLine(el)) return;  // thin: a flat or upright line counts
                const r = el.getBoundingClientRect();
                const near = boxes.filter(x => !crossed.has(x.t) && meets(x.b, {left: r.left - 1, right: r.right + 1, top: r.top - 1, bottom: r.bottom + 1}));
                if (!near.length) return;
                const pts = screenPoints(el);
                near.forEach(x => {
                    if (pts.some(p => inside(p, x.b))) {
                        crossed.add(x.t);
                        found.push({kind: 'crossed-text', cell: index, element: (el.closest('.js-plotly-plot') ? 'plotly' : 'svg') + ' ' + el.tagName,
                                    text: clip(x.t.textContent)});
                    }
                });
            });
            // 1b. text drawn over other text (a legend over an axis title, two value labels in one place):
            // ink boxes that share more than a quarter of the smaller one
            const byLeft = boxes.slice().sort((p, q) => p.b.left - q.b.left);
            const area = b => (b.right - b.left) * (b.bottom - b.top);
            for (let i = 0; i < byLeft.length; i++) {
                const a = byLeft[i];
                for (let j = i + 1; j < byLeft.length && byLeft[j].b.left < a.b.right; j++) {
                    const c = byLeft[j];
                    if (a.t.contains(c.t) || c.t.contains(a.t)) continue;
                    const w = Math.min(a.b.right, c.b.right) - Math.max(a.b.left, c.b.left);
                    const h = Math.min(a.b.bottom, c.b.bottom) - Math.max(a.b.top, c.b.top);
                    if (w > 2 && h > 2 && w * h > 0.25 * Math.min(area(a.b), area(c.b)))
                        found.push({kind: 'overlapping-text', cell: index, element: (a.t.closest('.js-plotly-plot') ? 'plotly' : 'svg') + ' text',
                                    text: clip(a.t.textContent, 20) + ' / ' + clip(c.t.textContent, 20)});
                }
            }
            // 2. text clipped by the edge of its figure (or a clip path, or a box that hides overflow)
            texts.forEach(t => {
                const b = inkBox(t.getBoundingClientRect()), c = clipBox(t, out);
                const cut = Math.max(c.left - b.left, b.right - c.right, c.top - b.top, b.bottom - c.bottom);
                if (cut > 1.5)
                    found.push({kind: 'clipped-text', cell: index, element: t.closest('.js-plotly-plot') ? 'plotly text' : 'svg text',
                                px: Math.round(cut), text: clip(t.textContent)});
            });
            // 3. a step counter shown more than once in one output
            const counter = /\\bstep\\s+\\d+\\s*(\\/|of)\\s*\\d+/gi;
            const runs = new Map();  // the text of each block (or SVG <text>), inline parts joined
            const walker = document.createTreeWalker(out, NodeFilter.SHOW_TEXT);
            for (let n = walker.nextNode(); n; n = walker.nextNode()) {
                let host = n.parentElement.closest('text');
                if (!host) {
                    host = n.parentElement;
                    while (host !== out && /^inline/.test(getComputedStyle(host).display)) host = host.parentElement;
                }
                if (!visible(n.parentElement)) continue;
                runs.set(host, (runs.get(host) || '') + n.textContent);
            }
            const shown = [...runs.values()].map(t => t.match(counter) || []).flat();
            if (shown.length > 1)
                found.push({kind: 'step-counter', cell: index, element: 'output', count: shown.length, text: shown.join(' | ')});
            // 4. a legend entry whose colours are drawn nowhere in its figure
            // (JupyterLab's output is the plot.) A stepper's or an animation's legend lists every holder of
            // the whole run, so that it never jumps between frames: only static figures are checked.
            [out, ...out.querySelectorAll('.js-plotly-plot')].filter(el => el.matches('.js-plotly-plot')
                && !el.closest('.kvlab-stepper') && !el.querySelector('.slider-container, .updatemenu-container')).forEach(plot => {
                const drawn = new Set();
                plot.querySelectorAll('.main-svg path, .main-svg rect, .main-svg line').forEach(el => {
                    if (el.closest('.legend, .hoverlayer, .bg, .modebar, defs, clipPath') || !visible(el, true)) return;
                    const st = getComputedStyle(el);
                    if (colour(st.fill) && parseFloat(st.fillOpacity || '1') > 0.05) drawn.add(colour(st.fill));
                    if (colour(st.stroke) && parseFloat(st.strokeWidth || '0') > 0) drawn.add(colour(st.stroke));
                });
                plot.querySelectorAll('.legend .traces').forEach(item => {
                    const cols = new Set();
                    item.querySelectorAll('.legendpoints path, .legendlines path, .legendfill path, .legendsymbols path').forEach(el => {
                        const st = getComputedStyle(el);
                        if (colour(st.fill) && parseFloat(st.fillOpacity || '1') > 0.05) cols.add(colour(st.fill));
                        if (colour(st.stroke) && parseFloat(st.strokeWidth || '0') > 0) cols.add(colour(st.stroke));
                    });
                    cols.delete(WHITE);
                    const missing = [...cols].filter(c => !drawn.has(c));
                    if (cols.size && missing.length)
                        found.push({kind: 'legend-undrawn', cell: index, element: 'plotly legend',
                                    text: clip(item.querySelector('.legendtext')?.textContent || '?') + ' (' + missing.join(' ') + ')'});
                });
            });
            // 5. a control and what it changes on one screen
            const top = [...out.querySelectorAll('.jupyter-widgets')].filter(w => !w.parentElement.closest('.jupyter-widgets'));
            top.forEach(w => {
                const parts = [...w.querySelectorAll('input, button, select, .js-plotly-plot, svg, img, canvas')]
                    .filter(el => visible(el) && !(el.tagName === 'svg' && el.parentElement.closest('svg, .js-plotly-plot, button')));
                if (!parts.some(el => /INPUT|BUTTON|SELECT/.test(el.tagName))) return;
                const rs = parts.map(el => el.getBoundingClientRect());
                const span = Math.max(...rs.map(r => r.bottom)) - Math.min(...rs.map(r => r.top));
                if (span > windowPx + 0.5)
                    found.push({kind: 'tall-control', cell: index, element: (w.className.match(/kvlab-[\\w-]+/) || ['widget'])[0],
                                content_px: Math.round(span), area_px: windowPx});
            });
        });
    });
    return found;
}"""


def layout_report(page, lesson: str, classroom: bool, notebook: str | None = None) -> list[dict]:
    """What a student would trip over in the page as it is now, one dict per problem (same
    ``kind``, cell and element grouped, with ``count`` and up to five ``examples`` of its text):

    - ``overflow``: an output wider than its output area (``content_px``, ``area_px``);
    - ``small-text``: visible text in outputs under 12 px (16 px in classroom mode) (``px``);
    - ``word-cut`` (both modes): printed text whose lines wrap inside a word (a line wider than
      its ``<pre>`` where the ``<pre>`` breaks anywhere: JupyterLab's own style, without the page
      style a lesson's first cell shows, :func:`kvlab.viz.palette.page_css`);
    - ``crossed-text``: SVG or plotly text whose letters a drawn line or arrow runs through
      (graphviz edges, plotly lines, error bars and shapes; not grids, axes, boxes or bars);
    - ``overlapping-text``: SVG or plotly text drawn over another text of the same output (their
      letters' boxes share more than a quarter of the smaller one: a legend over an axis title);
    - ``clipped-text``: SVG or plotly text cut by the edge of its figure, a clip path (plotly's
      plot area) or a box that hides overflow (``px``: how much is cut);
    - ``step-counter``: "step k / N" shown more than once in one output (``count``);
    - ``legend-undrawn``: a plotly legend entry whose colour nothing in its figure is drawn in (static
      figures only: a stepper's or an animation's legend covers its whole run);
    - ``tall-control``: a widget whose controls and figures span more than the visible notebook
      (``content_px`` against ``area_px``, about 599 px in classroom mode at 1280x720): a
      teacher who moves the control cannot see what it changes.

    ``cell`` is the cell's index in ``notebooks/<lesson>`` (the inserted classroom cell is not
    counted). Call :func:`page_chunks` first."""
    window = page.evaluate(f"() => {_SCROLLER}?.clientHeight || window.innerHeight")
    raw = page.evaluate(_LAYOUT_JS, [MIN_TEXT_PX[classroom], True]) + page.evaluate(_PICTURE_JS, [window])
    mode = "classroom" if classroom else "normal"
    first_code = _first_code_index(notebook or lesson)  # notebook: the file, where a number has two (09)
    grouped: dict[tuple, dict] = {}
    for item in raw:
        cell = item["cell"]
        if classroom and cell == first_code + 1:
            cell = "classroom"  # the inserted viz.classroom(True) cell
        elif classroom and cell > first_code:
            cell -= 1
        key = (item["kind"], cell, item["element"], item.get("px") if item["kind"] == "small-text" else None,
               item.get("content_px"))
        if key not in grouped:
            grouped[key] = {"lesson": lesson, "mode": mode, **item, "cell": cell, "count": 0, "examples": []}
        entry = grouped[key]
        entry["count"] += item.get("count", 1)
        if item.get("text") and item["text"] not in entry["examples"] and len(entry["examples"]) < 5:
            entry["examples"].append(item["text"])
    return list(grouped.values())


def _first_code_index(lesson: str) -> int:
    matches = lesson_names([lesson[:2]])  # 09 and its appendix share a number: the lesson itself first
    exact = [m for m in matches if Path(m).stem == Path(lesson).stem]
    nb = nbformat.read(ROOT / "notebooks" / (exact or matches)[0], as_version=4)
    return next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")


_SAYS = {  # kind -> what one line of the report says after "where: "
    "small-text": "{count} text(s) at {px} px, e.g. {said}",
    "tall-control": "controls and figures span {content_px} px, {area_px} px on screen",
    "word-cut": "{count} printed line(s) wrapped inside a word, e.g. {said}",
    "step-counter": "the step counter shown {count} times: {said}",
    "clipped-text": "{count} text(s) cut by the figure's edge (up to {px} px): {said}",
    "crossed-text": "{count} text(s) crossed by a line or arrow: {said}",
    "overlapping-text": "{count} text(s) drawn over another text: {said}",
    "legend-undrawn": "{count} legend entr(ies) with nothing drawn in their colour: {said}",
}


def format_report(entries: list[dict]) -> str:
    """One line per entry, for an assertion message or a terminal."""
    lines = []
    for e in entries:
        where = f"{e['lesson']} {e['mode']} cell {e['cell']}: {e['element']}"
        said = ", ".join(repr(t) for t in e.get("examples", [])) or repr(e.get("text", ""))
        if e["kind"] == "overflow":
            lines.append(f"{where} is {e['content_px']} px wide in a {e['area_px']} px output area")
        else:
            lines.append(f"{where}: " + _SAYS.get(e["kind"], e["kind"] + ": {count}: {said}").format(**{**e, "said": said}))
    return "\n".join(lines)
