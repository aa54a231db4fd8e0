"""A lesson control without a kernel: every state of a small grid of inputs computed now, and menus
and sliders over them in one HTML block (the static site's "Try it here").

``KVLAB_STATIC=frames`` (what scripts/build_site.py sets) makes a lesson control display
:func:`explorer_html` instead of its current state only: the control is set to every combination
of ``axes`` in turn (kvlab's own code computes each one), its caption and figure are kept, and the
page swaps them as the reader moves a menu or slider (plotly figures with ``Plotly.react``: the
page loads plotly.js once; HTML and SVG as is). The block says that its states were precomputed
at build time and which grid they cover; nothing runs Python in the browser.

A layer below kvlab.viz (the simulator's ``RateWidget``) cannot call this module: it displays its
states as data instead, one output of type :data:`EXPLORER_MIME` (``{"title", "axes": [[name,
values, labels]], "start", "states": [{"html", "fig"}]}``, states in row-major order), which
:func:`explorer_from_bundle` turns into the same block (scripts/site_render.py does).

CSS classes (for browser tests): ``kvlab-explorer`` (the box, ``data-states`` = N), ``kvlab-ex-input``
(one ``<select>`` or ``<input type=range>`` per axis, ``data-axis`` = its name), ``kvlab-ex-grid``
(the sentence naming the grid), ``kvlab-ex-html``, ``kvlab-ex-plot``.

Example:
    >>> box = {"x": 1}
    >>> h = explorer_html(lambda **kw: box.update(kw), lambda: [f"<p>x = {box['x']}</p>"], {"x": [1, 2, 3]})
    >>> 'data-states="3"' in h and "x = 3" in h and "precomputed at build time" in h, box
    (True, {'x': 1})
"""
from __future__ import annotations

import html
import itertools
import json
import secrets
from typing import Any, Callable, Mapping, Sequence

from .display import PLOTLY_CONFIG

__all__ = ["explorer_html", "explorer_from_bundle", "grid_sentence", "EXPLORER_MIME"]

EXPLORER_MIME = "application/vnd.kvlab.explorer+json"

_SCRIPT = """(function () {
  var box = document.getElementById(%(id)s);
  var data = JSON.parse(box.querySelector('script.kvlab-ex-data').textContent);
  var inputs = box.querySelectorAll('.kvlab-ex-input'), out = box.querySelector('.kvlab-ex-html');
  var plot = box.querySelector('.kvlab-ex-plot');
  function show() {
    var k = 0;
    inputs.forEach(function (el, a) {
      var i = parseInt(el.value, 10);
      k = k * data.sizes[a] + i;
      var v = box.querySelector('.kvlab-ex-value[data-axis="' + el.dataset.axis + '"]');
      if (v) v.textContent = data.labels[a][i];
    });
    var s = data.states[k];
    out.innerHTML = s.html;
    if (s.fig && window.Plotly) {
      var layout = Object.assign({}, s.fig.layout, {template: data.templates[s.fig.template]});
      plot.style.display = '';
      window.Plotly.react(plot, s.fig.data, layout, %(config)s);
    } else { plot.style.display = 'none'; }
    box.setAttribute('data-state', String(k));
  }
  inputs.forEach(function (el) { el.addEventListener('input', show); el.addEventListener('change', show); });
  show();
})();"""


def _label(value: Any) -> str:
    return value if isinstance(value, str) else (f"{value:g}" if isinstance(value, float) else str(value))


def grid_sentence(axes: Mapping[str, Sequence[Any]], labels: Mapping[str, Mapping[Any, str]] | None = None) -> str:
    """``'pos 0 to 11 (12 values) x policy: max, pow2 (2) = 24 states'`` (ranges of 5+ numbers shortened).

    >>> grid_sentence({"pos": list(range(12)), "policy": ["max", "pow2"]})
    'pos 0 to 11 (12 values) × policy max, pow2 = 24 states'
    """
    labels = labels or {}
    parts, n = [], 1
    for name, values in axes.items():
        shown = [labels.get(name, {}).get(v, _label(v)) for v in values]
        n *= len(values)
        words = name.replace("_", " ")
        if len(values) >= 5 and all(isinstance(v, (int, float)) for v in values):
            parts.append(f"{words} {shown[0]} to {shown[-1]} ({len(values)} values)")
        else:
            parts.append(f"{words} {', '.join(shown)}")
    return " × ".join(parts) + f" = {n} states"


def _payload(obj: Any, templates: dict[str, Any]) -> tuple[str, Any]:
    """('html', text) or ('plotly', {data, layout, template key}); plotly templates kept once."""
    from .flipbook import _frame_payload

    kind, p = _frame_payload(obj)
    if kind == "plotly":
        layout = dict(p["layout"])
        tpl = json.dumps(layout.pop("template", {}), sort_keys=True)
        key = templates.setdefault(tpl, str(len(templates)))
        return kind, {"data": p["data"], "layout": layout, "template": key}
    return kind, p


