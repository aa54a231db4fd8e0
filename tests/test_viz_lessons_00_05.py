"""Lessons 00 and 05's pictures (issue 28, the review of 34c45ca). Lesson 00 colours a block by who HOLDS
it now (cells 9, 12 and 14 coloured by who wrote it, and a block held only by the radix tree was drawn
like a free one); lesson 05's pool picture (cell 6) draws no tangle of arrows."""
from __future__ import annotations

import kvlab
import kvlab.viz as viz
from kvlab.lessons import char_tokenize
from kvlab.viz.memory_map import snapshot_ids
from kvlab.viz.palette import FREE, SHARED_OUTLINE, TREE, assign_colors, holder_color, request_color
from test_viz_kernel import lesson05_pool


def _lesson00_cache():
    """Lesson 00 cell 11: R1 ran and finished; R2 reuses its 12-token system prompt."""
    cm = kvlab.CacheManager(num_blocks=12, block_size=4)
    system = char_tokenize("你是客服助手，请简洁回答")
    r1, r2 = system + char_tokenize("怎么退款"), system + char_tokenize("何时发货")
    cm.admit("R1", r1)
    cm.cache_finished_req("R1", r1)
    cm.admit("R2", r2)
    return cm.snapshot("R2 reuses the system prompt R1 left in the radix tree")


def _fork():
    """Lesson 00 cell 7: R1, R2 and a fork of R1."""
    m = kvlab.BlockManager(num_blocks=12, block_size=4)
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R1-sample2")
    return m.snapshot("fork")


def _legend(fig) -> dict[str, str]:
    return {t.name: t.marker.color for t in fig.data if getattr(t, "mode", None) == "markers" and t.x == (None,)}


def test_tree_only_block_is_the_trees_and_reused_blocks_are_r2s():
    snap = _lesson00_cache()
    colors = assign_colors(snapshot_ids([snap]))
    d = viz.memory_map_data(snap, colors=colors, by_holder=True)
    tree_only = [b for b in snap.tables["tree"] if b not in snap.tables["R2"]]
    assert tree_only and all(d["color"][b] == TREE != FREE for b in tree_only)
    assert all(d["color"][b] == colors["R2"] for b in snap.tables["R2"])      # R2 holds them now, not R1
    assert "R1" not in d["legend"]                                            # R1 finished: it holds nothing


def test_block_held_by_two_requests_keeps_a_requests_colour_and_the_shared_outline():
    """Review r2_00_01: a colour of its own for "held by 2+ requests" (cell 9) against R2's cyan for a block R2
    and the tree share (cell 12) gave "x2" two colours; the design's rule is one colour per request, a shared
    block outlined and labelled with its ref count."""
    snap = _fork()
    fig = viz.memory_map_figure(snap, by_holder=True)
    d = viz.memory_map_data(snap, by_holder=True)
    both = set(snap.tables["R1"]) & set(snap.tables["R1-sample2"])
    assert both and all(d["color"][b] == request_color("R1") and d["outline_color"][b] == SHARED_OUTLINE for b in both)
    legend = _legend(fig)
    assert set(d["color"]) <= set(legend.values()), (set(d["color"]), legend)  # every fill drawn is in the legend
    tables = {holder_color(h, assign_colors(snapshot_ids([snap]))) for h in snap.tables}       # drawn as tables, arrows
    assert set(legend.values()) <= set(d["color"]) | tables | {FREE, "#ffffff"}, legend  # no entry drawn nowhere


def test_lesson00_maps_list_the_colours_of_their_tables():
    """Review r12: cell 9's legend lacked R1's purple and R3's pink, the colours of their tables and
    arrows (their blocks are all shared: then drawn in a held-by-2+ colour); the tree's green table is
    named by the tree-only block's entry (one green, one entry)."""
    m = kvlab.BlockManager(num_blocks=12, block_size=4)
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R3")
    legend = _legend(viz.memory_map_figure(m.snapshot("fork"), by_holder=True))
    assert {"R1", "R2", "R3"} <= set(legend) and legend["R3"] == request_color("R3"), legend
    legend = _legend(viz.memory_map_figure(_lesson00_cache(), by_holder=True))
    assert list(legend.values()).count(TREE) == 1, legend


