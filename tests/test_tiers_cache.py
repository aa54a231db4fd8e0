"""The tiered radix cache (pure Python): write policies, load-back, host eviction, the disk tier's
misses, bad inputs, and random workloads whose every transition is a legal lifecycle edge."""
from __future__ import annotations

import budget
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvlab.memory.block_pool import BlockAllocator, KVCacheError, OutOfBlocks
from kvlab.reuse.cache_manager import CacheManager, serve_request
from kvlab.reuse.hicache_manager import HiCacheManager, make_cache_manager
from kvlab.reuse.hicache_storage import MemoryStorage, page_keys
from kvlab.reuse.hiradix_cache import HiRadixCache
from kvlab.reuse.lifecycle import replay


def _serve(cm, sid, prompt, out=()):
    a = cm.admit(sid, prompt, len(prompt) + len(out))
    assert a is not None
    cm.cache_finished_req(sid, list(prompt) + list(out))
    cm.check_integrity()
    return a


def _keys(tokens, page_size=1):
    return page_keys(tokens, page_size, "")  # MemoryStorage's default fingerprint


def _node(cm, first):
    return cm.tree.root.children[first]


def test_write_through_copies_at_insert_and_keeps_evicted_pages_on_the_host():
    cm = HiCacheManager(4, 1, host_ratio=2, write_policy="write_through")
    _serve(cm, "R1", [1, 2, 3])
    assert [t.kind for t in cm.take_transfers()] == ["write"]
    assert cm.tree.placement(_node(cm, 1)) == "both"
    _serve(cm, "R2", [7, 8, 9])  # R1's pages leave the device, stay on the host
    assert cm.tree.placement(_node(cm, 1)) == "host" and cm.tree.host_size() == 6
    a = _serve(cm, "R3", [1, 2, 3, 4])
    assert a.prefix_len == 3 and cm.tier_stats.loaded_tokens == 3 and cm.tier_stats.host_hit_tokens == 3
    kinds = [t.kind for t in cm.take_transfers()]
    assert kinds.count("load") == 1
    assert cm.tree.placement(_node(cm, 1)) == "both"


def test_write_back_copies_only_on_eviction():
    cm = HiCacheManager(4, 1, host_ratio=2, write_policy="write_back")
    _serve(cm, "R1", [1, 2, 3])
    assert cm.take_transfers() == [] and cm.tree.placement(_node(cm, 1)) == "device"
    _serve(cm, "R2", [7, 8, 9])
    t = cm.take_transfers()
    assert [x.kind for x in t] == ["write"] and cm.tree.placement(_node(cm, 1)) == "host"
    assert _serve(cm, "R3", [1, 2, 3, 5]).prefix_len == 3


def test_selective_write_through_counts_inserts_as_sglang_does():
    """SGLang's inc_hit_count runs at insert (hiradix_cache.py ``_insert_helper``), threshold 2: a
    node is backed up when the second request caches it. kvlab used to count matches and waited
    for a third request; a request counts once however often it inserts (cache_unfinished_req)."""
    cm = HiCacheManager(16, 1, host_ratio=2, write_policy="write_through_selective")
    assert cm.tree.write_through_threshold == 2
    a = cm.admit("R1", [1, 2, 3, 4])
    cm.cache_unfinished_req("R1", [1, 2, 3, 4])   # the engine caches the prompt after prefill ...
    cm.cache_finished_req("R1", [1, 2, 3, 4])     # ... and again at the end: still one request
    assert a is not None and cm.take_transfers() == []
    _serve(cm, "R2", [1, 2, 3, 4, 5])  # the second request that inserts [1 2 3 4]: backed up now
    assert [t.kind for t in cm.take_transfers()] == ["write"]
    assert cm.tree.placement(_node(cm, 1)) == "both"
    assert cm.tree.placement(_node(cm, 1).children[5]) == "device"  # [5]: inserted once


