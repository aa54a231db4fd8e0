"""Tests of the radix-tree view: DOT source (nodes, labels, colours), captions, frames."""
from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("graphviz")

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
    assert caps[3] == "R3: matched 57 tokens (system prompt [A] + few-shot examples [B]), prefilling 5 (R3: 发票怎么开)"
    assert caps[4].startswith("R4: matched 88 tokens (system prompt [A] + few-shot examples [B] + R1's turn [C])")


def test_hit_path_green_suffix_blue(frames):
    r3 = frames[3].snapshot
    labels = r3.node_labels
    by_label = {v: k for k, v in labels.items()}
    assert r3.hit == {by_label["A"], by_label["B"]}
    assert r3.miss == {by_label["R3"]}
    d = viz.radix_tree_data(r3)
    kinds = {n["name"]: n["kind"] for n in d["nodes"]}
    assert kinds[f"n{by_label['R2']}"] == "cached" and kinds[f"n{by_label['C']}"] == "cached"
    g = viz.radix_tree_graph(r3, frames[3].caption)
    src = g.source
    a, r3node, c = (_node(src, f"n{by_label[k]}") for k in ("A", "R3", "C"))
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
    assert r4.miss == {by_label["R4"]}
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
    assert not any(f.caption.startswith("#") for f in fr)
    steps = [f.extra["event"] for f in fr]
    assert steps == sorted(set(steps)) and all(rec.events[i].kind in viz.radix_view._TREE_EVENTS for i in steps)
    match = next(f for f in fr if f.caption.startswith("R2: matched 6 of 11"))
    assert rec.events[match.extra["event"]].kind == "match"
    assert len(match.snapshot.hit) == 1
    ev = next(f for f in fr if "evicted" in f.caption)
    gone = {n.tokens for n in ev.snapshot.evicted}
    assert gone == {tuple(char_tokenize("world!")), tuple(char_tokenize("there"))}
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


def test_classroom_graph_bigger(frames):
    viz.classroom(False)
    small = viz.radix_tree_graph(frames[1].snapshot).source
    viz.classroom(True)
    try:
        big = viz.radix_tree_graph(frames[1].snapshot).source
    finally:
        viz.classroom(False)
    assert "fontsize=12" in small and "fontsize=24" in big and "penwidth=4.5" in big


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
    assert [type(o).__name__ for o in shown] == ["HTML", "SVG"]
    assert "人工呢" not in shown[1].data and "warm-up" in shown[1].data  # first frame
    shown.clear()
    viz.TranslationWidget(static=True)._ipython_display_()
    assert [type(o).__name__ for o in shown] == ["HTML", "Figure"]
    assert "block_table[2] = 1" in shown[0].data
