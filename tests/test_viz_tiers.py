"""Lesson 10's pictures: the lifecycle graphs fit an 850 px output, the animation's legend stays
off its controls, the stepper's caption counts steps once, and the tree coloured by tier agrees
with both pools."""
from __future__ import annotations

import html
import re

import pytest

import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
import graphviz  # noqa: F401  (installed by the set-up: a missing one fails)

from kvlab.lessons.four_requests import FOUR_REQUEST_TEXTS as T  # noqa: E402
from kvlab.lessons.four_requests import char_tokenize, four_request_example  # noqa: E402
from kvlab.reuse.cache_manager import serve_request  # noqa: E402
from kvlab.reuse.hicache_manager import HiCacheManager  # noqa: E402
from kvlab.reuse.hicache_storage import MemoryStorage  # noqa: E402
from kvlab.viz import tier_view as V  # noqa: E402
from kvlab.viz.radix_frames import NOTES_LETTERS  # noqa: E402


@pytest.fixture(scope="module")
def run():
    records = four_request_example()
    answers = {n: char_tokenize(T[f"{n} answer"]) for n in ("R1", "R2", "R3", "R4")}
    cm = HiCacheManager(28, 4, num_host_blocks=16, write_policy="write_back", storage=MemoryStorage())
    rec = V.TierRecorder(cm, "start")
    spans = []
    for r in records:
        serve_request(cm, list(r.prompt_tokens), answers.get(r.name, []), rid=r.name)
        cm.take_transfers()
        rec.snap(f"{r.name} done")
        parts = [(NOTES_LETTERS.get(s.label, s.label), s.start, s.end) for s in r.segments]
        ans = answers.get(r.name, [])
        if ans:
            parts.append((parts[-1][0], len(r.prompt_tokens), len(r.prompt_tokens) + len(ans)))
        spans.append((list(r.prompt_tokens) + ans, parts))
    return cm, rec, spans


def test_lifecycle_graphs_fit_850px_with_readable_text(run):
    cm, _, _ = run
    fig = V.lifecycle_graph("all", cm.tree.tracker.counts, [], "a caption")
    page = fig.html()
    assert page.count("<svg") == 3 and "max-width:100%" in page
    for w, svg in fig.svgs():
        # drawn at most 850 px wide (pt = 4/3 px) so the 12 pt labels are never scaled below 12 px
        assert w * 4 / 3 <= 850, w
        tag = re.search(r"<svg\b[^>]*>", svg).group(0)
        assert 'width="100%"' in tag and "max-width" in tag and 'height="' not in tag
    assert ['rankdir=TB' in g.source for g in fig.graphs] == [True, True, False]   # the node's: left to right
    node = fig.graphs[2].source
    assert "rankdir=LR" in node and node.count("rank=same") == 2, node
    assert min(int(x) for x in re.findall(r'fontsize=(\d+)', fig.source)) >= 12


def test_animation_legend_is_off_the_controls(run):
    _, rec, _ = run
    fig = V.animate_tiers(rec.snapshots)
    assert fig.layout.legend.yanchor == "bottom" and fig.layout.legend.y >= 1  # above the plot
    assert fig.layout.updatemenus[0].y < 0 and fig.layout.sliders[0].y < 0  # controls below it
    assert fig.layout.legend.font.size >= 12
    # the slider counts the steps: the frames' titles do not repeat "step i / n"
    assert not any("step " in f.layout.title.text for f in fig.frames)
    assert fig.layout.width is None or fig.layout.width <= 850


def test_stepper_caption_counts_steps_once(run):
    _, rec, _ = run
    s = V.tier_stepper(rec, static=True, graph=True)
    s.go(2)
    cap = s._caption_html()
    assert cap.count("step ") == 1 and f"step 3 / {len(s)}" in cap
    # one machine a frame in every mode: three drawn at once were about 1,000 px tall at 1500x1000; a step
    # that changed nothing (the start) has no frame (review r2: it drew the node machine; review r5: the
    # stepper then opened on an empty "nothing to draw" frame)
    assert all(len(f.extra["machines"]) == 1 for f in s.frames)
    assert not rec.taken[0] and s.frames[0].extra["i"] == 1
    s.go(0)
    first = s.render(s.frame)
    assert "nothing to draw" not in first and "<svg" in first
    assert s.error is None