def explorer_html(set_state: Callable[..., None], parts: Callable[[], Sequence[Any]],
                  axes: Mapping[str, Sequence[Any]], start: Mapping[str, Any] | None = None,
                  labels: Mapping[str, Mapping[Any, str]] | None = None, title: str = "Try it here",
                  config: Mapping[str, Any] | None = None) -> str:
    """Every combination of ``axes`` (name -> values; the first value of each shown first, or
    ``start``'s) through ``set_state(**combo)`` then ``parts()`` (HTML strings, plotly figures,
    graphviz graphs; at most one plotly figure a state), in one self-contained block (module doc).
    The control is left as ``start`` (default: each axis's first value). ``config``: plotly.js options
    over :data:`PLOTLY_CONFIG` (``{"displayModeBar": False}``: the figure has no mode bar)."""
    if not axes or any(len(v) == 0 for v in axes.values()):
        raise ValueError(f"every axis needs at least one value, got {dict(axes)}")
    names, labels = list(axes), labels or {}
    start = dict(start) if start is not None else {k: v[0] for k, v in axes.items()}
    templates: dict[str, str] = {}
    states = []
    try:
        for combo in itertools.product(*(axes[k] for k in names)):
            set_state(**dict(zip(names, combo)))
            texts, fig = [], None
            for obj in parts():
                kind, p = _payload(obj, templates)
                if kind == "plotly" and fig is None:
                    fig = p
                else:
                    texts.append(p if kind == "html" else "")
            states.append({"html": "".join(texts), "fig": fig})
    finally:
        set_state(**start)
    return _block(axes, start, labels, states, templates, title, config)


def explorer_from_bundle(bundle: Mapping[str, Any]) -> str:
    """The block of :func:`explorer_html` from states computed elsewhere (an :data:`EXPLORER_MIME`
    output: see the module doc); each state's ``fig`` is a plotly figure's JSON (data, layout) or None."""
    axes = {name: list(values) for name, values, _ in bundle["axes"]}
    labels = {name: dict(zip(values, shown)) for name, values, shown in bundle["axes"]}
    n = 1
    for values in axes.values():
        n *= len(values)
    if len(bundle["states"]) != n:
        raise ValueError(f"the grid has {n} combinations and the bundle {len(bundle['states'])} states")
    templates: dict[str, str] = {}
    states = []
    for s in bundle["states"]:
        fig = None
        if s.get("fig"):
            layout = dict(s["fig"].get("layout", {}))
            key = templates.setdefault(json.dumps(layout.pop("template", {}), sort_keys=True), str(len(templates)))
            fig = {"data": s["fig"].get("data", []), "layout": layout, "template": key}
        states.append({"html": s.get("html", ""), "fig": fig})
    return _block(axes, dict(bundle.get("start") or {}), labels, states, templates, bundle.get("title") or "Try it here")


def _block(axes: Mapping[str, Sequence[Any]], start: Mapping[str, Any], labels: Mapping[str, Mapping[Any, str]],
           states: list[dict], templates: dict[str, str], title: str, config: Mapping[str, Any] | None = None) -> str:
    names = list(axes)
    start = {k: start.get(k, axes[k][0]) for k in names}
    box_id = "kvlab-ex-" + secrets.token_hex(6)
    shown = [[labels.get(k, {}).get(v, _label(v)) for v in axes[k]] for k in names]
    data = json.dumps({"sizes": [len(axes[k]) for k in names], "labels": shown, "states": states,
                       "templates": {v: json.loads(t) for t, v in templates.items()}},
                      ensure_ascii=False).replace("</", "<\\/")
    return (
        f"<div class='kvlab-explorer' id='{box_id}' data-states=\"{len(states)}\" style='max-width:100%;"
        f"border:1px solid #cfd8e3;border-radius:6px;padding:8px 10px;margin:8px 0'>"
        f"<div style='font-size:15px'><b>{html.escape(title)}</b> "
        f"<span class='kvlab-ex-grid'>(precomputed at build time by kvlab: {html.escape(grid_sentence(axes, labels))};"
        f" any other value needs the live lesson)</span></div>"
        f"<div style='display:flex;flex-wrap:wrap;gap:6px 18px;align-items:center;margin:6px 0;font-size:15px'>"
        + "".join(_input(k, axes[k], shown[i], start.get(k)) for i, k in enumerate(names))
        + "</div><div class='kvlab-ex-html' style='max-width:100%;overflow-x:auto'></div>"
          "<div class='kvlab-ex-plot' style='max-width:100%'></div>"
          f"<script type='application/json' class='kvlab-ex-data'>{data}</script>"
          f"<script>{_SCRIPT % {'id': json.dumps(box_id), 'config': json.dumps({**PLOTLY_CONFIG, **(config or {}), 'responsive': True})}}</script></div>"
    )


def _input(name: str, values: Sequence[Any], shown: list[str], start: Any) -> str:
    at = values.index(start) if start in values else 0
    esc, words = html.escape(name), html.escape(name.replace("_", " "))
    if len(values) >= 5 and all(isinstance(v, (int, float)) for v in values):
        return (f"<label style='display:flex;align-items:center;gap:6px'>{words} <input class='kvlab-ex-input' "
                f"data-axis='{esc}' type='range' min='0' max='{len(values) - 1}' step='1' value='{at}' "
                f"style='width:min(260px,50vw)'> <b class='kvlab-ex-value' data-axis='{esc}'>{html.escape(shown[at])}"
                f"</b></label>")
    options = "".join(f"<option value='{i}'{' selected' if i == at else ''}>{html.escape(s)}</option>"
                      for i, s in enumerate(shown))
    return (f"<label style='display:flex;flex-wrap:wrap;align-items:center;gap:6px;max-width:100%;min-width:0'>{words} <select class='kvlab-ex-input' "
            f"data-axis='{esc}' style='font-size:inherit;max-width:100%'>{options}</select></label>")
