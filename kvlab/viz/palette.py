"""The one palette every kvlab view uses, and classroom mode (projector theme).

Rules (from DESIGN.md): one fixed colour per request; free blocks light grey; shared
blocks outlined and labelled with their ref count; radix hits green, misses (newly
prefilled) blue; evictable nodes dashed; every figure says simulated or measured.

A request's colour is a pure function of its id, so ``R1`` has the same colour in
every view of every lesson: ids ending in a number use that number (``R1``, ``seq3``),
single letters use their place in the alphabet (``A``, ``B``...), anything else a
stable hash. :func:`assign_colors` resolves clashes inside one figure (``R1`` and
``R11`` would share a colour) by moving the later id to the next unused colour.

Example:
    >>> request_color("R1") == request_color("R1") != request_color("R2")
    True
    >>> assign_colors(["R1", "R11"])["R11"] != request_color("R1")
    True
    >>> FREE
    '#e6e6e6'

Not handled here: drawing (see memory_map, radix_view).
"""
from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from typing import Iterable, Sequence

__all__ = [
    "REQUEST_COLORS", "STRONG_COLORS", "FREE", "UNOWNED", "HIT", "MISS", "EVICTED", "HIGHLIGHT", "SHARED_OUTLINE", "TREE",
    "request_color", "assign_colors", "holder_color", "tint", "Theme", "theme", "classroom", "is_classroom",
    "source_label", "classroom_css", "label_px", "classroom_page_css", "page_css"
]


# Request colours: qualitative, chosen to avoid the hit green, the miss blue, the
# highlight red and the free grey, so a block's colour never reads as a radix state.
REQUEST_COLORS: tuple[str, ...] = (
    "#ff7f0e",  # orange
    "#9467bd",  # purple
    "#17becf",  # cyan
    "#e377c2",  # pink
    "#bcbd22",  # olive
    "#8c564b",  # brown
    "#f7b6d2",  # light pink
    "#ffbb78",  # light orange
    "#c5b0d5",  # lavender
    "#9edae5",  # light cyan
    "#dbdb8d",  # khaki
    "#c49c94",  # tan
)
FREE = "#e6e6e6"  # free block: light grey
UNOWNED = "#7f7f7f"  # used block with no recorded owner (e.g. held only by a radix node)
HIT = "#2ca02c"  # radix: matched prefix (green, as in the notes)
MISS = "#1f77b4"  # radix: newly prefilled suffix (blue, as in the notes)
EVICTED = "#d9d9d9"  # radix: evicted node (faded)
HIGHLIGHT = "#d62728"  # the block being written or read
SHARED_OUTLINE = "#222222"  # outline of a block with ref_count > 1
TREE = "#2ca02c"  # the radix tree as a holder of blocks (cached, reusable: the hit green)

_TRAILING_NUMBER = re.compile(r"^.*?(\d+)$")


def _natural_index(seq_id: str) -> int:
    m = _TRAILING_NUMBER.match(seq_id)
    if m:
        return int(m.group(1))
    if len(seq_id) == 1 and seq_id.isalpha() and seq_id.isascii():
        return ord(seq_id.upper()) - ord("A")
    return zlib.crc32(seq_id.encode("utf-8"))


def request_color(seq_id: str | None) -> str:
    """The fixed colour of one request (``UNOWNED`` grey for ``None``).

    Example: ``request_color("R1")`` is ``REQUEST_COLORS[1]`` (purple) in every view.
    """
    if seq_id is None:
        return UNOWNED
    return REQUEST_COLORS[_natural_index(str(seq_id)) % len(REQUEST_COLORS)]


STRONG_COLORS: tuple[str, ...] = REQUEST_COLORS[:6]  # the six that no tint of another can be mistaken for


def assign_colors(seq_ids: Iterable[str | None], palette: Sequence[str] = REQUEST_COLORS) -> dict[str, str]:
    """Colours for every id of one figure: the fixed colour unless another id took it.

    Ids are processed in sorted order, so the result depends only on the set of ids.
    With more ids than colours, colours repeat (there is no clash-free answer). A figure that
    draws reserved slots as a *tint* of their request's colour passes ``palette=STRONG_COLORS``
    (the light request colours read as a tint: lesson 03 drew D' in light cyan, C's "reserved").

    Example: ``assign_colors(["D'"], STRONG_COLORS)["D'"] in STRONG_COLORS -> True``.
    """
    ids = sorted({str(s) for s in seq_ids if s is not None})
    used: set[str] = set()
    out: dict[str, str] = {}
    n = len(palette)
    for s in ids:
        i = _natural_index(s) % n
        if len(used) < n:
            while palette[i] in used:
                i = (i + 1) % n
        out[s] = palette[i]
        used.add(palette[i])
    return out