def test_tree_coloured_by_tier_matches_the_pools(run):
    cm, rec, spans = run
    tree, snap = rec.trees[-1], rec.snapshots[-1]
    labels = V.majority_labels(tree, spans)
    assert sorted(labels.values()) == ["A", "B", "C", "D", "E", "F"]
    assert set(snap.placements.values()) == {"device", "both", "host", "disk"}
    fig = V.tier_tree_figure(tree, snap, labels)
    nodes = fig.data[1]
    colors = V.STATE_COLORS["node"]
    for text, color in zip(nodes.text[1:], nodes.marker.color[1:]):
        letter = text[1]
        nid = next(i for i, lab in labels.items() if lab == letter)
        assert color == colors[snap.placements[nid]], (letter, snap.placements[nid])
    grid = fig.data[2]
    # every pool block carries its node's letter and colour; the disk-only node [D] holds no pool block
    disk = next(labels[i] for i, p in snap.placements.items() if p == "disk")
    assert disk not in grid.text
    assert fig.layout.width is None or fig.layout.width <= 850
    st = V.tier_tree_stepper(rec, labels, static=True)
    st.go(len(rec.trees) - 1)
    assert st.error is None


def test_tree_levels_leave_room_between_boxes_in_classroom_mode(run):
    """Issue 28 [6]: in classroom mode lesson 10's tree boxes (4 x 18 px) were taller than a
    level of the tree (66 px), so [A], [B] and [D] ran into each other."""
    import kvlab.viz as viz

    _cm, rec, spans = run
    tree, snap = rec.trees[-1], rec.snapshots[-1]
    for on in (False, True):
        viz.classroom(on)
        try:
            fig = V.tier_tree_figure(tree, snap, V.majority_labels(tree, spans))
        finally:
            viz.classroom(False)
        lay = fig.layout
        lo, hi = lay.yaxis.range
        level_px = (lay.height - lay.margin.t - lay.margin.b) / (hi - lo)  # one level of the tree, in px
        assert fig.data[1].marker.size < level_px, (on, fig.data[1].marker.size, level_px)


def test_tier_controls_answer_for_every_ratio_and_policy_in_under_a_second():
    import time

    from kvlab.sim.tiers import multi_turn_chat, run_tiers
    from kvlab.viz.tier_controls import POLICY_WORDS, TierControls

    trace = multi_turn_chat(num_sessions=20, turns=6, seed=0)
    c = TierControls(lambda r, p: run_tiers(trace, capacity=4096, host_ratios=(r,), write_policy=p)[0], host_ratio=2)
    for policy in POLICY_WORDS:
        row = c.update(4, policy)  # its time: bench/bench_lessons.py (target < 1 s)
        assert row.host_ratio == 4 and row.write_policy == policy
        assert POLICY_WORDS[policy] in c.caption and "(simulated)" in c.caption
    assert c.row.hit_rate > c.base.hit_rate  # a 4x host pool keeps history the device pool alone loses
    fig = c.figure()
    assert [t.y for t in fig.data][0][1] == pytest.approx(100 * c.row.hit_rate)
    assert fig.layout.width is None or fig.layout.width <= 850
    with pytest.raises(ValueError, match="write policy"):
        c.update(policy="write_around")
    with pytest.raises(ValueError, match="host_ratio"):
        c.update(host_ratio=7)


def test_steppers_print_the_caption_once(run):
    _, rec, _ = run
    s = V.tier_tree_stepper(rec, static=True)
    s.go(len(rec.trees) - 1)
    fig = s.figure()
    assert rec.snapshots[-1].caption not in fig.layout.title.text  # the stepper's caption line carries it
    g = V.tier_stepper(rec, static=True, graph=True)
    g.go(1)
    assert rec.snapshots[1].caption not in g.figure()


