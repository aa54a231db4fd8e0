"""Tests of the radix-tree view: DOT source (nodes, labels, colours), captions, frames.

Bugs these keep from coming back (issue 16, item 9): the stepper's tree clipped at the right
edge (the SVG now scales to the output width), a node split without a caption, node letters
other than the notes' figure ([A] .. [F]), question and answer run together in a node's text,
and in the event stepper a split shown before the match that causes it.
"""
from __future__ import annotations

import dataclasses
import html
import re

import pytest

import graphviz  # noqa: F401  (installed by the set-up: a missing one fails)

import kvlab.viz as viz  # noqa: E402
from kvlab.lessons.four_requests import char_detokenize, char_tokenize, four_request_example  # noqa: E402
from kvlab.memory.block_pool import BlockAllocator  # noqa: E402
from kvlab.reuse.cache_manager import serve_request  # noqa: E402
from kvlab.reuse.radix_cache import RadixCache  # noqa: E402
from kvlab.viz.palette import EVICTED, HIT, MISS  # noqa: E402


@pytest.fixture(scope="module")
def frames():
    return viz.radix_request_frames(four_request_example())


def _node(source: str, name: str) -> str:
    line = next(ln for ln in source.splitlines() if ln.strip().startswith(f"{name} ["))
    i = source.index(line)
    return source[i: source.index("]", source.index("style=", i)) + 1]


def test_four_request_captions(frames):
    caps = [f.caption for f in frames]
    assert caps[0] == "warm-up: matched 0 tokens, prefilling 26 (system prompt [A])"
    assert caps[1].startswith("R1: matched 26 tokens (system prompt [A]), prefilling 37")
    assert caps[3] == ("R3: matched 57 tokens (system prompt [A] + few-shot examples [B]), prefilling 5 "
                       "(R3's question [E]: 发票怎么开)")
    assert caps[4].startswith("R4: matched 88 tokens (system prompt [A] + few-shot examples [B] + R1's turn [C])")
    assert caps[4].endswith("prefilling 3 (R4's follow-up [F]: 人工呢)")


def test_every_split_has_a_caption(frames):
    """Between R1 and R2 the node [B+C] is split at the end of B: R2's caption says so, and
    every frame whose tree gained a node by splitting names the split."""
    assert caps_with_split(frames) == [2]
    assert frames[2].caption.endswith(
        "; its match ended inside node [B+C] after 31 of its 62 tokens, so that node was split into [B] -> [C]")
    for prev, f in zip(frames, frames[1:]):
        old = {n.id: n for n in prev.snapshot.snapshot.nodes}
        moved = [n for n in f.snapshot.snapshot.nodes if n.id in old and n.start != old[n.id].start]
        assert bool(moved) == ("split into" in f.caption), f.caption


def caps_with_split(frames):
    return [i for i, f in enumerate(frames) if "split" in f.caption]


def test_node_letters_are_the_notes_figure(frames):
    assert sorted(frames[4].snapshot.node_labels.values()) == ["A", "B", "C", "D", "E", "F"]
    assert sorted(frames[1].snapshot.node_labels.values()) == ["A", "B+C"]  # before the split
    src = viz.radix_tree_graph(frames[4].snapshot).source
    for letter in "ABCDEF":
        assert f"[{letter}] " in src
    assert "[R2]" not in src and "[R4]" not in src


def test_question_and_answer_on_separate_lines(frames):
    d = viz.radix_tree_data(frames[4].snapshot, max_chars=40)
    label = {n["label"].split(" ", 1)[0]: n["label"] for n in d["nodes"][1:]}
    c = label["[C]"].split("\n")
    assert c[0] == "[C] “怎么申请退款”" and c[1] == "answer “在订单详情页点击“申请退款”，选择原因后提交即可。”"
    f = label["[F]"].split("\n")
    assert f[0] == "[F] “人工呢”" and f[1].startswith("answer “正在为您转接")
    assert "\nanswer" not in label["[A]"] and "\nanswer" not in label["[B]"]  # no answer in the shared prompt


