"""One executed lesson notebook -> one HTML page of the static site (used by scripts/build_site.py).

What each part becomes:
- markdown cells: HTML (markdown-it-py, CommonMark + tables, raw HTML kept: the hints'
  ``<details>`` stay collapsed); links to ``NN_*.ipynb`` / ``glossary.md`` point at the site's pages;
- code cells: highlighted source (pygments), without the ``# NBVAL_...`` test markers;
- outputs: plotly figures as live plotly.js figures (frames and sliders kept; plotly.js is loaded
  once per page from ``assets/``), SVG inline, PNG as data URIs, HTML as is (steppers arrive as
  kvlab.viz.flipbook players when the lesson ran with ``KVLAB_STATIC=frames``), text in ``<pre>``;
  a widget (which needs a kernel) as a note saying so;
- exercise stubs (``exercise-stub`` tag): the stub, then the solution from ``solutions/`` behind a
  "show" control, and how to run the checker locally.

Example:
    >>> md_to_html("See [lesson 04](04_paging.ipynb) and the [glossary](glossary.md#block).")
    '<p>See <a href="04_paging.html">lesson 04</a> and the <a href="glossary.html#block">glossary</a>.</p>\\n'
"""
from __future__ import annotations

import base64
import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NBVAL = re.compile(r"^\s*# NBVAL_\w+\s*$")
_LINK = re.compile(r'href="(?!https?:|#)([^"#]*?)(\.ipynb|\.md)(#[^"]*)?"')


def _markdown():
    try:
        from markdown_it import MarkdownIt
    except ImportError as e:  # comes with jupyterlab's dependencies today; named in pyproject's lab extra
        raise SystemExit("the static site needs markdown-it-py: .venv/bin/python -m pip install 'markdown-it-py>=3,<5'") from e

    md = MarkdownIt("commonmark", {"html": True}).enable("table")

    def heading_open(renderer, tokens, idx, options, env):  # ids on headings, for links into a page
        text = tokens[idx + 1].content if idx + 1 < len(tokens) else ""
        tokens[idx].attrSet("id", slug(text))
        return md.renderer.renderToken(tokens, idx, options, env)

    md.add_render_rule("heading_open", heading_open)
    return md


_MD = None


def slug(text: str) -> str:
    """A heading's anchor, GitHub style: ``"2. The picture!" -> '2-the-picture'``."""
    s = re.sub(r"[^\w\- ]", "", text.strip().lower(), flags=re.UNICODE)
    return re.sub(r"\s+", "-", s)


def md_to_html(text: str) -> str:
    global _MD
    if _MD is None:
        _MD = _markdown()
    out = _MD.render(text)
    return _LINK.sub(lambda m: f'href="{Path(m.group(1)).name}.html{m.group(3) or ""}"', out)


def highlight(code: str) -> str:
    from pygments import highlight as pyg
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    return pyg(code, PythonLexer(), HtmlFormatter(cssclass="code"))


@dataclass
class PageStats:
    """What a rendered page holds (the site's manifest; the browser test compares against it)."""

    plotly: int = 0  # plotly figures drawn from outputs
    flipbooks: int = 0  # kernel-free steppers
    widgets: int = 0  # outputs that needed a kernel (shown as a note)
    svg: int = 0
    simulated: int = 0  # outputs (figures, printed lines) labelled simulated / measured
    measured: int = 0
    errors: list[str] = field(default_factory=list)


def _plotly_html(spec: dict, n: int) -> str:
    fig = {"data": spec.get("data", []), "layout": spec.get("layout", {})}
    frames = spec.get("frames") or []
    config = {"displaylogo": False, "responsive": True, **spec.get("config", {})}
    payload = json.dumps({"fig": fig, "frames": frames, "config": config}, ensure_ascii=False).replace("</", "<\\/")
    div = f"plotly-{n}"
    return (f"<div class='kvlab-plot' id='{div}'></div><script type='application/json' id='{div}-data'>{payload}</script>"
            f"<script>kvlabPlot('{div}');</script>")


