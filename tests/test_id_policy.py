"""One rule for ids, positions, counts and lengths across the public API (kvlab.memory.ids):
Python ints; ``bool`` rejected; numpy integer scalars accepted as ints; floats, strings and None
rejected with a TypeError that names the value. A rejected call changes nothing.

Each entry point below is called three times with one argument replaced: by a numpy integer
(must give the same result as the int), by ``True`` and by a float (must raise TypeError and
leave the structure as it was).
"""
from __future__ import annotations

import re
from typing import Any, Callable

import numpy as np
import pytest

from kvlab.memory.block_manager import BlockManager
from kvlab.memory.block_pool import BlockAllocator
from kvlab.memory.block_table import BlockTable, blocks_needed, slot_mapping, translate
from kvlab.memory.buddy import BuddyAllocator
from kvlab.memory.contiguous import ContiguousArena
from kvlab.memory.kvspec import KVSpec
from kvlab.reuse.block_hash_cache import BlockHashCache
from kvlab.reuse.cache_manager import CacheManager
from kvlab.reuse.radix_cache import RadixCache


def _allocator():
    a = BlockAllocator(8, 4)
    a.allocate(2)
    return a


def _tree():
    a = BlockAllocator(16, 1)
    t = RadixCache(a)
    t.insert([1, 2, 3], a.allocate(3))
    return t


def _manager():
    m = BlockManager(8, 4)
    m.add_sequence("A", 5)
    return m


def _cm():
    cm = CacheManager(16, 1)
    cm.admit("A", [1, 2, 3])
    return cm


def _hash_cache():
    pc = BlockHashCache(8, 2)
    pc.allocate(4, pc.match_prefix([]), "A")  # blocks 0 and 1 in use
    return pc


def _buddy():
    b = BuddyAllocator(8, 4)
    b.allocate(2)
    return b


def _arena():
    a = ContiguousArena(64, "exact", max_len=32)
    a.admit("A", 3, final_len=8)
    return a


def _state(obj: Any) -> Any:
    if isinstance(obj, BlockAllocator):
        return obj.state()
    if isinstance(obj, RadixCache):
        return (obj.allocator.state(), obj.snapshot())
    if isinstance(obj, BlockManager):
        return (obj.allocator.state(), {s: (list(t.block_ids), t.num_tokens) for s, t in obj.tables.items()})
    if isinstance(obj, CacheManager):
        return (obj.allocator.state(), obj.tree.snapshot(), {s: list(t.block_ids) for s, t in obj.tables.items()})
    if isinstance(obj, ContiguousArena):
        return {k: (r.start, r.reserved, r.length) for k, r in obj.requests.items()}
    if isinstance(obj, BlockHashCache):
        return obj.state()
    if isinstance(obj, BuddyAllocator):
        return obj.free_runs()
    return None


