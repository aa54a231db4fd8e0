"""A stepper without a kernel: every frame pre-rendered into one HTML block with play, pause,
previous / next, a slider and the stepper's captions ("step 3 / 16: ...").

Used where no widget front end exists but a browser does: the static site
(``scripts/build_site.py`` runs the lessons with ``KVLAB_STATIC=frames``, and every stepper
then displays :func:`flipbook_html` instead of its first frame only). Plotly frames are
redrawn in one figure with ``Plotly.react`` (the page must load plotly.js, once); graphviz and
HTML frames are swapped as inline SVG/HTML. A small inline script drives it; nothing is
fetched from the network.

CSS classes (for browser tests): ``kvlab-flipbook`` (the box, ``data-frames`` = N),
``kvlab-fb-play`` (play / pause), ``kvlab-fb-prev``, ``kvlab-fb-next``, ``kvlab-fb-reset``,
``kvlab-fb-slider`` (an ``<input type=range>`` from 1 to N), ``kvlab-caption``, ``kvlab-fb-view``.
Each button says on hover what it does (the stepper's tooltips); prev and reset are disabled at
step 1 and next at the last step, as the stepper's.

Example:
    >>> h = flipbook_html(["<p>a</p>", "<p>b</p>"], ["step 1 / 2: a", "step 2 / 2: b"])
    >>> 'data-frames="2"' in h and "step 2 / 2" in h
    True
"""
from __future__ import annotations

import html
import json
import secrets
from typing import Any, Sequence

from .display import PLOTLY_CONFIG

__all__ = ["TIPS", "flipbook_html"]

# What each step button does, in its tooltip: the same words on the live stepper (kvlab.viz.stepper)
# and on this player.
TIPS = {
    "prev": "previous step: go back one step",
    "next": "next step: go forward one step",
    "reset": "reset: stop playing and go back to step 1",
    "play": "play: show the steps one after another, from this one to the last",
    "play again": "play again from step 1 (this is the last step)",
    "pause": "pause: stop playing and stay at this step",
    "loop": "loop: when on, playing starts again at step 1 after the last step",
    "at first": "this is step 1: nothing before it",
    "at last": "this is the last step",
}

_SCRIPT = """(function () {
  var box = document.getElementById(%(id)s);
  var data = JSON.parse(box.querySelector('script.kvlab-fb-data').textContent);
  var view = box.querySelector('.kvlab-fb-view'), cap = box.querySelector('.kvlab-caption');
  var slider = box.querySelector('.kvlab-fb-slider'), play = box.querySelector('.kvlab-fb-play');
  var n = data.frames.length, i = 0, timer = null;
  function show(k) {
    i = Math.max(0, Math.min(n - 1, k));
    var f = data.frames[i];
    if (data.kind === 'plotly') {
      if (window.Plotly) window.Plotly.react(view, f.data, f.layout, %(config)s);
    } else { view.innerHTML = f; }
    cap.innerHTML = data.captions[i];
    slider.value = String(i + 1);
    box.setAttribute('data-step', String(i + 1));
    box.querySelector('.kvlab-fb-prev').disabled = box.querySelector('.kvlab-fb-reset').disabled = i === 0;
    box.querySelector('.kvlab-fb-next').disabled = i === n - 1;
  }
  function stop() { if (timer) { clearInterval(timer); timer = null; } play.textContent = '\\u25b6 play'; }
  play.addEventListener('click', function () {
    if (timer) { stop(); return; }
    if (i >= n - 1) show(0);
    play.textContent = '\\u275a\\u275a pause';
    timer = setInterval(function () { if (i >= n - 1) { stop(); } else { show(i + 1); } }, data.interval);
  });
  box.querySelector('.kvlab-fb-prev').addEventListener('click', function () { stop(); show(i - 1); });
  box.querySelector('.kvlab-fb-next').addEventListener('click', function () { stop(); show(i + 1); });
  box.querySelector('.kvlab-fb-reset').addEventListener('click', function () { stop(); show(0); });
  slider.addEventListener('input', function () { stop(); show(parseInt(slider.value, 10) - 1); });
  show(0);
})();"""


