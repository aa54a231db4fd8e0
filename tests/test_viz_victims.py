"""Lesson 08's first picture (review r3_00_08: "the lesson's core comparisons are printed text only"):
the tree of section 1 with, in every node, the order each eviction policy takes it in, or "kept"."""
from __future__ import annotations

import copy
import re

import pytest

import kvlab.viz as viz
from kvlab.reuse import EVICTION_POLICIES, CacheManager, serve_request
from kvlab.viz.eviction_view import POLICY_COLORS
from kvlab.viz.victims_view import victims_graph, victims_svg

NAME = {"lru": "LRU", "lfu": "LFU", "fewest_tokens": "fewest tokens"}


def _lesson_tree():
    """Section 1's tree, built as the lesson builds it, and each policy's victims for 3 tokens."""
    cm = CacheManager(num_blocks=16, block_size=1)
    cache = cm.tree
    r1, r2, r3 = [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 9, 9, 9], [7, 7]
    serve_request(cm, r1, rid="R1")
    cache.match_prefix(r1, rid="R1 again")
    cache.match_prefix(r1, rid="R1 again")
    serve_request(cm, r2, rid="R2")
    serve_request(cm, r3, rid="R3")
    cache.match_prefix(r3, rid="R3 again")
    victims = {}
    for name in EVICTION_POLICIES:
        c = copy.deepcopy(cache)
        c.set_eviction_policy(name)
        victims[name] = c.evict(3).node_ids
    return cache.snapshot(), victims


def _cells(source: str) -> list[tuple[str, str]]:
    """(fill colour or '', text) of every policy cell in the DOT source."""
    return re.findall(r'<td (?:bgcolor="(#[0-9a-fA-F]{6})"|border="1" color="#9e9e9e")><font color="#[0-9a-f]{6}">'
                      r'(?:<b>)?([^<]+)', source)


def test_each_policys_victims_are_drawn_in_its_colour_with_their_order():
    snap, victims = _lesson_tree()
    by_tokens = {n.tokens: n for n in snap.nodes}
    assert victims["lru"] == [by_tokens[(4, 5, 6, 7, 8)].id]
    assert victims["fewest_tokens"] == [by_tokens[(7, 7)].id, by_tokens[(9, 9, 9)].id]
    g = victims_graph(snap, victims, 3, names=NAME)
    cells = _cells(g.source)
    assert len(cells) == len(snap.nodes) * len(victims)   # one cell per node and policy
    filled = {text: colour for colour, text in cells if colour}
    assert filled == {"LRU 1st": POLICY_COLORS["lru"], "fewest tokens 1st": POLICY_COLORS["fewest_tokens"],
                      "fewest tokens 2nd": POLICY_COLORS["fewest_tokens"], "LFU 1st": POLICY_COLORS["lfu"]}
    assert sum(text.endswith(" kept") for _, text in cells) == len(cells) - 4
    for n in snap.nodes:   # what the policies look at, printed in the node
        assert f"{len(n.tokens)} tok · t={n.last_access_time} · hits {n.hit_count}" in g.source
    assert "free 3 tokens (simulated)" in g.source


def test_classroom_keeps_the_picture_narrow_and_it_fits_the_output():
    snap, victims = _lesson_tree()
    normal = victims_graph(snap, victims, 3, names=NAME)
    viz.classroom(True)
    try:
        wide = victims_graph(snap, victims, 3, names=NAME)
        html = victims_svg(snap, victims, 3, names=NAME)
    finally:
        viz.classroom(False)
    assert normal.source.count("</tr><tr><td") < wide.source.count("</tr><tr><td")   # two policy cells a row
    assert 'width="100%"' in html and "kvlab-svg" in html


def test_unknown_victims_are_refused():
    snap, _ = _lesson_tree()
    with pytest.raises(ValueError, match="does not hold"):
        victims_graph(snap, {"lru": [99]}, 3)


def test_the_queue_orders_picture_counts_the_prefix_changes_of_each_order():
    """Review r3_00_08 (section 5's queue example printed three orders as '1 2 7 | 9 9 9 1 | ...'): a row a
    policy, each request coloured by the cached prefix it runs through, and how often each order changes
    prefix: FCFS interleaves the two subtrees (4 changes), lpm 3, dfs-weight serves each subtree whole (2).
    Review r8_08: a change is between two cached prefixes (the uncached [5 5] is skipped): 3 / 2 / 1; the
    prefix colours are none of the lesson's policy colours, and a key names them."""
    from kvlab.reuse.schedule import order_by_shared_prefix, shared_prefix_lengths
    from kvlab.viz.order_view import orders_html
    from kvlab.viz.order_view import PREFIX_COLORS
    from kvlab.viz.palette import FREE, REQUEST_COLORS

    c = CacheManager(num_blocks=64, block_size=1)
    serve_request(c, [1, 2, 3, 4, 5])
    serve_request(c, [9, 9, 9])
    queue = [[1, 2, 7], [9, 9, 9, 1], [1, 2, 3, 4, 8], [9, 9, 9, 2], [9, 9, 9, 3], [5, 5]]
    cached = shared_prefix_lengths(queue, c.tree)
    orders = {p: order_by_shared_prefix(queue, c.tree, policy=p) for p in ("fcfs", "lpm", "dfs-weight")}
    out = orders_html(queue, cached, orders)
    changes = re.findall(r"(fcfs|lpm|dfs-weight)<br><span[^>]*>(\d+) changes? of prefix", out)
    assert changes == [("fcfs", "3"), ("lpm", "2"), ("dfs-weight", "1")], changes
    fills = re.findall(r"<td style='background:(#[0-9a-f]{6})", out)
    assert len(fills) == 18 and set(fills) == {PREFIX_COLORS[0], PREFIX_COLORS[1], FREE}
    assert not set(PREFIX_COLORS[:2]) & set(REQUEST_COLORS[:5])          # LRU, LFU, fewest, FCFS, cache-aware
    assert "[1 2 …] cached" in out and "[9 9 9 …] cached" in out and "nothing cached" in out
    assert out.count("4 cached") == 3 and out.count("0 cached") == 3   # [1 2 3 4 8] and [5 5], in each row
    with pytest.raises(ValueError, match="lengths for"):
        orders_html(queue, cached[:-1], orders)
