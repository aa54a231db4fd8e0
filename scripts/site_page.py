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
main { overflow-wrap: break-word; }
code { overflow-wrap: anywhere; }
pre.prose-code { background: #f6f8fa; border: 1px solid #e5e7eb; border-radius: 6px; padding: 8px 12px;
                 overflow-x: auto; white-space: pre; max-width: 100%; font-size: 14px; line-height: 1.45; }
pre.prose-code code { overflow-wrap: normal; }
.pictures a { display: block; }
.pictures img { width: 100%; height: auto; }
details.banner summary { color: var(--fg); }
details.banner ul { margin: 6px 0; padding-left: 22px; }
details.toc { border: 1px solid var(--line); border-radius: 6px; padding: 6px 12px; margin: 10px 0 18px; font-size: 15px; }
details.toc ul { margin: 4px 0; padding-left: 4px; list-style: none; columns: 2 280px; }
details.verdict { margin-top: 8px; } pre.verdict { background: #eef7ee; padding: 6px 8px; white-space: pre-wrap;
                 overflow-wrap: anywhere; font-size: 13px; }
.check-note, .live-only, .try-here { font-size: 15px; color: var(--muted); }
.live-only { border-left: 3px solid #f0d98c; padding-left: 8px; }
.kvlab-wide-note { font-size: 13px; color: var(--muted); margin: 2px 0; }
.kvlab-wide { overflow-x: auto !important; }
.kvlab-explorer label { flex-wrap: wrap; max-width: 100%; min-width: 0; }
.kvlab-explorer select { max-width: 100%; min-width: 0; }
table.series td:nth-child(3) { min-width: 12em; }
@media (max-width: 600px) {
  main { padding: 8px 12px 40px; }
  h1 { font-size: 24px; } h2 { font-size: 20px; }
  nav { padding: 8px 12px; }
  table.series { font-size: 14px; } table.series td { padding: 3px 5px; }
}
"""

SITE_JS = r"""
// Every figure and player fits the page: a layout wider than its box is redrawn at the box's width
// (fonts keep their size, long titles wrap); a figure with too many labels for that width keeps
// a readable width and scrolls inside its own box, with a note saying so.
function kvlabTextCount(data, layout) {
  var n = (layout.annotations || []).length;
  (data || []).forEach(function (t) {
    var shown = (t.mode || '').indexOf('text') >= 0 || t.texttemplate || t.type === 'bar' || t.type === 'heatmap';
    if (shown && t.text && t.text.length) n += t.text.length;
  });
  return n;
}
function kvlabWrap(text, chars) {
  return String(text).split('<br>').map(function (line) {
    if (line.replace(/<[^>]+>/g, '').length <= chars) return line;
    var out = [], cur = '';
    line.split(' ').forEach(function (w) {
      if (cur && (cur + ' ' + w).replace(/<[^>]+>/g, '').length > chars) { out.push(cur); cur = w; }
      else { cur = cur ? cur + ' ' + w : w; }
    });
    if (cur) out.push(cur);
    return out.join('<br>');
  }).join('<br>');
}
function kvlabWrapAnnotations(layout, width) {
  // annotations side by side at one height (subplot titles) share the width: wrap the long ones
  var rows = {}, grow = 0, base = (layout.font && layout.font.size) || 12;
  (layout.annotations || []).forEach(function (a) {
    if (a.text && a.xref && String(a.xref).indexOf('paper') === 0) { var k = String(Math.round((a.y || 0) * 100)); (rows[k] = rows[k] || []).push(a); }
  });
  layout.annotations = (layout.annotations || []).map(function (a) {
    var k = String(Math.round((a.y || 0) * 100)), row = rows[k];
    if (!row || !a.text) return a;
    var size = (a.font && a.font.size) || base, chars = Math.max(12, Math.floor(width * 0.9 / row.length / (size * 0.56)));
    var wrapped = kvlabWrap(a.text, chars), extra = wrapped.split('<br>').length - String(a.text).split('<br>').length;
    if (extra <= 0) return a;
    grow = Math.max(grow, extra * size * 1.3);
    return Object.assign({}, a, {text: wrapped});
  });
  if (grow) { var m = Object.assign({t: 80}, layout.margin || {}); m.t = (m.t || 80) + grow; layout.margin = m;
              if (layout.height) layout.height += grow; }
}
function kvlabFit(el, data, layout) {
  if (typeof el === 'string') el = document.getElementById(el);
  layout = Object.assign({}, layout || {});
  var avail = Math.max(200, (el.clientWidth || (el.parentElement || el).clientWidth || window.innerWidth) - 2);
  var want = layout.width || 0, width = want && want < avail ? want : avail;
  if (want > avail) {
    var dense = kvlabTextCount(data, layout) * 14 > avail * 1.5;
    var keep = dense ? Math.min(want, 620) : 0;
    if (keep > avail) {
      width = keep;
      el.classList.add('kvlab-wide');
      el.style.overflowX = 'auto';
      var prev = el.previousElementSibling;
      if (!prev || !prev.classList.contains('kvlab-wide-note')) {
        var note = document.createElement('p');
        note.className = 'kvlab-wide-note';
        note.textContent = 'This figure has too many labels for a screen this narrow: scroll it sideways inside its frame (or turn the phone).';
        el.parentElement.insertBefore(note, el);
      }
      layout.width = keep;
    } else { layout.width = avail; }
  }
  kvlabWrapAnnotations(layout, width);
  var t = layout.title, text = t && (typeof t === 'string' ? t : t.text);
  if (text) {
    var size = (t.font && t.font.size) || (layout.font && layout.font.size) || 17;
    var chars = Math.max(20, Math.floor((width - 40) / (size * 0.56)));
    var wrapped = kvlabWrap(text, chars), extra = wrapped.split('<br>').length - String(text).split('<br>').length;
    if (extra > 0) {
      layout.title = Object.assign({}, typeof t === 'string' ? {} : t, {text: wrapped});
      var m = Object.assign({t: 80}, layout.margin || {});
      m.t = (m.t || 80) + extra * size * 1.3;
      layout.margin = m;
      if (layout.height) layout.height += extra * size * 1.3;
    }
  }
  return layout;
}
if (window.Plotly) {
  var kvlabReact = Plotly.react, kvlabNewPlot = Plotly.newPlot;
  Plotly.react = function (el, data, layout, config) { return kvlabReact(el, data, kvlabFit(el, data, layout), config); };
  Plotly.newPlot = function (el, data, layout, config) { return kvlabNewPlot(el, data, kvlabFit(el, data, layout), config); };
}
document.addEventListener('DOMContentLoaded', function () {  // on a phone the contents start folded
  if (window.innerWidth < 600) document.querySelectorAll('details.toc').forEach(function (d) { d.open = false; });
});
function kvlabPlot(id) {
  var el = document.getElementById(id);
  var spec = JSON.parse(document.getElementById(id + '-data').textContent);
  Plotly.newPlot(el, spec.fig.data, spec.fig.layout || {}, spec.config).then(function () {
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
        f"<title>{html.escape(title)} · kvlab</title><link rel='icon' href='data:,'>"
        "<link rel='stylesheet' href='assets/site.css'>"
        f"{scripts}<script src='assets/site.js'></script></head><body>"
        "<nav><a href='index.html'><b>kvlab</b></a><a href='index.html#series'>lessons</a>"
        f"<a href='glossary.html'>glossary</a><span class='spacer'></span>{link(prev_link, '←')}"
        f"{link(next_link, '→')}</nav><main>{body}"
        f"<p class='pager'>{link(prev_link, '←')} &nbsp; {link(next_link, '→')}</p></main></body></html>"
    )