# (name, make the structure (or None), call(structure, value) -> result, the good int value)
CASES: list[tuple[str, Callable | None, Callable, int]] = [
    ("BlockAllocator(num_blocks)", None, lambda _, v: BlockAllocator(v, 4).num_blocks, 8),
    ("BlockAllocator(block_size)", None, lambda _, v: BlockAllocator(8, v).block_size, 4),
    ("allocate(n)", _allocator, lambda a, v: a.allocate(v), 2),
    ("incref([id])", _allocator, lambda a, v: a.incref([v]), 1),
    ("free([id])", _allocator, lambda a, v: a.free([v]), 1),
    ("translate(pos)", None, lambda _, v: translate([3, 7, 1, 5, 9], v, 4), 9),
    ("translate(block_size)", None, lambda _, v: translate([3, 7, 1, 5, 9], 9, v), 4),
    ("translate(table entry)", None, lambda _, v: translate([3, 7, v, 5, 9], 9, 4), 1),
    ("blocks_needed(num_tokens)", None, lambda _, v: blocks_needed(v, 4), 9),
    ("BlockTable.translate(pos)", None, lambda _, v: BlockTable("R", 4, [3, 7, 1], 10).translate(v), 9),
    ("BlockTable.slot_mapping(start)", None, lambda _, v: BlockTable("R", 4, [3, 7, 1], 10).slot_mapping(v, 6), 3),
    ("add_sequence(num_tokens)", _manager, lambda m, v: m.add_sequence("B", v).block_ids, 5),
    ("append(n)", _manager, lambda m, v: m.append("A", v), 4),
    ("write(pos)", _manager, lambda m, v: m.write("A", v), 2),
    ("adopt(block_ids)", _manager, lambda m, v: m.adopt("B", [v], 4).block_ids, 0),
    ("RadixCache(page_size)", None, lambda _, v: RadixCache(BlockAllocator(8, 2), v).page_size, 2),
    ("match_prefix(tokens)", _tree, lambda t, v: t.match_prefix([1, 2, v]).prefix_len, 3),
    ("insert(tokens)", _tree, lambda t, v: t.insert([1, 2, v], [0, 1, 2]).prefix_len, 3),
    ("insert(kv)", _tree, lambda t, v: t.insert([1, 2, 3], [0, 1, v]).prefix_len, 2),
    ("evict(num_tokens)", _tree, lambda t, v: t.evict(v).num_tokens, 2),
    ("CacheManager.admit(tokens)", _cm, lambda cm, v: cm.admit("B", [1, 2, v]).prefix_len, 9),
    ("CacheManager.admit(num_tokens)", _cm, lambda cm, v: cm.admit("B", [1, 2], v).table.num_tokens, 4),
    ("CacheManager.append(n)", _cm, lambda cm, v: cm.append("A", v), 2),
    ("ContiguousArena.admit(length)", _arena, lambda a, v: a.admit("B", v, final_len=8).length, 3),
    ("ContiguousArena.grow(n)", _arena, lambda a, v: a.grow("A", v), 1),
    ("BlockHashCache(num_blocks)", None, lambda _, v: BlockHashCache(v, 4).num_blocks, 8),
    ("BlockHashCache.match_prefix(tokens)", None, lambda _, v: BlockHashCache(8, 2).match_prefix([1, v]).prefix_len, 2),
    # the gaps the robustness pass found (issue 24 items 2 and 8), and every entry point since
    ("BlockAllocator.can_allocate(n)", _allocator, lambda a, v: a.can_allocate(v), 6),
    ("slot_mapping(start)", None, lambda _, v: slot_mapping([3, 7, 1], v, 6, 4), 3),
    ("slot_mapping(table entry)", None, lambda _, v: slot_mapping([3, v, 1], 3, 6, 4), 7),
    ("BlockTable(num_tokens)", None, lambda _, v: BlockTable("R", 4, [3, 7, 1], v).slot_mapping(), 10),
    ("BlockTable(block_ids)", None, lambda _, v: BlockTable("R", 4, [3, v], 5).slot_mapping(), 7),
    ("can_allocate(num_tokens)", _manager, lambda m, v: m.can_allocate(v), 12),
    ("blocks_to_append(n)", _manager, lambda m, v: m.blocks_to_append("A", v), 8),
    ("adopt(num_tokens)", _manager, lambda m, v: m.adopt("B", [0], v).num_tokens, 3),
    ("adopt(extra_tokens)", _manager, lambda m, v: m.adopt("B", [0], 4, v).num_tokens, 5),
    ("share_prefix(block_ids)", _manager, lambda m, v: m.share_prefix("A", [v]), 0),
    ("CacheManager.make_room(num_blocks)", _cm, lambda cm, v: cm.make_room(v), 3),
    ("CacheManager.cache_unfinished_req(tokens)", _cm, lambda cm, v: cm.cache_unfinished_req("A", [1, 2, v]).prefix_len, 3),
    ("CacheManager.cache_finished_req(tokens)", _cm, lambda cm, v: cm.cache_finished_req("A", [1, 2, v]).prefix_len, 3),
    ("BlockHashCache.allocate(num_tokens)", _hash_cache, lambda pc, v: pc.allocate(v, pc.match_prefix([]), "B"), 4),
    ("BlockHashCache.free_blocks([id])", _hash_cache, lambda pc, v: pc.free_blocks([v], "A"), 0),
    ("BlockHashCache.cache_full_blocks(block_ids)", _hash_cache,
     lambda pc, v: pc.cache_full_blocks([1, 2], [v], "A"), 0),
    ("BlockHashCache.evict(num_tokens)", _hash_cache, lambda pc, v: pc.evict(v).num_tokens, 2),
    ("BuddyAllocator.allocate(n)", _buddy, lambda b, v: b.allocate(v), 2),
    ("KVSpec(layers)", None, lambda _, v: KVSpec(v, 2, 4).bytes_per_token, 3),
    ("KVSpec.kv_bytes(tokens)", None, lambda _, v: KVSpec(3, 2, 4).kv_bytes(v), 5),
]