def render_output(out: dict, stats: PageStats) -> str:
    kind = out.get("output_type")
    if kind == "stream":
        cls = "stderr" if out.get("name") == "stderr" else "stdout"
        return f"<pre class='{cls}'>{html.escape(out.get('text', ''))}</pre>"
    if kind == "error":
        tb = _ANSI.sub("", "\n".join(out.get("traceback", [])))
        stats.errors.append(f"{out.get('ename')}: {out.get('evalue')}")
        return f"<pre class='error'>{html.escape(tb)}</pre>"
    data = out.get("data", {})
    if PLOTLY_MIME in data:
        stats.plotly += 1
        return _plotly_html(data[PLOTLY_MIME], stats.plotly + 1000 * stats.flipbooks)
    if WIDGET_MIME in data:
        stats.widgets += 1
        return ("<div class='widget-note'>An interactive control runs here in JupyterLab (it needs a Python kernel): "
                "<code>make lab</code> and open this lesson to use it.</div>")
    if "text/html" in data:
        text = data["text/html"]
        stats.flipbooks += text.count("class='kvlab-flipbook'")
        return f"<div class='html-output'>{text}</div>"
    if "image/svg+xml" in data:
        stats.svg += 1
        return f"<div class='svg-output'>{data['image/svg+xml']}</div>"
    for mime in ("image/png", "image/jpeg"):
        if mime in data:
            b64 = data[mime] if isinstance(data[mime], str) else base64.b64encode(data[mime]).decode()
            return f"<img class='image-output' alt='figure' src='data:{mime};base64,{b64.strip()}'>"
    if "text/markdown" in data:
        return md_to_html(data["text/markdown"])
    if "text/plain" in data:
        return f"<pre class='stdout'>{html.escape(data['text/plain'])}</pre>"
    return ""


def _count_labels(text: str, stats: PageStats) -> None:
    stats.simulated += len(re.findall(r"\bsimulated\b", text))
    stats.measured += len(re.findall(r"\bmeasured\b", text))


def solution_source(stub: str, solution_file: Path) -> str | None:
    """The solution's definitions for the names a stub cell defines (as the notebook tests inject them)."""
    from build_notebooks import inject_solutions  # scripts/ is on sys.path (build_site.py puts it there)

    if not solution_file.exists():
        return None
    cell = inject_solutions([{"cell_type": "code", "source": stub, "tags": ["exercise-stub"]}], solution_file)[0]
    return "\n".join(cell["source"].splitlines()[1:])  # without "# solution injected from ..."


def render_cells(nb: Any, solution_file: Path, stats: PageStats) -> str:
    parts = []
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            parts.append(f"<section class='md'>{md_to_html(cell.source)}</section>")
            continue
        if cell.cell_type != "code":
            continue
        src = "\n".join(ln for ln in cell.source.splitlines() if not _NBVAL.match(ln)).strip("\n")
        outs = []
        for o in cell.get("outputs", []):
            outs.append(render_output(o, stats))
            _count_labels(json.dumps(o.get("data", {}).get(PLOTLY_MIME, {}).get("layout", {}).get("title", ""))
                          + o.get("text", "") + str(o.get("data", {}).get("text/html", "")), stats)
        block = f"<div class='cell'><div class='input'>{highlight(src) if src else ''}</div>"
        if "exercise-stub" in cell.get("metadata", {}).get("tags", []):
            sol = solution_source(cell.source, solution_file)
            block += "<p class='run-locally'>Your turn: <code>make lab</code>, open this lesson, replace the stub above " \
                     "and run the check cell below it (the checker names the likely mistake).</p>"
            if sol:
                block += f"<details class='solution'><summary>show the solution</summary>{highlight(sol)}</details>"
        if outs:
            block += "<div class='outputs'>" + "\n".join(o for o in outs if o) + "</div>"
        parts.append(block + "</div>")
    return "\n".join(parts)
