"""Which host-only node leaves the host pool first: LRU (SGLang's host eviction) or ARC (vLLM's CPU offloading).

The tiered tree (:class:`~kvlab.reuse.hiradix_cache.HiRadixCache`) evicts host-only leaves one
at a time, in the order of ``priority(node)`` (smallest first), and tells the policy what happens
to host copies: ``store`` (a node got a host copy), ``touch`` (a match went through a node that
has one), ``evicted`` (its host copy left: saved to disk or dropped), ``split``.

:class:`PriorityHostPolicy` wraps a device eviction policy (``lru``, ``lfu``, ``fewest_tokens``):
no state, the order is the node's ``priority``. :class:`ARCHostPolicy` is ARC (Megiddo and
Modha, FAST'03) as vLLM runs it over offloaded blocks (``ARCCachePolicy`` in
``vllm/v1/kv_offload/cpu/policies/arc.py``; ``ARCOffloadingManager`` in ``arc_manager.py`` before),
here over host copies counted in pages: ``T1`` holds copies used once since they were stored,
``T2`` copies used again; the victim comes from ``T1`` while it holds at least ``target`` pages,
else from ``T2``, each in LRU order; evicted copies leave a ghost in ``B1`` / ``B2`` (by the
content of their prefix, so a recomputed node is recognised); storing a copy whose ghost is in
``B1`` raises ``target`` (recency pays), in ``B2`` lowers it (frequency pays). So a scan of
one-off prompts stays in ``T1`` and passes through without pushing reused prefixes out of
``T2``, where LRU would evict them.

Example:
    >>> p = ARCHostPolicy(capacity=4)
    >>> p.store(1, 2, "a"); p.store(2, 2, "b"); p.touch(1)   # node 1 used again: T2
    >>> p.lists(), p.priority_of(2) < p.priority_of(1)        # node 2 (T1) goes first
    (([2], [1]), True)
"""
from __future__ import annotations

from collections import OrderedDict

from .radix_cache import EvictionPolicy, get_eviction_policy

__all__ = ["HOST_POLICIES", "PriorityHostPolicy", "ARCHostPolicy", "make_host_policy"]

HOST_POLICIES = ("lru", "lfu", "fewest_tokens", "arc")


class PriorityHostPolicy:
    """A stateless order: a device eviction policy's ``priority`` (LRU: oldest access first)."""

    def __init__(self, policy: EvictionPolicy) -> None:
        self.name = policy.name
        self._priority = policy.priority

    def priority(self, node) -> object:
        return self._priority(node)

    def store(self, node_id: int, pages: int, content: str) -> None: ...

    def touch(self, node_id: int) -> None: ...

    def evicted(self, node_id: int, content: str) -> None: ...

    def split(self, old_id: int, new_id: int, new_pages: int) -> None: ...


class ARCHostPolicy:
    """ARC over the host copies of tree nodes (see the module docstring); ``capacity``: host pages."""

    name = "arc"

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.target = 0                                     # pages ARC wants in T1 (vLLM's target_t1_size)
        self.t1: OrderedDict[int, int] = OrderedDict()      # node id -> pages, least recently used first
        self.t2: OrderedDict[int, int] = OrderedDict()
        self.b1: OrderedDict[str, int] = OrderedDict()      # ghosts: prefix content -> pages
        self.b2: OrderedDict[str, int] = OrderedDict()

    def lists(self) -> tuple[list[int], list[int]]:
        """The node ids in T1 and T2, least recently used first."""
        return list(self.t1), list(self.t2)

    def store(self, node_id: int, pages: int, content: str) -> None:
        if content in self.b1:
            self.target = min(self.target + max(pages, sum(self.b2.values()) // max(1, sum(self.b1.values()))),
                              self.capacity)
            del self.b1[content]
        elif content in self.b2:
            self.target = max(self.target - max(pages, sum(self.b1.values()) // max(1, sum(self.b2.values()))), 0)
            del self.b2[content]
        self.t2.pop(node_id, None)
        self.t1[node_id] = pages

    def touch(self, node_id: int) -> None:
        if node_id in self.t1:
            self.t2[node_id] = self.t1.pop(node_id)
        elif node_id in self.t2:
            self.t2.move_to_end(node_id)

    def evicted(self, node_id: int, content: str) -> None:
        for t, b in ((self.t1, self.b1), (self.t2, self.b2)):
            if node_id in t:
                pages = t.pop(node_id)
                if content:  # "" : dropped with its parent, no ghost
                    b[content] = pages
                    b.move_to_end(content)
        for b in (self.b1, self.b2):
            while sum(b.values()) > self.capacity:
                b.popitem(last=False)

    def split(self, old_id: int, new_id: int, new_pages: int) -> None:
        """``new_id`` (the upper part, ``new_pages`` pages) takes ``old_id``'s list and place."""
        for t in (self.t1, self.t2):
            if old_id in t:
                t[old_id] -= new_pages
                items = list(t.items())
                i = [k for k, _ in items].index(old_id)
                items.insert(i, (new_id, new_pages))
                t.clear()
                t.update(items)

    def priority_of(self, node_id: int) -> tuple[int, int]:
        """(0 for the list ARC evicts from now, 1 for the other; position in LRU order)."""
        t1_first = sum(self.t1.values()) >= self.target and self.t1
        for rank, t in enumerate((self.t1, self.t2) if t1_first else (self.t2, self.t1)):
            if node_id in t:
                return rank, list(t).index(node_id)
        return 2, node_id

    def priority(self, node) -> tuple[int, int]:
        return self.priority_of(node.id)


def make_host_policy(name: str, capacity: int):
    """The host policy called ``name`` (one of HOST_POLICIES) for a host pool of ``capacity`` pages."""
    if name == "arc":
        return ARCHostPolicy(capacity)
    if name not in HOST_POLICIES:
        raise ValueError(f"unknown host_eviction_policy {name!r}; choose one of {HOST_POLICIES}")
    return PriorityHostPolicy(get_eviction_policy(name))