def test_classroom_map_blocks_hold_three_label_lines():
    """Review r12: in classroom mode a shared block's label (P0, 4/4, x2) filled the block, the arrowheads
    landed on "P0" and the slot ticks on "x2": the figure's blocks are now tall enough for three lines
    between the ticks (0.12 units up from the bottom) and the arrowheads."""
    from kvlab.viz.memory_map import grid_layout
    from kvlab.viz.block_tables import map_geometry
    from kvlab.viz.pool_grid import cell_label_px

    viz.classroom(True)
    try:
        lay = grid_layout(12)
        g = map_geometry(lay, [_fork()], fit_labels=True)
        unit_px = (g.height - g.margin[2] - g.margin[3]) / (g.y_range[0] - g.y_range[1])
        assert (0.84 - 2 * 0.12) * unit_px >= 3 * 1.25 * cell_label_px(lay.cell), unit_px
    finally:
        viz.classroom(False)


def test_default_still_colours_by_owner():
    d = viz.memory_map_data(_lesson00_cache())
    assert d["color"][3] == request_color("R1")


def test_thesis_picture_draws_tree_blocks_as_held_not_free():
    from kvlab.viz.thesis_widget import thesis_state
    from kvlab.viz.translate_widget import translation_figure, translation_figure_data

    s = thesis_state(shared=True, table="R2", pos=5)
    phys = translation_figure_data(s["chain"], holders=s["holders"])["physical"]
    outside = [c for c in phys if c["label"].endswith("(tree)")]
    assert outside and all(c["color"] == TREE for c in outside), phys
    fills = [sh.fillcolor for sh in translation_figure(s["chain"], holders=s["holders"]).layout.shapes]
    assert len(set(fills)) > len(set(translation_figure(s["chain"]).layout.shapes[i].fillcolor
                                     for i in range(len(fills))))


def test_lesson05_pool_picture_has_no_crossing_arrows_and_names_every_block():
    """The review: cell 6's arrows (one per table entry, into interleaved blocks) were a tangle. The
    picture is drawn as the lesson draws it (its own call, read from the source) and must have no two
    arrows that meet, while every used block still names its request and logical block."""
    from pathlib import Path

    from test_viz_block_arrows import _meet, _polylines

    src = (Path(__file__).resolve().parent.parent / "notebooks" / "src" / "05_paged_kernel.py").read_text()
    call = src[src.index("memory_map_figure(m.snapshot("):]
    call = call[:call.index("\n\n")]
    snap = lesson05_pool().snapshot("three requests decoding together")  # lesson 05 cell 5
    fig = eval(call.replace("memory_map_figure(m.snapshot(\"three requests decoding together\")", "viz.memory_map_figure(snap"),
               {"viz": viz, "snap": snap})
    lines = [ln for t in fig.data if t.name and t.name.endswith(" arrows") for ln in _polylines(t)]
    met = [(a, b) for a, b in __import__("itertools").combinations(lines, 2)
           if any(_meet(p, q, r, s) for p, q in zip(a, a[1:]) for r, s in zip(b, b[1:]))]
    assert not met, f"{len(met)} pairs of arrows meet"
    labels = next(t for t in fig.data if t.name == "labels").text
    for seq, table in snap.tables.items():
        for i, b in enumerate(table):
            assert f"{seq} L{i}" in labels[b].replace("<br>", " "), (b, labels[b])   # a partly filled block: a word a line


# ------------------------------------------------------------------ lesson 00, the review of 6b9afee
def test_thesis_tree_and_translation_agree_that_r2_is_running():
    """The review: the tree view drew R2's nodes unlocked (dashed: evictable, R2 finished) while the
    translation drew R2's blocks as R2's own (R2 running). kvlab's state is drawn: R2 runs (its prefill
    cached, SGLang's cache_unfinished_req), so it locks its path, and the blocks on it are R2's."""
    from kvlab.viz.thesis_widget import thesis_state, thesis_tree
    from kvlab.viz.translate_widget import translation_figure_data

    s = thesis_state(shared=True, table="R2", pos=5)
    on_r2 = {n.id: n for n in s["tree"].nodes if n.id in s["hit"] | s["miss"]}
    assert on_r2 and all(n.lock_ref > 0 for n in on_r2.values()), on_r2       # R2 holds its path
    others = [n for n in s["tree"].nodes if n.id not in on_r2 and n.tokens]
    assert others and all(n.lock_ref == 0 for n in others)                     # R1's question: evictable
    svg = thesis_tree(s).source
    assert "while R2 runs" in svg
    phys = translation_figure_data(s["chain"], holders=s["holders"], seq="R2")["physical"]
    assert all(c["color"] == request_color("R2") for c in phys if "(L" in c["label"])
    r1 = thesis_state(shared=True, table="R1", pos=5)                          # R1's table: P4 is R2's, not the tree's
    phys = translation_figure_data(r1["chain"], holders=r1["holders"], seq="R1")["physical"]
    assert any(c["label"].endswith("(R2)") and c["color"] == request_color("R2") for c in phys), phys


