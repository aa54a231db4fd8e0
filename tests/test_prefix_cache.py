"""Tests of kvlab.reuse.block_hash_cache (vLLM-style block-hash prefix caching) and its comparison
with the radix tree. Integrity, with every running block table as holder, after every step."""
from __future__ import annotations

import budget
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.memory.events import EventLog
from kvlab.memory import BlockAllocator, DoubleFree, KVCacheError, OutOfBlocks, UnknownBlock
from kvlab.reuse.block_hash_cache import ROOT_HASH, BlockHashCache, hash_block_tokens
from kvlab.reuse import RadixCache, serve_request


def run(pc: BlockHashCache, seq: list[int], rid: str = "R", tables: list | None = None) -> list[int]:
    """One request: match, allocate, cache its full blocks; returns its table (still held)."""
    m = pc.match_for_prefill(seq, rid)
    table = pc.allocate(len(seq), m, rid)
    pc.cache_full_blocks(seq, table, rid, block_hashes=m.block_hashes)
    pc.check_integrity(holders=(tables or []) + [table])
    return table


def test_hashes_are_chained_over_full_blocks_only():
    pc = BlockHashCache(8, 4)
    h = pc.compute_block_hashes(list(range(10)))
    assert len(h) == 2
    assert h[0] == hash_block_tokens(ROOT_HASH, [0, 1, 2, 3])
    assert h[1] == hash_block_tokens(h[0], [4, 5, 6, 7])
    other = pc.compute_block_hashes([9, 1, 2, 3, 4, 5, 6, 7])
    assert other[1] != h[1]  # same block tokens, different parent: different hash


def test_reuse_of_full_blocks_only_and_hit_stats():
    pc = BlockHashCache(16, 4)
    t1 = run(pc, list(range(10)))  # 2 full blocks cached, third partial
    pc.free_blocks(t1)
    m = pc.match_prefix(list(range(10)) + [50, 51])
    assert (m.prefix_len, m.block_ids) == (8, t1[:2])  # the partial block is never shared
    m = pc.match_prefix([0, 1, 2, 3, 4, 5, 9, 9])
    assert m.prefix_len == 4
    s = pc.stats
    assert s.hit_tokens == 8 + 4 and s.num_matches == 3
    assert 0 < s.hit_rate < 1 and s.prefill_tokens_saved == s.hit_tokens
    pc.check_integrity(holders=[])


def test_a_hit_on_a_free_cached_block_takes_it_out_of_the_queue():
    pc = BlockHashCache(6, 2)
    t1 = run(pc, [1, 2, 3, 4, 5])
    pc.free_blocks(t1)
    assert pc.evictable_size() == 4 and pc.protected_size() == 0
    t2 = run(pc, [1, 2, 3, 4, 7])
    assert t2[:2] == t1[:2]
    assert all(pc.blocks[b].ref_cnt == 1 for b in t2)
    assert t2[0] not in pc.free_block_queue
    assert pc.protected_size() == 4 and pc.evictable_size() == 0
    t3 = run(pc, [1, 2, 3, 4, 8], tables=[t2])
    assert pc.blocks[t1[0]].ref_cnt == 2
    pc.free_blocks(t2)
    pc.free_blocks(t3)
    pc.check_integrity(holders=[])


def test_block_hash_entry_is_dropped_when_its_block_is_reused():
    pc = BlockHashCache(3, 2)
    t1 = run(pc, [1, 2, 3, 4])
    assert t1 == [0, 1]
    pc.free_blocks(t1)  # both cached and free; queue: 2, then 1 (the tail of t1), then 0
    assert list(pc.free_block_queue) == [2, 1, 0]
    old = pc.blocks[1].block_hash
    t2 = run(pc, [7, 7, 8])  # needs 2 blocks: 2 (never cached), then 1 (cached [3 4]: evicted)
    assert t2 == [2, 1]
    assert old not in pc.cached_block_hash_to_block  # no stale entry pointing at reused block 1
    assert pc.blocks[1].block_hash is None or pc.blocks[1].token_ids == (7, 7)
    assert pc.stats.evicted_blocks == 1
    assert pc.match_prefix([1, 2, 3, 4, 9]).block_ids == [0]  # [1 2] still cached, [3 4] gone
    pc.check_integrity(holders=[t2])


