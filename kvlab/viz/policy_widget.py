"""Lesson 03's control: pick how a contiguous allocator reserves, and the paged side's block size,
and see what the same requests leave behind (contiguous versus paged, simulated).

:func:`policy_state` runs one of lesson 03's traces (:func:`~kvlab.viz.compare.notes_trace`, the
notes' A, B, C and D'; :func:`~kvlab.viz.compare.growth_trace`, requests that grow) through
:func:`~kvlab.viz.compare.run_compare` with the chosen **reservation** policy and **block size**,
and sums up the run: which requests each side refused, the slots reserved but unused, the slots
stranded in holes, the tokens copied on growth, at the step where each side did worst.
:class:`PolicyWidget` shows that sentence and the figure of the final step; every change reruns
the trace (a few milliseconds) and redraws.

Example:
    >>> s = policy_state("max", "notes", 4)      # A and B reserve 24 slots each: C finds none
    >>> s["refused_contiguous"], s["refused_paged"]
    (['C'], [])
    >>> policy_state("exact", "notes", 16)["refused_paged"]   # blocks of 16: B's 8 tokens hold 16 slots
    ["D'"]
    >>> policy_state("exact", "growth", 4)["copied"]
    0
"""
from __future__ import annotations

import html
from typing import Any

from .compare import compare_figure, growth_trace, notes_trace, run_compare
from .display import display_control, is_static
from .palette import classroom_css, theme

__all__ = ["POLICIES", "TRACES", "policy_state", "PolicyWidget"]

POLICIES = (("the maximum length (24 slots)", "max"), ("the next power of two, doubled on growth", "pow2"),
            ("exactly the final length (an oracle)", "exact"))
SHORT_NAMES = {"max": "the maximum length", "pow2": "the power of two", "exact": "the exact final length"}
TRACES = (("the notes' A, B, C, then D'", "notes"), ("requests that grow while decoding", "growth"))
BLOCK_SIZES = (1, 2, 4, 8, 16)
CAPACITY, MAX_LEN = 48, 24


def policy_state(policy: str = "max", trace: str = "notes", block_size: int = 4) -> dict[str, Any]:
    """The run's numbers and sentence for one choice (see module doc)."""
    if policy not in {k for _, k in POLICIES}:
        raise ValueError(f"policy must be one of {[k for _, k in POLICIES]}, got {policy!r}")
    if trace not in {k for _, k in TRACES}:
        raise ValueError(f"trace must be one of {[k for _, k in TRACES]}, got {trace!r}")
    if block_size not in BLOCK_SIZES:
        raise ValueError(f"block_size must be one of {BLOCK_SIZES}, got {block_size!r}")
    ops = notes_trace() if trace == "notes" else growth_trace()
    steps = run_compare(ops, CAPACITY, block_size, policy, max_len=MAX_LEN)
    refused = {side: [s.op[1] for s in steps if s.op[0] == "admit" and not getattr(s, f"{side}_ok")]
               for side in ("contiguous", "paged")}
    stuck = {side: [s.op[1] for s in steps if s.op[0] == "grow" and not getattr(s, f"{side}_ok")]
             for side in ("contiguous", "paged")}
    worst = {side: max(s.__getattribute__(side)["reserved_unused"] + s.__getattribute__(side)["external_fragmentation"]
                       for s in steps) for side in ("contiguous", "paged")}
    last = steps[-1]
    copied = last.contiguous["bytes_copied"]
    name = SHORT_NAMES[policy]  # short: the sentence fits 3 + 2 lines on a projector, the menu says the rest
    sentence = (f"Contiguous, {name}: refused {', '.join(refused['contiguous']) or 'nothing'}; "
                + _stuck(stuck["contiguous"], "no free range held the bigger size") + "at its worst "
                f"{worst['contiguous']} of {CAPACITY} slots reserved but empty or stranded; "
                f"{copied} tokens copied. Paged, blocks of {block_size}: refused "
                f"{', '.join(refused['paged']) or 'nothing'}; " + _stuck(stuck["paged"], "no free block")
                + (f"at its worst {worst['paged']} slots empty, all in last blocks"
                   if worst["paged"] else "never an empty slot (" + (
                       "blocks of one token fill exactly" if block_size == 1 else
                       f"every request it held was a multiple of {block_size} tokens long")
                   + ")")
                + "; nothing stranded or copied.")
    return {"policy": policy, "trace": trace, "block_size": block_size, "steps": steps,
            "refused_contiguous": refused["contiguous"], "refused_paged": refused["paged"],
            "worst_contiguous": worst["contiguous"], "worst_paged": worst["paged"], "copied": copied,
            "sentence": sentence}