def test_hit_path_green_suffix_blue(frames):
    r3 = frames[3].snapshot
    labels = r3.node_labels
    by_label = {v: k for k, v in labels.items()}
    assert r3.hit == {by_label["A"], by_label["B"]}
    assert r3.miss == {by_label["E"]}
    d = viz.radix_tree_data(r3)
    kinds = {n["name"]: n["kind"] for n in d["nodes"]}
    assert kinds[f"n{by_label['D']}"] == "cached" and kinds[f"n{by_label['C']}"] == "cached"
    g = viz.radix_tree_graph(r3, frames[3].caption)
    src = g.source
    a, r3node, c = (_node(src, f"n{by_label[k]}") for k in ("A", "E", "C"))
    assert f'fillcolor="{HIT}"' in a and "[A]" in a and "26 tok" in a and "lock 0" in a and "t=" in a
    assert f'fillcolor="{MISS}"' in r3node and "发票怎么开" in r3node
    assert 'fillcolor="#ffffff"' in c and "dashed" in c  # unlocked: evictable
    assert f'n{by_label["A"]} -> n{by_label["B"]} [color="{HIT}"' in src
    assert "(simulated)" in src and "R3: matched 57 tokens" in src
    assert src.count(" -> ") == len(r3.snapshot.nodes)  # one edge per node


def test_r4_matches_whole_history(frames):
    r4 = frames[4].snapshot
    by_label = {v: k for k, v in r4.node_labels.items()}
    assert r4.hit == {by_label[k] for k in ("A", "B", "C")}
    assert r4.miss == {by_label["F"]}
    svg = viz.radix_tree_graph(r4).pipe(format="svg", encoding="utf-8")
    assert svg.lstrip().startswith("<?xml") and "人工呢" in svg


def test_text_is_shortened_and_ids_without_detokenize(frames):
    st = dataclasses.replace(frames[4].snapshot, detokenize=None)
    d = viz.radix_tree_data(st, max_chars=6)
    assert all("“" not in n["label"] for n in d["nodes"])
    assert any("[20320 26159" in n["label"] for n in d["nodes"])  # 你是 as ids
    d = viz.radix_tree_data(frames[4].snapshot, max_chars=6)
    a = next(n for n in d["nodes"] if n["label"].startswith("[A]"))
    assert "“你是一个电…”" in a["label"]


def test_event_frames_show_match_insert_and_evicted_nodes():
    cache = RadixCache(BlockAllocator(24, 1))
    rec = viz.RadixRecorder(cache)
    serve_request(cache, char_tokenize("hello world"), char_tokenize("!"), rid="R1")
    serve_request(cache, char_tokenize("hello there"), rid="R2")
    serve_request(cache, char_tokenize("goodbye all you"), rid="R3")  # pool too small: evicts
    fr = viz.radix_event_frames(rec, char_detokenize)
    assert len(rec.snapshots) == len(rec.events) + 1
    # frames are found by what they show: the stepper numbers them 1..N, captions carry no event number
    assert not any(re.search(r"#\d", f.caption) for f in fr)
    steps = [f.extra["event"] for f in fr]
    assert len(steps) == len(set(steps)) and all(rec.events[i].kind in viz.radix_frames._TREE_EVENTS for i in steps)
    match = next(i for i, f in enumerate(fr) if f.caption.startswith("R2: matched 6 of 11"))
    assert rec.events[fr[match].extra["event"]].kind == "match"
    assert len(fr[match].snapshot.hit) == 1
    # the split that match causes comes right after it, never before
    assert "the match ends inside node 1, after 6 of its 12 tokens" in fr[match].caption
    assert fr[match + 1].caption.startswith("R2: split node 1 after 6 tokens")
    assert not any("split" in f.caption for f in fr[:match])
    before, after = fr[match].snapshot.snapshot, fr[match + 1].snapshot.snapshot
    assert len(after.nodes) == len(before.nodes) + 1  # the match is drawn on the tree before the split
    labels = [n["label"] for n in viz.radix_tree_data(fr[match + 1].snapshot)["nodes"][1:]]
    assert any(lab.startswith("[node 1] ") for lab in labels)  # the node the captions name is labelled
    ev = next(f for f in fr if "evicted" in f.caption)
    gone = {n.tokens for n in ev.snapshot.evicted}
    assert gone == {tuple(char_tokenize("world!")), tuple(char_tokenize("there"))}
    # review r12: the caption named the policy by its internal id ("policy lru")
    assert "(2 nodes); policy: least recently used (LRU)" in ev.caption and "policy lru" not in ev.caption
    d = viz.radix_tree_data(ev.snapshot)
    faded = [n for n in d["nodes"] if n["kind"] == "evicted"]
    assert len(faded) == 2 and all(n["fill"] == EVICTED and "(evicted)" in n["label"] for n in faded)
    src = viz.radix_tree_graph(ev.snapshot, ev.caption).source
    assert src.count(f'fillcolor="{EVICTED}"') == 2 and "style=dotted" in src
    ins = next(f for f in fr if "R3: inserted" in f.caption)
    assert len(ins.snapshot.miss) == 1 and not ins.snapshot.evicted
    for f in fr:
        f.snapshot.check_integrity()
    g = viz.radix_graph_at(fr, 0)
    assert fr[0].caption == "R1: matched 0 of 11 tokens, prefilling 11" and "R1: matched 0 of 11" in g.source
    assert not any("locked nothing" in f.caption for f in fr)  # locking the bare root changes nothing: no frame
    every = viz.radix_event_frames(rec, tree_events_only=False)
    assert len(every) == len(rec.events) and any(f.caption.startswith("admit R1") for f in every)
    with pytest.raises(ValueError):
        viz.radix_graph_at(fr, len(fr))