def test_one_meaning_per_colour_and_one_projector_screen(run):
    """Issue 28, the review of lesson 10: red meant both "locked" and "taken this step"; in
    classroom mode the tree stepper's figure was 599 px and the diagram stepper 793 px (with
    its controls), more than a projector's 599 px."""
    import re

    import kvlab.viz as viz

    _cm, rec, spans = run
    states = {c for m in V.STATE_COLORS.values() for c in m.values()}
    assert V.TAKEN not in states
    taken = V.lifecycle_graph("device", None, [("device", "free", "allocated")]).source
    assert f'color="{V.TAKEN}"' in taken
    viz.classroom(True)
    try:
        # as the tree stepper draws it (its caption printed above the view, not in the figure)
        fig = V.tier_tree_figure(rec.trees[-1], rec.snapshots[-1], V.majority_labels(rec.trees[-1], spans), caption=False)
        steps = V.tier_stepper(rec, static=True, graph=True)
        heights = []
        for i in range(len(steps)):
            steps.go(i)
            assert len(steps.frame.extra["machines"]) <= 1  # one machine a frame on a projector
            heights += [float(h) for h in re.findall(r'viewBox="[0-9.-]+ [0-9.-]+ [0-9.]+ ([0-9.]+)"', steps.render(steps.frame))]
    finally:
        viz.classroom(False)
    assert fig.layout.height <= 510
    assert max(heights) * 4 / 3 <= 460  # the tallest diagram in px, leaving room for the controls and caption


def test_the_animation_names_blocks_by_the_figures_letters(run):
    """Issue 28, the review of lesson 10 (cell 12): the animation labelled the blocks n1..n6 while
    the tree figure and its pools below say [A]-[F]: one naming, the notes' letters, in every frame."""
    _, rec, spans = run
    labels = [V.majority_labels(t, spans) for t in rec.trees]
    fig = V.animate_tiers(rec.snapshots, labels=labels)
    texts = [t for f in fig.frames for tr in f.data for t in tr.text if t]
    assert texts and all(t in "ABCDEF?" for t in texts), sorted(set(texts))
    last = {t for tr in fig.frames[-1].data[:2] for t in tr.text if t}   # the two pools (the disk row: no pool)
    assert set(labels[-1].values()) >= last >= {"A", "C"}
    tree = V.tier_tree_figure(rec.trees[-1], rec.snapshots[-1], labels[-1])
    pooled = {t for tr in tree.data if tr.text is not None and not isinstance(tr.text, str) for t in tr.text if t}
    assert last <= pooled  # the same letters as the pools drawn beside the tree
    assert all(re.fullmatch(r"n\d+", t) for tr in V.animate_tiers(rec.snapshots).frames[-1].data for t in tr.text if t)


def test_lesson_10_does_not_name_the_node_events_before_exercise_3(run):
    """Issue 28, the review of lesson 10: exercise 3's table (a node's placement after each event)
    could be read off section 3's diagram, whose node edges said "evict", "load_back", ... The
    diagrams before the exercise draw the node's edges with their counts only."""
    from pathlib import Path

    cm, rec, _ = run
    words = set(V.EDGE_LABELS["node"].values())
    named = V.lifecycle_graph("node", cm.tree.tracker.counts).source
    assert any(f"<td>{w}" in named for w in words)  # the default still names them
    for g in V.lifecycle_graph("all", cm.tree.tracker.counts, unnamed=("node",)).graphs:
        labels = re.findall(r"<td>(.*?)</td>", g.source)
        if "lifecycle_node" in g.source:
            assert not [lab for lab in labels if any(w in lab for w in words)], labels
            assert any("×" in lab for lab in labels)  # the counts stay
    s = V.tier_stepper(rec, static=True, graph=True, unnamed=("node",))
    for i in range(len(s)):
        s.go(i)
        html_ = str(s.figure())
        assert "evict_host (save)" not in html_ and "load_back (fetch)" not in html_
    src = Path(__file__).resolve().parent.parent.joinpath("notebooks/src/10_tiers.py").read_text()
    before = src.split("### Exercise 3")[0]
    calls = re.findall(r"(?:lifecycle_graph\(\"all\"|tier_stepper\(rec, graph=True)[^\n]*(?:\n [^\n]*)*", before)
    assert calls and all('unnamed=("node",)' in c for c in calls), calls