def test_without_a_host_copy_eviction_drops_and_the_prefix_is_recomputed():
    cm = HiCacheManager(4, 1, num_host_blocks=1, write_policy="write_through")  # too small for a 3-page node
    _serve(cm, "R1", [1, 2, 3])
    _serve(cm, "R2", [7, 8, 9])
    assert 1 not in cm.tree.root.children
    assert _serve(cm, "R3", [1, 2, 3, 4]).prefix_len == 0


def test_host_eviction_frees_for_good_or_saves_to_disk():
    for storage in (None, MemoryStorage()):
        cm = HiCacheManager(4, 1, num_host_blocks=3, write_policy="write_back", storage=storage)
        _serve(cm, "R1", [1, 2, 3])
        _serve(cm, "R2", [4, 5, 6])  # R1 -> host
        _serve(cm, "R3", [7, 8, 9])  # R2 -> host, R1's host copy must go
        if storage is None:
            assert 1 not in cm.tree.root.children and cm.tier_stats.host_dropped_tokens == 3
        else:
            assert cm.tree.placement(_node(cm, 1)) == "disk" and set(_keys([1, 2, 3])) <= set(storage.chunks)
            assert [t.kind for t in cm.take_transfers()].count("save") == 1
            a = _serve(cm, "R4", [1, 2, 3, 9])
            assert a.prefix_len == 3 and cm.tier_stats.fetched_tokens == 3
            assert any(t.kind == "fetch" and t.keys == tuple(_keys([1, 2, 3])) for t in cm.take_transfers())


def test_evict_and_evict_host_count_tokens_as_sglang_does():
    """page size 2: evict(2) and evict_host(2) each free one page (2 tokens), not two."""
    dev, host = BlockAllocator(4, 2), BlockAllocator(4, 2)
    tree = HiRadixCache(dev, host, page_size=2, write_policy="write_through")
    tree.insert([1, 2], dev.allocate(1))
    tree.insert([3, 4], dev.allocate(1))
    r = tree.evict(2)
    assert (r.requested, r.num_tokens, len(r.block_ids)) == (2, 2, 1) and dev.num_free_blocks == 3
    tree.evict(2)
    h = tree.evict_host(2)
    assert (h.requested, h.num_tokens, len(h.node_ids)) == (2, 2, 1)  # one node of one page, dropped
    assert host.num_free_blocks == 3 and tree.host_size() == 2
    tree.check_integrity()


@pytest.mark.parametrize("damage", ["corrupt", "drop"])
def test_a_missing_or_corrupt_chunk_is_a_miss(damage):
    s = MemoryStorage()
    cm = HiCacheManager(4, 1, num_host_blocks=3, write_policy="write_back", storage=s)
    for i, p in enumerate(([1, 2, 3], [4, 5, 6], [7, 8, 9])):
        _serve(cm, f"R{i}", p)
    getattr(s, damage)(_keys([1, 2, 3])[0])
    a = _serve(cm, "R9", [1, 2, 3, 4])
    assert a.prefix_len == 0 and cm.tier_stats.disk_misses == 1 and 1 in cm.tree.root.children  # recomputed, cached anew
    assert cm.tree.placement(_node(cm, 1)) == "device"


def test_a_split_disk_chunk_serves_each_half_from_its_own_pages():
    s = MemoryStorage()
    cm = HiCacheManager(4, 1, num_host_blocks=4, write_policy="write_back", storage=s)
    _serve(cm, "R1", [1, 2, 3, 4])
    _serve(cm, "R2", [5, 6, 7, 8])
    _serve(cm, "R3", [9, 10, 11, 12])  # R1 on disk
    cm.take_transfers()
    a = _serve(cm, "R4", [1, 2, 9])  # splits the disk node after 2 tokens, fetches pages 0-1
    fetch = [t for t in cm.take_transfers() if t.kind == "fetch"]
    keys = _keys([1, 2, 3, 4])
    assert a.prefix_len == 2 and fetch[0].keys == tuple(keys[:2]) and len(fetch[0].dst) == 2
    tree = cm.tree
    lower = next(n for n in tree.iter_nodes() if n.key == [3, 4])
    assert tree.placement(lower) == "disk" and tree.disk_ref[lower.id] == keys[2:]  # its half
    a = _serve(cm, "R5", [1, 2, 3, 4])  # [1 2] on the device, [3] from page 2 of the same run
    fetch = [t for t in cm.take_transfers() if t.kind == "fetch"]
    assert a.prefix_len == 3 and fetch[0].keys == (keys[2],) and len(fetch[0].dst) == 1