def test_two_requests_with_one_prefix_in_one_step():
    pc = BlockHashCache(8, 2)
    seq = [1, 2, 3, 4, 5]
    m1, m2 = pc.match_for_prefill(seq), pc.match_for_prefill(seq)  # both miss
    t1 = pc.allocate(len(seq), m1, "R1")
    t2 = pc.allocate(len(seq), m2, "R2")
    assert pc.cache_full_blocks(seq, t1) == 2
    assert pc.cache_full_blocks(seq, t2) == 0  # same content: the first copy stays the cached one
    assert pc.stats.duplicate_blocks == 2
    pc.check_integrity(holders=[t1, t2])
    pc.free_blocks(t1)
    pc.free_blocks(t2)
    pc.check_integrity(holders=[])
    assert pc.match_prefix(seq).block_ids == t1[:2]


def test_exact_block_boundary_prompt_leaves_a_token_to_compute():
    pc = BlockHashCache(8, 4)
    pc.free_blocks(run(pc, list(range(8))))
    m = pc.match_for_prefill(list(range(8)))
    assert m.prefix_len == 4  # not 8: the last token must be computed (logits)
    assert pc.match_prefix(list(range(8))).prefix_len == 8
    table = pc.allocate(8, m)
    assert len(table) == 2 and pc.blocks[table[1]].ref_cnt == 1
    pc.check_integrity(holders=[table])


def test_allocate_is_all_or_nothing():
    pc = BlockHashCache(4, 2)
    t1 = run(pc, [1, 2, 3, 4])
    pc.free_blocks(t1)
    m = pc.match_for_prefill([1, 2, 3, 4, 5, 6, 7, 8, 9])  # 2 hits, both in the free queue
    before = pc.state()
    with pytest.raises(OutOfBlocks):
        pc.allocate(9, m)  # 3 new blocks, only 2 not counting the hits
    assert before == pc.state()
    table = pc.allocate(8, m)
    assert pc.num_free_blocks == 0
    pc.check_integrity(holders=[table])


def test_bad_input_raises_and_changes_nothing():
    pc = BlockHashCache(8, 2)
    t = run(pc, [1, 2, 3, 4])
    before = pc.state()
    with pytest.raises(TypeError, match=r"tokens\[1\] = 'a'"):
        pc.match_prefix([1, "a"])
    with pytest.raises(DoubleFree, match="block"):
        pc.free_blocks([t[0], t[0]])  # the same block twice in one call
    with pytest.raises(UnknownBlock):
        pc.free_blocks([99])
    with pytest.raises(ValueError, match="block_ids has 1"):
        pc.cache_full_blocks([1, 2, 3, 4], t[:1])
    with pytest.raises(KVCacheError, match="is free"):
        pc.cache_full_blocks([5, 6], [7])
    assert before == pc.state()
    pc.free_blocks(t)
    with pytest.raises(DoubleFree):
        pc.free_blocks(t)
    pc.check_integrity(holders=[])


def test_evict_drops_lru_hashes_and_says_when_short():
    pc = BlockHashCache(8, 2)
    t1 = run(pc, [1, 2, 3, 4])
    t2 = run(pc, [5, 6, 7, 8], tables=[t1])
    pc.free_blocks(t1)
    res = pc.evict(100)
    assert (res.num_tokens, res.satisfied) == (4, False)  # t2's blocks are in use
    assert pc.match_prefix([1, 2, 3, 4]).prefix_len == 0
    assert pc.match_prefix([5, 6, 7, 8]).prefix_len == 4
    pc.check_integrity(holders=[t2])


def test_events_and_shared_log():
    log = EventLog()
    pc = BlockHashCache(8, 2, log)
    pc.free_blocks(run(pc, [1, 2, 3]))
    assert log.kinds() == ["match", "allocate", "insert", "free"]


def test_radix_shares_at_token_granularity_block_hash_at_block_granularity():
    """The same trace on both: the radix tree reuses 37 of 37 shared tokens, the block-hash
    cache only whole blocks (32 with block_size 16)."""
    shared = list(range(37))
    r = RadixCache(BlockAllocator(256, 1))
    serve_request(r, shared + [1000, 1001])
    rec = serve_request(r, shared + [2000, 2001])
    pc = BlockHashCache(64, 16)
    pc.free_blocks(run(pc, shared + [1000, 1001]))
    m = pc.match_for_prefill(shared + [2000, 2001])
    assert rec.matched_len == 37
    assert m.prefix_len == 32
    r.check_integrity(holders=[])
    pc.check_integrity(holders=[])


