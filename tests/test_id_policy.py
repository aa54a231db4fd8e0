"""One rule for ids, positions, counts and lengths across the public API (kvlab.memory.ids):
Python ints; ``bool`` rejected; numpy integer scalars accepted as ints; floats, strings and None
rejected with a TypeError that names the value. A rejected call changes nothing.

Each entry point below is called three times with one argument replaced: by a numpy integer
(must give the same result as the int), by ``True`` and by a float (must raise TypeError and
leave the structure as it was).
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

from kvlab.memory.block_manager import BlockManager
from kvlab.memory.block_pool import BlockAllocator
from kvlab.memory.block_table import BlockTable, blocks_needed, translate
from kvlab.memory.contiguous import ContiguousArena
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
]


@pytest.mark.parametrize("name, make, call, good", CASES, ids=[c[0] for c in CASES])
def test_numpy_ints_work_like_ints(name, make, call, good):
    want = call(make() if make else None, good)
    got = call(make() if make else None, np.int64(good))
    assert got == want, name


@pytest.mark.parametrize("bad", [True, float(2), 2.5, "2", None], ids=["bool", "float", "fraction", "str", "None"])
@pytest.mark.parametrize("name, make, call, good", CASES, ids=[c[0] for c in CASES])
def test_bools_floats_and_strings_are_refused_and_change_nothing(name, make, call, good, bad):
    if bad is None and name == "CacheManager.admit(num_tokens)":
        pytest.skip("num_tokens=None means: as many slots as tokens")
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
