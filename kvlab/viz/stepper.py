"""The stepper: one reusable widget (previous, next, play, reset, caption) over any frames.

A frame is a snapshot plus a caption (:class:`Frame`); a *render* function turns a frame
into a plotly figure, a graphviz graph or an SVG/HTML string. The stepper shows the
current frame, calls ``frame.snapshot.check_integrity()`` on every move and shows a
visible red error (and sets ``stepper.error``) if it fails. Play is an
``ipywidgets.Play`` (a timer in the browser), never a blocking Python loop.

Widget or static: see :mod:`kvlab.viz.display`. In static mode (``static=True`` or
``KVLAB_STATIC=1``) no widget is built; displaying the stepper renders its current frame
as a static figure or SVG with its caption; with ``KVLAB_STATIC=frames`` (the static site) it
renders every frame into a player that needs no kernel (:meth:`Stepper.flipbook_html`).

Controls: reset, prev, play / pause, loop, next and a step slider, each saying on hover what it
does (:data:`kvlab.viz.flipbook.TIPS`); prev and reset are disabled at step 1 and next at the last step.

CSS classes (for browser tests): ``kvlab-stepper`` (the box), ``kvlab-prev``,
``kvlab-next``, ``kvlab-play`` (the box of ``kvlab-play-button`` and the ``kvlab-loop``
toggle), ``kvlab-reset``, ``kvlab-step-slider``, ``kvlab-caption``,
``kvlab-error``, ``kvlab-figure`` (plotly, an Output widget) or ``kvlab-svg`` (graphviz).
:class:`StepperChoice`: ``kvlab-stepper-choice`` (the box) and ``kvlab-choice`` (its toggle buttons).

Example (no front end needed):
    >>> s = Stepper([Frame(None, "first"), Frame(None, "second")], render=lambda f: f"<p>{f.caption}</p>", static=True)
    >>> s.next(); s.index, s.caption
    (1, 'second')
    >>> s.reset(); s.index
    0
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..memory.ids import check_int
from .display import PLOTLY_CONFIG, is_static, static_frames, static_html
from .flipbook import TIPS
from .palette import classroom_css, theme

__all__ = ["Frame", "Stepper", "StepperChoice"]


@dataclass(frozen=True)
class Frame:
    """One step of a recorded run: the state (anything with ``check_integrity()``, or
    None), a caption in words, and the blocks to highlight."""

    snapshot: Any
    caption: str = ""
    highlight: tuple[int, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def _kind(obj: Any) -> str:
    if hasattr(obj, "pipe") and hasattr(obj, "source"):
        return "graphviz"
    if isinstance(obj, str):
        return "html"
    return "plotly"


class Stepper:
    """Step through ``frames`` with ``render(frame)`` (see module doc).

    Python API (also what the buttons call): ``next()``, ``prev()``, ``reset()``,
    ``go(i)``; state: ``index``, ``frame``, ``caption``, ``error`` (None or the message);
    ``figure()`` renders the current frame statically; ``widget`` is the ipywidgets box
    (None in static mode).
    """

    def __init__(
        self,
        frames: Sequence[Frame],
        render: Callable[[Frame], Any],
        static: bool | None = None,
        interval_ms: int = 900,
        title: str = "",
        caption_lines: int = 0,
    ) -> None:
        frames = list(frames)
        if not frames:
            raise ValueError("Stepper needs at least one frame")
        for i, f in enumerate(frames):
            if not isinstance(f, Frame):
                raise TypeError(f"frame {i} is a {type(f).__name__}, not a kvlab.viz.Frame")
        if not callable(render):
            raise TypeError(f"render must be callable, got {render!r}")
        self.frames = frames
        self.render = render
        self.static = is_static(static)
        self.title = title
        self.caption_lines = caption_lines  # > 0: the caption keeps that many lines' height (no jump between steps)
        self.index = 0
        self.error: str | None = None
        self.widget: Any = None
        self._slider: Any = None
        self._check()
        if not self.static:
            self._build(interval_ms)

    # ------------------------------------------------------------------ state
    def __len__(self) -> int:
        return len(self.frames)

    @property
    def frame(self) -> Frame:
        return self.frames[self.index]

    @property
    def caption(self) -> str:
        return self.frame.caption

    def _check(self) -> None:
        snap = self.frame.snapshot
        self.error = None
        if snap is not None and hasattr(snap, "check_integrity"):
            try:
                snap.check_integrity()
            except Exception as e:  # noqa: BLE001 - any failure must be shown, not raised
                self.error = f"integrity check failed at step {self.index}: {type(e).__name__}: {e}"

    def go(self, i: int) -> None:
        """Show frame ``i`` (0-based)."""
        if not 0 <= check_int("step", i) < len(self.frames):
            raise ValueError(f"step {i!r} is outside 0..{len(self.frames) - 1}")
        if self.widget is not None and self._slider.value != i + 1:
            self._slider.value = i + 1  # the slider (1-based, as the caption) calls _show
        else:
            self._show(i)

    def next(self) -> None:
        self.go(min(self.index + 1, len(self.frames) - 1))

    def prev(self) -> None:
        self.go(max(self.index - 1, 0))

    def reset(self) -> None:
        """Stop playing and show step 1 (what the reset button does)."""
        if self.widget is not None:
            self._play.playing = False
            self._play.value = 1
        self.go(0)

    def figure(self) -> Any:
        """The current frame rendered statically (a plotly figure, a graphviz graph or HTML)."""
        return self.render(self.frame)

    # ---------------------------------------------------------------- widgets
    def _caption_html(self) -> str:
        """"step 3 / 16: R1 appends ..." (the numbering the animations use), with the title first."""
        th = theme()
        head = f"{self.title}: " if self.title else ""
        sep = ":" if self.caption else ""
        return (
            f"<div style='font-size:{max(th.font_size + 2, th.control_px)}px;color:{th.text_color};"
            f"line-height:1.35;overflow-wrap:anywhere"
            + (f";min-height:{1.35 * self.caption_lines:.2f}em" if self.caption_lines else "") + "'>"
            f"<b>{html.escape(head)}step {self.index + 1} / {len(self.frames)}{sep}</b> "
            f"{html.escape(self.caption)}</div>"
        )

    def _error_html(self) -> str:
        if not self.error:
            return ""
        return (
            "<div style='color:#ffffff;background:#d62728;padding:4px 8px;font-weight:bold'>"
            f"{html.escape(self.error)}</div>"
        )

    @property
    def slider(self) -> Any:
        """The step slider (1-based, as the caption counts), or None for a static stepper; a
        control beside the stepper observes it to follow the step (lesson 12's request menu)."""
        return self._slider

    def _build(self, interval_ms: int) -> None:
        import ipywidgets as W

        n = len(self.frames)
        th = theme()

        def button(desc: str, cls: str, tip: str) -> Any:
            b = W.Button(description=desc, tooltip=tip, layout=W.Layout(width="auto"))
            b.add_class(cls)
            return b

        self._prev = button("◀ prev", "kvlab-prev", TIPS["prev"])
        self._next = button("next ▶", "kvlab-next", TIPS["next"])
        self._reset = button("⟲ reset", "kvlab-reset", TIPS["reset"])
        # The timer is an ipywidgets Play (it runs in the browser), hidden: its own three buttons have
        # no labels and no tooltips, and its stop jumped back to step 1 without a word (issue 28). The
        # stepper's labelled play / pause button and loop toggle drive it; reset is the one way back.
        # Play and the slider count steps from 1, as the caption does ("step 2 / 12"). The caption
        # is the one step counter: the slider shows no number of its own (the rubric: once).
        self._play = W.Play(value=1, min=1, max=n, step=1, interval=interval_ms, show_repeat=False,
                            layout=W.Layout(display="none"))
        self._play_button = button("▶ play", "kvlab-play-button", TIPS["play"])
        self._loop = W.ToggleButton(value=False, description="⟳ loop", tooltip=TIPS["loop"],
                                    layout=W.Layout(width="auto"))
        self._loop.add_class("kvlab-loop")
        self._loop_link = W.link((self._loop, "value"), (self._play, "repeat"))
        playing = W.HBox([self._play_button, self._loop, self._play], layout=W.Layout(width="auto"))
        playing.add_class("kvlab-play")  # ``.kvlab-play button``: the play button first
        self._play_button.on_click(lambda _b: self.toggle_play())
        self._play.observe(lambda _ch: self._sync_buttons(), names="playing")
        # Labelled "step" (reviews r7 and r9: an unlabelled slider); the caption still counts.
        self._slider = W.IntSlider(value=1, min=1, max=n, readout=False, continuous_update=True,
                                   description="step", style={"description_width": "initial"},
                                   tooltip="drag to any step", layout=W.Layout(width="min(300px, 100%)"))
        self._slider.add_class("kvlab-step-slider")
        self._link = W.link((self._play, "value"), (self._slider, "value"))
        self._caption = W.HTML(self._caption_html())
        self._caption.add_class("kvlab-caption")
        self._error = W.HTML(self._error_html())
        self._error.add_class("kvlab-error")
        self._prev.on_click(lambda _b: self.prev())
        self._next.on_click(lambda _b: self.next())
        self._reset.on_click(lambda _b: self.reset())
        self._slider.observe(lambda ch: self._show(ch["new"] - 1), names="value")
        view = self._render_widget()
        controls = W.HBox([self._reset, self._prev, playing, self._next, self._slider],
                          layout=W.Layout(flex_flow="row wrap", max_width="100%"))
        parts = [controls, self._caption, self._error, view]
        css = classroom_css("kvlab-stepper")
        if css:  # classroom mode: bigger controls that wrap instead of overflowing a projector's width
            parts.insert(0, W.HTML(css))
            for b in (self._prev, self._next, self._reset, self._play_button, self._loop):
                b.style.font_size = f"{th.control_px}px"
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-stepper")
        self._sync_buttons()

    def toggle_play(self) -> None:
        """What the play / pause button does: start the browser's timer from this step (from step 1
        at the last step, as the Play widget does) or pause it where it is."""
        if self.widget is None:
            return
        self._play.playing = not self._play.playing

    def _sync_buttons(self) -> None:
        """Prev and reset off at step 1, next off at the last step; the play button says what a
        click does now (play, pause, play again from step 1), each in its tooltip too."""
        if self.widget is None:
            return
        first, last, n = self.index == 0, self.index == len(self.frames) - 1, len(self.frames)
        self._prev.disabled, self._next.disabled = first, last
        self._reset.disabled = first and not self._play.playing
        self._prev.tooltip = TIPS["at first"] if first else TIPS["prev"]
        self._next.tooltip = TIPS["at last"] if last else TIPS["next"]
        self._reset.tooltip = TIPS["at first"] if self._reset.disabled else TIPS["reset"]
        self._play_button.disabled = self._loop.disabled = n == 1
        if self._play.playing:
            self._play_button.description, self._play_button.tooltip = "❚❚ pause", TIPS["pause"]
        else:
            self._play_button.description = "▶ play"
            self._play_button.tooltip = TIPS["play again"] if last else TIPS["play"]

    def _render_widget(self) -> Any:
        import ipywidgets as W

        obj = self._safe_render()
        self._view_kind = _kind(obj) if obj is not None else "html"
        if self._view_kind == "plotly":
            # An Output widget holding the figure's plotly mime bundle: rendered by the
            # JupyterLab plotly renderer plotly ships, no anywidget / FigureWidget needed.
            self._out = W.Output()
            self._out.add_class("kvlab-figure")
            self._set_figure(obj)
            return self._out
        self._html = W.HTML(self._as_html(obj))
        self._html.add_class("kvlab-svg")
        return self._html

    def _set_figure(self, fig: Any) -> None:
        self._out.outputs = (figure_output(fig),)

    def _as_html(self, obj: Any) -> str:
        if obj is None:
            return ""
        return obj if isinstance(obj, str) else static_html(obj)

    def _safe_render(self) -> Any:
        try:
            return self.render(self.frame)
        except Exception as e:  # noqa: BLE001 - show it in the widget
            msg = f"rendering step {self.index} failed: {type(e).__name__}: {e}"
            self.error = f"{self.error}; {msg}" if self.error else msg
            return None

    def _show(self, i: int) -> None:
        self.index = i
        self._check()
        if self.widget is None:
            return
        obj = self._safe_render()
        if obj is not None:
            if self._view_kind == "plotly" and _kind(obj) == "plotly":
                self._set_figure(obj)
            elif self._view_kind != "plotly":
                self._html.value = self._as_html(obj)
        self._caption.value = self._caption_html()
        self._error.value = self._error_html()
        self._sync_buttons()

    def flipbook_html(self, interval_ms: int = 900) -> str:
        """Every frame rendered, with its caption, into one HTML block that plays in a browser
        without a kernel (see :mod:`kvlab.viz.flipbook`); the stepper stays on its frame."""
        from .flipbook import flipbook_html

        start, rendered, captions = self.index, [], []
        try:
            for i in range(len(self.frames)):
                self.index = i
                self._check()
                rendered.append(self.render(self.frame))
                captions.append(self._caption_html() + self._error_html())
        finally:
            self.index = start
            self._check()
        return flipbook_html(rendered, captions, interval_ms=interval_ms)

    # ----------------------------------------------------------------- display
    def __repr__(self) -> str:
        err = f" ERROR: {self.error}" if self.error else ""
        return f"<Stepper step {self.index + 1}/{len(self.frames)}: {self.caption}{err}>"

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        if self.widget is not None:
            display(self.widget)
            return
        if static_frames():  # a browser without a kernel (the static site): every frame, playable
            display(HTML(self.flipbook_html()))
            return
        display(HTML(self._caption_html() + self._error_html()))
        obj = self._safe_render()
        if obj is None:
            display(HTML(self._error_html()))
        elif isinstance(obj, str):
            display(HTML(obj))
        elif _kind(obj) == "graphviz":
            from IPython.display import SVG

            display(SVG(static_html(obj)))
        else:
            display(obj)


def figure_output(fig: Any, config: dict[str, Any] | None = None) -> dict[str, Any]:
    """A plotly figure as one notebook ``display_data`` output (what an Output widget holds);
    ``config``: plotly.js options over :data:`PLOTLY_CONFIG` (``{"displayModeBar": False}``: no mode bar)."""
    import json

    import plotly.io as pio

    spec = json.loads(pio.to_json(fig, validate=False))
    return {
        "output_type": "display_data",
        "data": {"application/vnd.plotly.v1+json": {**spec, "config": {**PLOTLY_CONFIG, **(config or {})}},
                 "text/plain": f"<plotly figure: {fig.layout.title.text}>"},
        "metadata": {},
    }


class StepperChoice:
    """Toggle buttons above a stepper: each option is a run of its own (a :class:`Stepper` over its
    frames), and a click swaps that run's stepper in at the same step (lesson 06: a prompt that ends
    inside a block against one that ends on a block boundary). In static mode: the first option's
    stepper, under a line naming the options.

    Example (no front end needed):
        >>> a = Stepper([Frame(None, "a1"), Frame(None, "a2")], render=lambda f: f.caption, static=True)
        >>> b = Stepper([Frame(None, "b1"), Frame(None, "b2")], render=lambda f: f.caption, static=True)
        >>> c = StepperChoice({"run a": a, "run b": b}, static=True)
        >>> a.next(); c.pick("run b"); c.current.caption
        'b2'
    """

    def __init__(self, choices: dict[str, Stepper], description: str = "", static: bool | None = None) -> None:
        if not choices or not all(isinstance(s, Stepper) for s in choices.values()):
            raise ValueError("StepperChoice needs at least one option, each a Stepper")
        self.choices = dict(choices)
        self.value = next(iter(self.choices))
        self.static = is_static(static)
        self.widget: Any = None
        if not self.static and all(s.widget is not None for s in self.choices.values()):
            self._build(description)

    @property
    def current(self) -> Stepper:
        return self.choices[self.value]

    def pick(self, label: str) -> None:
        """Show option ``label``'s stepper at the step the current one shows (or its last)."""
        if label not in self.choices:
            raise ValueError(f"no option {label!r}; the options: {list(self.choices)}")
        step, self.value = self.current.index, label
        self.current.go(min(step, len(self.current) - 1))
        if self.widget is not None:
            self.widget.children = (self._toggle, self.current.widget)
            if self._toggle.value != label:
                self._toggle.value = label

    def _build(self, description: str) -> None:
        import ipywidgets as W

        th = theme()
        self._toggle = W.ToggleButtons(options=list(self.choices), value=self.value, description=description,
                                       style={"button_width": "auto", "description_width": "initial"})
        if th.high_contrast:
            self._toggle.style.font_size = f"{th.control_px}px"
        self._toggle.add_class("kvlab-choice")
        self._toggle.observe(lambda ch: self.pick(ch["new"]), names="value")
        self.widget = W.VBox([self._toggle, self.current.widget], layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-stepper-choice")

    def _ipython_display_(self) -> None:
        from IPython.display import HTML, display

        if self.widget is not None:
            display(self.widget)
            return
        display(HTML(f"<p>{html.escape(' / '.join(self.choices))}: {html.escape(self.value)} shown "
                     "(the buttons need a live kernel)</p>"))
        self.current._ipython_display_()
