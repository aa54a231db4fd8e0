"""Unit and regression tests of kvlab.reuse.radix_cache (RadixCache on the paged allocator).

Integrity (tree + allocator, with every running request's own blocks as holders) is
checked after every step.
"""
from __future__ import annotations

import pytest

from kvlab.memory.events import EventLog
from kvlab.memory import BlockAllocator, DoubleFree, KVCacheError, OutOfBlocks
from kvlab.lessons import FOUR_REQUEST_TEXTS, char_tokenize, four_request_example, multi_turn_example
from kvlab.reuse import EVICTION_POLICIES, RadixCache, serve_request


def make(num_blocks: int = 64, page_size: int = 1, policy: str = "lru") -> RadixCache:
    return RadixCache(BlockAllocator(num_blocks, page_size), page_size=page_size, eviction_policy=policy)


def put(cache: RadixCache, tokens: list[int], rid: str = "R") -> list[int]:
    """Insert ``tokens`` the way a finished request does: match, allocate the rest, insert."""
    m = cache.match_prefix(tokens)
    cache.inc_lock_ref(m.last_node)
    ps = cache.page_size
    new = cache.allocator.allocate(len(tokens) // ps - len(m.kv), owner=rid)
    res = cache.insert(tokens, m.kv + new)
    cache.dec_lock_ref(m.last_node)
    cache.check_integrity()
    return res.kv


def shape(cache: RadixCache) -> list[tuple[int, tuple[int, ...]]]:
    """(depth, tokens) of every node, depth first."""
    return [(n.depth, n.tokens) for n in cache.snapshot().nodes]


# --------------------------------------------------------------------- the notes' example
def test_four_request_example_matches_the_notes():
    recs = four_request_example()
    T = FOUR_REQUEST_TEXTS
    a, b = len(T["A"]), len(T["B"])
    c = len(T["R1"]) + len(T["R1 answer"])
    by = {r.name: r for r in recs}
    assert [r.name for r in recs] == ["warm-up", "R1", "R2", "R3", "R4"]
    # R1: hits the warmed system prompt only
    assert (by["R1"].matched_len, by["R1"].prefill_len) == (a, b + len(T["R1"]))
    assert by["R1"].hit_segments == ["A"] and by["R1"].missed_segments == ["B", "C"]
    # R2 and R3: hit A and B, only their own question is missed and prefilled
    for name in ("R2", "R3"):
        r = by[name]
        assert r.matched_len == a + b
        assert r.prefill_len == len(T[name])
        assert r.hit_segments == ["A", "B"] and r.missed_segments == [name]
        assert [s.text for s in r.segments if not s.hit] == [T[name]]
    # R4: root -> A -> B -> C in full, only "人工呢" prefilled
    r4 = by["R4"]
    assert r4.matched_len == a + b + c
    assert r4.prefill_len == len(T["R4"]) == 3
    assert r4.hit_segments == ["A", "B", "C"] and r4.missed_segments == ["R4"]
    assert r4.text.endswith("人工呢")
    # the tree's shape after R4: root -> A -> B -> {C -> R4, R2, R3}
    snap = r4.tree
    lab = r4.node_labels
    kids = lambda nid: sorted(lab[n.id] for n in snap.children(nid))  # noqa: E731
    (na,) = snap.children(0)
    assert lab[na.id] == "A" and len(na.tokens) == a
    (nb,) = snap.children(na.id)
    assert lab[nb.id] == "B" and len(nb.tokens) == b
    assert kids(nb.id) == ["C", "R2", "R3"]
    nc = next(n for n in snap.children(nb.id) if lab[n.id] == "C")
    assert len(nc.tokens) == c and kids(nc.id) == ["R4"]
    assert "".join(map(chr, nc.tokens)) == T["R1"] + T["R1 answer"]
    # after R1 alone: A -> [B + C], one compressed node
    assert sorted(by["R1"].node_labels.values()) == ["A", "B+C"]


def test_four_request_example_without_warm_up_merges_a_and_b():
    recs = four_request_example(warm_system_prompt=False)
    assert [r.name for r in recs] == ["R1", "R2", "R3", "R4"]
    assert recs[0].matched_len == 0
    labels = recs[-1].node_labels
    assert "A+B" in labels.values() and "A" not in labels.values()
    assert recs[-1].hit_segments == ["A", "B", "C"]


def test_four_request_example_with_another_tokenizer_and_pages():
    # a tokenizer that maps two characters to one token: boundaries still line up per part
    def tok(text: str) -> list[int]:
        return [ord(text[i]) * 70000 + (ord(text[i + 1]) if i + 1 < len(text) else 0) for i in range(0, len(text), 2)]

    recs = four_request_example(tokenize=tok)
    assert recs[-1].hit_segments == ["A", "B", "C"] and recs[-1].missed_segments == ["R4"]
    # page_size 4: matches are cut to whole pages, so parts straddle hits and misses
    recs = four_request_example(page_size=4)
    for r in recs:
        assert r.matched_len % 4 == 0
    assert recs[-1].matched_len == (88 // 4) * 4


def test_multi_turn_reuses_the_whole_previous_turn():
    recs = multi_turn_example()
    history = 0
    for i, r in enumerate(recs):
        q = len(r.segments[-1].text)
        assert r.matched_len == history, f"turn {i + 1} should match all earlier turns"
        # only its own question is prefilled (turn 1 also prefills the system prompt)
        assert r.prefill_len == q + (len(FOUR_REQUEST_TEXTS["A"]) if i == 0 else 0)
        assert [s.hit for s in r.segments] == [True] * (len(r.segments) - 1) + [False] or i == 0
        history = len(r.prompt_tokens) + len(r.answer_text)
    assert len(recs) == 3 and recs[-1].tree.nodes[-1].depth == 3


# ---------------------------------------------------------------------------- matching
def test_split_on_partial_match_and_across_node_boundaries():
    cache = make()
    kv1 = put(cache, [1, 2, 3, 4, 5])
    m = cache.match_prefix([1, 2, 3, 9])
    assert (m.prefix_len, m.kv) == (3, kv1[:3])
    assert shape(cache) == [(1, (1, 2, 3)), (2, (4, 5))]
    assert m.last_node.key == [1, 2, 3]
    cache.check_integrity()
    put(cache, [1, 2, 3, 9, 9])
    m = cache.match_prefix([1, 2, 3, 9, 9, 7])  # across the [1 2 3] | [9 9] boundary
    assert m.prefix_len == 5
    assert m.kv[:3] == kv1[:3]
    assert shape(cache) == [(1, (1, 2, 3)), (2, (4, 5)), (2, (9, 9))]
    assert cache.stats.num_splits == 1
    cache.check_integrity()


def test_exact_length_empty_and_miss():
    cache = make()
    kv = put(cache, [5, 6, 7])
    m = cache.match_prefix([5, 6, 7])
    assert (m.prefix_len, m.kv) == (3, kv)
    assert cache.num_nodes == 1  # exact match: no split
    m = cache.match_prefix([])
    assert (m.prefix_len, m.kv, m.last_node) == (0, [], cache.root)
    m = cache.match_prefix([8, 5, 6])
    assert (m.prefix_len, m.last_node) == (0, cache.root)
    assert cache.match_prefix([5, 6]).prefix_len == 2
    cache.check_integrity()


def test_fully_cached_prompt_leaves_its_last_token_to_compute():
    cache = make()
    put(cache, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2, 3, 4], limit=3)
    assert m.prefix_len == 3  # the caller needs the logits of token 4
    assert cache.match_prefix([1], limit=0).prefix_len == 0
    assert cache.match_prefix([], limit=0).prefix_len == 0
    r = serve_request(cache, [1, 2, 3, 4])
    assert (r.matched_len, r.prefill_len) == (3, 1)
    assert r.insert.duplicates == [4]  # the recomputed last token's block was a duplicate: handed back
    assert cache.allocator.ref_count[4] == 0
    cache.check_integrity()
    # page_size 2: 4 cached tokens, cap at 3, cut to 2
    pc = make(page_size=2)
    put(pc, [1, 2, 3, 4])
    assert pc.match_prefix([1, 2, 3, 4], limit=3).prefix_len == 2
    pc.check_integrity()


def test_page_aligned_matching():
    cache = make(page_size=4)
    kv = put(cache, list(range(12)))  # 3 pages
    assert len(kv) == 3
    m = cache.match_prefix(list(range(7)) + [99])
    assert (m.prefix_len, m.kv) == (4, kv[:1])
    assert shape(cache) == [(1, (0, 1, 2, 3)), (2, tuple(range(4, 12)))]
    assert cache.match_prefix(list(range(11))).prefix_len == 8  # partial last page dropped
    cache.check_integrity()
    with pytest.raises(ValueError, match="kv has 2 block"):
        cache.insert(list(range(13)), [0, 1])


def test_match_cut_to_zero_by_page_alignment_is_an_empty_match():
    cache = make(page_size=4)
    put(cache, [1, 2, 3, 4, 5, 6, 7, 8])
    before = shape(cache)
    m = cache.match_prefix([1, 2, 3, 9, 9, 9])  # 3 tokens in common, 0 whole pages
    assert (m.prefix_len, m.kv, m.last_node) == (0, [], cache.root)
    assert shape(cache) == before  # no empty node from a split at 0
    assert cache.match_prefix([1, 2]).prefix_len == 0  # shorter than one page
    cache.check_integrity()


def test_children_keyed_by_first_token_match_is_linear():
    cache = make(num_blocks=4096)
    for t in range(200):  # 200 children of the root
        put(cache, [t, 1000 + t, 2000 + t])
    m = cache.match_prefix([150, 1150, 2150, 7])
    assert m.prefix_len == 3 and m.last_node.key == [150, 1150, 2150]
    cache.check_integrity()


# -------------------------------------------------------------------------------- insert
def test_insert_returns_prefix_len_and_hands_back_duplicate_kv():
    cache = make()
    a = cache.allocator
    kv1 = a.allocate(4, owner="R1")
    assert cache.insert([1, 2, 3, 4], kv1).prefix_len == 0
    kv2 = a.allocate(5, owner="R2")  # R2 computed the same prefix again, in the same step
    res = cache.insert([1, 2, 3, 4, 5], kv2)
    assert res.prefix_len == 4
    assert res.freed == kv2[:4]
    assert res.kv == kv1 + kv2[4:]
    for b in res.freed:
        assert a.ref_count[b] == 0  # handed back, not leaked
    # no request may still point at the freed slots: the canonical kv is what R2 keeps
    assert not set(res.kv) & set(res.freed)
    assert cache.match_prefix([1, 2, 3, 4, 5]).kv == res.kv
    assert cache.stats.duplicate_tokens == 4
    cache.check_integrity(holders=[])


def test_insert_of_the_trees_own_blocks_frees_nothing():
    cache = make()
    kv = put(cache, [1, 2, 3])
    res = cache.insert([1, 2, 3], kv)
    assert (res.prefix_len, res.freed, res.kv) == (3, [], kv)
    cache.check_integrity()


def test_cache_unfinished_request_relock_after_duplicate():
    """A running request inserts its prefix (chunked prefill) and keeps going with the canonical kv."""
    cache = make()
    a = cache.allocator
    put(cache, [1, 2, 3, 4])
    mine = a.allocate(6, owner="R")  # R did not match (e.g. arrived in the same batch)
    res = cache.insert([1, 2, 3, 4, 5, 6], mine)
    m = cache.match_prefix([1, 2, 3, 4, 5, 6])
    cache.inc_lock_ref(m.last_node)
    assert m.kv == res.kv
    assert all(a.ref_count[b] == 1 for b in res.kv)
    cache.check_integrity(holders=[])
    cache.dec_lock_ref(m.last_node)
    cache.check_integrity(holders=[])


# ------------------------------------------------------------------------------- locking
def test_lock_covers_the_matched_node_and_every_ancestor():
    cache = make()
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 7, 8])
    m = cache.match_prefix([1, 2, 3, 4])
    path = []
    n = m.last_node
    while n is not cache.root:
        path.append(n)
        n = n.parent
    assert len(path) == 2
    assert cache.inc_lock_ref(m.last_node) == -4
    assert all(n.lock_ref == 1 for n in path)
    assert (cache.evictable_size(), cache.protected_size()) == (2, 4)
    res = cache.evict(100)
    assert res.num_tokens == 2 and not res.satisfied and res.short_by == 98
    assert cache.match_prefix([1, 2, 3, 4]).prefix_len == 4
    cache.check_integrity()
    assert cache.dec_lock_ref(m.last_node) == 4
    assert (cache.evictable_size(), cache.protected_size()) == (4, 0)
    cache.check_integrity()