def test_a_stale_match_is_refused():
    pc = BlockHashCache(2, 2)
    pc.free_blocks(run(pc, [1, 2, 3, 4]))
    m = pc.match_for_prefill([1, 2, 3, 4, 5])  # hits both blocks
    assert m.prefix_len == 4
    pc.free_blocks(run(pc, [8, 8, 9, 9]))  # reuses (and re-caches) both blocks meanwhile
    before = pc.state()
    with pytest.raises(KVCacheError, match="stale"):
        pc.allocate(5, m)
    assert before == pc.state()
    pc.check_integrity(holders=[])


SEQ = st.tuples(st.integers(0, 2), st.integers(0, 9), st.lists(st.integers(0, 3), max_size=5)).map(
    lambda t: [[0, 1, 2, 3, 0, 1, 2, 3, 0], [0, 1, 2, 0, 0, 1, 3, 3], [1, 1, 1, 1, 2, 2, 2, 2]][t[0]][:t[1]] + t[2])


@settings(max_examples=budget.examples(200), deadline=None)
@given(ops=st.lists(st.tuples(st.sampled_from(["run", "hold", "finish", "evict"]), SEQ, st.integers(0, 7)),
                    max_size=30),
       block_size=st.sampled_from([1, 2, 4]), num_blocks=st.integers(4, 24))
def test_block_hash_cache_properties(ops, block_size, num_blocks):
    """Every hit is sound (the blocks hold exactly the query's tokens), a sequence just cached
    is found in full, and ref counts equal the running tables after every step."""
    pc = BlockHashCache(num_blocks, block_size)
    running: list[list[int]] = []
    for kind, seq, k in ops:
        if kind in ("run", "hold"):
            m = pc.match_prefix(seq)
            for i, b in enumerate(m.block_ids):
                assert pc.blocks[b].token_ids == tuple(seq[i * block_size:(i + 1) * block_size])
            try:
                table = pc.allocate(len(seq), m)
            except OutOfBlocks:
                pc.check_integrity(holders=running)
                continue
            pc.cache_full_blocks(seq, table, block_hashes=m.block_hashes)
            assert pc.match_prefix(seq, record_stats=False).prefix_len == len(seq) // block_size * block_size
            if kind == "hold":
                running.append(table)
            else:
                pc.free_blocks(table)
        elif kind == "finish" and running:
            pc.free_blocks(running.pop(k % len(running)))
        elif kind == "evict":
            pc.evict(k)
        pc.check_integrity(holders=running)
    for t in running:
        pc.free_blocks(t)
    pc.check_integrity(holders=[])
    assert pc.num_free_blocks == num_blocks


def test_a_key_made_by_plus_whose_matched_part_was_changed_is_refused():
    """``m.tokens.plus(answer)`` changed by the caller in its matched part before caching: the
    cache compares that part with the matched tokens (not trusting the key's origin): ValueError,
    nothing changed, so no block is hashed as tokens it does not hold."""
    pc = BlockHashCache(16, 2)
    m = pc.match_for_prefill([1, 2, 3, 4, 5], "A")
    table = pc.allocate(7, m, "A")
    key = m.tokens.plus([6, 7])
    key[1] = 9
    before = pc.state()
    with pytest.raises(ValueError, match="do not start with"):
        pc.cache_full_blocks(key, table, "A", block_hashes=m.block_hashes)
    assert pc.state() == before


def test_the_matched_tokens_plus_the_answer_are_cached_and_a_key_that_does_not_extend_them_is_refused():
    """``cache_full_blocks(match.tokens.plus(answer), ...)``: only the answer is checked; a key that
    differs from the matched tokens is a ValueError with nothing changed."""
    from kvlab.reuse.radix_cache import RadixKey
    pc = BlockHashCache(16, 2)
    m = pc.match_for_prefill([1, 2, 3, 4, 5], "A")
    table = pc.allocate(7, m, "A")
    before = pc.state()
    with pytest.raises(ValueError, match="do not start with"):
        pc.cache_full_blocks(RadixKey([1, 9, 3, 4, 5, 6, 7]), table, "A", block_hashes=m.block_hashes)
    with pytest.raises(TypeError, match=r"tokens\[5\] = 6.0"):
        m.tokens.plus([6.0, 7])
    assert pc.state() == before
    assert pc.cache_full_blocks(m.tokens.plus([6, 7]), table, "A", block_hashes=m.block_hashes) == 3
    pc.free_blocks(table, "A")
    pc.check_integrity()
    assert pc.match_for_prefill([1, 2, 3, 4, 5, 6, 9], "B").prefix_len == 6
