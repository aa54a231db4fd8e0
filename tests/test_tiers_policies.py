"""The host pool's eviction policy is pluggable: LRU and ARC (vLLM's CPU offloading). On a scan of
one-off prompts mixed with a few reused system prompts, ARC keeps the reused ones on the host
(they reach T2) while LRU lets the scan push them out; both keep every invariant."""
from __future__ import annotations

import pytest

from kvlab.reuse.hicache_manager import HiCacheManager
from kvlab.reuse.host_policy import ARCHostPolicy, make_host_policy
from kvlab.reuse.lifecycle import replay
from kvlab.sim.tiers import host_policy_hits, scan_with_hot_set


def host_hits(policy: str, seed: int, host_blocks: int = 16) -> int:
    cm = HiCacheManager(8, 1, num_host_blocks=host_blocks, write_policy="write_through",
                        host_eviction_policy=policy)
    for i, p in enumerate(scan_with_hot_set(seed=seed)):
        assert cm.admit(f"R{i}", p) is not None
        cm.cache_finished_req(f"R{i}", p)
        cm.take_transfers()
        cm.check_integrity()
    assert replay(cm.log).illegal == []
    assert cm.tier_stats.host_hit_tokens == host_policy_hits(policy, scan_with_hot_set(seed=seed), 8, host_blocks)
    return cm.tier_stats.host_hit_tokens


@pytest.mark.parametrize("host_blocks", [12, 16])
def test_arc_keeps_reused_prefixes_through_a_scan(host_blocks):
    lru = sum(host_hits("lru", s, host_blocks) for s in range(3))
    arc = sum(host_hits("arc", s, host_blocks) for s in range(3))
    assert arc > 1.5 * lru > 0, (lru, arc)


def test_arc_moves_between_its_lists_and_adapts():
    p = ARCHostPolicy(capacity=4)
    p.store(1, 2, "a")
    p.store(2, 2, "b")
    assert p.lists() == ([1, 2], []) and p.priority_of(1) < p.priority_of(2)   # both in T1: LRU order
    p.touch(1)                                                                   # used again: T2
    assert p.lists() == ([2], [1])
    p.evicted(2, "b")                                                            # ghost in B1
    p.store(3, 2, "b")                                                           # back again: recency pays
    assert p.target == 2 and p.lists() == ([3], [1]) and "b" not in p.b1
    p.split(1, 9, 1)                                                             # the upper half keeps its place
    assert p.lists() == ([3], [9, 1]) and p.t2[9] == 1 and p.t2[1] == 1


def test_unknown_host_policy_is_named():
    with pytest.raises(ValueError, match="host_eviction_policy 'mru'"):
        make_host_policy("mru", 4)
    with pytest.raises(ValueError, match="mru"):
        HiCacheManager(8, 1, host_ratio=1, host_eviction_policy="mru")
