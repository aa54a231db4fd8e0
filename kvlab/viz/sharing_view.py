"""Lesson 06's control: how many samples, how wide a beam, how long a prompt and answers, how big a
block; blocks shared, copied and saved.

Sliders for parallel sampling's ``n``, beam search's width, the new tokens per sequence, the block
size and the prompt length; after every change both runs are counted again on the real allocator
(:mod:`kvlab.lessons.sharing`: forks, appends with copy-on-write, frees) and drawn as bars:
blocks without sharing (each sequence its own copy) beside blocks with sharing, and the share
saved; the caption says how many prompt blocks the samples share and how many copies
copy-on-write made (none when the prompt ends on a block boundary), and the figure draws that
count in red under the sampling bars. No plotly mode bar (it covered the title). Under 0.1 s at the
sliders' ends (prompt 1000, blocks of 4, 64 new tokens, width 8). Mirrors no vLLM or SGLang file
(vLLM's sharing is ``fork`` + copy-on-write in its block manager).

Example:
    >>> c = SharingControl(static=True)
    >>> c.set(samples=4, beam_width=4, prompt_len=100)
    >>> c.result["sampling"], c.result["beam"]
    ((32, 14), (32, 11))
    >>> c.set(prompt_len=96); c.result["copies"], c.result["shared_prompt_blocks"]   # 96 = 6 blocks of 16
    (0, 6)
"""
from __future__ import annotations

from typing import Any

from ..lessons.sharing import beam_search_blocks, sampling_run
from .control import LiveControl
from .palette import HIGHLIGHT, HIT, is_classroom, source_label, theme

__all__ = ["SharingControl", "UNSHARED_COLOR", "SHARED_COLOR", "UNSHARED_NAME", "SHARED_NAME"]

# Lesson 06's one palette for its "with / without sharing" pictures (the line chart and this control):
# without sharing dark grey (never the light grey of a free block), with sharing the reuse green.
UNSHARED_COLOR, SHARED_COLOR = "#555555", HIT
# two rows in a 1068 px output area (1500 x 1000): samples, beam width and new tokens; block size and prompt tokens
WIDTHS = {"samples": "min(330px, 31%)", "beam_width": "min(330px, 31%)", "new_tokens": "min(330px, 31%)",
          "block_size": "min(360px, 34%)", "prompt_len": "min(660px, 62%)"}
# classroom mode (an 850 px output area, 18 px labels): side by side, the tracks were about 60 px wide; there
# two sliders share a row and prompt tokens (8 to 1000) has a row of its own
CLASSROOM_WIDTHS = {"samples": "min(410px, 48%)", "beam_width": "min(410px, 48%)", "new_tokens": "min(410px, 48%)",
                    "block_size": "min(410px, 48%)", "prompt_len": "min(840px, 97%)"}
# name, label, min, max, step: in the order the rows take them
SLIDERS = (("samples", "samples (n)", 1, 8, 1), ("beam_width", "beam width", 1, 8, 1),
           ("new_tokens", "new tokens", 1, 64, 1), ("block_size", "block size", 4, 32, 4),
           ("prompt_len", "prompt tokens", 8, 1000, 4))
UNSHARED_NAME, SHARED_NAME = "without sharing (each sequence its own copy)", "with sharing (fork + copy-on-write)"


