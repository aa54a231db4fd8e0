"""Widget or static: how each view decides, and the static fallback's display helper.

A view shows live widgets (ipywidgets; plotly figures inside Output widgets) when a Jupyter kernel
with a widget front end is running, and otherwise renders its current frame as a
static plotly figure or graphviz SVG, so it never fails and never shows a blank box.

The decision, first match wins:
1. the view's ``static=`` argument (``True`` or ``False``);
2. the environment variable ``KVLAB_STATIC``: ``1``/``true``/``yes`` -> static,
   ``0``/``false``/``no`` -> widgets (CI, nbval and HTML export set ``KVLAB_STATIC=1``);
   ``frames`` -> static, and steppers show every frame in a player (the static site);
3. no IPython kernel (a plain Python shell, a script, terminal IPython) -> static;
4. otherwise (a Jupyter kernel) -> widgets.

Example:
    >>> is_static(True), is_static(False)
    (True, False)
"""
from __future__ import annotations

import os
from typing import Any, Callable

__all__ = ["is_static", "static_frames", "static_html", "display_control", "PLOTLY_CONFIG", "use_plotly_config"]

# Every plotly figure's config (the notebook renderers, the stepper's Output widgets, the site's players):
# no plotly logo and no "Share chart" (Plotly Cloud) button: nothing a lesson shows sends data anywhere.
PLOTLY_CONFIG: dict = {"displaylogo": False, "showSendToCloud": False, "modeBarButtonsToRemove": ["sendChartToCloud"]}


def use_plotly_config() -> None:
    """Give every plotly renderer (``display(fig)`` in a notebook, ``fig.show()``) :data:`PLOTLY_CONFIG`.
    ``import kvlab.viz`` calls it; a no-op without plotly.

    Example:
        >>> import plotly.io as pio
        >>> use_plotly_config(); pio.renderers["plotly_mimetype"].config["showSendToCloud"]
        False
    """
    try:
        import plotly.io as pio
    except ImportError:
        return
    for name in pio.renderers:
        renderer = pio.renderers[name]
        if isinstance(getattr(renderer, "config", None), dict):
            renderer.config.update(PLOTLY_CONFIG)


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def is_static(static: bool | None = None) -> bool:
    """Whether views should render static figures instead of widgets (see module doc)."""
    if static is not None:
        if not isinstance(static, bool):
            raise TypeError(f"static must be True, False or None, got {static!r}")
        return static
    env = os.environ.get("KVLAB_STATIC", "").strip().lower()
    if env in _TRUE or env == "frames":
        return True
    if env in _FALSE:
        return False
    if env:
        raise ValueError(f"KVLAB_STATIC must be 1/true/yes, frames or 0/false/no, got {env!r}")
    try:
        from IPython import get_ipython
    except ImportError:
        return True
    ip = get_ipython()
    if ip is None:
        return True
    return "IPKernelApp" not in getattr(ip, "config", {})


def static_frames() -> bool:
    """``KVLAB_STATIC=frames`` (what scripts/build_site.py sets): static, and steppers render
    every frame into a player that runs in a browser without a kernel (kvlab.viz.flipbook)."""
    return os.environ.get("KVLAB_STATIC", "").strip().lower() == "frames"


def static_html(obj: Any) -> str:
    """HTML for a static figure: a plotly figure (plotly.js inlined from the installed
    package: no network) or a graphviz graph (its SVG)."""
    if hasattr(obj, "pipe"):  # graphviz.Digraph
        return obj.pipe(format="svg", encoding="utf-8")
    if hasattr(obj, "to_html"):
        return obj.to_html(include_plotlyjs=True, full_html=False, config=PLOTLY_CONFIG)
    return str(obj)


def display_control(widget: Any, static_parts: Callable[[], list[Any]], explore: Callable[[], str] | None = None) -> None:
    """What a lesson control shows in a notebook: its live ipywidgets ``widget``, or (static mode,
    ``widget`` None) each of ``static_parts()`` in turn, a ``str`` as HTML, anything else as itself.
    ``static_parts`` is called only then, so a live control builds no static figures. With
    ``KVLAB_STATIC=frames`` (the static site) and an ``explore`` (a callable returning
    :func:`kvlab.viz.explorer.explorer_html` over a grid of the control's states), that block instead."""
    from IPython.display import HTML, display

    if widget is not None:
        display(widget)
        return
    if explore is not None and static_frames():
        display(HTML(explore()))
        return
    for part in static_parts():
        display(HTML(part) if isinstance(part, str) else part)