def holder_color(holder: str, colors: dict[str, str]) -> str:
    """The colour a block table is drawn in: the tree's green for ``"tree"``, else the request's."""
    if holder == "tree":
        return TREE
    return colors.get(holder, request_color(holder))


def tint(hex_color: str, alpha: float = 0.35) -> str:
    """Mix a colour with white (``alpha`` 1 = the colour itself). Example: ``tint("#000000", 0.5) -> '#808080'``."""
    r, g, b = (int(hex_color[i:i + 2], 16) for i in (1, 3, 5))
    return "#" + "".join(f"{round(255 - (255 - v) * alpha):02x}" for v in (r, g, b))


def source_label(source: str) -> str:
    """``'simulated'`` or ``'measured'``; anything else is a ValueError naming it."""
    if source not in ("simulated", "measured"):
        raise ValueError(f"source must be 'simulated' or 'measured', got {source!r}")
    return source


# ------------------------------------------------------------------ classroom mode
@dataclass(frozen=True)
class Theme:
    """Sizes and contrast every view reads when it builds a figure."""

    font_size: int
    title_size: int
    label_size: int
    line_width: float  # outlines, arrows, graph edges
    shared_width: float  # outline of shared blocks
    highlight_width: float
    text_color: str
    grid_width: int  # canvas width in px a figure is laid out for (its height follows from it)
    high_contrast: bool
    autosize: bool = False  # True: figures take the output area's width (layout.width unset)
    control_px: int = 13  # font size of widget controls (buttons, sliders, captions)
    min_text_px: int = 12  # no text in a figure or output is drawn smaller (LESSON-RUBRIC: 12, classroom 16)

    def _ipython_display_(self) -> None:
        """What a notebook shows after ``viz.classroom(True)``: one line, not the dataclass; in a
        Jupyter kernel, with :func:`classroom_page_css` (printed text, tables and widgets grow)."""
        if self.high_contrast:
            line = (f"classroom mode on: figures drawn from now on take the output width, fonts {self.font_size}px, "
                    f"controls {self.control_px}px, printed text and tables larger (viz.classroom(False) switches back)")
        else:
            line = "classroom mode off: figures drawn from now on use the normal sizes"
        from .display import is_static

        if is_static():
            print(line)
            return
        from IPython.display import display

        css = classroom_page_css() if self.high_contrast else ""
        display({"text/html": f"{css}<pre>{line}</pre>", "text/plain": line}, raw=True)


# A 1280x720 projector with JupyterLab's file browser open leaves an output area about 900 px
# wide: classroom figures are laid out for 880 px and then take whatever width the output has.
# Every font size a view uses comes from here (font_size, title_size, label_size, control_px) or
# from label_px(); none is below min_text_px.
_NORMAL = Theme(12, 15, 12, 1.0, 2.5, 4.0, "#333333", 860, False)
_CLASSROOM = Theme(18, 22, 16, 3.0, 5.0, 7.0, "#000000", 880, True, autosize=True, control_px=18, min_text_px=16)
_state = {"classroom": False}


def classroom(on: bool = True) -> Theme:
    """Switch every figure built from now on to large fonts, thick lines, high contrast.

    For a projector: ``kvlab.viz.classroom(True)``; back with ``classroom(False)``.
    Classroom figures take the output area's width (laid out for a 1280x720 screen with
    JupyterLab's file browser open), and widget controls (buttons, sliders, captions) grow.
    Figures already drawn keep their look; re-run the cell to redraw. Returns the theme.
    """
    if not isinstance(on, bool):
        raise TypeError(f"classroom(on) takes True or False, got {on!r}")
    _state["classroom"] = on
    _plotly_default_template(on)
    return theme()


CLASSROOM_TEMPLATE = "kvlab_classroom"


def _plotly_default_template(on: bool) -> None:
    """Figures a lesson builds itself (``px.bar(...)``, ``go.Figure(...)``) get the theme's sizes
    too: in classroom mode plotly's default template gains a ``kvlab_classroom`` layer (fonts,
    titles, legends, hover labels, slider labels); off, the previous default comes back.
    A figure with its own ``template=`` or explicit font sizes keeps them. No-op without plotly."""
    try:
        import plotly.graph_objects as go
        import plotly.io as pio
    except ImportError:
        return
    th = _CLASSROOM
    if CLASSROOM_TEMPLATE not in pio.templates:
        pio.templates[CLASSROOM_TEMPLATE] = go.layout.Template(layout=dict(
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(font=dict(size=th.title_size)),
            legend=dict(font=dict(size=th.font_size)),
            hoverlabel=dict(font=dict(size=th.font_size)),
            annotationdefaults=dict(font=dict(size=th.font_size)),
            sliderdefaults=dict(font=dict(size=th.font_size), currentvalue=dict(font=dict(size=th.font_size))),
            updatemenudefaults=dict(font=dict(size=th.font_size)),
        ))
    layers = [t for t in str(pio.templates.default or "").split("+") if t and t != CLASSROOM_TEMPLATE]
    pio.templates.default = "+".join(layers + [CLASSROOM_TEMPLATE] if on else layers) or "plotly"