def test_a_locked_node_stays_on_the_device():
    cm = HiCacheManager(6, 1, host_ratio=2, write_policy="write_through")
    _serve(cm, "R1", [1, 2, 3])
    assert cm.admit("R2", [1, 2, 3, 4]) is not None  # locks [1 2 3]
    assert cm.admit("R3", [7, 8, 9]) is None  # would need R2's pages: refused, nothing changed
    assert cm.tree.placement(_node(cm, 1)) == "both" and cm.tree.evict(100).num_tokens == 0
    cm.check_integrity()


def test_bad_inputs_raise_and_change_nothing():
    with pytest.raises(ValueError, match="write_policy"):
        HiCacheManager(4, 1, write_policy="write_sideways")
    for bad in (0, -1, float("nan"), True, "2"):
        with pytest.raises(ValueError, match="host_ratio"):
            HiCacheManager(4, 1, host_ratio=bad)
    with pytest.raises(ValueError, match="num_host_blocks"):
        HiCacheManager(4, 1, num_host_blocks=0)
    with pytest.raises(TypeError, match="storage"):
        HiCacheManager(4, 1, storage=object())
    with pytest.raises(ValueError, match="host tier"):
        make_cache_manager(4, 1, write_policy="write_back")
    with pytest.raises(ValueError, match="radix"):
        make_cache_manager(4, 1, radix=False, host_ratio=2)
    with pytest.raises(ValueError, match="block_size"):
        HiRadixCache(BlockAllocator(4, 2), BlockAllocator(4, 1), page_size=2)
    assert type(make_cache_manager(4, 1)) is CacheManager
    cm = HiCacheManager(4, 1, host_ratio=2)
    _serve(cm, "R1", [1, 2, 3])
    before = (cm.allocator.state(), cm.host_allocator.state(), cm.tree.pretty_tiers())
    with pytest.raises(KVCacheError, match="on the device"):
        cm.tree.load_back([_node(cm, 1)])
    with pytest.raises(ValueError):
        cm.tree.evict_host(-1)
    assert (cm.allocator.state(), cm.host_allocator.state(), cm.tree.pretty_tiers()) == before
    _serve(cm, "R2", [7, 8, 9])
    node = _node(cm, 1)
    cm.allocator.allocate(cm.allocator.num_free_blocks)
    before = (cm.allocator.state(), cm.host_allocator.state(), cm.tree.pretty_tiers())
    with pytest.raises(OutOfBlocks):
        cm.tree.load_back([node])
    assert (cm.allocator.state(), cm.host_allocator.state(), cm.tree.pretty_tiers()) == before


def test_without_eviction_tiers_change_no_hit():
    rng = random.Random(3)
    prompts = [[rng.randrange(6) for _ in range(rng.randint(1, 9))] for _ in range(40)]
    plain, tiered = CacheManager(400, 2), HiCacheManager(400, 2, host_ratio=1)
    for i, p in enumerate(prompts):
        a, b = serve_request(plain, p, [9], rid=f"R{i}"), serve_request(tiered, p, [9], rid=f"R{i}")
        assert (a.matched_len, a.prefill_len) == (b.matched_len, b.prefill_len)
    tiered.check_integrity()


