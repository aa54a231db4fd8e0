"""One executed lesson notebook -> one HTML page of the static site (used by scripts/build_site.py).

What each part becomes:
- markdown cells: HTML (markdown-it-py, CommonMark + tables, raw HTML kept: the hints'
  ``<details>`` stay collapsed); links to ``NN_*.ipynb`` / ``glossary.md`` point at the site's pages;
- code cells: highlighted source (pygments), without the ``# NBVAL_...`` test markers;
- outputs: plotly figures as live plotly.js figures (frames and sliders kept; plotly.js is loaded
  once per page from ``assets/``), SVG inline, PNG as data URIs, HTML as is (steppers arrive as
  kvlab.viz.flipbook players when the lesson ran with ``KVLAB_STATIC=frames``), text in ``<pre>``;
  a widget (which needs a kernel) as a note saying so;
- exercise stubs (``exercise-stub`` tag): the stub, how to check your own answer (the notebook's
  download link, ``make lab``), then the solution from ``solutions/`` behind a "show" control and,
  behind it, the checker's verdict on that solution (run at build time, scripts/site_exercises.py);
  the check cell after a stub keeps its code but not the stub's FAIL;
- "Try it" passages (a live control asked for): they say whether the control is on the page
  (a player or a precomputed explorer follows) or needs the live lesson.

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

from kvlab.viz.display import PLOTLY_CONFIG

PLOTLY_MIME = "application/vnd.plotly.v1+json"
WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
EXPLORER_MIME = "application/vnd.kvlab.explorer+json"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_NBVAL = re.compile(r"^\s*# NBVAL_\w+\s*$")
_LINK = re.compile(r'href="(?!https?:|#)([^"#]*?)(\.ipynb|\.md)(#[^"]*)?"')


def _markdown():
    try:
        from markdown_it import MarkdownIt
    except ImportError as e:  # comes with jupyterlab's dependencies today; named in pyproject's lab extra
        raise SystemExit("the static site needs markdown-it-py: .venv/bin/python -m pip install 'markdown-it-py>=3,<5'") from e

    md = MarkdownIt("commonmark", {"html": True, "highlight": _highlight_fence}).enable("table")

    def heading_open(renderer, tokens, idx, options, env):  # ids on headings, for links into a page
        text = tokens[idx + 1].content if idx + 1 < len(tokens) else ""
        tokens[idx].attrSet("id", slug(text))
        return md.renderer.renderToken(tokens, idx, options, env)

    md.add_render_rule("heading_open", heading_open)
    return md


_MD = None


def _highlight_fence(code: str, lang: str, _attrs: str) -> str:
    """A fenced code block in prose: highlighted (Python unless another language is named); it
    scrolls inside itself (CSS ``pre.prose-code``), never the page."""
    from pygments import highlight as pyg
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer, get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(lang) if lang else PythonLexer()
    except ClassNotFound:
        lexer = PythonLexer()
    return f"<pre class='code prose-code'><code>{pyg(code, lexer, HtmlFormatter(nowrap=True))}</code></pre>"


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
    labels: dict[str, int] = field(default_factory=dict)  # outputs labelled simulated / measured / ...
    explorers: int = 0  # precomputed controls (kvlab.viz.explorer)
    verdicts: list[str] = field(default_factory=list)  # "checker: PASS" per exercise
    try_it: int = 0  # "Try it" passages; live_only: those whose control needs the live lesson
    live_only: int = 0
    errors: list[str] = field(default_factory=list)

    @property
    def simulated(self) -> int:
        return self.labels.get("simulated", 0)

    @property
    def measured(self) -> int:
        return self.labels.get("measured", 0)


def _plotly_html(spec: dict, n: int) -> str:
    fig = {"data": spec.get("data", []), "layout": spec.get("layout", {})}
    frames = spec.get("frames") or []
    config = {**PLOTLY_CONFIG, "responsive": True, **spec.get("config", {})}
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
    if EXPLORER_MIME in data:  # states a layer below kvlab.viz computed (kvlab.sim's RateWidget)
        from kvlab.viz.explorer import explorer_from_bundle

        stats.explorers += 1
        return f"<div class='html-output'>{explorer_from_bundle(data[EXPLORER_MIME])}</div>"
    if WIDGET_MIME in data:
        stats.widgets += 1
        return ("<div class='widget-note'>An interactive control runs here in JupyterLab (it needs a Python kernel): "
                "<code>make lab</code> and open this lesson to use it.</div>")
    if "text/html" in data:
        text = data["text/html"]
        stats.flipbooks += text.count("class='kvlab-flipbook'")
        stats.explorers += text.count("class='kvlab-explorer'")
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


_LABELS = {"simulated": r"\bsimulated\b", "measured": r"(?<!not )\bmeasured\b", "counted": r"\bcounted\b",
           "published": r"\bpublished\b"}


def _count_labels(text: str, stats: PageStats) -> None:
    """One count per output and label it carries (not per word)."""
    for label, pattern in _LABELS.items():
        if re.search(pattern, text):
            stats.labels[label] = stats.labels.get(label, 0) + 1


def _output_text(o: dict) -> str:
    data = o.get("data", {})
    title = data.get(PLOTLY_MIME, {}).get("layout", {}).get("title", "")
    return json.dumps(title) + o.get("text", "") + str(data.get("text/html", ""))


_TRY = re.compile(r"\btry it\b|\bmove (?:a|the) slider|\bdrag\b|\btype a question|\bpick a (?:pool|policy|method)"
                  r"|\bchange them here|\byourself\b", re.I)
_ON_PAGE = ("class='kvlab-explorer'", "class='kvlab-flipbook'", '"sliders"', '"updatemenus"', EXPLORER_MIME)


def _try_it_note(cells: list, i: int, notebook_href: str | None) -> str:
    """For a markdown cell that asks for a live control: where that control is."""
    for c in cells[i + 1:i + 4]:
        if c.cell_type == "markdown":
            break
        for o in c.get("outputs", []):
            text = json.dumps(o.get("data", {}))
            if any(mark in text for mark in _ON_PAGE):
                return ("<p class='try-here'>On this page: the control below works without Python, over states "
                        "precomputed at build time (other values: the live lesson).</p>")
    where = f"<a href='{notebook_href}' download>download the notebook</a> or " if notebook_href else ""
    return ("<p class='live-only'>This control needs the live lesson (a Python kernel): "
            f"{where}<code>make lab</code>. Here you see its output for the lesson's own values.</p>")


def _exercise_html(stub: str, solution_file: Path, check_cell: str, notebook_href: str | None,
                   stats: PageStats) -> str:
    from site_exercises import check_calls, solution_for, verdict

    where = f"<a href='{notebook_href}' download>download this lesson's notebook</a>, " if notebook_href else ""
    out = ("<p class='run-locally'>Your turn: write it in the live lesson (" + where + "or <code>make lab</code> "
           "in a kvlab checkout), replace the stub and run the check cell below it: the checker runs your code "
           "and names the likely mistake.</p>")
    sol = solution_for(stub, solution_file)
    if not sol:
        return out
    verdicts = []
    for checker, arg in check_calls(check_cell):
        v = verdict(checker, arg, solution_file)
        stats.verdicts.append(f"{checker}: {'PASS' if v.passed else 'FAIL'}")
        if not v.passed:
            stats.errors.append(f"the solution fails check.{checker}: {v.text.strip()[-300:]}")
        verdicts.append(f"<pre class='verdict'>{html.escape(v.text.strip())}</pre>")
    behind = ("<details class='verdict'><summary>the checker's verdict on this solution (run when the site was "
              "built)</summary>" + "".join(verdicts) + "</details>") if verdicts else ""
    return out + f"<details class='solution'><summary>show the solution</summary>{highlight(sol)}{behind}</details>"


_CHECK_NOTE = ("<p class='check-note'>In the lesson this cell runs the checker on <i>your</i> function. The site "
               "does not run the stub above (it would only fail): the checker's verdict on the solution is behind "
               "\u201cshow the solution\u201d.</p>")


def _is_stub(cell: Any) -> bool:
    return cell.cell_type == "code" and "exercise-stub" in cell.get("metadata", {}).get("tags", [])


def render_cells(nb: Any, solution_file: Path, stats: PageStats, notebook_href: str | None = None) -> str:
    parts, cells = [], list(nb.cells)
    for i, cell in enumerate(cells):
        if cell.cell_type == "markdown":
            note = ""
            if _TRY.search(cell.source):
                stats.try_it += 1
                note = _try_it_note(cells, i, notebook_href)
                stats.live_only += "live-only" in note
            parts.append(f"<section class='md'>{md_to_html(cell.source)}{note}</section>")
            continue
        if cell.cell_type != "code":
            continue
        src = "\n".join(ln for ln in cell.source.splitlines() if not _NBVAL.match(ln)).strip("\n")
        after_stub = i > 0 and _is_stub(cells[i - 1]) and "check." in cell.source
        outs = []
        for o in [] if after_stub else cell.get("outputs", []):
            outs.append(render_output(o, stats))
            _count_labels(_output_text(o), stats)
        block = f"<div class='cell'><div class='input'>{highlight(src) if src else ''}</div>"
        if _is_stub(cell):
            nxt = cells[i + 1].source if i + 1 < len(cells) and cells[i + 1].cell_type == "code" else ""
            block += _exercise_html(cell.source, solution_file, nxt, notebook_href, stats)
        if after_stub:
            block += _CHECK_NOTE
        if outs:
            block += "<div class='outputs'>" + "\n".join(o for o in outs if o) + "</div>"
        parts.append(block + "</div>")
    return "\n".join(parts)