def test_locked_node_not_dashed():
    cache = RadixCache(BlockAllocator(16, 1))
    serve_request(cache, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2, 3])
    cache.inc_lock_ref(m.last_node)
    d = viz.radix_tree_data(cache.snapshot())
    styles = {n["label"].split("\n")[0]: n["style"] for n in d["nodes"][1:]}
    assert styles == {"[1 2 3]": "filled", "[4]": "filled,dashed"}
    assert "lock 1" in d["nodes"][1]["label"]


def test_stepper_over_radix_frames_and_integrity(frames):
    s = viz.radix_stepper(frames, static=False)
    assert "kvlab-svg" in s._html._dom_classes
    s.go(3)
    assert "<svg" in s._html.value and "R3: matched 57" in s._caption.value and s.error is None
    broken = dataclasses.replace(frames[3].snapshot, hit=frozenset({999}))
    s2 = viz.radix_stepper([frames[0], viz.Frame(broken, "bad")], static=False)
    s2.next()
    assert s2.error and "integrity check failed" in s2.error
    snap = frames[2].snapshot.snapshot
    bad = dataclasses.replace(snap, evictable_size=snap.evictable_size + 1)
    with pytest.raises(AssertionError, match="evictable"):
        viz.check_radix_snapshot(bad)


def _node_attr(src: str, name: str) -> float:
    return float(re.search(r"\tnode \[[^]]*\b" + name + r"=([0-9.]+)", src).group(1))


def test_classroom_graph_bigger(frames):
    viz.classroom(False)
    small = viz.radix_tree_graph(frames[1].snapshot).source
    viz.classroom(True)
    try:
        big = viz.radix_tree_graph(frames[1].snapshot).source
    finally:
        viz.classroom(False)
    assert _node_attr(big, "fontsize") > _node_attr(small, "fontsize")
    assert _node_attr(big, "penwidth") > _node_attr(small, "penwidth")


def test_stepper_tree_fits_the_output_width(frames):
    """The tree is never clipped: every frame's SVG scales to 100% of the output width (up
    to its drawn width), with a viewBox holding every node, R4's node [F] included."""
    s = viz.radix_stepper(frames, static=False)
    for i in range(len(frames)):
        s.go(i)
        html_ = s._html.value
        tag = re.search(r"<svg\b[^>]*>", html_).group(0)
        assert 'width="100%"' in tag and "max-width:" in tag and "height=" not in tag.replace("height:auto", "")
        assert "viewBox=" in tag and not html_.lstrip().startswith("<?xml")
    assert "人工呢" in s._html.value  # the rightmost node, [F], is in the picture
    assert viz.radix_view.fit_svg('<svg width="10pt" height="5pt" viewBox="0 0 10 5"/>') == (
        '<svg width="100%" style="max-width:10pt;height:auto" viewBox="0 0 10 5"/>')
    with pytest.raises(ValueError):
        viz.radix_view.fit_svg("<p>no svg</p>")


def test_radix_pool_on_the_memory_map():
    cache = RadixCache(BlockAllocator(16, 1))
    serve_request(cache, [1, 2, 3, 4], rid="R1")
    r2 = serve_request(cache, [1, 2, 3, 9], rid="R2")
    tree = cache.snapshot()
    snap = viz.pool_snapshot(cache.allocator, {f"node {n.id}": n.kv for n in tree.nodes})
    snap.check_integrity()
    d = viz.memory_map_data(snap, highlight=list(r2.matched_kv))
    assert d["highlight"] == [0, 1, 2]
    assert d["color"][4] == viz.assign_colors(["R1", "R2"])["R2"] and d["color"][5] == viz.FREE
    assert d["label"][3].startswith("P3<br>node ")
    with pytest.raises(ValueError, match="99"):
        viz.pool_snapshot(cache.allocator, {"x": [99]})


