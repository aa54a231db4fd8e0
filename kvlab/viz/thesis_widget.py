"""The series' thesis in one widget: the radix tree decides which blocks R2 reuses (logical layer),
the block table decides where each of R2's tokens lives (physical layer).

Two requests share a pool of 12 blocks of 4 tokens (a real :class:`~kvlab.reuse.cache_manager.CacheManager`,
one token a character). R1 (a 12-token system prompt and its question) runs and finishes, so its
full blocks stay cached in the radix tree; then R2 arrives. The controls:

* **R2 starts with R1's system prompt** (a checkbox): on, R2's longest prefix match finds R1's
  blocks and its block table *points at them*; off, R2 has another prompt and every block is new;
* **block table of** (a menu): R2's or R1's table from that run, or the source notes' example
  (L0->P3, L1->P7, L2->P1, L3->P5, L4->P9);
* **token position** (a slider): the position translated through the chosen table.

A **show** switch beside the slider picks one picture at a time, right under the controls, so a
control and what it changes share one screen (599 px of notebook on a projector): the translation
figure (:func:`kvlab.viz.translate_widget.translation_figure`; every pool block in the colour of who
holds it now, whichever table is shown: R2's cyan, the tree's green for a block only the radix tree
holds, light grey when free, a shared block outlined with its ref count) or the radix tree (graphviz),
hits green and R2's newly computed suffix blue, as in the notes, dashed nodes evictable. The notes'
table has no run behind it: with it, the checkbox (which changes the run) is greyed out. Under the
picture: one sentence of what the radix tree found, one of where the position lives (and whether that block is shared, so R2 reads K and V that R1 computed).

All the numbers come from the run (:func:`thesis_state`, plain data, what the tests check).

Example:
    >>> s = thesis_state(shared=True, table="R2", pos=5)
    >>> s["prefix_len"], s["computed"], s["chain"]["physical_block"] in s["shared_blocks"]
    (12, 4, True)
    >>> thesis_state(shared=False, table="R2", pos=5)["prefix_len"]
    0
"""
from __future__ import annotations

import html
from typing import Any

from ..lessons.four_requests import char_detokenize, char_tokenize
from ..lessons.translation import NOTES_TABLE
from ..reuse.cache_manager import CacheManager
from .control import renew_slider
from .display import display_control, is_static
from .palette import classroom_css, theme
from .translate_widget import chain_rows, translation_chain, translation_figure

__all__ = ["thesis_state", "thesis_tree", "ThesisWidget", "SYSTEM_PROMPT", "TABLE_CHOICES"]

SYSTEM_PROMPT = "你是客服助手，请简洁回答"  # "you are a support assistant, answer briefly": 12 tokens, 3 blocks
OTHER_PROMPT = "你是翻译助手，请译成英文"    # another 12-token prompt (a translation assistant)
QUESTIONS = {"R1": "怎么退款", "R2": "何时发货"}  # "how do I get a refund", "when does it ship"
TABLE_CHOICES = (("R2 (from the run)", "R2"), ("R1 (from the run)", "R1"),
                 ("the notes' example", "notes"))  # its table: L0->P3 ... L4->P9, drawn in the figure
BLOCK_SIZE, NUM_BLOCKS = 4, 12
THESIS_VIEWS = ("the translation", "the radix tree")  # one picture at a time, under the controls
CLASSROOM_TRIM_PX = 30  # the translation figure's rows 30 px closer in classroom mode (the widget was 609 px)
NOTES_SEQ = "R0"  # the notes' table is no request's: drawn in orange, a colour no request of lesson 00 has


