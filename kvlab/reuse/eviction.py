"""Which cached leaf the radix tree evicts first: one priority function per policy.

An :class:`EvictionPolicy` maps a tree node to a sort key; the tree evicts the unlocked leaf
with the smallest key first (a heap), and a parent whose last child goes becomes a leaf that
may go next. So the tree is always evicted leaf by leaf, never a whole subtree at once.

Mirrors SGLang ``python/sglang/srt/mem_cache/evict_policy.py`` (``LRUStrategy``,
``LFUStrategy``); ``fewest_tokens`` is kvlab's own (the source notes' "weighted by token
count", here: the shortest leaf first).

:class:`RadixEviction` is the radix tree's eviction itself (the heap of unlocked leaves,
``evict``, ``reset``): one concept of :class:`kvlab.reuse.radix_cache.RadixCache`, kept here
beside the policies it orders by.

Example:
    >>> sorted(EVICTION_POLICIES)
    ['fewest_tokens', 'lfu', 'lru']
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

from ..memory.block_pool import KVCacheError
from ..memory.events import pack_ids
from ..memory.ids import check_int
from .radix_node import EvictResult, TreeNode

if TYPE_CHECKING:
    from ..memory.block_pool import BlockAllocator
    from ..memory.events import EventLog
    from .radix_node import RadixStats

__all__ = ["EvictionPolicy", "EVICTION_POLICIES", "get_eviction_policy", "RadixEviction"]


@dataclass(frozen=True)
class EvictionPolicy:
    """Which unlocked leaf goes first: the one with the smallest ``priority(node)``."""

    name: str
    priority: Callable[[object], object]
    description: str


EVICTION_POLICIES: dict[str, EvictionPolicy] = {
    "lru": EvictionPolicy("lru", lambda n: (n.last_access_time, n.id),
                          "least recently used leaf first (SGLang's default)"),
    "fewest_tokens": EvictionPolicy("fewest_tokens", lambda n: (len(n.key), n.last_access_time, n.id),
                                    "shortest leaf first (frees the fewest tokens per victim; ties: LRU)"),
    "lfu": EvictionPolicy("lfu", lambda n: (n.hit_count, n.last_access_time, n.id),
                          "least frequently matched leaf first (ties: LRU)"),
}


def get_eviction_policy(name: str) -> EvictionPolicy:
    """The policy called ``name`` (ValueError listing the choices otherwise)."""
    if name not in EVICTION_POLICIES:
        raise ValueError(f"unknown eviction_policy {name!r}; choose one of {sorted(EVICTION_POLICIES)}")
    return EVICTION_POLICIES[name]


class RadixEviction:
    """RadixCache's eviction (a mixin: the attributes below are RadixCache's). The heap holds
    ``(priority, node id, node)`` for unlocked leaves; entries whose node changed since are
    stale and skipped when popped (a lazily maintained heap: no tree walk per ``evict``)."""

    allocator: BlockAllocator
    log: EventLog
    root: TreeNode
    stats: RadixStats
    policy: EvictionPolicy
    _heap: list
    _num_nodes: int
    _evictable_size: int
    _protected_size: int
    _tree_blocks: set[int] | None

    def set_eviction_policy(self, name: str) -> None:
        """Switch the policy (rebuilds the eviction heap)."""
        self.policy = get_eviction_policy(name)
        self._rebuild_heap()


    def _push(self, node: TreeNode) -> None:
        """Record an evictable leaf in the heap (stale entries are skipped when popped)."""
        heapq.heappush(self._heap, (self.policy.priority(node), node.id, node))
        if len(self._heap) > 2 * self._num_nodes + 64:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        prio = self.policy.priority
        self._heap = [(prio(n), n.id, n) for n in self.iter_nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(self._heap)

    # ------------------------------------------------------------------ evict
    def evict(self, num_tokens: int, rid: str | None = None) -> EvictResult:
        """Free at least ``num_tokens`` tokens from unlocked leaves, in policy order.

        A parent whose last child goes becomes a leaf and may go next. When less is evictable,
        frees what it can and says so (``result.satisfied`` is False); never raises for that.
        The blocks go back to the allocator in one step.
        """
        num_tokens = check_int("num_tokens", num_tokens, 0)
        heap, prio, root = self._heap, self.policy.priority, self.root
        freed_tokens = 0
        blocks: list[int] = []
        node_ids: list[int] = []
        while freed_tokens < num_tokens and heap:
            p, _, node = heapq.heappop(heap)
            if node.parent is None or node.children or node.lock_ref or prio(node) != p:
                continue  # stale entry
            parent = node.parent
            del parent.children[self._child_key(node.key)]
            node.parent = None
            ln = len(node.key)
            freed_tokens += ln
            blocks += node.value
            node_ids.append(node.id)
            self._evictable_size -= ln
            self._num_nodes -= 1
            if parent is not root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (prio(parent), parent.id, parent))
        if blocks:
            if self._tree_blocks is not None:
                self._tree_blocks.difference_update(blocks)
            self.allocator.free_blocks(blocks, rid, record=False)  # the tree's own references; the evict event says it
            s = self.stats
            s.evicted_tokens += freed_tokens
            s.evicted_nodes += len(node_ids)
        self.log.add("evict", rid, blocks, num_tokens, freed_tokens, pack_ids(node_ids), self.policy.name)
        return EvictResult(num_tokens, freed_tokens, blocks, node_ids)

    def reset(self) -> None:
        """Evict everything (raises if a node is still locked)."""
        if self._protected_size:
            raise KVCacheError(f"reset: {self._protected_size} token(s) are still locked")
        self.evict(self._evictable_size)