def test_unlock_more_than_locked_raises_and_changes_nothing():
    cache = make()
    put(cache, [1, 2, 3])
    m = cache.match_prefix([1, 2, 3])
    with pytest.raises(KVCacheError, match=f"node {m.last_node.id} is not locked"):
        cache.dec_lock_ref(m.last_node)
    cache.inc_lock_ref(m.last_node)
    cache.dec_lock_ref(m.last_node)
    st = (m.last_node.lock_ref, cache.evictable_size(), cache.protected_size(), len(cache.log))
    with pytest.raises(KVCacheError):
        cache.dec_lock_ref(m.last_node)
    assert st == (m.last_node.lock_ref, cache.evictable_size(), cache.protected_size(), len(cache.log))
    assert m.last_node.lock_ref == 0
    cache.check_integrity()


def test_unlock_of_an_ancestor_locked_only_through_a_child_raises():
    cache = make()
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 9])
    m = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(m.last_node)
    parent = m.last_node.parent
    assert parent.lock_ref == 1
    with pytest.raises(KVCacheError):
        cache.dec_lock_ref(parent)  # its lock belongs to the child's request
    cache.check_integrity()


def test_split_node_inherits_lock_count_and_access_time():
    cache = make()
    put(cache, [1, 2, 3, 4])
    m = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(m.last_node)
    t = m.last_node.last_access_time
    put(cache, [1, 2, 9])  # splits the locked node [1 2 3 4] at 2
    new = m.last_node.parent
    assert new is not cache.root and new.key == [1, 2]
    assert new.lock_ref == m.last_node.lock_ref == 1
    assert new.last_access_time >= t
    assert cache.protected_size() == 4 and cache.evictable_size() == 1
    cache.check_integrity()
    assert cache.evict(10).num_tokens == 1  # only [9]; the split, locked path survives
    cache.dec_lock_ref(m.last_node)  # unlock walks through the new node
    assert new.lock_ref == 0 and cache.protected_size() == 0
    cache.check_integrity()