# ------------------------------------------------------------------ random workloads
OPS = st.lists(st.tuples(st.integers(0, 5), st.integers(0, 10_000)), min_size=5, max_size=60)


def _drive(cm, ops, storage, seed):
    rng = random.Random(seed)
    bases = [[rng.randrange(40) for _ in range(rng.randint(2, 9))] for _ in range(3)]
    running: dict[str, list[int]] = {}
    for i, (op, r) in enumerate(ops):
        if op <= 1 and len(running) < 3:
            p = rng.choice(bases)[:1 + r % 9] + [rng.randrange(40) for _ in range(r % 4)]
            sid = f"S{i}"
            if cm.admit(sid, p) is not None:
                running[sid] = list(p)
                if r % 3:
                    cm.cache_unfinished_req(sid, p)
        elif op == 2 and running:
            sid = sorted(running)[r % len(running)]
            if cm.append(sid, 1 + r % 3) is not None:
                running[sid] += [rng.randrange(40) for _ in range(1 + r % 3)]
        elif op == 3 and running:
            sid = sorted(running)[r % len(running)]
            toks = running.pop(sid)
            if r % 5:
                cm.cache_finished_req(sid, toks[:cm.table(sid).num_tokens])
            else:
                cm.free(sid)
        elif op == 4:
            cm.take_transfers()
        elif storage is not None and storage.chunks:
            key = sorted(storage.chunks)[r % len(storage.chunks)]
            (storage.corrupt if r % 2 else storage.drop)(key)
        cm.check_integrity()  # includes: tracker states == the pools' states, no illegal edge
    for sid in list(running):
        cm.free(sid)
    cm.check_integrity()
    rep = replay(cm.log)
    assert rep.illegal == []
    tr = cm.tree.tracker
    assert rep.device == {b: s for b, s in enumerate(tr.device) if s != "free"}
    assert rep.host == {b: s for b, s in enumerate(tr.host) if s != "free"}
    assert rep.nodes == tr.nodes


@settings(max_examples=budget.examples(60))
@given(ops=OPS, seed=st.integers(0, 1000), policy=st.sampled_from(["write_through", "write_through_selective",
                                                                   "write_back"]),
       disk=st.booleans(), block_size=st.sampled_from([1, 2]), ratio=st.sampled_from([0.5, 1, 2]),
       threshold=st.sampled_from([0, 1, 3]))
def test_random_workloads_take_only_legal_edges(ops, seed, policy, disk, block_size, ratio, threshold):
    storage = MemoryStorage() if disk else None
    cm = HiCacheManager(num_blocks=8, block_size=block_size, host_ratio=ratio, write_policy=policy,
                        storage=storage, load_back_threshold=threshold)
    _drive(cm, ops, storage, seed)


def test_every_edge_of_the_machines_is_reached():
    """A long random run visits every legal edge of the three machines at least once."""
    from kvlab.reuse.lifecycle import LEGAL_EDGES

    seen = set()
    for seed in budget.seeds(12):
        for policy, storage in (("write_through", MemoryStorage()), ("write_back", MemoryStorage()), ("write_back", None)):
            cm = HiCacheManager(num_blocks=8, block_size=1, host_ratio=1, write_policy=policy, storage=storage)
            rng = random.Random(seed)
            _drive(cm, [(rng.randrange(6), rng.randrange(10_000)) for _ in range(250)], storage, seed)
            seen |= {k for k, n in cm.tree.tracker.counts.items() if n}
    want = {(m, s, d) for m, edges in LEGAL_EDGES.items() for s, d in edges}
    assert want - seen == set(), sorted(want - seen)


