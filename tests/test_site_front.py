"""The static site's words (scripts/site_front.py) without building it: the index carries the
thesis whole and one summary line per lesson (never the "What you will learn" label), the banner
names the CPU, its cores and the four labels. Fast: reads the stored notebooks only."""
from __future__ import annotations

import html
import re
import sys
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from site_front import Machine, banner_html, index_html, summary, toc_html  # noqa: E402
from site_render import PageStats, _count_labels, md_to_html  # noqa: E402

THESIS = ("PagedAttention decides how KV memory is laid out (the physical layer); RadixAttention decides which "
          "cached KV can be reused across requests (the logical layer); RadixAttention is built on top of paged "
          "allocation.")


def _lessons() -> dict:
    return {p.name: nbformat.read(p, as_version=4) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))}


def _words(text: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", text)).split())


def test_the_index_has_the_thesis_whole_and_each_lessons_own_summary_line():
    nbs = _lessons()
    page = index_html(nbs, list(nbs), md_to_html, {n: f"notebooks/{n}" for n in nbs})
    assert THESIS in _words(page)
    for name, nb in nbs.items():
        line = summary(nb)
        assert line and "what you will learn" not in line.lower(), f"{name}: {line!r}"
        assert html.escape(line) in page and f"href='notebooks/{name}'" in page
    assert "Who it is for" in page and "Where to start" in page and "href='glossary.html'" in page


def test_the_banner_is_plain_words_with_four_labels_counted_per_output():
    stats = PageStats()
    for text in ("hit rate 40% (simulated)", "1.2 ms (measured)", "counted, not measured", "the paper's 96.3% (published)",
                 "simulated and simulated again"):
        _count_labels(text, stats)
    assert stats.labels == {"simulated": 2, "measured": 1, "counted": 1, "published": 1}
    page = banner_html(stats.labels, Machine("Some CPU", 2, "", "1.5"), "2026-01-01", "notebooks/x.ipynb")
    words = _words(page)
    assert "2-core Some CPU, no GPU" in words and "load average 1.5" in words and "torch.cuda" not in page
    assert all(f"<b>{k}</b>:" in page for k in ("simulated", "measured", "counted", "published"))
    assert "(2 outputs on this page)" in words and "href='notebooks/x.ipynb'" in page


def test_the_contents_list_the_sections():
    body = "".join(f'<h2 id="s{i}">Section {i}</h2><p>x</p>' for i in range(4))
    toc = toc_html(body)
    assert all(f"href='#s{i}'" in toc for i in range(4)) and toc_html(body[:60]) == ""