def test_tree_edges_end_on_their_boxes(run):
    """The review of lesson 10 (cell 16): the tree's edges floated, ending beside their boxes instead
    of on them (each edge was cut short by the same fraction in x and y, so a slanted edge to a
    far leaf stopped outside the box). Each end, in px, lies inside its node's box (the box is
    drawn over it) and outside the label's two lines of text."""
    import kvlab.viz as viz

    _cm, rec, spans = run
    tree, snap = rec.trees[-1], rec.snapshots[-1]
    for on in (False, True):
        viz.classroom(on)
        try:
            th = viz.theme()
            fig = V.tier_tree_figure(tree, snap, V.majority_labels(tree, spans))
        finally:
            viz.classroom(False)
        lay = fig.layout
        width = lay.width or th.grid_width
        (x0, x1), (y0, y1) = lay.xaxis.range, lay.yaxis.range
        px_x = (width - lay.margin.l - lay.margin.r) * (lay.xaxis.domain[1] - lay.xaxis.domain[0]) / (x1 - x0)
        px_y = (lay.height - lay.margin.t - lay.margin.b) / (y1 - y0)
        box = fig.data[1].marker.size
        centres = list(zip(fig.data[1].x, fig.data[1].y))
        ex, ey = fig.data[0].x, fig.data[0].y
        ends = [(ex[i + k], ey[i + k]) for i in range(0, len(ex), 3) for k in (0, 1)]
        assert ends
        for x, y in ends:
            cx, cy = min(centres, key=lambda c: ((c[0] - x) * px_x) ** 2 + ((c[1] - y) * px_y) ** 2)
            dx, dy = abs(x - cx) * px_x, abs(y - cy) * px_y
            assert dx <= box / 2 and dy <= box / 2, (on, (x, y), (cx, cy), dx, dy, box)   # on the box
            assert dx > 0.3 * box or dy > 0.3 * box, (on, (x, y), dx, dy, box)              # not on the label


def test_lifecycle_graph_says_what_its_greys_mean(run):
    """The review of lesson 10 (cell 8): the diagram drew light grey edges without saying what grey is
    (an edge the run never took). With counts, the title's key names every edge style drawn."""
    cm, _rec, _spans = run
    fig = V.lifecycle_graph("all", cm.tree.tracker.counts, [("device", "free", "allocated")])
    text = fig.html()
    assert "#c8c8c8" in fig.source and "light grey edge: legal, but this run never took it" in text
    assert "bold purple" in text
    assert "light grey edge" not in V.lifecycle_graph("all").html()  # no counts: every edge is drawn dark


def test_tier_controls_bars_use_no_colour_that_means_something_else():
    """The review of lesson 10: the "host 2x" bars were drawn in the hit green and the miss/allocated
    blue, which mean block states elsewhere in the lesson. One colour for the host tier's bars, one
    for the device pool alone, neither a block state's, both named in the title."""
    from types import SimpleNamespace as NS

    from kvlab.viz.tier_controls import TierControls

    c = TierControls(lambda r, p: NS(hit_rate=0.2 + 0.1 * r, prefill_tokens=1000 - 100 * r, ttft_mean_s=0.05 - 0.01 * r))
    fig = c.figure()
    states = {col for m in V.STATE_COLORS.values() for col in m.values()} | {V.TAKEN}
    pairs = {tuple(t.marker.color) for t in fig.data}
    assert len(pairs) == 1, pairs
    (base, tier), = pairs
    assert base != tier and not {base, tier} & states, (base, tier)
    assert "device pool alone" in fig.layout.title.text and "host tier" in fig.layout.title.text


def test_review_r6_classroom_tree_legend_under_every_box_and_root_not_a_free_block(run):
    """The review of 79ae8b9 (cell 16, classroom): the legend covered the [F] node and the host
    pool's third row; the root was drawn in the free block's light grey."""
    import kvlab.viz as viz

    _cm, rec, spans = run
    viz.classroom(True)
    try:
        fig = V.tier_tree_figure(rec.trees[-1], rec.snapshots[-1], V.majority_labels(rec.trees[-1], spans))
        th = V.theme()
    finally:
        viz.classroom(False)
    lay = fig.layout
    plot_bottom = lay.height - lay.margin.b            # px from the figure's top
    legend_rows_px = 1.6 * th.font_size
    assert lay.legend.yref == "container" and lay.legend.y == 0 and lay.margin.b >= legend_rows_px
    for tr, axis, box in ((fig.data[1], lay.yaxis, V._tree_box_px(th)), (fig.data[2], lay.yaxis2, th.font_size * 2.3)):
        lo, hi = axis.range
        lowest = min(y for y in tr.y if y is not None)
        px = lay.margin.t + (hi - lowest) / (hi - lo) * (lay.height - lay.margin.t - lay.margin.b) + box / 2
        assert px <= plot_bottom + 1, (px, plot_bottom)     # every box ends above the legend's margin
    assert fig.data[1].marker.color[0] != V.FREE