def is_classroom() -> bool:
    return _state["classroom"]


def theme() -> Theme:
    """The theme in force (classroom or normal)."""
    return _CLASSROOM if _state["classroom"] else _NORMAL


def label_px(room_px: float | None = None) -> int:
    """The font size of a label with ``room_px`` pixels of room (a block's cell, a token's slot):
    the theme's label size, smaller when the room is short, but never under the theme's minimum
    (12 px, 16 px in classroom mode): below that a view should hide the label (hover still has it).

    Example (normal theme): ``label_px() -> 12``, ``label_px(5.0) -> 12``.
    """
    th = theme()
    if room_px is None:
        return th.label_size
    return int(max(th.min_text_px, min(th.label_size, room_px)))


# Printed text (``print``) in JupyterLab's output ``<pre>`` wraps with ``word-break: break-all``: a
# line wider than the output area is cut inside a word. This wraps it at a word (a word longer than
# the line still breaks). The lessons' first cell (kvlab.check.self_test) shows it, at every size.
_PRE_WRAP = "word-break: normal !important; overflow-wrap: break-word;"


def page_css() -> str:
    """The ``<style>`` block every lesson's first cell shows (:func:`kvlab.check.self_test` in a
    Jupyter kernel): printed text wraps at words, not inside them, at every screen size.

    Example: ``"word-break: normal" in page_css() -> True``.
    """
    out = ".jp-OutputArea-output"
    return f"<style>{out} pre, {out}.jp-RenderedText pre {{{_PRE_WRAP}}}</style>"


def classroom_page_css() -> str:
    """A ``<style>`` block, shown by ``viz.classroom(True)`` in a notebook, that enlarges the text
    of every output on the page for a projector: printed text (``print``) to the minimum (16 px:
    80 characters still fit an 850 px output area; a longer line wraps at a word, not inside one, as
    JupyterLab's ``word-break: break-all`` would), HTML and pandas tables and every widget's
    labels, readouts, buttons, menus and text fields to the controls' size (18 px)."""
    th = _CLASSROOM
    out, px, small = ".jp-OutputArea-output", th.control_px, th.min_text_px
    return (
        "<style>"
        f"{out} pre, {out}.jp-RenderedText pre {{font-size: {small}px !important; line-height: 1.35; "
        f"{_PRE_WRAP}}}"   # wrap at words (JupyterLab: break-all), as page_css() does at every size
        f"{out} table, {out} th, {out} td, {out} code, {out} .jp-RenderedHTMLCommon {{font-size: {px}px !important;}}"
        f".jupyter-widgets .widget-label, .jupyter-widgets .widget-readout, .jupyter-widgets .widget-html-content, "
        f".jupyter-widgets .widget-label-basic, .jupyter-widgets input, .jupyter-widgets select, "
        f".jupyter-widgets button, .jupyter-widgets .widget-button, .jupyter-widgets .widget-toggle-button, "
        f".jupyter-widgets .widget-dropdown, .jupyter-widgets textarea {{font-size: {px}px !important;}}"
        f".jupyter-widgets .widget-button, .jupyter-widgets button, .jupyter-widgets select, "
        f".jupyter-widgets input {{height: auto !important; min-height: {px + 12}px;}}"
        f".jupyter-widgets .widget-label {{min-width: fit-content;}}"
        "</style>"
    )


def classroom_css(box_class: str) -> str:
    """A ``<style>`` block that enlarges the controls inside widgets of class ``box_class``
    (labels, slider readouts, text fields, buttons) and lets their rows wrap instead of
    overflowing a narrow output area; empty outside classroom mode."""
    th = theme()
    if not th.high_contrast:
        return ""
    px, sel = th.control_px, f".{box_class}"
    return (
        "<style>"
        f"{sel} .widget-label, {sel} .widget-readout, {sel} .widget-html-content, {sel} input, "
        f"{sel} .widget-button, {sel} button {{font-size: {px}px !important; line-height: 1.4;}}"
        f"{sel} .widget-button, {sel} button {{height: auto !important; padding: 4px 12px;}}"
        f"{sel} .widget-hbox {{flex-wrap: wrap; max-width: 100%;}}"
        f"{sel} .widget-inline-hbox {{max-width: 100%;}}"
        f"{sel} .widget-label {{min-width: fit-content;}}"
        "</style>"
    )