def test_split_during_match_keeps_access_time_of_the_untouched_tail():
    cache = make()
    put(cache, [1, 2, 3, 4])
    tail = cache.match_prefix([1, 2, 3, 4]).last_node
    t = tail.last_access_time
    cache.match_prefix([1, 2, 8])  # splits; the new node [1 2] is touched now
    assert tail.key == [3, 4] and tail.last_access_time == t
    assert tail.parent.last_access_time > t
    cache.check_integrity()


def test_evictable_size_does_not_count_shared_tokens_twice():
    cache = make()
    put(cache, [1, 2, 3, 4])
    put(cache, [1, 2, 5, 6])
    put(cache, [1, 2, 7])
    assert cache.evictable_size() == 2 + 2 + 2 + 1 == cache.allocator.num_used_blocks
    m = cache.match_prefix([1, 2, 3, 4])
    cache.inc_lock_ref(m.last_node)
    m2 = cache.match_prefix([1, 2, 5, 6])
    cache.inc_lock_ref(m2.last_node)
    assert cache.protected_size() == 6 and cache.evictable_size() == 1
    cache.check_integrity()


# ------------------------------------------------------------------------------ eviction
def _lru_setup(policy: str) -> RadixCache:
    cache = make(policy=policy)
    put(cache, [1, 2, 3])          # leaf [1 2 3] (later split)
    put(cache, [1, 2, 9, 9, 9])    # leaf [9 9 9]
    put(cache, [5])                # leaf [5]
    cache.match_prefix([1, 2, 3])  # refresh [1 2] and [3]
    return cache