def test_a_page_key_names_its_whole_prefix():
    """The same tokens after different prefixes are different pages."""
    s = MemoryStorage()
    cm = HiCacheManager(6, 1, num_host_blocks=2, write_policy="write_back", storage=s)
    _serve(cm, "R1", [1, 2, 3, 4])
    _serve(cm, "R2", [1, 2, 5, 6])  # splits: [1 2] -> {[3 4], [5 6]}
    _serve(cm, "R3", [7, 8, 9, 10, 11])
    _serve(cm, "R4", [12, 13, 14, 15, 16])
    assert set(s.chunks) == set(_keys([1, 2, 3, 4])[2:] + _keys([1, 2, 5, 6])[2:])  # [3 4], [5 6]
    assert _keys([1, 2, 3, 4])[2] != _keys([9, 2, 3, 4])[2] and all(k.isalnum() for k in s.chunks)
    cm.check_integrity()


def _warm_store(pages: int) -> MemoryStorage:
    s = MemoryStorage()
    for k in _keys(list(range(1, pages + 1))):
        s.add(k)
    return s


def test_a_fresh_manager_finds_pages_an_earlier_run_saved():
    s = MemoryStorage()
    first = HiCacheManager(4, 1, num_host_blocks=3, write_policy="write_back", storage=s)
    for i, p in enumerate(([1, 2, 3], [4, 5, 6], [7, 8, 9])):
        _serve(first, f"R{i}", p)                  # [1 2 3] goes host -> disk
    fresh = HiCacheManager(6, 1, host_ratio=1, storage=s)   # a restart: an empty tree, the same store
    a = _serve(fresh, "R9", [1, 2, 3, 4])
    st = fresh.tier_stats
    assert a.prefix_len == 3 and st.storage_hit_tokens == 3 and st.fetched_tokens == 3
    assert [t.kind for t in fresh.take_transfers()][:1] == ["fetch"]


@pytest.mark.parametrize("policy,timeout,threshold,want", [
    ("wait_complete", 1.0, 1, 5), ("best_effort", 1.0, 1, 5),
    ("timeout", 0.0, 1, 1),          # the budget is spent after the first page
    ("wait_complete", 1.0, 6, 0),    # fewer tokens than prefetch_threshold: not worth it
])
def test_prefetch_stop_policies_and_threshold(policy, timeout, threshold, want):
    cm = HiCacheManager(8, 1, host_ratio=1, storage=_warm_store(5), prefetch_policy=policy,
                        prefetch_timeout_s=timeout, prefetch_threshold=threshold)
    a = _serve(cm, "R", [1, 2, 3, 4, 5, 6, 7])
    assert a.prefix_len == want and cm.tier_stats.storage_hit_tokens == want


def test_storage_options_are_checked():
    for kw, word in ((dict(prefetch_policy="eager"), "prefetch_policy"), (dict(storage_write="never"), "storage_write"),
                     (dict(prefetch_timeout_s=-1), "prefetch_timeout_s"), (dict(prefetch_threshold=-1), "prefetch_threshold")):
        with pytest.raises(ValueError, match=word):
            HiCacheManager(8, 1, host_ratio=1, storage=MemoryStorage(), **kw)


def test_write_through_to_storage_saves_when_the_host_copy_is_made():
    s = MemoryStorage()
    cm = HiCacheManager(8, 1, host_ratio=1, storage=s, storage_write="write_through")
    _serve(cm, "R1", [1, 2, 3])
    assert [t.kind for t in cm.take_transfers()] == ["write", "save"] and set(_keys([1, 2, 3])) <= set(s.chunks)
    cm2 = HiCacheManager(8, 1, host_ratio=1, storage=MemoryStorage())   # default: saved only on host eviction
    _serve(cm2, "R1", [1, 2, 3])
    assert [t.kind for t in cm2.take_transfers()] == ["write"]


