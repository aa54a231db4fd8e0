"""A live control: a few inputs a student changes, and a figure and a caption redrawn at once.

The base of the lessons' "change the parameter, see the consequence" widgets (lesson 05's
shuffle and split count, 06's samples and beam width, 08's pool size and policy). A subclass
keeps its state in plain attributes, recomputes in ``update()`` (well under a second), and
says what to show in ``caption()`` and ``figure()``; its ``_inputs(W)`` builds the ipywidgets
inputs and calls ``self.set(name=value)`` from their callbacks. Everything but the widgets
works without a browser (tests call ``set`` and read ``result``, ``caption()``, ``figure()``).

Widget or static (see :mod:`kvlab.viz.display`): with no widget front end the control shows
its current caption and figure, so nbval and exported HTML never see a blank box.

CSS classes: the box has ``kvlab-control`` and the subclass's ``css_class``; the caption
``kvlab-control-caption``; the figure ``kvlab-figure`` (an Output widget with the plotly figure).

Example:
    >>> class Double(LiveControl):
    ...     def __init__(self):
    ...         self.x = 2
    ...         super().__init__(static=True)
    ...     def update(self):
    ...         self.result = {"y": 2 * self.x}
    ...     def caption(self):
    ...         return f"2 x {self.x} = {self.result['y']}"
    >>> c = Double(); c.set(x=5); c.caption()
    '2 x 5 = 10'
"""
from __future__ import annotations

import html
from typing import Any, Callable, Sequence

from .display import display_control, is_static
from .palette import classroom_css, theme

__all__ = ["LiveControl", "renew_slider"]


def _swap(box: Any, old: Any, new: Any) -> bool:
    """Put ``new`` where ``old`` is among ``box``'s children or its nested boxes' (True if found)."""
    kids = tuple(getattr(box, "children", ()))
    if any(k is old for k in kids):
        box.children = tuple(new if k is old else k for k in kids)
        return True
    return any(_swap(k, old, new) for k in kids)


def renew_slider(box: Any, old: Any, maximum: int | Sequence[tuple[str, Any]], on_change: Callable[[dict], None],
                 value: Any = None) -> Any:
    """A NEW IntSlider over ``old.min..maximum`` in ``old``'s place inside ``box`` (same description,
    style, width and CSS classes, observed by ``on_change`` instead of ``old``); returns it. When
    ``old`` is a SelectionSlider, ``maximum`` is the new slider's options, ``(label, value)`` pairs
    (lesson 01's context lengths, up to the chosen model's window), and ``value`` one of their values.

    The browser's slider (noUiSlider, bundled by ipywidgets 8) keeps the range it was created with
    for its End and Home keys (its ``updateOptions`` renews the range for dragging only), so a
    ``max`` set on a live slider left End at the old maximum (issue 28: lesson 04 after a block
    size change, lesson 00 after a table change). A slider made with the new range has none of it.

    Example: a slider over 0..15 at 5 inside ``box``, ``renew_slider(box, s, 19, f)`` -> a new
    slider over 0..19 at 5 in its place (``value`` defaults to ``min(old.value, maximum)``).
    """
    import ipywidgets as W

    common = dict(description=old.description, style={"description_width": old.style.description_width},
                  layout=W.Layout(width=old.layout.width, margin=old.layout.margin))
    if isinstance(old, W.SelectionSlider):
        options = list(maximum)  # type: ignore[arg-type]
        new = W.SelectionSlider(options=options, value=options[0][1] if value is None else value, **common)
    else:
        new = W.IntSlider(value=min(old.value, maximum) if value is None else value, min=old.min, max=maximum, **common)
    for cls in old.get_state()["_dom_classes"]:   # the widget's synced state (public), not the trait itself
        new.add_class(cls)
    if not _swap(box, old, new):
        raise ValueError(f"renew_slider: the slider {old.description!r} is not inside the box given")
    old.unobserve(on_change, names="value")
    new.observe(on_change, names="value")
    old.close()
    return new


class _Configured:
    """A plotly figure that a notebook displays with its own plotly.js ``config`` (a static control's figure)."""

    def __init__(self, fig: Any, config: dict[str, Any]) -> None:
        self.fig, self.config = fig, config

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, Any]:
        from .stepper import figure_output

        return figure_output(self.fig, self.config)["data"]


