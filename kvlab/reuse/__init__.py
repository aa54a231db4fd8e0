"""kvlab.reuse: the logical layer, which cached KV a new request can reuse (pure Python).

    radix_cache.py       RadixCache: SGLang's radix tree over token ids (match, insert, lock, evict)
    radix_snapshot.py    NodeView, RadixSnapshot: the tree frozen for pictures and printing
    eviction.py          EvictionPolicy, EVICTION_POLICIES: which leaf goes first
    block_hash_cache.py  BlockHashCache: vLLM's hash-chained prefix cache, for comparison
    stats.py             HitStats: hits and misses, shared by both caches
    cache_manager.py     CacheManager: the one request cycle and the ownership rule
    schedule.py          order_by_shared_prefix: fcfs, lpm, dfs-weight (cache-aware order)

Imports only kvlab.memory.
"""
from __future__ import annotations

from .block_hash_cache import BlockHashCache, PrefixMatch, hash_block_tokens
from .cache_manager import Admission, CacheManager, ServeRecord, serve_request
from .eviction import EVICTION_POLICIES, EvictionPolicy
from .radix_cache import EvictResult, InsertResult, MatchResult, RadixCache, RadixStats, TreeNode
from .radix_snapshot import NodeView, RadixSnapshot
from .schedule import SCHEDULE_POLICIES, order_by_shared_prefix, shared_prefix_lengths
from .stats import HitStats

__all__ = ["BlockHashCache", "PrefixMatch", "hash_block_tokens", "Admission", "CacheManager", "ServeRecord",
           "serve_request", "EVICTION_POLICIES", "EvictionPolicy", "EvictResult", "InsertResult", "MatchResult",
           "RadixCache", "RadixStats", "TreeNode", "NodeView", "RadixSnapshot", "SCHEDULE_POLICIES",
           "order_by_shared_prefix", "shared_prefix_lengths", "HitStats"]