class SharingControl(LiveControl):
    """Inputs: ``samples`` (parallel sampling's n), ``beam_width``, ``prompt_len``, ``new_tokens`` per
    sequence and ``block_size``. ``result``: ``sampling`` and ``beam``, each (blocks without sharing,
    blocks with sharing) at the end of the run; ``copies`` (copy-on-write's block copies in the
    sampling run) and ``shared_prompt_blocks`` (blocks all n samples still hold at its end)."""

    css_class = "kvlab-sharing"
    plotly_config = {"displayModeBar": False}  # its buttons sat on the title and the legend (classroom mode, review r8_06)

    def __init__(self, samples: int = 4, beam_width: int = 4, prompt_len: int = 100, new_tokens: int = 24,
                 block_size: int = 16, static: bool | None = None) -> None:
        self.samples, self.beam_width, self.prompt_len = samples, beam_width, prompt_len
        self.new_tokens, self.block_size = new_tokens, block_size
        self.check()
        super().__init__(static=static)

    def check(self) -> None:
        for name, lo, hi in (("samples", 1, 16), ("beam_width", 1, 16), ("prompt_len", 1, 4096),
                             ("new_tokens", 1, 256), ("block_size", 1, 256)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise ValueError(f"{name} must be an int in {lo}..{hi}, got {v!r}")

    def site_grid(self) -> dict[str, list[Any]]:
        return {"samples": list(range(1, 9)), "beam_width": list(range(1, 9))}

    def update(self) -> None:
        run = sampling_run(self.prompt_len, self.samples, self.new_tokens, self.block_size)
        shared, alone = beam_search_blocks(self.prompt_len, self.beam_width, self.new_tokens, self.block_size)
        self.result = dict(sampling=(run.alone, run.shared), beam=(alone[-1], shared[-1]), copies=run.copies,
                           shared_prompt_blocks=run.shared_prompt_blocks)

    @staticmethod
    def saved(pair: tuple[int, int]) -> float:
        alone, shared = pair
        return 1 - shared / alone

    def prompt_blocks(self) -> str:
        """How the prompt lies in blocks, e.g. "100 = 6 blocks of 16 + 4 tokens" or "96 = 6 blocks of 16"."""
        full, rest = divmod(self.prompt_len, self.block_size)
        return f"{self.prompt_len} = {full} block{'s' * (full != 1)} of {self.block_size}" + (
            f" + {rest} token{'s' * (rest != 1)}" if rest else "")

    def sharing_words(self) -> str:
        """What the samples shared and copied (n > 1), from the run: "the 4 samples share 6 prompt
        blocks; copy-on-write copied the partial last block 3 times (...)"."""
        k, c = self.result["shared_prompt_blocks"], self.result["copies"]
        shared = f"the {self.samples} samples share {k} prompt block{'s' * (k != 1)}"
        if self.prompt_len % self.block_size:
            return (f"{shared}; copy-on-write copied the partial last block {c} time{'s' * (c != 1)} "
                    "(every sample but the last writes into it)")
        return f"{shared}; the prompt ends on a block boundary, so no shared block is written: {c} copies"

    def copies_words(self) -> str:
        """The sampling run's copy-on-write copies, drawn under its bars in the copy red (the picture
        shows what the 96-against-100 experiment changes): "3 copy-on-write copies"."""
        c = self.result["copies"]
        words = "one sample: no copy" if self.samples == 1 else f"{c} copy-on-write cop{'y' if c == 1 else 'ies'}"
        return f"<span style='color:{HIGHLIGHT}'><b>{words}</b></span>"

    def caption(self) -> str:
        s, b = self.result["sampling"], self.result["beam"]
        if self.samples == 1:
            sampling = f"Parallel sampling, n = 1: one sample, nothing to share ({s[1]} blocks)."
        else:
            sampling = (f"Parallel sampling, n = {self.samples}: {s[1]} blocks instead of {s[0]} "
                        f"({self.saved(s):.0%} saved): {self.sharing_words()}.")
        if self.beam_width == 1:
            beam = f"Beam search, width 1: one beam, nothing to share ({b[1]} blocks)."
        elif self.saved(b) > self.saved(s):
            beam = (f"Beam search, width {self.beam_width}: {b[1]} instead of {b[0]} ({self.saved(b):.0%} saved): "
                    "the beams share generated text too.")
        else:
            beam = f"Beam search, width {self.beam_width}: {b[1]} instead of {b[0]} ({self.saved(b):.0%} saved)."
        if is_classroom():   # a projector: two lines, so that the sliders' three rows and the chart share the 599 px
            c = self.result["copies"]
            copies = "" if self.samples == 1 else f", {c} cop{'y' if c == 1 else 'ies'}"
            return (f"prompt {self.prompt_blocks()}. Sampling, n = {self.samples}: {s[1]} of {s[0]} blocks "
                    f"({self.saved(s):.0%} saved{copies}); beam width {self.beam_width}: {b[1]} of {b[0]} "
                    f"({self.saved(b):.0%} saved).")
        return (f"Prompt {self.prompt_blocks()}, {self.new_tokens} new token{'s' * (self.new_tokens != 1)} each. "
                f"{sampling} {beam} (Counted on the real allocator; beam scores simulated.)")

    def figure(self) -> Any:
        import plotly.graph_objects as go

        th = theme()
        groups = [f"parallel sampling, n = {self.samples}<br>{self.copies_words()}",
                  f"beam search, width {self.beam_width}"]
        pairs = [self.result["sampling"], self.result["beam"]]
        fig = go.Figure([
            go.Bar(x=groups, y=[p[0] for p in pairs], name=UNSHARED_NAME, marker_color=UNSHARED_COLOR,
                   text=[str(p[0]) for p in pairs], textposition="outside"),
            go.Bar(x=groups, y=[p[1] for p in pairs], name=SHARED_NAME, marker_color=SHARED_COLOR,
                   text=[f"{p[1]}  ({self.saved(p):.0%} saved)" for p in pairs], textposition="outside"),
        ])
        top = max(p[0] for p in pairs)
        head = int(th.title_size * 1.4 + th.font_size * 2 + 16)  # the title, then the legend's row above the plot
        fig.update_layout(
            barmode="group", template="none", height=360 if not th.high_contrast else 400,  # 3 slider rows above
            width=None if th.autosize else th.grid_width, autosize=th.autosize,
            font=dict(size=th.font_size, color=th.text_color),
            title=dict(text=f"Blocks in use at the end ({source_label('simulated')} scores, real allocator)",
                       font=dict(size=th.title_size)),
            yaxis=dict(title="blocks in use", range=[0, top * 1.25], dtick=1 if top <= 6 else None),  # whole blocks
            # the legend above the plot, under the title: under it, it sat on the bars' labels (classroom mode)
            legend=dict(orientation="h", y=1.02, yanchor="bottom", x=0),
            margin=dict(t=head, b=max(60, th.font_size * 4), l=60, r=20))   # two lines of group names
        return fig

    def _inputs(self, W: Any) -> list[Any]:
        style = {"description_width": "initial"}
        widths = CLASSROOM_WIDTHS if is_classroom() else WIDTHS  # two rows at 1500 x 1000, three in classroom mode
        sliders = []
        for name, label, lo, hi, step in SLIDERS:
            s = W.IntSlider(value=getattr(self, name), min=lo, max=hi, step=step, description=label, style=style,
                            layout=W.Layout(width=widths[name]))
            s.continuous_update = False
            s.add_class(f"kvlab-{name.replace('_', '-')}-slider")
            s.observe(lambda ch, name=name: self.set(**{name: ch["new"]}), names="value")
            sliders.append(s)
        return sliders
