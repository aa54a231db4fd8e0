"""Issue 24 items 4 and 9: a false illegal transition with write-back and a one-block host pool,
and the tier arguments (bounds, the host pool being the device pool, nodes that are not nodes of
this tree). Each test failed on the code before the fix."""
from __future__ import annotations

import random

import pytest

from kvlab.memory.block_pool import BlockAllocator, KVCacheError
from kvlab.reuse.hicache_manager import HiCacheManager
from kvlab.reuse.hiradix_cache import HiRadixCache
from kvlab.reuse.lifecycle import replay


def test_dropping_a_host_only_child_records_its_host_blocks_freed():
    """12 legal calls (found by a seeded search): with write-back and one host block, a device
    eviction drops a node whose host-only child held the host block; the next backup reuses it.
    Before the fix the free was not recorded and check_integrity saw host -> writing."""
    cm = HiCacheManager(4, 1, num_host_blocks=1, write_policy="write_back")
    calls = [("admit", "R0", [2, 3, 1]), ("admit", "R1", [1, 2]), ("finish", "R0", [2, 3, 1]),
             ("admit", "R3", [2, 3, 1]), ("take",), ("finish", "R3", [2, 3, 1]), ("admit", "R6", [1]),
             ("finish", "R6", [1]), ("admit", "R8", [1, 1]), ("take",), ("finish", "R8", [1, 1]),
             ("admit", "R11", [3, 2, 3])]
    for c in calls:
        if c[0] == "admit":
            cm.admit(c[1], c[2])
        elif c[0] == "finish":
            cm.cache_finished_req(c[1], c[2])
        else:
            cm.take_transfers()
        cm.check_integrity()
    assert replay(cm.log).illegal == []


@pytest.mark.parametrize("seed", range(40))
def test_one_host_block_write_back_random_runs_stay_legal(seed):
    rng = random.Random(seed)
    cm = HiCacheManager(4, 1, num_host_blocks=1, write_policy="write_back")
    running: dict[str, list[int]] = {}
    for i in range(60):
        op = rng.randrange(3)
        if op == 0 or not running:
            toks = [rng.randrange(1, 4) for _ in range(rng.randint(1, 3))]
            if cm.admit(f"R{i}", toks) is not None:
                running[f"R{i}"] = toks
        elif op == 1:
            sid = rng.choice(sorted(running))
            cm.cache_finished_req(sid, running.pop(sid))
        else:
            cm.take_transfers()
        cm.check_integrity()


def test_tier_arguments_are_bounded_and_named():
    with pytest.raises(ValueError, match="host_ratio"):
        HiCacheManager(8, 1, host_ratio=1e9)  # was a MemoryError
    with pytest.raises(ValueError, match="num_host_blocks"):
        HiCacheManager(8, 1, num_host_blocks=10**9)
    a = BlockAllocator(4, 1)
    with pytest.raises(ValueError, match="device pool itself"):
        HiRadixCache(a, a)


def test_nodes_are_checked_to_belong_to_the_tree():
    cm = HiCacheManager(8, 1, host_ratio=1, write_policy="write_back")
    other = HiCacheManager(8, 1, host_ratio=1, write_policy="write_back")
    for m in (cm, other):
        m.admit("A", [1, 2, 3])
        m.cache_finished_req("A", [1, 2, 3])
    tree, foreign = cm.tree, other.tree.root.children[1]
    assert tree.root.children[1].id == foreign.id  # ids collide across trees
    with pytest.raises(KVCacheError, match="root"):
        tree.load_back([tree.root])
    with pytest.raises(TypeError, match="'x'"):
        tree.backup("x")
    with pytest.raises(TypeError, match="sequence of tree nodes"):
        tree.check_disk("x")
    with pytest.raises(TypeError, match="'x'"):
        tree.check_disk(["x"])
    with pytest.raises(KVCacheError, match="not in this tree"):
        tree.backup(foreign)  # returned True before: its id is a node of this tree
    with pytest.raises(KVCacheError, match="root"):
        tree.backup(tree.root)
    assert tree.take_transfers() == [] and tree.host_size() == 0
    cm.check_integrity()