class LiveControl:
    """Base class (see the module doc). ``result``: the last computed data (a dict)."""

    css_class = "kvlab-control"
    caption_below = False  # True: the caption under the figure (the controls right above what they change)
    plotly_config: dict[str, Any] = {}  # plotly.js options over PLOTLY_CONFIG, e.g. {"displayModeBar": False}

    def __init__(self, static: bool | None = None) -> None:
        self.static = is_static(static)
        self.result: dict[str, Any] = {}
        self.widget: Any = None
        self.update()
        if not self.static:
            self._build()

    # ------------------------------------------------------------------ subclass API
    def update(self) -> None:
        """Recompute ``self.result`` from the current inputs."""
        raise NotImplementedError

    def caption(self) -> str:
        """The result in one or two plain sentences."""
        return ""

    def figure(self) -> Any:
        """The picture of the result (a plotly figure), or None."""
        return None

    def _inputs(self, W: Any) -> list[Any]:
        """The ipywidgets inputs, each calling ``self.set(...)`` when it changes."""
        return []

    # ------------------------------------------------------------------ state changes
    def set(self, **values: Any) -> None:
        """Change inputs by name, recompute and redraw. An unknown name or a value the
        subclass's ``check`` refuses is an error that leaves the state as it was."""
        for name in values:
            if name.startswith("_") or not hasattr(self, name) or callable(getattr(self, name)):
                raise ValueError(f"{type(self).__name__} has no input {name!r}")
        old = {name: getattr(self, name) for name in values}
        for name, v in values.items():
            setattr(self, name, v)
        try:
            self.check()
            self.update()
        except Exception:
            for name, v in old.items():
                setattr(self, name, v)
            self.update()
            raise
        self.refresh()

    def check(self) -> None:
        """Raise ValueError naming a bad input (called before every update)."""

    def site_grid(self) -> dict[str, list[Any]] | None:
        """The inputs' values the static site precomputes (name -> values, see
        :mod:`kvlab.viz.explorer`); None: the site shows the current state only."""
        return None

    def site_labels(self) -> dict[str, dict[Any, str]]:
        """How the site's menus name some of :meth:`site_grid`'s values (axis -> value -> text)."""
        return {}

    def _static_parts(self) -> list[Any]:
        figure = [f for f in [self.figure()] if f is not None]
        return figure + [self.caption_html()] if self.caption_below else [self.caption_html()] + figure

    def _shown_parts(self) -> list[Any]:
        """:meth:`_static_parts` as a notebook displays them: the figure with :attr:`plotly_config`."""
        return [_Configured(p, self.plotly_config) if self.plotly_config and hasattr(p, "to_plotly_json") else p
                for p in self._static_parts()]

    def _explore(self) -> str:
        from .explorer import explorer_html

        axes = self.site_grid() or {}
        start = {k: getattr(self, k) for k in axes}
        return explorer_html(lambda **kw: self.set(**kw), self._static_parts, axes, start, self.site_labels(),
                             config=self.plotly_config)

    # ------------------------------------------------------------------ widgets
    def caption_html(self, text: str | None = None) -> str:
        """The caption (or ``text``, e.g. a "computing" line) as the control's caption box shows it."""
        th = theme()
        return (f"<div style='font-size:{max(th.font_size + 2, th.control_px)}px;color:{th.text_color};"
                f"line-height:1.35;overflow-wrap:anywhere'>{html.escape(self.caption() if text is None else text)}</div>")

    def refresh(self) -> None:
        if self.widget is None:
            return
        from .stepper import figure_output

        self._caption.value = self.caption_html()
        fig = self.figure()
        self._out.outputs = (figure_output(fig, self.plotly_config),) if fig is not None else ()

    def _build(self) -> None:
        import ipywidgets as W

        inputs = self._inputs(W)
        self._caption = W.HTML()
        self._caption.add_class("kvlab-control-caption")
        self._out = W.Output()
        self._out.add_class("kvlab-figure")
        row = W.HBox(inputs, layout=W.Layout(flex_flow="row wrap", max_width="100%"))
        parts = [row, self._out, self._caption] if self.caption_below else [row, self._caption, self._out]
        css = classroom_css(self.css_class)
        if css:
            parts.insert(0, W.HTML(css))
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-control")
        self.widget.add_class(self.css_class)
        self.refresh()

    def _ipython_display_(self) -> None:
        display_control(self.widget, self._shown_parts, self._explore if self.site_grid() else None)

    def __repr__(self) -> str:
        return f"<{type(self).__name__}: {self.caption()}>"