def test_eviction_order_lru():
    cache = _lru_setup("lru")
    res = cache.evict(1)
    assert res.num_tokens == 3  # the least recently used leaf, [9 9 9], goes whole
    assert [s for s in cache.snapshot().sequences()] == [(1, 2, 3), (5,)]
    res = cache.evict(1)
    assert res.num_tokens == 1 and cache.snapshot().sequences() == [(1, 2, 3)]
    res = cache.evict(2)  # [3], then its parent [1 2] becomes a leaf and goes too
    assert res.num_tokens == 3 and cache.num_nodes == 0
    assert cache.allocator.num_free_blocks == 64
    cache.check_integrity()


def test_eviction_order_fewest_tokens():
    cache = _lru_setup("fewest_tokens")
    assert cache.evict(1).num_tokens == 1  # [5] or [3]: one token; [5] is older
    assert cache.snapshot().sequences() == [(1, 2, 3), (1, 2, 9, 9, 9)]
    assert cache.evict(1).num_tokens == 1  # [3]
    assert cache.snapshot().sequences() == [(1, 2, 9, 9, 9)]
    cache.check_integrity()


def test_eviction_order_lfu():
    cache = _lru_setup("lfu")
    for _ in range(3):
        cache.match_prefix([5])
    cache.match_prefix([1, 2, 9, 9, 9])
    assert cache.evict(1).num_tokens == 1  # [3]: hit once by match, [9 9 9] twice
    assert cache.evict(1).num_tokens == 3  # then [9 9 9]
    assert cache.snapshot().sequences() == [(1, 2), (5,)]
    cache.check_integrity()