@pytest.mark.parametrize("name, make, call, good", CASES, ids=[c[0] for c in CASES])
def test_numpy_ints_work_like_ints(name, make, call, good):
    want = call(make() if make else None, good)
    got = call(make() if make else None, np.int64(good))
    assert got == want, name


@pytest.mark.parametrize("bad", [True, float(2), 2.5, "2", None], ids=["bool", "float", "fraction", "str", "None"])
@pytest.mark.parametrize("name, make, call, good", CASES, ids=[c[0] for c in CASES])
def test_bools_floats_and_strings_are_refused_and_change_nothing(name, make, call, good, bad):
    if bad is None and name in ("CacheManager.admit(num_tokens)", "adopt(num_tokens)"):
        pytest.skip("num_tokens=None means: as many slots as tokens (blocks)")
    obj = make() if make else None
    before = _state(obj)
    with pytest.raises(TypeError):
        call(obj, bad)
    assert _state(obj) == before, f"{name} changed state on a refused call"


COMPUTE_CASES = [
    ("generate(prompt_ids)", lambda m, v: _gen(m, [5, v], 2), 7),
    ("generate(max_new_tokens)", lambda m, v: _gen(m, [5, 7], v), 2),
    ("generate(n)", lambda m, v: _gen(m, [5, 7], 2, n=v), 2),
    ("generate(block_size)", lambda m, v: _gen(m, [5, 7], 2, strategy="paged", block_size=v), 4),
    ("Engine.submit(prompt_ids)", lambda m, v: _submit(m, [5, v], 2), 7),
    ("Engine.submit(max_new_tokens)", lambda m, v: _submit(m, [5, 7], v), 2),
    ("Engine.submit(n)", lambda m, v: _submit(m, [5, 7], 2, n=v), 2),
    ("Engine.submit(arrival_step)", lambda m, v: _submit(m, [5, 7], 2, arrival_step=v), 1),
    ("Engine(max_batch_size)", lambda m, v: _engine(m, max_batch_size=v).scheduler.max_batch_size, 4),
]


def _gen(model, prompt, k, **kw):
    from kvlab.compute.generate import generate

    return generate(model, prompt, k, **kw).sequences


def _engine(model, **kw):
    from kvlab.compute.engine import Engine

    return Engine(model, num_blocks=32, block_size=4, **kw)


def _submit(model, prompt, k, **kw):
    eng = _engine(model)
    eng.submit(prompt, k, **kw)
    eng.run()
    return [r.outputs for r in eng.requests]


@pytest.mark.parametrize("name, call, good", COMPUTE_CASES, ids=[c[0] for c in COMPUTE_CASES])
def test_compute_entry_points_follow_the_same_rule(bundled, name, call, good):
    model, _tok = bundled
    assert call(model, np.int64(good)) == call(model, good), name
    for bad in (True, 2.0, 2.5, "2", None):
        with pytest.raises(TypeError):
            call(model, bad)


