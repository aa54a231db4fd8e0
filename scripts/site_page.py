"""The static site's page frame, CSS and JavaScript (used by scripts/build_site.py).

Every page loads ``assets/site.css`` and ``assets/site.js``; lesson pages also load
``assets/plotly.min.js`` (copied from the installed plotly package: nothing from a CDN).
``kvlabPlot(id)`` draws one figure from the JSON next to its div, adding animation frames.

Example:
    >>> "<nav" in page("t", "<p>x</p>", None, ("01_a.ipynb", "A"), plotly=False)
    True
"""
from __future__ import annotations

import html
from pathlib import Path

INDEX_CSS = """
:root { --fg: #1b1b1b; --muted: #555; --line: #ddd; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; font: 16px/1.55 system-ui, -apple-system, "Segoe UI", Helvetica, Arial, "Noto Sans CJK SC", sans-serif;
       color: var(--fg); background: #fff; }
main { max-width: 1000px; margin: 0 auto; padding: 12px 20px 60px; }
nav { display: flex; flex-wrap: wrap; gap: 8px 18px; align-items: center; padding: 10px 20px; border-bottom: 1px solid var(--line);
      background: #fafafa; font-size: 15px; }
nav a { color: var(--accent); text-decoration: none; }
nav .spacer { flex: 1; }
a { color: var(--accent); }
h1 { font-size: 30px; line-height: 1.25; } h2 { font-size: 24px; margin-top: 36px; } h3 { font-size: 19px; }
.banner { background: #fff8e1; border: 1px solid #f0d98c; border-radius: 6px; padding: 10px 14px; margin: 12px 0 20px;
          font-size: 15px; }
.banner code { font-size: 13px; }
table { border-collapse: collapse; margin: 10px 0; font-size: 15px; max-width: 100%; display: block; overflow-x: auto; }
th, td { border: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
blockquote { border-left: 4px solid var(--line); margin: 10px 0; padding: 2px 14px; color: #333; }
code { font-family: ui-monospace, "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 14px; }
.cell { margin: 14px 0; }
.input .code { background: #f6f8fa; border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 12px; overflow-x: auto; }
.input pre, .code pre { margin: 0; font-size: 14px; line-height: 1.45; white-space: pre-wrap; overflow-wrap: anywhere; }
.outputs { margin: 6px 0 0 0; padding-left: 12px; border-left: 3px solid #e8eef5; max-width: 100%; overflow: hidden; }
.outputs pre { margin: 4px 0; font-size: 14px; white-space: pre-wrap; overflow-wrap: anywhere; }
.outputs pre.stderr { background: #fff4f4; }
.outputs pre.error { background: #ffecec; color: #8b0000; }
.outputs svg, .outputs img { max-width: 100%; height: auto; }
.html-output { max-width: 100%; overflow: hidden; }
.kvlab-plot { max-width: 100%; }
.widget-note { background: #f3f3f3; border: 1px dashed #bbb; padding: 8px 12px; border-radius: 6px; font-size: 15px; }
details { margin: 8px 0; } summary { cursor: pointer; color: var(--accent); }
details.solution { border: 1px solid #cfe3cf; background: #f5fbf5; border-radius: 6px; padding: 6px 10px; }
.run-locally { font-size: 15px; color: var(--muted); }
.pictures { display: flex; flex-wrap: wrap; gap: 16px; } .pictures figure { margin: 0; flex: 1 1 300px; }
.pictures img { max-width: 100%; border: 1px solid var(--line); }
figcaption { font-size: 14px; color: var(--muted); }
table.series { display: table; }
"""

SITE_JS = """
function kvlabPlot(id) {
  var el = document.getElementById(id);
  var spec = JSON.parse(document.getElementById(id + '-data').textContent);
  var layout = spec.fig.layout || {};
  var wide = layout.width && el.parentElement && layout.width > el.parentElement.clientWidth;
  if (wide) { layout.width = null; layout.autosize = true; }  // never wider than the page
  Plotly.newPlot(el, spec.fig.data, layout, spec.config).then(function () {
    if (spec.frames && spec.frames.length) return Plotly.addFrames(el, spec.frames);
  });
}
"""


def page(title: str, body: str, prev_link: tuple[str, str] | None, next_link: tuple[str, str] | None,
         plotly: bool) -> str:
    """A whole HTML page: the navigation (index, glossary, previous / next lesson), then ``body``."""
    def link(item: tuple[str, str] | None, arrow: str) -> str:
        if not item:
            return ""
        name, text = item
        return f"<a href='{Path(name).stem}.html'>{arrow} {html.escape(text)}</a>"

    scripts = "<script src='assets/plotly.min.js'></script>" if plotly else ""
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{html.escape(title)} · kvlab</title><link rel='stylesheet' href='assets/site.css'>"
        f"{scripts}<script src='assets/site.js'></script></head><body>"
        "<nav><a href='index.html'><b>kvlab</b></a><a href='index.html#series'>lessons</a>"
        f"<a href='glossary.html'>glossary</a><span class='spacer'></span>{link(prev_link, '←')}"
        f"{link(next_link, '→')}</nav><main>{body}"
        f"<p class='pager'>{link(prev_link, '←')} &nbsp; {link(next_link, '→')}</p></main></body></html>"
    )
