"""Which cached leaf the radix tree evicts first: one priority function per policy.

An :class:`EvictionPolicy` maps a tree node to a sort key; the tree evicts the unlocked leaf
with the smallest key first (a heap), and a parent whose last child goes becomes a leaf that
may go next. So the tree is always evicted leaf by leaf, never a whole subtree at once.

Mirrors SGLang ``python/sglang/srt/mem_cache/evict_policy.py`` (``LRUStrategy``,
``LFUStrategy``); ``fewest_tokens`` is kvlab's own (the source notes' "weighted by token
count", here: the shortest leaf first).

The heap that uses these keys, ``evict`` and ``reset`` are :class:`kvlab.reuse.radix_cache.RadixCache`'s.

Example:
    >>> sorted(EVICTION_POLICIES)
    ['fewest_tokens', 'lfu', 'lru']
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

__all__ = ["EvictionPolicy", "EVICTION_POLICIES", "get_eviction_policy"]


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