def test_r2_has_one_colour_in_every_picture_of_lesson_00():
    """The review: R2 was pink in cell 9 (the fork took its cyan), cyan in cell 12, purple in cell 14."""
    m = kvlab.BlockManager(num_blocks=12, block_size=4)     # cell 7, as the lesson now names the fork
    m.add_sequence("R1", 10)
    m.add_sequence("R2", 5)
    m.fork("R1", "R3")
    cell9 = viz.memory_map_data(m.snapshot("fork"), by_holder=True)["legend"]
    cell12 = viz.memory_map_data(_lesson00_cache(), by_holder=True)["legend"]
    assert cell9["R2"] == cell12["R2"] == request_color("R2")


def test_thesis_tree_view_disables_the_controls_it_does_not_use():
    """The review: in the tree view the position slider and the table menu changed nothing on screen."""
    w = viz.ThesisWidget(static=False)
    assert not w._pos.disabled and not w._table.disabled
    w._view.value = "the radix tree"
    assert w._pos.disabled and w._table.disabled and not w._shared.disabled
    w._table.value = "notes"                                # a renewed slider keeps the view's state
    assert w._pos.disabled
    w._view.value = "the translation"
    assert not w._pos.disabled and not w._table.disabled
    assert w._view.style.button_width == "auto"             # classroom: "the translat..." was cut


def test_thesis_figure_draws_the_pool_the_lesson_names_and_says_what_its_colours_mean():
    """Review r12 (cell 14): the figure drew P0-P7 while the prose said 12 blocks; it had no legend for
    its shades and green; the tree's "t=4" and "lock 1" were never explained."""
    import re
    from pathlib import Path

    from kvlab.viz.thesis_widget import BLOCK_SIZE, NUM_BLOCKS, TREE_CAPTION, thesis_figure, thesis_state, thesis_tree

    prose = (Path(__file__).resolve().parent.parent / "notebooks" / "src" / "00_start_here.py").read_text()
    said = re.search(r"one small pool \((\d+) blocks of (\d+)", prose)
    assert said and (int(said.group(1)), int(said.group(2))) == (NUM_BLOCKS, BLOCK_SIZE), said
    for table in ("R2", "R1", "notes"):
        fig = thesis_figure(thesis_state(shared=True, table=table, pos=5))
        drawn = [t for t in fig.data if t.name == "physical"][0].text
        assert [x.split(" ")[0] for x in drawn] == [f"P{b}" for b in range(NUM_BLOCKS)], drawn
        legend = _legend(fig)
        fills = {s["fillcolor"] for s in fig.layout.shapes if s["type"] == "rect"}
        assert set(legend.values()) - {"#ffffff"} <= fills, (legend, fills)            # each entry is drawn
        assert {f for f in fills if f not in ("#ffffff", "#ffe0e0") and "rgba" not in f} <= set(legend.values()) | {
            s["fillcolor"] for s in fig.layout.shapes if s["type"] == "rect" and s["line"]["color"] == "#d62728"}
    assert "lock" in TREE_CAPTION and "t:" in TREE_CAPTION
    assert "last use" in thesis_tree(thesis_state()).source


def test_a_partly_filled_blocks_label_is_not_cut_by_the_fill_edge():
    """Review r12 (lesson 01, the last cell): "seq0 L24" straddled the edge of a 3/4-filled block; the
    label now sits over the filled part, a word a line where one line does not fit."""
    from kvlab.viz.pool_grid import CELL_W, _label_places, cell_label_px

    viz.classroom(True)
    try:
        m = kvlab.BlockManager(num_blocks=10, block_size=4)
        m.add_sequence("seq0", 35)                       # 9 blocks, the last holding 3 of 4
        fig = viz.memory_map_figure(m.snapshot("x"), tables=False, cols=9)
        lay = viz.memory_map.grid_layout(10, 9)
        d = viz.memory_map_data(m.snapshot("x"), layout=lay)
        xs, texts = _label_places(d, d["label"], lay, CELL_W)
        b = 8
        edge = d["x"][b] - CELL_W / 2 + CELL_W * d["fill"][b]
        half = max(len(w) for w in texts[b].split("<br>")) * 0.58 * cell_label_px(lay.cell) / 2 / lay.cell
        assert xs[b] + half <= edge, (xs[b], half, edge, texts[b])
        assert next(t for t in fig.data if t.name == "labels").text[b] == texts[b]
    finally:
        viz.classroom(False)