def _run(shared: bool) -> tuple[CacheManager, dict[str, list[int]], dict[str, Any]]:
    """R1 runs and finishes (its blocks stay in the tree), then R2 is admitted and prefilled: its
    computed pages are cached (SGLang's ``cache_unfinished_req``) and it keeps running, locking its path."""
    cm = CacheManager(num_blocks=NUM_BLOCKS, block_size=BLOCK_SIZE)
    toks = {"R1": char_tokenize(SYSTEM_PROMPT + QUESTIONS["R1"]),
            "R2": char_tokenize((SYSTEM_PROMPT if shared else OTHER_PROMPT) + QUESTIONS["R2"])}
    cm.admit("R1", toks["R1"])
    tables = {"R1": list(cm.table("R1").block_ids)}
    cm.cache_finished_req("R1", toks["R1"])
    adm = cm.admit("R2", toks["R2"])
    tables["R2"] = list(adm.table.block_ids)
    info = {"prefix_len": adm.prefix_len, "matched_blocks": list(adm.matched_kv), "tokens": toks}
    cm.cache_unfinished_req("R2", toks["R2"])   # R2 runs on (decoding): the tree and the table agree on that
    cm.check_integrity()
    return cm, tables, info


def thesis_state(shared: bool = True, table: str = "R2", pos: int = 5) -> dict[str, Any]:
    """Everything the widget shows, as plain data.

    Keys: ``shared``, ``table`` (the menu's key), ``block_table``, ``pos``, ``max_pos``, ``chain``
    (:func:`translation_chain`), ``prefix_len`` (R2's tokens found in the tree), ``computed`` (R2's
    tokens prefilled now), ``shared_blocks`` (blocks in both R1's and R2's tables), ``tree`` (a
    RadixSnapshot: R1 finished, R2 running, its path locked), ``hit``/``miss`` (node ids on R2's path),
    ``evictable`` (tokens in unlocked nodes), ``tree_sentence``, ``position_sentence``, ``holders`` (block ->
    ``"R2"`` for each block of R2's running table, ``"tree"`` for the others the radix tree holds; none for
    the notes' table), ``ref_counts`` (block -> ref count of every held block; none for the notes' table),
    ``seq`` (whose colour the chosen table's tokens are drawn in). ``pos`` past the table is clamped to its
    last slot.
    """
    if table not in {key for _, key in TABLE_CHOICES}:
        raise ValueError(f"table must be one of {[k for _, k in TABLE_CHOICES]}, got {table!r}")
    cm, tables, info = _run(bool(shared))
    block_table = list(NOTES_TABLE) if table == "notes" else tables[table]
    num_tokens = len(info["tokens"][table]) if table in tables else len(block_table) * BLOCK_SIZE
    max_pos = num_tokens - 1
    pos = max(0, min(int(pos), max_pos))
    chain = translation_chain(block_table, pos, BLOCK_SIZE)
    both = sorted(set(tables["R1"]) & set(tables["R2"]))
    snap, pool = cm.tree.snapshot(), cm.snapshot().ref_count
    r2 = info["tokens"]["R2"]
    on_path = [n for n in snap.nodes if tuple(r2[n.start:n.start + len(n.tokens)]) == n.tokens]
    hit = frozenset(n.id for n in on_path if n.start + len(n.tokens) <= info["prefix_len"])
    miss = frozenset(n.id for n in on_path if n.id not in hit)
    k, n2 = info["prefix_len"], len(r2)
    evictable = sum(len(n.tokens) for n in snap.nodes if n.lock_ref == 0)
    running = f" R2 is still running: its path is locked (solid); only the dashed {evictable} tokens could be evicted."
    in_tree = [b for b in tables["R2"] if b not in both and pool[b] > 1]   # R2's own blocks the tree holds too
    also = (f" R2's own {'block' if len(in_tree) == 1 else 'blocks'} {', '.join(f'P{b}' for b in in_tree)} "
            f"{'shows' if len(in_tree) == 1 else 'show'} x{pool[in_tree[0]]}: the radix tree holds "
            f"{'it' if len(in_tree) == 1 else 'them'} too, beside R2's table." if in_tree else "")
    if k:
        tree_sentence = (f"R2 has {n2} tokens; its longest prefix match found {k} in the radix tree (R1's system "
                         f"prompt), so only {n2 - k} were computed.{also}{running}")   # its blocks: the translation view
    else:
        tree_sentence = (f"R2 has {n2} tokens and another system prompt: the radix tree matches none of them, so all "
                         f"{n2} were computed and R2 got {len(tables['R2'])} new blocks; none of R1's blocks is in "
                         f"R2's table.{also}{running}")
    pb = chain["physical_block"]
    if table == "notes":
        position_sentence = (f"position {pos} of the notes' table lives in P{pb} at offset {chain['offset']} "
                             "(no run behind this table: the notes' figure).")
    elif pb in both:
        position_sentence = (f"{table}'s position {pos} lives in P{pb}, offset {chain['offset']}: a block R1 computed "
                             "and the radix tree kept, now in R2's table, so R2 reads the K and V that R1 computed there.")
    else:
        tree_too = " (x2: the radix tree holds it too, beside R2's table)" if table == "R2" and pb in in_tree else ""
        position_sentence = (f"{table}'s position {pos} lives in P{pb}, offset {chain['offset']}: {table}'s own block, "
                             f"{'computed when R2 arrived' if table == 'R2' else 'computed by R1'}{tree_too}.")
    return {"shared": bool(shared), "table": table, "block_table": block_table, "pos": pos, "max_pos": max_pos,
            "chain": chain, "prefix_len": k, "computed": n2 - k, "shared_blocks": both, "tree": snap,
            "hit": hit, "miss": miss, "evictable": evictable, "tree_sentence": tree_sentence,
            "position_sentence": position_sentence, "seq": NOTES_SEQ if table == "notes" else table,
            "holders": {} if table == "notes" else {**{b: "tree" for b in cm.tree.tree_block_ids()},
                                                    **{b: "R2" for b in cm.table("R2").block_ids}},
            "ref_counts": {} if table == "notes" else {b: rc for b, rc in enumerate(pool) if rc}}