def test_fewest_tokens_sees_a_leaf_shortened_by_a_split():
    cache = make(policy="fewest_tokens")
    put(cache, [1, 2, 3, 4, 5, 6])
    put(cache, [7, 8])
    put(cache, [1, 2, 3, 4, 5, 9])  # leaf [6] is now 1 token long
    assert cache.evict(1).num_tokens == 1
    assert sorted(cache.snapshot().sequences()) == [(1, 2, 3, 4, 5, 9), (7, 8)]
    cache.check_integrity()


def test_evict_more_than_evictable_frees_what_it_can():
    cache = make()
    put(cache, [1, 2, 3])
    put(cache, [4, 5])
    m = cache.match_prefix([1, 2, 3])
    cache.inc_lock_ref(m.last_node)
    res = cache.evict(1000)
    assert (res.requested, res.num_tokens, res.satisfied, res.short_by) == (1000, 2, False, 998)
    assert cache.evictable_size() == 0 and cache.protected_size() == 3
    assert cache.allocator.num_used_blocks == 3
    cache.check_integrity()
    assert cache.evict(0).num_tokens == 0
    assert cache.log[-1].kind == "evict"


def test_policies_are_registered_and_switchable():
    assert {"lru", "fewest_tokens", "lfu"} <= set(EVICTION_POLICIES)
    cache = _lru_setup("lru")
    cache.set_eviction_policy("fewest_tokens")
    cache.check_integrity()
    assert cache.evict(1).num_tokens == 1
    with pytest.raises(ValueError, match="'mru'"):
        make(policy="mru")


def test_serve_request_evicts_when_the_pool_is_short():
    cache = make(num_blocks=10)
    serve_request(cache, [1, 2, 3, 4, 5, 6], rid="R1")
    r = serve_request(cache, [7, 8, 9, 10, 11, 12], rid="R2")
    assert r.evicted_tokens >= 2
    cache.check_integrity(holders=[])
    with pytest.raises(OutOfBlocks):
        serve_request(cache, list(range(20, 40)), rid="big")
    assert cache.protected_size() == 0  # the failed request released its lock
    cache.check_integrity(holders=[])


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("tokens, msg", [
    ([1, "x", 3], r"tokens\[1\] = 'x'"),
    ([1, 2.0], r"tokens\[1\] = 2.0"),
    ([1, None], r"tokens\[1\] = None"),
    ("abc", "str"),
])
def test_non_int_tokens_raise_and_change_nothing(tokens, msg):
    cache = make()
    put(cache, [1, 2, 3])
    before = (shape(cache), cache.allocator.state(), len(cache.log), cache.stats.num_matches)
    for call in (lambda: cache.match_prefix(tokens), lambda: cache.insert(tokens, [9, 9, 9]),
                 lambda: cache.match_prefix(tokens, limit=1)):
        with pytest.raises(TypeError, match=msg):
            call()
    assert before == (shape(cache), cache.allocator.state(), len(cache.log), cache.stats.num_matches)


def test_negative_token_raises():
    with pytest.raises(ValueError, match=r"tokens\[0\] = -1"):
        make().match_prefix([-1])


def test_bad_kv_raises_and_changes_nothing():
    cache = make(num_blocks=16)
    put(cache, [1, 2, 3])
    a = cache.allocator
    mine = a.allocate(2, owner="R")
    before = (shape(cache), a.state(), len(cache.log))
    with pytest.raises(ValueError, match="kv has 1 block"):
        cache.insert([1, 2, 3, 4, 5], [0])
    with pytest.raises(TypeError, match=r"kv\[1\] = 'b'"):
        cache.insert([1, 2], [0, "b"])
    with pytest.raises(KVCacheError, match="block 0 is already owned by the tree"):
        cache.insert([7, 8], [0, mine[0]])
    with pytest.raises(KVCacheError, match="is free"):
        cache.insert([7, 8], [mine[0], 15])
    with pytest.raises(KVCacheError, match="unknown block id 99"):
        cache.insert([7, 8], [mine[0], 99])
    with pytest.raises(KVCacheError, match="appears twice"):
        cache.insert([7, 8], [mine[0], mine[0]])
    assert before == (shape(cache), a.state(), len(cache.log))
    cache.check_integrity(holders=[mine])


