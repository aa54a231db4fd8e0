"""Issue 28, the review of lesson 09: in classroom mode (1280x720) printed prose was cut in the
middle of words (cells 16-32). JupyterLab's output ``<pre>`` wraps with ``word-break: break-all``,
so a printed line wider than the output area breaks anywhere; at classroom mode's 16 px many lines
are. The layout check (tests/browser_utils.py ``_LAYOUT_JS``) reports such a ``<pre>`` as
``word-cut``; ``viz.classroom``'s page style makes printed text wrap at words. Both checked here on
a page shaped like a notebook's output (no JupyterLab: a second or two).

The same in normal mode (1500x1000): reviewers of lessons 00, 07 and 09 saw printed lines over about
120 characters cut mid-word there too. The page style every lesson's first cell shows
(``kvlab.check.self_test`` -> :func:`kvlab.viz.palette.page_css`) wraps them at words, at every size,
and the browser test's ``word-cut`` check runs in both modes."""
from __future__ import annotations

import pytest

from browser_utils import _LAYOUT_JS, browser_problems, chromium

LINE = ("the three Orca bars: within 3% of the paper (memory-bound: the reservations decide); vLLM: 26.0 "
        "against the published 30.42, outside the 15% tolerance")
PAGE = """<html><head><style>
.jp-OutputArea-output pre {{ word-break: break-all; word-wrap: break-word; white-space: pre-wrap; margin: 0;
  font-family: monospace; font-size: 13px; overflow-x: auto; }}
</style>{extra}</head><body>
<div class="jp-NotebookPanel"><div class="jp-Notebook" style="width: 860px">
<div class="jp-Cell"><div class="jp-OutputArea-output"><pre>{line}</pre></div></div>
</div></div></body></html>"""


def _found(style: str, line: str = LINE, width: int = 1280, area_px: int = 860) -> list[dict]:
    with chromium() as b:
        page = b.new_page(viewport={"width": width, "height": 720})
        page.set_content(PAGE.format(extra=style, line=line).replace("width: 860px", f"width: {area_px}px"))
        return [f for f in page.evaluate(_LAYOUT_JS, [16, True]) if f["kind"] == "word-cut"]


@pytest.mark.skipif(bool(browser_problems()), reason="no Chromium here")
def test_classroom_prose_wraps_at_words():
    from kvlab.viz.palette import classroom_page_css

    assert _found(""), "a 140-character line in an 860 px <pre> that breaks anywhere is a word-cut"
    assert not _found(classroom_page_css()), "viz.classroom's page style wraps printed text at words"


@pytest.mark.skipif(bool(browser_problems()), reason="no Chromium here")
def test_normal_mode_prose_wraps_at_words_with_the_style_every_lesson_shows():
    from kvlab.viz.palette import page_css

    long = LINE + "; the cached curve rises from 0.21 ms to 5.7 ms per step over the measured contexts"
    assert _found("", long, width=1500, area_px=1100), "a 230-character line in a 1100 px <pre> breaks anywhere"
    assert not _found(page_css(), long, width=1500, area_px=1100), "page_css() wraps printed text at words"


def test_the_self_test_shows_the_page_style_in_a_kernel_only(monkeypatch, capsys):
    """The first cell of every lesson shows :func:`page_css` (in a Jupyter kernel); a plain shell
    gets the printed report only."""
    import IPython
    import IPython.display

    from kvlab.check import environment
    from kvlab.viz.palette import page_css

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda obj, raw=False: shown.append(obj))
    monkeypatch.setattr(IPython, "get_ipython", lambda: None)
    environment._show_page_style()
    assert shown == []
    monkeypatch.setattr(IPython, "get_ipython", lambda: type("Shell", (), {"kernel": object()})())
    environment._show_page_style()
    assert shown == [{"text/html": page_css(), "text/plain": ""}]