TREE_CAPTION = ("tok: a node's tokens; lock: the running requests that read it (0: it can be evicted); "
                "t: its last use on the tree's clock (LRU evicts the smallest t first).")


def thesis_tree(state: dict[str, Any]) -> Any:
    """The radix tree after R1 finished, while R2 runs: R2's path coloured and locked (graphviz Digraph)."""
    from .radix_state import RadixState
    from .radix_view import radix_tree_graph

    rs = RadixState(state["tree"], hit=state["hit"], miss=state["miss"], detokenize=char_detokenize,
                    title="The radix tree while R2 runs")
    return radix_tree_graph(rs, caption=TREE_CAPTION, max_chars=12)


def thesis_figure(state: dict[str, Any]) -> Any:
    """The translation through the chosen table, the whole pool of :data:`NUM_BLOCKS` drawn, with a
    legend of its colours (plotly figure)."""
    name = {"notes": "the notes' table (no run)", "R1": "R1's tokens (R1 has finished)",
            "R2": "R2's tokens and blocks"}[state["table"]]
    fig = translation_figure(state["chain"], num_blocks=NUM_BLOCKS, holders=state["holders"], seq=state["seq"],
                             legend=name, ref_counts=state["ref_counts"])
    if theme().high_contrast:   # classroom: the controls, this figure and its sentence on one 599 px screen
        fig.update_layout(height=fig.layout.height - CLASSROOM_TRIM_PX)
    return fig


_DRAWN: dict[tuple, Any] = {}  # (theme, view, controls) -> a rendered picture: a control's answer is a lookup


def _drawn(view: str, state: dict[str, Any]) -> Any:
    """The figure's output (view "figure") or the tree's fitted SVG (view "tree", which depends on the
    prefix only), rendered once per theme and state."""
    from .radix_view import fit_svg
    from .stepper import figure_output

    key = (theme(), view, state["shared"]) + ((state["table"], state["pos"]) if view == "figure" else ())
    if key not in _DRAWN:
        _DRAWN[key] = (figure_output(thesis_figure(state)) if view == "figure" else
                       fit_svg(thesis_tree(state).pipe(format="svg", encoding="utf-8")))
    return _DRAWN[key]


