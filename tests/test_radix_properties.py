"""Hypothesis property tests: RadixCache against a brute-force reference.

The reference is the set of cached page-aligned prefixes (a prefix-closed set of token
tuples). After any random sequence of requests (match, lock, allocate, insert, unlock,
some held while others run), duplicate inserts, plain matches and evictions:
  * ``match_prefix`` equals the longest prefix of the query in the reference;
  * the tree's cached tokens equal the reference's (no duplicate KV is kept);
  * the allocator's used blocks are exactly the tree's plus the running requests' own
    (``check_integrity(holders=...)``), after every step;
  * a running (locked) request's matched prefix keeps its tokens and its blocks;
  * eviction only removes unlocked subtrees, and frees everything evictable when asked for more.
"""
from __future__ import annotations

import budget
from dataclasses import dataclass

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvlab.memory import BlockAllocator, KVCacheError, OutOfBlocks
from kvlab.reuse import EVICTION_POLICIES, RadixCache

# sequences share prefixes often: a cut of one of three base sequences, then a random tail
BASES = [[0, 1, 2, 3, 0, 1, 2, 3, 0, 1], [0, 1, 2, 0, 0, 1, 3, 3], [1, 1, 1, 1, 2, 2, 2, 2, 3]]
TOKENS = st.tuples(st.integers(0, 2), st.integers(0, 10), st.lists(st.integers(0, 3), max_size=5)).map(
    lambda t: BASES[t[0]][:t[1]] + t[2])
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("request"), TOKENS, st.booleans()),
        st.tuples(st.just("finish"), st.integers(0, 7)),
        st.tuples(st.just("dup_insert"), TOKENS),
        st.tuples(st.just("match"), TOKENS),
        st.tuples(st.just("evict"), st.integers(0, 20)),
    ),
    min_size=4,
    max_size=40,
)


@dataclass
class Running:
    seq: list[int]
    prefix_len: int
    matched_kv: list[int]
    new_kv: list[int]
    node: object


def prefixes(seq, ps):
    return {tuple(seq[:k * ps]) for k in range(1, len(seq) // ps + 1)}


def ref_match(ref: set, seq, ps) -> int:
    best = 0
    for k in range(1, len(seq) // ps + 1):
        if tuple(seq[:k * ps]) in ref:
            best = k * ps
        else:
            break
    return best


def tree_prefixes(cache: RadixCache) -> set:
    out = set()
    for s in cache.snapshot().sequences():
        out |= prefixes(list(s), cache.page_size)
    return out


def check(cache: RadixCache, ref: set, running: list[Running]) -> None:
    cache.check_integrity(holders=[r.new_kv for r in running])
    assert tree_prefixes(cache) == ref
    assert cache.total_size() == len(ref) * cache.page_size
    for r in running:  # a locked prefix keeps its tokens and its blocks
        assert cache.peek_prefix_len(r.seq[:r.prefix_len]) == r.prefix_len
        assert r.node.path_kv() == r.matched_kv


@settings(max_examples=budget.examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=OPS, page_size=st.sampled_from([1, 1, 2, 4]), policy=st.sampled_from(sorted(EVICTION_POLICIES)),
       num_blocks=st.integers(6, 40), check_kv=st.booleans())
def test_radix_cache_matches_brute_force_reference(ops, page_size, policy, num_blocks, check_kv):
    ps = page_size
    alloc = BlockAllocator(num_blocks, ps)
    cache = RadixCache(alloc, page_size=ps, eviction_policy=policy, check_kv=check_kv)
    ref: set = set()
    running: list[Running] = []

    def finish(r: Running) -> None:
        full = len(r.seq) // ps
        kv = (r.matched_kv + r.new_kv)
        res = cache.insert(r.seq, kv[:full])
        running.remove(r)
        assert res.prefix_len >= r.prefix_len
        # duplicates handed back are exactly the new blocks for already cached pages
        assert res.freed == kv[r.prefix_len // ps:res.prefix_len // ps]
        assert res.kv[:r.prefix_len // ps] == r.matched_kv
        if len(kv) > full:
            alloc.free(kv[full:])
        cache.dec_lock_ref(r.node)
        ref.update(prefixes(r.seq, ps))

    for op in ops:
        kind = op[0]
        if kind in ("request", "match"):
            seq = op[1]
            expect = ref_match(ref, seq, ps)
            m = cache.match_prefix(seq)
            assert m.prefix_len == expect
            assert len(m.kv) == expect // ps
            if kind == "request":
                cache.inc_lock_ref(m.last_node)
                need = -(-len(seq) // ps) - len(m.kv)
                if need > alloc.num_free_blocks:
                    before = cache.evictable_size()
                    res = cache.evict((need - alloc.num_free_blocks) * ps)
                    assert res.num_tokens == before - cache.evictable_size()
                    if not res.satisfied:
                        assert cache.evictable_size() == 0
                    for node_id in res.node_ids:
                        assert all(node_id != r.node.id for r in running)
                    ref.intersection_update(tree_prefixes(cache))  # evicted pages leave the reference
                try:
                    new = alloc.allocate(need, owner="R")
                except OutOfBlocks:
                    cache.dec_lock_ref(m.last_node)
                    check(cache, ref, running)
                    continue
                r = Running(list(seq), m.prefix_len, list(m.kv), new, m.last_node)
                running.append(r)
                if not op[2]:
                    finish(r)
        elif kind == "finish":
            if running:
                finish(running[op[1] % len(running)])
        elif kind == "dup_insert":
            seq = op[1]
            full = len(seq) // ps
            if full > alloc.num_free_blocks:
                continue
            cached_before = ref_match(ref, seq, ps)
            kv = alloc.allocate(full, owner="D")
            res = cache.insert(seq, kv)
            assert res.prefix_len == cached_before
            assert res.freed == kv[:cached_before // ps]
            ref.update(prefixes(seq, ps))
        elif kind == "evict":
            before = cache.evictable_size()
            locked_before = {p for r in running for p in prefixes(r.seq[:r.prefix_len], ps)}
            res = cache.evict(op[1])
            assert res.num_tokens == before - cache.evictable_size()
            assert res.satisfied or cache.evictable_size() == 0
            new_ref = tree_prefixes(cache)
            assert new_ref <= ref and locked_before <= new_ref
            assert len(ref - new_ref) * ps == res.num_tokens
            ref = new_ref
        check(cache, ref, running)

    # unlocking more than was locked raises and changes nothing
    for r in list(running):
        finish(r)
    check(cache, ref, running)
    m = cache.match_prefix([0, 1, 2, 3] * 2)
    if m.last_node is not cache.root:
        try:
            cache.dec_lock_ref(m.last_node)
        except KVCacheError:
            pass
        else:
            raise AssertionError("dec_lock_ref on an unlocked node did not raise")
    cache.evict(cache.evictable_size())
    assert cache.total_size() == 0 and alloc.num_free_blocks == num_blocks
    cache.check_integrity(holders=[])