def _stuck(rids: list[str], why: str) -> str:
    """'failed 2 growths (R1, R3: ...); ' or '' when every growth fitted."""
    if not rids:
        return ""
    return (f"failed {len(rids)} growth{'s' if len(rids) > 1 else ''} ({', '.join(rids)}: {why}; that step's "
            "tokens were not added); ")


class PolicyWidget:
    """Two menus and a slider over :func:`policy_state`; ``w.state`` is the current state and
    ``w.set(policy=..., trace=..., block_size=...)`` moves the controls."""

    def __init__(self, policy: str = "max", trace: str = "notes", block_size: int = 4,
                 static: bool | None = None) -> None:
        self.static = is_static(static)
        self.widget: Any = None
        self.state = policy_state(policy, trace, block_size)
        if not self.static:
            self._build()

    def set(self, **kw: Any) -> None:
        unknown = set(kw) - {"policy", "trace", "block_size"}
        if unknown:
            raise TypeError(f"set() got unknown argument(s) {sorted(unknown)}")
        if self.widget is None:
            s = self.state
            self.state = policy_state(kw.get("policy", s["policy"]), kw.get("trace", s["trace"]),
                                      kw.get("block_size", s["block_size"]))
            return
        for key, value in kw.items():
            self._controls[key].value = value

    def _build(self) -> None:
        import ipywidgets as W

        style = {"description_width": "initial"}
        s = self.state
        self._controls = {
            "policy": W.Dropdown(options=list(POLICIES), value=s["policy"], description="contiguous side reserves",
                                 style=style, layout=W.Layout(width="min(640px, 100%)")),
            "trace": W.Dropdown(options=list(TRACES), value=s["trace"], description="requests", style=style,
                                layout=W.Layout(width="min(440px, 100%)")),
            "block_size": W.SelectionSlider(options=list(BLOCK_SIZES), value=s["block_size"],
                                            description="paged side's block size", style=style,
                                            layout=W.Layout(width="min(440px, 100%)")),
        }
        for key, w in self._controls.items():
            w.add_class(f"kvlab-policy-{key.replace('_', '-')}")
            w.observe(self._changed, names="value")
        self._text = W.HTML()
        self._out = W.Output()
        self._out.add_class("kvlab-figure")
        parts = [*self._controls.values(), self._text, self._out]
        css = classroom_css("kvlab-policy")
        if css:  # a projector (599 px): the controls side by side, the sentence, then a compact figure
            row = W.Layout(flex_flow="row wrap", max_width="100%")
            self._controls["trace"].layout.width = "min(400px, 100%)"     # the policy menu keeps its width: its
            self._controls["trace"].layout.margin = "2px 28px 2px 2px"    # a gap before the slider's label
            self._controls["block_size"].layout.width = "min(400px, 100%)"  # entries are long sentences
            parts = [W.HTML(css), self._controls["policy"],
                     W.HBox([self._controls["trace"], self._controls["block_size"]], layout=row), self._text, self._out]
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-policy")
        self._redraw()

    def _changed(self, _change: dict[str, Any]) -> None:
        c = self._controls
        self.state = policy_state(c["policy"].value, c["trace"].value, c["block_size"].value)
        self._redraw()

    def _html(self) -> str:
        th = theme()
        px = max(th.font_size + 1, th.control_px)
        text = html.escape(self.state["sentence"]).replace(" Paged, blocks", "<br>Paged, blocks")  # one line a side
        lh = 1.3 if th.high_contrast else 1.45
        fixed = f";min-height:{5 * lh:.2f}em" if th.high_contrast else ""  # a projector: 5 lines whatever the choice
        return f"<p style='font-size:{px}px;line-height:{lh};margin:4px 0{fixed}'>{text}</p>"

    def figure(self) -> Any:
        last = self.state["steps"][-1]  # its caption says why a side failed, on a projector too
        return compare_figure(last, "The last step of the run", compact=theme().high_contrast)

    def _redraw(self) -> None:
        from .stepper import figure_output

        self._text.value = self._html()
        self._out.outputs = (figure_output(self.figure()),)

    def __repr__(self) -> str:
        s = self.state
        return (f"<PolicyWidget {s['policy']} on {s['trace']}, blocks of {s['block_size']}: contiguous refused "
                f"{s['refused_contiguous']}, paged refused {s['refused_paged']}>")

    def _ipython_display_(self) -> None:
        display_control(self.widget, lambda: [self._html(), self.figure()], self._explore)

    def _explore(self) -> str:
        """The site's grid: every policy, trace and block size."""
        from .explorer import explorer_html

        s = self.state
        axes = {"policy": [v for _, v in POLICIES], "trace": [v for _, v in TRACES], "block_size": list(BLOCK_SIZES)}
        labels = {"policy": {v: k for k, v in POLICIES}, "trace": {v: k for k, v in TRACES}}
        return explorer_html(self.set, lambda: [self._html(), self.figure()], axes, {k: s[k] for k in axes}, labels)