def test_review_r6_tier_controls_never_say_1x_faster():
    """The review (cell 27): the caption said "1.0x faster" at a host pool of 0.5x."""
    from types import SimpleNamespace as NS

    from kvlab.viz.tier_controls import TierControls

    c = TierControls(lambda r, p: NS(hit_rate=0.2, prefill_tokens=1000, ttft_mean_s=0.0500 - 0.0005 * r), host_ratio=0.5)
    assert "1.0x" not in c.caption and "about the same as device only" in c.caption
    assert "(2.0x faster)" in TierControls(lambda r, p: NS(hit_rate=0.2, prefill_tokens=1000,
                                                           ttft_mean_s=0.05 / (1 + r / 2)), host_ratio=2).caption


def test_review_r6_pool_legend_in_words_not_ids(run):
    """The review of 79ae8b9: a legend entry read "host: host" (a state's id)."""
    _, rec, _ = run
    names = [t.name for t in V.tier_map_figure(rec.snapshots[-1]).data if t.name and ":" in t.name]
    drawn = V.drawn_states([rec.snapshots[-1]])   # the legend lists what is drawn (review r2: 4 of 9 were not)
    assert "host: host" not in names and "host: only copy" in names and len(names) == sum(map(len, drawn.values()))


def test_review_r6_one_colour_per_block_state_in_every_picture(run):
    """The review of lesson 10: the same device blocks ([C]) were green ("device: cached") in the
    animation (cell 14) and light cyan ("device + host copy") in the tree figure (cell 16), whose
    pools were coloured by their node's placement. Every picture colours a block by its own
    state, and a colour's legend words are the same in both figures (one meaning a colour)."""
    _, rec, spans = run
    snap = rec.snapshots[-1]
    tree = V.tier_tree_figure(rec.trees[-1], snap, V.majority_labels(rec.trees[-1], spans))
    grid = tree.data[2]
    want = [V.STATE_COLORS[row][s] for row, states in (("device", snap.device_states), ("host", snap.host_states))
            for s in states]
    assert list(grid.marker.color) == want
    anim = {t.marker.color: t.name for t in V.tier_map_figure(snap).data if t.name and ":" in t.name}
    for t in tree.data[3:]:
        words = [w for col, w in anim.items() if col == t.marker.color]
        # the animation's words, kept (review r7: its disk row's words, "a page, on disk only", hold the tree's)
        assert all(w.split(": ", 1)[1] in t.name or t.name.split(": ", 1)[1] in w for w in words), (t.name, words)
    drawn = set(grid.marker.color) | set(tree.data[1].marker.color[1:])
    assert drawn <= {t.marker.color for t in tree.data[3:]}          # every colour drawn has its entry
    assert len({t.marker.color for t in tree.data[3:]}) == len(tree.data[3:])   # one entry a colour
    assert "host cyan" not in V.state_colour_words() and "only copy cyan" in V.state_colour_words()


def test_lesson_10_line_plots_use_no_block_state_colour():
    """One colour a meaning across lesson 10: the break-even plot (cell 30) drew "recompute" in the
    allocated blue, "load: host" in the cached green, the SSDs in loading orange and disk brown."""
    from pathlib import Path

    src = Path(__file__).resolve().parent.parent.joinpath("notebooks/src/10_tiers.py").read_text()
    cell = next(c for c in src.split("# %%") if "Recompute a prefix or load it back" in c)
    used = {c.lower() for c in re.findall(r"#[0-9a-fA-F]{6}", cell)}
    states = {c.lower() for m in V.STATE_COLORS.values() for c in m.values()} | {V.TAKEN.lower()}
    assert used and not used & states, used & states


