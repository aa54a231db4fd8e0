"""Tests of the address-translation widget: the chain, the figure data, the callbacks."""
from __future__ import annotations

import html

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
import ipywidgets  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab.viz as viz  # noqa: E402
from kvlab import translate  # noqa: E402
from kvlab.viz.palette import HIGHLIGHT  # noqa: E402


def test_default_state_is_the_notes_example():
    w = viz.TranslationWidget(static=False)
    c = w.chain
    assert (c["block_table"], c["block_size"], c["pos"]) == ([3, 7, 1, 5, 9], 4, 9)
    assert (c["logical_block"], c["offset"], c["physical_block"], c["slot"]) == (2, 1, 1, 5)
    assert c["error"] is None
    assert "block_table[2] = 1" in w._chain.value
    classes = {cls for ch in _walk(w.widget) for cls in ch._dom_classes}
    assert {"kvlab-translation", "kvlab-pos-slider", "kvlab-block-size-slider", "kvlab-block-table",
            "kvlab-chain", "kvlab-translation-error", "kvlab-figure"} <= classes


@pytest.mark.parametrize("pos", [0, 3, 4, 9, 13, 19])
def test_pos_slider_updates_chain(pos):
    w = viz.TranslationWidget(static=False)
    w._pos.value = pos
    t = translate([3, 7, 1, 5, 9], pos, 4)
    c = w.chain
    assert (c["pos"], c["logical_block"], c["offset"], c["physical_block"], c["slot"]) == (
        pos, t.logical_block, t.offset, t.physical_block, t.slot)
    spec = w._out.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert f"P{t.physical_block}" in spec["layout"]["title"]["subtitle"]["text"]


def test_block_size_slider_clamps_pos_and_recomputes():
    w = viz.TranslationWidget(static=False)
    w._pos.value = 19
    w._bs.value = 2  # table now holds positions 0..9
    assert w._pos.max == 9 and w.chain["pos"] == 9
    assert (w.chain["logical_block"], w.chain["offset"], w.chain["physical_block"]) == (4, 1, 9)
    w._bs.value = 8
    assert w._pos.max == 39 and w.chain["pos"] == 9
    assert (w.chain["logical_block"], w.chain["offset"], w.chain["physical_block"]) == (1, 1, 7)


def test_bytes_per_token_and_table_edit():
    w = viz.TranslationWidget(static=False)
    w._bpt.value = "1024"
    assert w.chain["byte_address"] == 5 * 1024 and w.chain["block_base"] == 4 * 1024
    w._table.value = "[0, 2, 4]"
    assert w.chain["block_table"] == [0, 2, 4] and w._pos.max == 11
    assert w.chain["pos"] == 9 and w.chain["physical_block"] == 4
    w._table.value = "0, 2, 2"
    assert "appears twice" in w.chain["error"] and "appears twice" in w._error.value
    assert w.block_table == [0, 2, 4]  # the last good table is kept
    w._table.value = "1 2"
    assert w.chain["error"] is None and w._error.value == ""


def test_set_api_static_and_widget():
    s = viz.TranslationWidget(static=True)
    assert s.widget is None
    s.set(pos=13)
    assert s.chain["physical_block"] == 5
    w = viz.TranslationWidget(static=False)
    w.set(block_size=2, pos=3)
    assert w._bs.value == 2 and w.chain["physical_block"] == 7
    with pytest.raises(TypeError, match="colour"):
        w.set(colour=1)


def test_chain_errors_and_parse():
    assert viz.parse_block_table(" 3,7 1 ") == [3, 7, 1]
    for bad, msg in [("", "empty"), ("3, -1", "negative"), ("a", "'a'")]:
        with pytest.raises(ValueError, match=msg):
            viz.parse_block_table(bad)
    c = viz.translation_chain([3, 7], 8, 4)
    assert c["physical_block"] is None and "past the block table" in c["error"]


def test_figure_data_highlights_token_row_and_slot():
    c = viz.translation_chain([3, 7, 1, 5, 9], 9, 4)
    d = viz.translation_figure_data(c)
    assert [t["label"] for t in d["tokens"] if t["highlight"]] == ["8–11"]
    assert [r["label"] for r in d["table"] if r["highlight"]] == ["L2 → P1"]
    assert [p["label"] for p in d["physical"] if p["highlight"]] == ["P1 (L2)"]
    assert d["pos_slot"] == (2.25, 2.5) and d["slot"] == (1.25, 1.5) and len(d["physical"]) == 10
    assert d["arrows"] == [(2.375, 2.0), (2.5, 1.0), (1.375, 0.0)]
    fig = viz.translation_figure(c)
    assert "(simulated)" in fig.layout.title.text
    assert any(s.fillcolor == HIGHLIGHT for s in fig.layout.shapes)
    bad = viz.translation_figure_data(viz.translation_chain([3], 9, 4))
    assert not bad["ok"] and bad["arrows"] == [] and not any(t["highlight"] for t in bad["tokens"])


