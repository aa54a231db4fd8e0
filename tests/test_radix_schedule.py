"""Tests of kvlab.reuse.schedule: cache-aware ordering of the waiting queue."""
from __future__ import annotations

from dataclasses import dataclass

import pytest

from kvlab.memory import BlockAllocator
from kvlab.reuse import RadixCache, serve_request
from kvlab.reuse.schedule import SCHEDULE_POLICIES, order_by_shared_prefix, shared_prefix_lengths


def cache_with(*seqs: list[int], num_blocks: int = 256) -> RadixCache:
    cache = RadixCache(BlockAllocator(num_blocks, 1))
    for s in seqs:
        serve_request(cache, s)
    return cache


def test_lpm_orders_by_cached_prefix_length_stably():
    cache = cache_with([1, 2, 3, 4, 5, 6], [7, 7, 7])
    queue = [[9], [1, 2, 0], [7, 7, 1], [1, 2, 3, 4, 0], [8], [1, 2, 3, 4, 5, 0]]
    assert shared_prefix_lengths(queue, cache) == [0, 2, 2, 4, 0, 5]
    assert order_by_shared_prefix(queue, cache, "lpm") == [
        [1, 2, 3, 4, 5, 0], [1, 2, 3, 4, 0], [1, 2, 0], [7, 7, 1], [9], [8]]


def test_dfs_weight_keeps_subtrees_together_heaviest_first():
    cache = cache_with([1, 1, 1, 1], [2, 2, 2, 2])
    queue = [[1, 1, 5], [2, 2, 2, 9], [3], [2, 2, 8], [1, 1, 1, 6], [2, 2, 2, 2, 4]]
    out = order_by_shared_prefix(queue, cache, "dfs-weight")
    assert sorted(map(tuple, out)) == sorted(map(tuple, queue))
    firsts = [r[0] for r in out]
    assert firsts == [2, 2, 2, 1, 1, 3]  # the 2-subtree has 3 requests, the 1-subtree 2, then misses
    assert out[:3] == [[2, 2, 2, 2, 4], [2, 2, 2, 9], [2, 2, 8]]  # deeper matches first
    assert out[3:5] == [[1, 1, 1, 6], [1, 1, 5]]


def test_lookups_change_nothing():
    cache = cache_with([1, 2, 3, 4])
    before = (cache.snapshot(), len(cache.log), cache.stats.num_matches)
    for policy in SCHEDULE_POLICIES:
        order_by_shared_prefix([[1, 2, 9], [1, 2, 3, 7], [5]], cache, policy)
    assert before == (cache.snapshot(), len(cache.log), cache.stats.num_matches)
    cache.check_integrity(holders=[])


def test_fcfs_objects_and_bad_policy():
    @dataclass
    class Req:
        rid: str
        tokens: list[int]

    reqs = [Req("a", [5]), Req("b", [1, 2, 3]), Req("c", [1, 2, 4])]
    cache = cache_with([1, 2, 3])
    assert order_by_shared_prefix(reqs, cache, "fcfs") == reqs
    assert [r.rid for r in order_by_shared_prefix(reqs, cache, "lpm")] == ["b", "c", "a"]
    assert [r.rid for r in order_by_shared_prefix(reqs, cache, "lpm", tokens_of=lambda r: r.tokens[::-1])] == [
        "a", "b", "c"]
    with pytest.raises(ValueError, match="'sjf'"):
        order_by_shared_prefix(reqs, cache, "sjf")
    assert order_by_shared_prefix([], cache) == []


def _hits(order: list[list[int]], num_blocks: int) -> int:
    cache = RadixCache(BlockAllocator(num_blocks, 1))
    total = sum(serve_request(cache, r).matched_len for r in order)
    cache.check_integrity(holders=[])
    return total


def test_grouping_the_queue_raises_hits_under_memory_pressure():
    """Two 40-token system prompts, interleaved requests, room for about one prompt's family:
    first-come-first-served thrashes, the dfs-weight order (built from the queue itself) groups them."""
    sys_a, sys_b = list(range(100, 140)), list(range(200, 240))
    queue = []
    for i in range(6):
        queue.append(sys_a + [1000 + i, 1000 + i])
        queue.append(sys_b + [2000 + i, 2000 + i])
    fcfs = _hits(queue, num_blocks=60)
    grouped_order = order_by_shared_prefix(queue)
    assert [r[0] for r in grouped_order] == [100] * 6 + [200] * 6
    grouped = _hits(grouped_order, num_blocks=60)
    assert grouped >= fcfs + 8 * 40  # at least eight more requests reuse their 40-token prompt