def test_review_r9_pool_legend_slots_hold_their_labels(run):
    """The review of e072322 (cell 14, normal mode): at 5 entries a row, each slot (1/5 of the plot)
    was narrower than "host: copy (also on device)": its text ran under the next entry's swatch.
    Each slot now holds its swatch and its widest label (0.6 em a character, 40 px for the swatch)."""
    _, rec, _ = run
    fig = V.animate_tiers(rec.snapshots)
    lg, m = fig.layout.legend, fig.layout.margin
    labels = [t.name for t in fig.data if t.name and ":" in t.name]
    slot = lg.entrywidth * (fig.layout.width - m.l - m.r)
    assert lg.entrywidthmode == "fraction" and labels
    assert slot >= max(len(t) for t in labels) * 0.6 * lg.font.size + 40, (slot, max(labels, key=len))


def test_review_r9_new_is_named_and_r8_each_graph_frame_keeps_its_own_height(run):
    """The review of e072322: cells 8 and 19 drew the state "new" as an empty circle (exercise 3 uses
    the name). Review r8 of lesson 10: a box as tall as the tallest machine (r9's fix for a stepper
    that changed height) left half of a node-machine frame blank; the buttons sit above the diagram,
    so each frame is now as tall as its own diagram, with no blank box under it."""
    cm, rec, _ = run
    fig = V.lifecycle_graph("all", cm.tree.tracker.counts, [], "a caption")
    assert re.search(r'node_new \[label=new\b', fig.source), fig.source[:400]
    st = V.tier_stepper(rec, static=True, graph=True)
    frames = [st.render(f) for f in st.frames]
    assert not any("min-height" in h for h in frames)
    heights = {float(h) for f in frames for h in re.findall(r'viewBox="[-0-9.]+ [-0-9.]+ [0-9.]+ ([0-9.]+)"', f)}
    assert len(heights) > 1, heights   # the machines differ in height, and each frame shows its own