def _labels_fit(fig, d):
    """Every label of the figure fits its cell at the figure's own px per block width."""
    from kvlab.viz.translate_widget import fits

    left, right = fig.layout.margin.l, fig.layout.margin.r
    px = ((fig.layout.width or 850) - left - right) / d["width"]
    size = fig.data[0].textfont.size
    for t in fig.data:
        for text in t.text:
            for line in text.split("<br>"):
                assert fits(line, px - 4, size), (t.name, text, px)
    return px


@pytest.mark.parametrize("classroom", [False, True])
@pytest.mark.parametrize("table, pos, block_size", [
    ([3, 7, 1, 5, 9], 9, 4), ([3, 7, 1, 5, 9], 79, 16), ([3, 7, 1, 5, 9], 0, 1),
    ([3, 7, 1, 5, 99], 18, 4), ([3, 7, 1, 5, 99], 79, 16), (list(range(40, 0, -1)), 600, 16),
])
def test_figure_is_readable_at_every_block_size_and_block_id(table, pos, block_size, classroom):
    """Issue 28 student review: with block 99 in the table (a 100-block pool) the pool was 400 slots
    wide and its labels ran together; at block size 16 the token row had 80 cells. Every block is
    now one width whatever its size, a big pool shows the table's blocks with the runs between them
    elided, a long table a window around pos's block; every label fits its cell and at least 40 px
    of width is left to a block."""
    from kvlab.viz.translate_widget import MAX_LOGICAL, MAX_POOL

    viz.classroom(classroom)
    try:
        c = viz.translation_chain(table, pos, block_size)
        d = viz.translation_figure_data(c)
        fig = viz.translation_figure(c)
        assert len(d["physical"]) <= MAX_POOL and len(d["tokens"]) == len(d["table"]) <= MAX_LOGICAL
        assert all(abs(x["x1"] - x["x0"] - 1) < 1e-9 for x in d["tokens"] + d["table"] + d["physical"])
        assert _labels_fit(fig, d) >= 40
        hl = [p for p in d["physical"] if p["highlight"]]
        assert len(hl) == 1 and hl[0]["label"].startswith(f"P{c['physical_block']}")
        lb = c["logical_block"]
        assert [t["label"] for t in d["tokens"] if t["highlight"]] == [
            f"{lb * block_size}" if block_size == 1 else f"{lb * block_size}–{lb * block_size + block_size - 1}"]
        if max(table) + 1 > MAX_POOL:  # the elided runs are drawn and say which blocks they stand for
            assert d["gaps"] and all(g["label"] == "…" and g["first"] <= g["last"] for g in d["gaps"])
            drawn = {int(p["label"][1:].split()[0]) for p in d["physical"]}
            assert {table[i] for i in range(len(table))} & drawn == {
                table[int(r["label"].split()[0][1:])] for r in d["table"]}
        if len(table) > MAX_LOGICAL:
            assert sum(m["count"] for m in d["more"]) == len(table) - MAX_LOGICAL
    finally:
        viz.classroom(False)


def test_pool_columns_and_window():
    from kvlab.viz.translate_widget import _pool_columns, _visible_logical

    assert _pool_columns(100, {3, 7}) == [("gap", 0, 2), ("block", 3, 3), ("gap", 4, 6), ("block", 7, 7),
                                          ("gap", 8, 99)]
    assert _pool_columns(5, {3}) == [("block", b, b) for b in range(5)]
    assert _pool_columns(13, {0, 12}) == [("block", 0, 0), ("gap", 1, 11), ("block", 12, 12)]
    assert _visible_logical(9, 8) == [3, 4, 5, 6, 7, 8] and _visible_logical(9, 0) == [0, 1, 2, 3, 4, 5]
    assert _visible_logical(5, 4) == [0, 1, 2, 3, 4] and _visible_logical(20, 10) == [7, 8, 9, 10, 11, 12]


def _walk(w):
    yield w
    for c in getattr(w, "children", ()):
        yield from _walk(c)


def test_chain_labels_never_run_into_their_formulas():
    """Issue 16 bug 10: HTML collapsed the spaces between a step's label and its formula."""
    w = viz.TranslationWidget(static=False)
    rows = viz.chain_rows(w.chain["steps"])
    assert rows[1] == ("logical block", "pos // block_size = 9 // 4 = 2  (L2)")
    assert rows[2] == ("offset in block", "pos % block_size = 9 % 4 = 1")
    h = w._chain.value
    assert "<table" in h and h.count("<tr>") == len(w.chain["steps"]) == 6
    for label, formula in rows:  # each in a cell of its own
        assert f">{label}</td>" in h and f"<code>{html.escape(formula)}</code>" in h