def _frame_payload(obj: Any) -> tuple[str, Any]:
    """(kind, what the page needs to draw one rendered frame): a plotly figure's data and
    layout, or the HTML/SVG of anything else (see :func:`kvlab.viz.display.static_html`)."""
    from .display import static_html

    if isinstance(obj, str) or hasattr(obj, "pipe") or not hasattr(obj, "to_plotly_json"):
        return "html", obj if isinstance(obj, str) else static_html(obj)
    import plotly.io as pio

    spec = json.loads(pio.to_json(obj, validate=False))
    return "plotly", {"data": spec.get("data", []), "layout": spec.get("layout", {})}


def flipbook_html(rendered: Sequence[Any], captions: Sequence[str], title: str = "", interval_ms: int = 900) -> str:
    """One self-contained HTML block over frames already rendered (plotly figures, graphviz
    graphs or HTML strings) with their captions as HTML (see module doc);
    :meth:`kvlab.viz.Stepper.flipbook_html` passes a stepper's."""
    if not rendered or len(rendered) != len(captions):
        raise ValueError(f"need one caption per frame, got {len(rendered)} frames and {len(captions)} captions")
    payloads = [_frame_payload(obj) for obj in rendered]
    kinds = {k for k, _ in payloads}
    if len(kinds) == 1:
        kind, frames = kinds.pop(), [p for _, p in payloads]
    else:  # mixed frames: draw every one as HTML
        kind, frames = "html", [p if k == "html" else _plotly_div(p) for k, p in payloads]
    box_id = "kvlab-fb-" + secrets.token_hex(6)
    data = json.dumps({"kind": kind, "frames": frames, "captions": list(captions), "interval": interval_ms},
                      ensure_ascii=False).replace("</", "<\\/")
    n = len(frames)
    head = f"<b>{html.escape(title)}</b> " if title else ""
    button = "style='font-size:inherit;padding:3px 10px;cursor:pointer'"
    tip = {k: html.escape(TIPS[k], quote=True) for k in ("reset", "prev", "play", "next")}  # as the stepper's
    return (
        f"<div class='kvlab-flipbook' id='{box_id}' data-frames=\"{n}\" data-step='1' style='max-width:100%'>"
        f"<div class='kvlab-fb-controls' style='display:flex;flex-wrap:wrap;align-items:center;gap:4px;"
        f"font-size:15px'>{head}"
        f"<button class='kvlab-fb-reset' {button} title='{tip['reset']}'>&#x27f2; reset</button>"
        f"<button class='kvlab-fb-prev' {button} title='{tip['prev']}'>&#x25c0; prev</button>"
        f"<button class='kvlab-fb-play' {button} title='{tip['play']}'>&#x25b6; play</button>"
        f"<button class='kvlab-fb-next' {button} title='{tip['next']}'>next &#x25b6;</button>"
        f"<label style='display:flex;align-items:center;gap:6px'>step <input class='kvlab-fb-slider' type='range' "
        f"min='1' max='{n}' value='1' step='1' style='width:min(320px,40vw)'></label></div>"
        f"<div class='kvlab-caption'></div><div class='kvlab-fb-view' style='max-width:100%;overflow:hidden'></div>"
        f"<script type='application/json' class='kvlab-fb-data'>{data}</script>"
        f"<script>{_SCRIPT % {'id': json.dumps(box_id), 'config': json.dumps({**PLOTLY_CONFIG, 'responsive': True})}}</script></div>"
    )


def _plotly_div(payload: dict) -> str:
    import plotly.graph_objects as go
    import plotly.io as pio

    fig = go.Figure(payload)
    return pio.to_html(fig, include_plotlyjs=False, full_html=False, config=PLOTLY_CONFIG)