def test_review_r5_the_grid_and_the_animation_draw_the_same_blocks_the_same_way(run):
    """Review r5 of lesson 10: cell 14 draws the device pool as one row of 28 with block ids, cell 16
    as a 7x4 grid without them, so a student could not find cell 14's block 6 in cell 16. The grid now
    writes each row's block ids at its right end, in block id order, with the animation's letters
    and colours for the same block."""
    cm, rec, spans = run
    names, blocks = V.run_labels(rec, spans)
    step = 1                                            # after R1: block 6 is free between [A] and [B]
    anim = V.tier_map_data(rec.snapshots[step], names[step], blocks[step])
    fig = V.tier_tree_figure(rec.trees[step], rec.snapshots[step], names[step], blocks=blocks[step])
    grid = fig.data[2]
    cols = 7
    ids = {f"{a.text}" for a in fig.layout.annotations}
    n_dev, n_host = len(rec.snapshots[step].device_states), len(rec.snapshots[step].host_states)
    assert {f"{r * cols}-{min(n_dev, r * cols + cols) - 1}" for r in range(-(-n_dev // cols))} <= ids
    assert {f"{r * cols}-{min(n_host, r * cols + cols) - 1}" for r in range(-(-n_host // cols))} <= ids
    for k, (x, y) in enumerate(zip(grid.x, grid.y)):   # the device grid first, row-major: block id = row * 7 + column
        pool, b = ("device", k) if k < n_dev else ("host", k - n_dev)
        if pool == "device":
            assert b == -round(y) * cols + x
        assert grid.text[k] == anim[pool]["labels"][b] and grid.marker.color[k] == anim[pool]["colors"][b]


def test_review_r5_edge_labels_are_padded_not_spaced(run):
    """Review r5 of lesson 10: once cell 19's stepper opened on R1's device frame, the layout check saw
    "copy done" (then "evict") crossed by an edge on a projector: the en and em spaces around an edge
    label are text, and a bending edge ran through them. Every edge label is now a padded HTML table
    (graphviz keeps edges out of its padding) whose text is the words alone."""
    cm, rec, _ = run
    for compact in (True, False):
        for m in V.MACHINES:
            src = V._machine_graph(m, cm.tree.tracker.counts, set(), V.theme(), 14 if compact else None).source
            edges = [line for line in src.splitlines() if "->" in line and "label=" in line]
            assert edges and all('label=<<table border="0" cellborder="0" cellpadding="4"><tr><td>' in e for e in edges)
            texts = re.findall(r"<td>(.*?)</td>", src)
            assert texts and all(t == t.strip() and "\u2002" not in t and "\u2003" not in t for t in texts), texts


def _edge_crossings(svg: str) -> list[tuple[str, str]]:
    """Pairs of a graph's edges whose drawn paths cross (sampled cubic Béziers, away from the nodes
    they share), and edges that run through another edge's label text."""
    import numpy as np

    edges = []
    for m in re.finditer(r'<g id="edge\d+" class="edge">\s*<title>(.*?)</title>(.*?)</g>', svg, re.S):
        name, body = html.unescape(m.group(1)), m.group(2)
        d = re.search(r'<path[^>]* d="M([^"]+)"', body).group(1)
        pts = np.array([[float(v) for v in p.split(",")] for p in re.split(r"[C ]+", d.strip()) if "," in p])
        curve = []
        for i in range(0, len(pts) - 3, 3):
            for t in np.linspace(0, 1, 12):
                p0, p1, p2, p3 = pts[i:i + 4]
                curve.append((1 - t) ** 3 * p0 + 3 * (1 - t) ** 2 * t * p1 + 3 * (1 - t) * t ** 2 * p2 + t ** 3 * p3)
        texts = [(float(x), float(y), len(t)) for x, y, t in re.findall(r'<text[^>]* x="([-0-9.]+)" y="([-0-9.]+)"[^>]*>([^<]*)<', body)]
        edges.append((name, np.array(curve), set(name.split("->")), texts))

    def cross(a, b):
        for i in range(len(a) - 1):
            for j in range(len(b) - 1):
                p, r, q, s = a[i], a[i + 1] - a[i], b[j], b[j + 1] - b[j]
                den = r[0] * s[1] - r[1] * s[0]
                if abs(den) < 1e-9:
                    continue
                t = ((q - p)[0] * s[1] - (q - p)[1] * s[0]) / den
                u = ((q - p)[0] * r[1] - (q - p)[1] * r[0]) / den
                if 0 <= t <= 1 and 0 <= u <= 1:
                    return True
        return False

    out = []
    for i, (na, ca, ea, _) in enumerate(edges):
        for nb, cb, eb, tb in edges[i + 1:] + edges[:i]:
            if nb > na and not (ea & eb) and cross(ca, cb):
                out.append((na, nb))
            for x, y, n in tb:        # text centred on x, baseline y, about 0.55 em a character at 12-14 pt
                w = 0.55 * 14 * n / 2
                if any(abs(px - x) < w and y - 11 < py < y + 2 for px, py in ca):
                    out.append((na, f"label of {nb}"))
    return out


def test_the_node_machine_is_short_and_no_edge_crosses_another(run):
    """Review of lesson 10's state-machine figure: the node machine (device, both, host, disk,
    evicted) was drawn top to bottom, 420 pt tall, and its split and evict edges crossed. Left to
    right, as a loop round "new", it is wider than tall and no two edges that share no state cross,
    with counts (as lesson 10 draws it: nor through a label) or event names, at both sizes."""
    cm, _, _ = run
    for font_pt in (None, 14):
        for events in (False, True):
            g = V._machine_graph("node", cm.tree.tracker.counts, set(), V.theme(), font_pt, events=events)
            svg = g.pipe(format="svg", encoding="utf-8")
            w, h = map(float, re.search(r'width="([0-9.]+)pt" height="([0-9.]+)pt"', svg).groups())
            assert h < w and h <= 320, (font_pt, events, w, h)
            bad = [c for c in _edge_crossings(svg) if not (events and c[1].startswith("label of"))]
            assert bad == [], (font_pt, events, bad)   # named: an xlabel beside a column may touch an evict edge


def test_review_r8_the_graph_steppers_buttons_sit_above_its_diagram(run):
    """Review r8 of lesson 10: with each frame as tall as its own diagram, the buttons must not move
    between steps: they come before the diagram in the stepper, so a shorter frame moves nothing above."""
    _, rec, _ = run
    st = V.tier_stepper(rec, static=False, graph=True)
    kinds = [type(w).__name__ for w in st.widget.children]
    assert kinds.index("HBox") < len(kinds) - 1, kinds   # the controls' row, then the caption and the view
    assert st.widget.children[-1] is not st.widget.children[kinds.index("HBox")]