def _html(state: dict[str, Any], view: str | None = None) -> str:
    """The sentence of the picture shown (``view``, one of :data:`THESIS_VIEWS`; None: both, static
    mode), right under it: the other picture's sentence would push it off a projector's screen. In
    classroom mode the translation's sentence comes without the walk's table: the figure's subtitle
    gives the same walk (pos -> L -> offset -> P -> slot -> byte), and the table put the sentence's
    end under a 599 px screen (the output was 777 px tall)."""
    px = max(theme().font_size + 1, theme().control_px)
    walk = not (theme().high_contrast and view == THESIS_VIEWS[0])
    rows = "".join(f"<tr><td style='padding:0 12px 0 0;white-space:nowrap'>{html.escape(a)}</td>"
                   f"<td><code>{html.escape(b)}</code></td></tr>" for a, b in chain_rows(state["chain"]["steps"]))
    logical = (f"<p style='margin:4px 0'><b>Logical layer (which blocks are reused):</b> "
               f"{html.escape(state['tree_sentence'])}</p>")
    physical = (f"<p style='margin:4px 0'><b>Physical layer (where a token lives):</b> "
                f"{html.escape(state['position_sentence'])}</p>"
                + (f"<table style='border-collapse:collapse'>{rows}</table>" if walk else ""))
    body = logical if view == THESIS_VIEWS[1] else physical if view == THESIS_VIEWS[0] else logical + physical
    return f"<div style='font-size:{px}px;line-height:1.45;max-width:100%'>{body}</div>"


def _prerender(shared: bool, table: str) -> None:
    """Render every position's figure of one table ahead, in a daemon thread: the slider's answer is
    then a lookup (a render took 30 ms, and far more on a busy machine)."""
    import threading

    def run() -> None:
        try:
            for pos in range(thesis_state(shared, table, 0)["max_pos"] + 1):
                _drawn("figure", thesis_state(shared, table, pos))
        except Exception:  # noqa: BLE001 - a head start only: the widget renders what it needs itself
            pass

    threading.Thread(target=run, daemon=True, name="kvlab-thesis-prerender").start()