def test_labels_never_run_together_at_classroom_sizes():
    """Seen in classroom mode: "L1 → P1L2 → P2" (table labels wider than their cells)."""
    from kvlab.viz.translate_widget import _one_line, _wrap, fits

    assert _wrap("L1 → P1", 40.0, 16) == "P1" and _wrap("L1 → P1", 120.0, 16) == "L1 → P1"  # r2_00_01: not two lines
    assert _wrap("L1 → P1", 60.0, 16) == "L1→P1"  # review r12: a wrapped label filled the cell the arrows cross
    assert _one_line("P9 (L4)", 40.0, 16) == "P9" and _one_line("P9 (L4)", 120.0, 16) == "P9 (L4)"
    assert fits("P10", 40, 12) and not fits("P10 (L3)", 40, 12)


def test_pos_slider_shown_after_a_block_size_change_was_made_with_the_new_maximum():
    """Issue 28 review: after block size 4 -> 16, End on the pos slider landed on 19, not 79. The
    front end's slider (noUiSlider, bundled by ipywidgets 8) moves its End/Home keys to the range it
    was CREATED with (updateOptions renews the range for dragging only), so changing ``max`` on the
    live slider is not enough: the widget shows a new slider made with the new maximum."""
    w = viz.TranslationWidget(static=False)
    old = w._pos
    w._bs.value = 16
    row = w.widget.children[-5]  # the pos / block size row
    assert w._pos is not old and w._pos in row.children and old not in row.children
    assert (w._pos.min, w._pos.max, w._pos.value) == (0, 79, 9)
    w._pos.value = 79  # the new slider drives the translation
    assert w.chain["pos"] == 79 and w.chain["logical_block"] == 4
    same = w._pos
    w._bpt.value = "2"  # no change of range: the same slider stays
    assert w._pos is same


def test_byte_addresses_are_printed_with_thousands_separators():
    """Issue 28 review: "16252928" in the chain and the subtitle."""
    w = viz.TranslationWidget(static=False)
    w._bpt.value = "524288"
    assert "2,621,440" in w._chain.value and "2621440" not in w._chain.value
    spec = w._out.outputs[0]["data"]["application/vnd.plotly.v1+json"]
    assert "byte 2,621,440" in spec["layout"]["title"]["subtitle"]["text"]


def test_bytes_per_token_below_one_is_refused_with_a_message_not_silently_reset():
    """Issue 28 student review: the field silently turned 0 and -5 into 1; the block size slider was
    labelled with the identifier block_size."""
    w = viz.TranslationWidget(static=False)
    assert w._bs.description == "block size"
    w._bpt.value = "64"
    for bad in (0, -5):
        w._bpt.value = str(bad)
        assert f"bytes per token {bad}" in w.chain["error"] and f"bytes per token {bad}" in w._error.value
        assert w.bytes_per_token == 64  # the last good value is kept
    w._bpt.value = "2"
    assert w.chain["error"] is None and w._error.value == "" and w.chain["byte_address"] == 5 * 2


def test_lesson00_tree_block_keeps_its_name_on_a_projector():
    """Lesson 00's thesis figure (the same figure, with holders): the block only the radix tree
    holds is named "(tree)" in the picture, also at classroom sizes (a label that did not fit lost
    its suffix)."""
    from kvlab.viz.thesis_widget import thesis_state

    viz.classroom(True)
    try:
        s = thesis_state(shared=True, table="R2", pos=5)
        fig = viz.translation_figure(s["chain"], holders=s["holders"])
    finally:
        viz.classroom(False)
    pool = next(t for t in fig.data if t.name == "physical")
    assert any(text.endswith("(tree)") for text in pool.text), pool.text


def test_a_refused_input_keeps_the_last_good_walk_and_says_so_once():
    """Review r8 of lesson 04: bytes per token 2.5 showed 25 in its box while the walk computed with 2,
    and a refused block table emptied the step table and put its message twice (banner and figure)."""
    w = viz.TranslationWidget(static=False)
    w._bpt.value = "2"
    walk = w._chain.value
    w._bpt.value = "2.5"
    assert w._bpt.value == "2.5" and "2.5 is not a whole number" in w._error.value and "kept 2" in w._error.value
    assert w.bytes_per_token == 2 and w._chain.value == walk  # the last good walk, in full
    w._bpt.value = "2"
    for bad in ("3, x, 1", "", "3, 3, 1", "-1, 2"):
        w._table.value = bad
        assert w.chain["error"] and w._error.value, bad
        assert w._chain.value == walk, f"{bad!r}: the step table changed or vanished"
        title = w.figure().layout.title.text or ""
        assert "error" not in title and w.chain["error"] not in title, f"{bad!r}: the message shows twice"