def test_a_page_whose_save_is_still_queued_is_a_miss_not_a_fetch():
    s = MemoryStorage()
    cm = HiCacheManager(4, 1, num_host_blocks=3, write_policy="write_back", storage=s)
    for i, p in enumerate(([1, 2, 3], [4, 5, 6], [7, 8, 9])):
        _serve(cm, f"R{i}", p)                     # [1 2 3]'s save is queued, not performed
    a = _serve(cm, "R9", [1, 2, 3, 4])
    kinds = [t.kind for t in cm.take_transfers()]
    assert a.prefix_len == 0 and "fetch" not in kinds and cm.tier_stats.disk_misses == 1


@settings(max_examples=budget.examples(40), deadline=None)
@given(ops=OPS, seed=st.integers(0, 1000), policy=st.sampled_from(["write_through", "write_back"]),
       block_size=st.sampled_from([1, 2]), storage_write=st.sampled_from(["on_host_evict", "write_through"]),
       host_policy=st.sampled_from(["lru", "arc"]))
def test_a_restart_on_a_shared_store_only_finds_its_own_tokens(ops, seed, policy, block_size, storage_write,
                                                               host_policy):
    """A first manager fills a store; a second one (a restart) runs random workloads on it. Every
    disk node's page keys are the keys of its own tokens (check_integrity), so a fetch can only
    bring back the KV of the tokens it stands for; a store seeded for another model finds nothing."""
    store = MemoryStorage()
    kw = dict(num_blocks=8, block_size=block_size, host_ratio=0.5, write_policy=policy, storage=store,
              storage_write=storage_write, host_eviction_policy=host_policy)
    _drive(HiCacheManager(**kw), ops, None, seed)   # fills the store (no sabotage)
    second = HiCacheManager(**kw)                   # the restart: same prompts, pages corrupted or dropped at random
    _drive(second, ops, store, seed)
    other = MemoryStorage(fingerprint="another model")
    other.chunks = dict(store.chunks)            # the same files, under another model's fingerprint
    third = HiCacheManager(**{**kw, "storage": other})
    _drive(third, ops, None, seed)
    assert third.tier_stats.storage_hit_tokens == 0


def test_the_restart_property_test_is_not_vacuous():
    hits = 0
    for seed in budget.seeds(10):
        rng = random.Random(seed)
        ops = [(rng.randrange(6), rng.randrange(10_000)) for _ in range(60)]
        store = MemoryStorage()
        kw = dict(num_blocks=8, block_size=1, host_ratio=0.5, write_policy="write_back", storage=store,
                  storage_write="write_through")
        _drive(HiCacheManager(**kw), ops, None, seed)
        second = HiCacheManager(**kw)
        _drive(second, ops, store, seed)
        hits += second.tier_stats.storage_hit_tokens > 0
    assert hits >= 4


def test_tiers_plug_in_at_one_point_and_override_no_step_of_the_cycle():
    """HiCacheManager is CacheManager's cycle unchanged; the plain admit has no template hook."""
    steps = ("admit", "make_room", "append", "fork", "cache_req", "cache_unfinished_req", "cache_finished_req", "free")
    assert [s for s in steps if s in vars(HiCacheManager)] == []
    assert not [n for n in vars(CacheManager) if n in ("_room_for_admit", "_extend_match")]
    from kvlab.reuse.radix_cache import RadixCache
    assert HiRadixCache.init_load_back is not RadixCache.init_load_back  # the one point (the plain tree: the match)
    # and a plain CacheManager over a tiered tree gets the tiers too (load back, lifecycle checkpoints)
    tree = HiCacheManager(4, 1, host_ratio=2, write_policy="write_through").tree
    cm = CacheManager(tree=tree)
    for rid, toks in (("R1", [1, 2, 3]), ("R2", [7, 8, 9])):
        cm.admit(rid, toks)
        cm.cache_finished_req(rid, toks)
    assert cm.admit("R3", [1, 2, 3, 4]).prefix_len == 3 and tree.tier_stats.loaded_tokens == 3
    assert tree.tracker.device == tree.device_states() and not tree.tracker.illegal
    cm.check_integrity()  # the tree's placements and both pools, with R3's table as a holder