# ------------------------------------------------------------------ counts that enter state
WIDTHS = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64]


def _all_ints(*values) -> bool:
    """Every value, and every element of a list/tuple value, is a plain Python int."""
    flat = [x for v in values for x in (v if isinstance(v, (list, tuple)) else [v])]
    return all(type(x) is int for x in flat)


@pytest.mark.parametrize("dtype", WIDTHS, ids=[w.__name__ for w in WIDTHS])
def test_a_numpy_count_enters_state_as_the_plain_int(dtype):
    """``append("A", np.uint8(200))`` on a 100-token table once stored ``np.uint8(44)`` (it wrapped)."""
    m = BlockManager(400, 1)
    m.add_sequence("A", 100)
    m.append("A", dtype(100))
    m.append("A", dtype(100))
    t = m.tables["A"]
    assert (t.num_tokens, len(t.block_ids)) == (300, 300) and _all_ints(t.num_tokens, t.block_ids)
    m.add_sequence("B", dtype(7))
    m.adopt("C", [0], dtype(1), dtype(9))
    assert [m.tables[s].num_tokens for s in "BC"] == [7, 10] and _all_ints(*(m.tables[s].num_tokens for s in "BC"))
    m.check_integrity()

    cm = CacheManager(64, 4)
    a = cm.admit("A", np.array([1, 2, 3], dtype=dtype), dtype(9))
    cm.append("A", dtype(3))
    t = cm.table("A")
    assert (t.num_tokens, len(t.block_ids)) == (12, 3) and _all_ints(t.num_tokens, t.block_ids, a.prefix_len)
    res = cm.cache_finished_req("A", np.array(list(range(1, 13)), dtype=dtype))  # admit took an array: so does this
    assert res.prefix_len == 0 and _all_ints(*cm.tree.snapshot().sequences())
    cm.check_integrity()


@pytest.mark.parametrize("dtype", [np.int8, np.uint16, np.int64], ids=["int8", "uint16", "int64"])
def test_numpy_ids_and_counts_come_back_as_plain_ints(dtype):
    pc = BlockHashCache(8, 2)
    table = pc.allocate(dtype(4), pc.match_prefix([]), "A")  # once refused although numpy ints are ints
    assert table == [0, 1] and _all_ints(table)
    assert pc.free_blocks([dtype(1), dtype(0)], "A") == [0, 1]
    assert _all_ints(list(pc.free_block_queue)) and sorted(pc.free_block_queue) == list(range(8))
    assert pc.allocate(4, pc.match_prefix([]), "B") == [2, 3]  # never a numpy id handed out
    pc.check_integrity()
    slots = slot_mapping(np.array([3, 7, 1], dtype=dtype), dtype(3), dtype(6), dtype(4))
    assert slots == [15, 28, 29] and _all_ints(slots)
    assert _all_ints(BlockTable("R", dtype(4), np.array([3, 7], dtype=dtype), dtype(5)).slot_mapping())


@pytest.mark.parametrize("bad", [True, False, 1.0, "0", None], ids=["True", "False", "float", "str", "None"])
def test_a_block_id_that_is_not_an_int_never_enters_the_free_queue(bad):
    pc = _hash_cache()
    before = pc.state()
    with pytest.raises(TypeError, match=repr(bad)):
        pc.free_blocks([bad], "A")
    with pytest.raises(TypeError):
        pc.cache_full_blocks([1, 2], [bad], "A")
    assert pc.state() == before
    pc.check_integrity()


