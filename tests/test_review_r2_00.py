"""The review r2_00_01 of lesson 00 (at b2adebf): a (pos + 1) answer to warm-up 1 was misnamed "the offset
counts from 1" in the summary line; the pool pictures gave one state two colours (cells 9, 12, 14); the
thesis widget's checkbox did nothing with the notes' table, and its dashes meant "free" in one view and
"evictable" in the other; classroom labels filled their boxes."""
from __future__ import annotations

import kvlab
import kvlab.viz as viz
from kvlab import check
from kvlab.viz.palette import FREE, SHARED_OUTLINE, TREE, request_color

from test_check_mistakes_06_11 import wrong_answer
from test_viz_lessons_00_05 import _lesson00_cache


def test_pos_plus_one_is_named_in_the_summary_line():
    fn = wrong_answer("00", "block_and_offset", [("return divmod(pos, block_size)",
                                                  "return (pos + 1) // block_size, (pos + 1) % block_size")])
    r = check.block_and_offset(fn, verbose=False)
    assert not r.passed
    assert "as if pos were one more" in r.summary, r.summary
    assert "as if pos were one more" in r.failures[0].note, r.failures[0].note


def _fork_snapshot():
    m = kvlab.BlockManager(num_blocks=12, block_size=4)   # lesson 00, cell 7
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R3")
    return m.snapshot("fork")


def test_shared_blocks_follow_one_rule_in_cells_9_and_12():
    """A block two holders share keeps a request's colour (the design: one colour per request), outlined
    and labelled x2, in both pictures: no colour of its own in one and a request's in the next."""
    for snap in (_fork_snapshot(), _lesson00_cache()):
        d = viz.memory_map_data(snap, by_holder=True)
        assert d["shared"]
        for b in d["shared"]:
            reqs = [h for h, _ in d["holders"][b] if h != "tree"]
            assert d["color"][b] == request_color(reqs[0]), (b, d["color"][b], reqs)
            assert d["outline_color"][b] == SHARED_OUTLINE and d["label"][b].endswith(f"x{d['ref_count'][b]}")
        assert not d["legend_extra"].get("held by 2+ requests")


def _pool(table):
    from kvlab.viz.thesis_widget import thesis_state
    from kvlab.viz.translate_widget import translation_figure_data

    s = thesis_state(shared=True, table=table, pos=15)
    return s, {c["label"].split(" ")[0]: c for c in
               translation_figure_data(s["chain"], 12, s["holders"], s["seq"], s["ref_counts"])["physical"]}


def test_thesis_pool_is_coloured_by_holder_in_every_table_view():
    """R1 has finished: its table's blocks are drawn in the colour of who holds them now (P3: the tree's
    green, as in the R2 view), the same in both views; shared blocks are outlined with their ref count."""
    _, r1 = _pool("R1")
    _, r2 = _pool("R2")
    assert r1["P3"]["color"] == r2["P3"]["color"] == TREE
    for p in ("P0", "P1", "P2", "P4"):
        assert r1[p]["color"] == r2[p]["color"] == request_color("R2"), (p, r1[p], r2[p])
    for pool in (r1, r2):
        assert all(pool[p]["ref_count"] == 2 for p in ("P0", "P1", "P2")) and pool["P3"]["ref_count"] == 1


def test_thesis_figure_draws_no_dashes_and_free_blocks_grey():
    """Dashed outlines mean evictable (the tree view); the translation draws free blocks light grey, solid."""
    from kvlab.viz.thesis_widget import thesis_figure, thesis_state

    for table in ("R1", "R2", "notes"):
        fig = thesis_figure(thesis_state(shared=True, table=table, pos=15))
        rects = [s for s in fig.layout.shapes if s["type"] == "rect"]
        assert all(s["line"]["dash"] in (None, "solid") for s in rects), table
        assert FREE in {s["fillcolor"] for s in rects}, table


def test_thesis_checkbox_is_greyed_out_with_the_notes_table():
    w = viz.ThesisWidget(static=False)
    assert not w._shared.disabled
    w._table.value = "notes"
    assert w._shared.disabled
    w._view.value = "the radix tree"      # the tree depends on it, whatever the menu says
    assert not w._shared.disabled
    w._view.value = "the translation"
    assert w._shared.disabled
    w._table.value = "R1"
    assert not w._shared.disabled


def test_classroom_table_labels_keep_a_margin_and_arrows_stop_short():
    from kvlab.viz.thesis_widget import thesis_figure, thesis_state

    viz.classroom(True)
    try:
        fig = thesis_figure(thesis_state(shared=True, table="notes", pos=15))
    finally:
        viz.classroom(False)
    table = next(t for t in fig.data if t.name == "table").text
    assert table == ("P3", "P7", "P1", "P5", "P9"), table     # "L3→P5" filled its 57 px; two lines fill it too (r12)
    arrows = [a for a in fig.layout.annotations if a.showarrow]
    assert arrows and all((a.standoff or 0) >= 3 for a in arrows)