def test_static_display_of_radix_and_translation(monkeypatch, frames):
    import IPython.display

    shown = []
    monkeypatch.setattr(IPython.display, "display", lambda *objs, **kw: shown.extend(objs))
    viz.radix_stepper(frames, static=True)._ipython_display_()
    assert [type(o).__name__ for o in shown] == ["HTML", "HTML"]  # caption, then the fitted SVG
    assert "<svg" in shown[1].data and 'width="100%"' in shown[1].data
    assert "人工呢" not in shown[1].data and "after warm&#45;up" in shown[1].data  # the first frame
    shown.clear()
    viz.TranslationWidget(static=True)._ipython_display_()
    assert [type(o).__name__ for o in shown] == ["HTML", "Figure"]
    assert "block_table[2] = 1" in shown[0].data


@pytest.mark.parametrize("classroom", [False, True])
def test_split_frame_keeps_its_text_size(frames, classroom):
    """Issue 21 [4]: lesson 07's split frame was 2,219 pt wide in classroom mode (its one-line
    caption), so fitting it to an ~850 px output drew its text at 0.37 scale. The caption is
    wrapped, the legend takes two rows, and a tree wider than the limit is laid out top-to-bottom."""
    from kvlab.viz.radix_view import MAX_WIDTH_PT, RadixView, radix_tree_graph

    viz.classroom(classroom)
    try:
        for f in frames:
            svg = RadixView()(f)
            width = float(re.search(r"max-width:([\d.]+)pt", svg).group(1))
            assert width <= MAX_WIDTH_PT[classroom] * 1.0, (f.caption, width)
            # the smallest text, scaled to an 850 px output: >= 16 px in classroom mode, >= 12 px otherwise
            font_pt = min(float(x) for x in re.findall(r'font-size="([\d.]+)"', svg))
            assert font_pt * 4 / 3 * min(1.0, 850 / (width * 4 / 3)) >= (16 if classroom else 12)
        split = next(f for f in frames if "split" in f.caption)
        src = radix_tree_graph(split.snapshot, split.caption).source
        wrapped = re.search(r"<td[^>]*>(R2: matched.*?)</td>", src).group(1).split('<br align="left"/>')
        assert len(wrapped) >= 4 and all(len(line) <= 80 for line in wrapped)
    finally:
        viz.classroom(False)
    with pytest.raises(ValueError, match="rankdir"):
        radix_tree_graph(frames[0].snapshot, rankdir="BT")



def test_legend_names_only_what_the_picture_uses(frames):
    """"faded: evicted" was in every legend, also where nothing was evicted."""
    first = viz.radix_tree_graph(frames[0].snapshot, frames[0].caption).source
    assert "faded: evicted" not in first and "prefilled now (miss)" in first
    assert "matched (hit" not in first  # the warm-up matched nothing
    later = viz.radix_tree_graph(frames[3].snapshot, frames[3].caption).source
    assert "matched (hit, reused)" in later and "faded: evicted" not in later
    cache = RadixCache(BlockAllocator(24, 1))
    rec = viz.RadixRecorder(cache)
    serve_request(cache, char_tokenize("hello world"), char_tokenize("!"), rid="R1")
    serve_request(cache, char_tokenize("goodbye all you, friends"), rid="R2")  # pool too small: evicts
    ev = next(f for f in viz.radix_event_frames(rec, char_detokenize) if "evicted" in f.caption)
    assert "faded: evicted" in viz.radix_tree_graph(ev.snapshot, ev.caption).source


def test_mid_word_node_text_is_marked():
    """A page-sized node can start inside a word ("istant" after "ass"): its label starts with "…"."""
    from kvlab.viz.chat_demo import mid_word_decode

    cache = RadixCache(BlockAllocator(32, block_size=4), page_size=4)
    serve_request(cache, char_tokenize("the assistant is"), rid="R1")
    serve_request(cache, char_tokenize("the assistant did"), rid="R2")   # pages of 4: split after "the assistan"
    snap = cache.snapshot()
    decode = mid_word_decode(snap, char_detokenize)
    labels = {char_detokenize(n.tokens): decode(n.tokens) for n in snap.nodes}
    assert labels == {"the assistan": "the assistan", "t is": "…t is", "t di": "…t di"}, labels