def _sim_and_viz_cases():
    from kvlab.sim.policies import make_policy
    from kvlab.sim.workloads import sharegpt
    from kvlab.viz.kernel_view import kernel_access_order
    from kvlab.viz.pool_grid import grid_layout

    return [
        ("make_policy(capacity)", lambda v: make_policy("paged", v, 4).capacity, 64),
        ("make_policy(block_size)", lambda v: make_policy("radix", 64, v).block_size, 4),
        ("sharegpt(num_requests)", lambda v: len(sharegpt(v, seed=0)), 3),
        ("grid_layout(num_blocks)", lambda v: grid_layout(v).cols, 12),
        ("grid_layout(cols)", lambda v: grid_layout(12, cols=v).rows, 4),
        ("kernel_access_order(context_len)", lambda v: len(kernel_access_order([1, 2], v, 4)), 5),
        ("kernel_access_order(tile_tokens)", lambda v: len(kernel_access_order([1, 2], 5, 4, tile_tokens=v)), 8),
    ]


def test_the_simulator_and_the_pictures_follow_the_same_rule():
    import plotly  # noqa: F401  (installed by the set-up: a missing one fails)
    for name, call, good in _sim_and_viz_cases():
        assert call(np.int64(good)) == call(good), name
        for bad in (True, 2.0, 2.5, "2"):
            with pytest.raises(TypeError, match="must be an int"):
                call(bad)


@pytest.mark.parametrize("bad", [5, None, b"A", 1.5], ids=["int", "None", "bytes", "float"])
def test_sequence_and_request_ids_are_strings(bad):
    """``CacheManager.admit(5, ...)`` was accepted, and then ``free("nope")`` failed sorting mixed ids."""
    m, cm, arena = _manager(), _cm(), _arena()
    before = [_state(x) for x in (m, cm, arena)]
    for call in (lambda: m.add_sequence(bad, 4), lambda: m.adopt(bad, [0], 4), lambda: m.fork("A", bad),
                 lambda: m.append(bad, 1), lambda: m.free(bad), lambda: cm.admit(bad, [1, 2]),
                 lambda: cm.admit(bad, None, 3), lambda: cm.fork("A", bad), lambda: cm.free(bad),
                 lambda: arena.admit(bad, 3, final_len=8), lambda: BlockTable(bad, 4, [1], 2)):
        with pytest.raises(TypeError, match=r"(seq|req)_id must be a str, got " + repr(bad).replace("[", r"\[")):
            call()
    assert [_state(x) for x in (m, cm, arena)] == before
    with pytest.raises(KeyError, match="'nope'"):
        cm.free("nope")


def test_a_key_extended_checks_only_the_new_tokens_and_names_them_in_the_whole_list():
    """``RadixKey.extended`` (the cache manager's check of a growing sequence) and ``plus``:
    the known head is compared, the tail goes through the id rule, and an error names the bad
    token by its position in the whole list; numpy ints in the head are equal ids."""
    from kvlab.memory.ids import as_ids
    from kvlab.reuse.radix_cache import RadixKey

    k = RadixKey([1, 2, 3])
    assert k.extended([1, 2, 3]) == [1, 2, 3] and k.extended([1, 2, 3]) is not k
    assert k.extended((1, 2, 3, 4)) == [1, 2, 3, 4]  # a tuple: checked whole
    assert k.extended(np.array([1, 2, 3, 9])) == [1, 2, 3, 9]
    assert type(k.extended([np.int64(1), 2, 3, 5])[0]) is int
    assert k.extended([1, 2]) is None and k.extended([1, 9, 3, 4]) is None
    for bad, where, err in (([1, 2, 3, 4.5], "tokens[3]", TypeError), ([1, 2, 3, 4, -1], "tokens[4]", ValueError),
                            ([1, 2, 3, True], "tokens[3]", TypeError)):
        with pytest.raises(err, match=re.escape(where)):
            k.extended(bad)
        with pytest.raises(err, match=re.escape(where)):
            k.plus(bad[3:])
    assert k == [1, 2, 3]  # nothing changed
    with pytest.raises(TypeError, match=re.escape("tokens[7]")):
        as_ids([0, "x"], start=6)