class ThesisWidget:
    """The widget (see module doc). ``w.state`` is :func:`thesis_state` of the current controls;
    ``w.set(shared=..., table=..., pos=...)`` moves them (also in static mode)."""

    def __init__(self, shared: bool = True, table: str = "R2", pos: int = 5, static: bool | None = None) -> None:
        self.static = is_static(static)
        self.widget: Any = None
        self.state = thesis_state(shared, table, pos)
        if not self.static:
            self._build()

    def set(self, **kw: Any) -> None:
        unknown = set(kw) - {"shared", "table", "pos"}
        if unknown:
            raise TypeError(f"set() got unknown argument(s) {sorted(unknown)}")
        if self.widget is None:
            s = self.state
            self.state = thesis_state(kw.get("shared", s["shared"]), kw.get("table", s["table"]), kw.get("pos", s["pos"]))
            return
        for key, w in (("shared", self._shared), ("table", self._table), ("pos", self._pos)):
            if key in kw:
                w.value = kw[key]

    def _build(self) -> None:
        import ipywidgets as W

        style = {"description_width": "initial"}
        self._shared = W.Checkbox(value=self.state["shared"], description="R2 starts with R1's system prompt",
                                  style=style, indent=False, layout=W.Layout(width="auto", margin="2px 28px 2px 0"),
                                  tooltip="changes the run: R2's prompt (greyed out with the notes' table, which has no run)")
        self._table = W.Dropdown(options=list(TABLE_CHOICES), value=self.state["table"], description="block table of",
                                 style=style, layout=W.Layout(width="min(400px, 100%)"))
        self._pos = W.IntSlider(value=self.state["pos"], min=0, max=self.state["max_pos"], description="token position",
                                style=style, layout=W.Layout(width="min(420px, 100%)"))
        for w, cls in ((self._shared, "kvlab-thesis-shared"), (self._table, "kvlab-thesis-table"),
                       (self._pos, "kvlab-pos-slider")):
            w.add_class(cls)
            w.observe(self._changed, names="value")
        self._text = W.HTML()
        self._fig = W.Output()
        self._fig.add_class("kvlab-figure")
        self._tree = W.HTML()
        self._tree.add_class("kvlab-svg")
        row = W.Layout(flex_flow="row wrap", max_width="100%")
        # One picture at a time, right under the controls, the sentences after it: the controls and the
        # picture they change share one screen (599 px of notebook on a projector; both pictures and the
        # sentences were 860 px at 1500x1000). The switch picks the picture.
        self._view = W.ToggleButtons(options=list(THESIS_VIEWS), value=THESIS_VIEWS[0], description="show",
                                     style={"button_width": "auto"},   # classroom: "the translat..." was cut
                                     tooltips=["where token position pos lives (the block table)",
                                               "which blocks R2 reuses (the radix tree)"])
        self._view.add_class("kvlab-thesis-view")
        self._view.observe(lambda _c: self._show_view(), names="value")
        css = classroom_css("kvlab-thesis")
        parts = [W.HBox([self._shared, self._table], layout=row), W.HBox([self._pos, self._view], layout=row),
                 self._fig, self._tree, self._text]
        if css:  # and a checkbox as tall as its (larger) label, the box on the label's middle
            parts.insert(0, W.HTML(css + "<style>.kvlab-thesis .widget-checkbox {height: auto !important;}"
                                   ".kvlab-thesis .widget-checkbox label {display: flex; align-items: center; gap: 6px;}"
                                   ".kvlab-thesis .widget-checkbox input {margin: 0; width: 18px; height: 18px;}</style>"))
        self._show_view()
        self.widget = W.VBox(parts, layout=W.Layout(max_width="100%"))
        self.widget.add_class("kvlab-thesis")
        self._redraw()
        _prerender(self.state["shared"], self.state["table"])

    def _show_view(self) -> None:
        """Show the picture the switch names and its sentence, hide the other; grey out what changes
        nothing on screen: the tree view, the controls only the translation uses (the table menu and the
        position); the translation of the notes' table (no run behind it), the checkbox."""
        fig_first = self._view.value == THESIS_VIEWS[0]
        self._fig.layout.display = None if fig_first else "none"
        self._tree.layout.display = "none" if fig_first else None
        self._table.disabled = self._pos.disabled = not fig_first
        self._shared.disabled = fig_first and self._table.value == "notes"
        if self.widget is not None:
            self._redraw()

    def _changed(self, change: dict[str, Any]) -> None:
        self.state = thesis_state(self._shared.value, self._table.value, self._pos.value)
        self._shared.disabled = self._view.value == THESIS_VIEWS[0] and self.state["table"] == "notes"
        if change.get("owner") is not self._pos:   # a new prefix or table: its positions rendered ahead
            _prerender(self.state["shared"], self.state["table"])
        if self._pos.max != self.state["max_pos"]:  # a new slider: a live one's End key keeps its first range
            self._pos = renew_slider(self.widget, self._pos, self.state["max_pos"], self._changed,
                                     value=self.state["pos"])
            self._pos.disabled = self._view.value != THESIS_VIEWS[0]
        self._redraw()

    def _redraw(self) -> None:
        """The sentence and the picture shown; the hidden one waits until the switch shows it."""
        self._text.value = _html(self.state, self._view.value)
        if self._view.value == THESIS_VIEWS[0]:
            self._fig.outputs = (_drawn("figure", self.state),)
        else:
            self._tree.value = _drawn("tree", self.state)

    def __repr__(self) -> str:
        s = self.state
        return f"<ThesisWidget shared={s['shared']} table={s['table']} pos={s['pos']} -> P{s['chain']['physical_block']}>"

    def _ipython_display_(self) -> None:
        def parts() -> list[Any]:
            s = self.state
            return [_html(s), thesis_figure(s), _drawn("tree", s)]

        display_control(self.widget, parts, lambda: self._explore(parts))

    def _explore(self, parts: Any) -> str:
        """The site's grid: shared or not and every token position, on the current block table."""
        from .explorer import explorer_html

        s = self.state
        axes = {"shared": [True, False], "pos": list(range(s["max_pos"] + 1))}
        labels = {"shared": {True: "R2 starts with R1's system prompt", False: "no shared prompt"}}
        return explorer_html(self.set, parts, axes, {k: s[k] for k in axes}, labels)