def test_a_live_radix_stepper_states_each_caption_once(frames):
    """The rubric's "the step counter appears once": a live stepper's caption line carries the
    frame's caption, so the graph it draws does not repeat it; a static stepper's graph keeps it."""
    from kvlab.viz.radix_view import RadixView

    cap = frames[2].caption
    assert cap and cap not in RadixView(captioned=False)(frames[2])
    first_words = cap.split()[0]
    assert first_words in RadixView()(frames[2])
    live = viz.radix_stepper(frames, static=False)
    assert live.widget is not None and frames[0].caption in html.unescape(live._caption.value)


def test_locks_false_leaves_out_a_zero_locked_count(frames):
    """Lesson 00's tree (before locks are taught) does not print "protected (locked) 0 tokens"."""
    state = frames[4].snapshot
    assert "protected (locked) 0" in viz.radix_tree_graph(state).source
    assert "protected" not in viz.radix_tree_graph(state, locks=False).source


def test_a_full_match_is_captioned_as_a_lookup_not_a_prefill_of_0():
    """Review of lesson 08 (cell 11): a bare match_prefix of a fully cached prompt read "matched 8 of 8
    tokens, prefilling 0", against lesson 07's rule that the last token is always computed."""
    from kvlab.reuse import CacheManager, serve_request
    from kvlab.viz.radix_frames import RadixRecorder
    cm = CacheManager(num_blocks=16, block_size=1)
    rec = RadixRecorder(cm.tree)
    serve_request(cm, [1, 2, 3, 4], rid="R1")
    cm.tree.match_prefix([1, 2, 3, 4], rid="R1 again")
    cap = [f.caption for f in viz.radix_event_frames(rec) if f.caption.startswith("R1 again")][0]
    assert "prefilling 0" not in cap and "lookup" in cap and "would prefill 1" in cap, cap


def test_a_stepper_draws_every_frame_in_one_orientation():
    """Review of lesson 07 (cell 10): steps 1-4 were drawn left-to-right and step 5 top-to-bottom
    (each frame chose its own orientation), so the nodes jumped between frames."""
    from kvlab.viz.radix_frames import radix_request_frames
    frames = radix_request_frames()
    s = viz.radix_stepper(frames, static=True)
    assert s.render.rankdir in ("LR", "TB")
    assert all(f"rankdir={s.render.rankdir}" in s.render.graph(f).source for f in frames)
    assert all("<svg" in s.render(f) for f in frames)


def test_legend_names_a_locked_node():
    """Review of lesson 08 (cell 11, step 14): R4 locked [1 2 3] -> [9 9 9], drawn with a solid
    border beside the dashed "evictable (unlocked)" ones, and the legend said nothing of solid."""
    cache = RadixCache(BlockAllocator(16, 1))
    serve_request(cache, [1, 2, 3, 4], rid="R1")
    before = viz.radix_tree_graph(cache.snapshot()).source
    assert "solid: locked" not in before and "dashed: evictable" in before     # nothing locked: no entry
    m = cache.match_prefix([1, 2, 3, 4, 5], rid="R2")
    cache.inc_lock_ref(m.last_node, rid="R2")
    locked = viz.radix_tree_graph(cache.snapshot()).source
    assert "solid: locked" in locked and "dashed: evictable" not in locked   # every node is locked now


def test_lesson_08_stepper_can_show_whole_8_token_keys():
    """Review r8_08 (cell 13): the stepper cut lesson 08's 8-token keys to six ids ("[1 2 3 4 5 6 …]");
    ``max_ids=8`` shows them whole, and the default (other lessons' pictures) still stops at six."""
    from kvlab.reuse import CacheManager, serve_request
    from kvlab.viz.radix_frames import RadixRecorder, radix_event_frames
    from kvlab.viz.radix_view import radix_tree_data

    cm = CacheManager(num_blocks=16, block_size=1)
    rec = RadixRecorder(cm.tree)
    serve_request(cm, [1, 2, 3, 4, 5, 6, 7, 8])
    snap = radix_event_frames(rec)[-1].snapshot
    assert any("[1 2 3 4 5 6 7 8]" in n["label"] for n in radix_tree_data(snap, max_ids=8)["nodes"])
    assert any("[1 2 3 4 5 6 …]" in n["label"] for n in radix_tree_data(snap)["nodes"])