def test_same_block_freed_twice_in_one_insert_is_caught():
    cache = make(num_blocks=16)
    put(cache, [1, 2])
    a = cache.allocator
    (dup,) = a.allocate(1, owner="R")
    before = (shape(cache), a.state())
    with pytest.raises(DoubleFree, match=f"block {dup}"):
        cache.insert([1, 2], [dup, dup])  # both cached positions get the same duplicate block
    assert before == (shape(cache), a.state())
    cache.check_integrity(holders=[[dup]])


def test_lock_of_a_foreign_or_evicted_node_raises():
    cache = make()
    put(cache, [1, 2])
    node = cache.match_prefix([1, 2]).last_node
    cache.evict(10)
    with pytest.raises(KVCacheError, match="not in this tree"):
        cache.inc_lock_ref(node)
    with pytest.raises(TypeError):
        cache.inc_lock_ref("node")
    with pytest.raises(TypeError):
        cache.evict(1.5)
    with pytest.raises(ValueError):
        cache.evict(-1)
    cache.check_integrity()


def test_constructor_checks_page_size():
    with pytest.raises(ValueError, match="block_size 4 != page_size 1"):
        RadixCache(BlockAllocator(8, 4), page_size=1)
    with pytest.raises(ValueError, match="page_size"):
        RadixCache(BlockAllocator(8, 1), page_size=0)


# ----------------------------------------------------------------------- events and stats
def test_events_share_the_allocators_log_and_stats_add_up():
    log = EventLog()
    cache = RadixCache(BlockAllocator(32, 1, log))
    serve_request(cache, char_tokenize("abcd"), char_tokenize("xy"), rid="R1")
    serve_request(cache, char_tokenize("abz"), rid="R2")
    cache.evict(1)
    kinds = log.kinds()
    for k in ("match", "lock", "admit", "append", "insert", "unlock", "split", "evict", "free_seq", "cache"):
        assert k in kinds, k
    assert [e.seq_id for e in log if e.kind == "match"] == ["R1", "R2"]
    s = cache.stats
    assert (s.num_matches, s.hit_tokens, s.missed_tokens) == (2, 2, 4 + 1)
    assert s.hit_rate == pytest.approx(2 / 7)
    assert s.prefill_tokens_saved == 2
    assert cache.log is log


def test_peek_changes_nothing():
    cache = make()
    put(cache, [1, 2, 3])
    before = (shape(cache), len(cache.log), cache.stats.num_matches, cache._clock)
    assert cache.peek_prefix_len([1, 2, 9]) == 2
    assert before == (shape(cache), len(cache.log), cache.stats.num_matches, cache._clock)


def test_check_kv_off_skips_only_the_ownership_checks():
    cache = RadixCache(BlockAllocator(16, 1), check_kv=False)
    kv = put(cache, [1, 2, 3])
    with pytest.raises(ValueError, match="kv has 1 block"):
        cache.insert([4, 5], [7])
    with pytest.raises(KVCacheError, match="unknown block id 99"):
        cache.insert([4, 5], [7, 99])
    cache.insert([4], [kv[0]])  # a tree block passed as new KV: not caught at insert...
    with pytest.raises(AssertionError, match="held by two nodes"):
        cache.check_integrity()  # ...but by the integrity check


def test_four_request_example_with_the_bundled_tokenizer():
    import tokenizers  # noqa: F401  (installed by the set-up: a missing one fails)
    from kvlab.compute.tokenizer import load_bundled_tokenizer

    tok = load_bundled_tokenizer()  # ships in assets/: failing to load it is a failure, not a skip
    recs = four_request_example(tokenize=tok.encode, detokenize=tok.decode)
    r4 = recs[-1]
    assert r4.hit_segments == ["A", "B", "C"] and r4.missed_segments == ["R4"]
    assert r4.prefill_len == len(tok.encode(FOUR_REQUEST_TEXTS["R4"]))
    assert [s.text for s in recs[2].segments if not s.hit] == [FOUR_REQUEST_TEXTS["R2"]]
    assert sorted(r4.node_labels.values()) == ["A", "B", "C", "R2", "R3", "R4"]


class _CountingInt(int):
    """An int token that counts how often it is compared."""

    compares = 0

    def __eq__(self, other):
        _CountingInt.compares += 1
        return int.__eq__(self, other)

    def __ne__(self, other):
        _CountingInt.compares += 1
        return int.__ne__(self, other)

    __hash__ = int.__hash__


def test_match_costs_linear_token_comparisons_not_times_children():
    C = _CountingInt
    cache = make(num_blocks=20000)
    for t in range(300):  # 300 children under a shared 50-token prefix, each 40 tokens long
        put(cache, [C(x) for x in [7] * 50 + [1000 + t] + list(range(39))])
    n = 50 + 40
    query = [C(x) for x in [7] * 50 + [1299] + list(range(38)) + [5]]
    C.compares = 0
    m = cache.match_prefix(query)
    assert m.prefix_len == n - 1
    assert C.compares <= 2 * n + 64, C.compares  # O(n), not O(n x 300 children)
    cache.check_integrity()


def test_a_split_refreshes_only_the_part_the_request_used():
    """LRU at a split (documented in kvlab.reuse.radix_cache): the upper part of a split node is
    on the request's path and becomes just-used; the lower remainder keeps its own age. (SGLang's
    split marks the remainder as just used too; kvlab lets LRU see that nobody used it.)"""
    a = BlockAllocator(16, 1)
    cache = RadixCache(a)
    cache.insert([1, 2, 3, 4], a.allocate(4))          # t1
    cache.insert([9], a.allocate(1))                   # t2
    m = cache.match_prefix([1, 2, 7])                  # t3: splits [1 2 3 4] into [1 2] -> [3 4]
    upper = m.last_node
    lower = next(iter(upper.children.values()))
    assert (upper.key, lower.key) == ([1, 2], [3, 4])
    assert upper.last_access_time > lower.last_access_time
    ev = cache.evict(1)                                # LRU: the untouched remainder [3 4] goes first
    assert ev.num_tokens == 2 and lower.parent is None
    assert cache.peek_prefix_len([9]) == 1              # [9], used after [3 4] was last used, stays
    cache.check_integrity()


def test_numpy_block_ids_are_plain_ints_in_the_tree_and_evict_frees_them():
    """Issue 15 item 2: numpy ids used to enter the tree as they were and break eviction."""
    import numpy as np
    a = BlockAllocator(8, 1)
    c = RadixCache(a)
    c.insert([1, 2, 3], [np.int64(b) for b in a.allocate(3)])
    assert all(type(b) is int for n in c.iter_nodes() for b in n.value)
    assert c.evict(3).num_tokens == 3
    assert c.total_size() == 0 and a.num_used_blocks == 0
    c.check_integrity()
    with pytest.raises(TypeError, match=r"kv\[0\] = True"):
        c.insert([4], [True])
    c.check_integrity()


def test_default_integrity_check_catches_a_block_nobody_holds():
    a = BlockAllocator(8, 1)
    c = RadixCache(a)
    c.insert([1, 2], a.allocate(2))
    a.allocate(1)  # a leak: used, but neither the tree nor any table holds it
    with pytest.raises(AssertionError, match="ref_count != holders"):
        c.check_integrity()
    c.check_integrity(holders=[[2]])  # ... unless the caller says who holds it


def test_pretty_and_snapshot_walk_a_5000_deep_tree_without_recursion():
    """Issue 15 item 3: a tree 5,000 nodes deep (every prefix matched plus a different token)."""
    depth = 5000
    a = BlockAllocator(2 * depth + 2, 1)
    c = RadixCache(a)
    seq = list(range(1, depth + 1))
    c.insert(seq, a.allocate(depth))
    for i in range(depth - 1, 0, -1):  # branch off after every prefix, deepest first (each walk is short)
        c.insert(seq[:i] + [depth + 1], c.match_prefix(seq[:i]).kv + a.allocate(1))
    text = c.pretty()
    assert text.count("\n") == c.num_nodes and c.num_nodes >= depth
    assert len(c.snapshot().sequences()) == depth
    c.check_integrity()
