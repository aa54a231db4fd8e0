"""kvlab.reuse: the logical layer, which cached KV a new request can reuse (pure Python).

    radix_cache.py       RadixCache: SGLang's radix tree over token ids (match, split, insert, lock, evict, invariants),
                         with its key (RadixKey), node (TreeNode), results and eviction order (EVICTION_POLICIES)
    radix_snapshot.py    NodeView, RadixSnapshot: the tree frozen for pictures and printing
    block_hash_cache.py  BlockHashCache: vLLM's hash-chained prefix cache, for comparison
    stats.py             HitStats: hits and misses, shared by both caches
    cache_manager.py     CacheManager: the one request cycle, the ownership rule, forks locking what another fork caches
    schedule.py          order_by_shared_prefix: fcfs, lpm, dfs-weight (cache-aware order)
    lifecycle.py         the states of a KV block and of a node, the legal edges, LifecycleTracker, replay
    hiradix_cache.py     HiRadixCache: the radix tree over a device pool, a host pool and storage (SGLang's HiCache):
                         placements, backup, evict, evict_host, load_back, saves, disk checks, storage lookup
    hiradix_node.py      Transfer, TierStats, HiMatchResult, TierSnapshot: its plain data
    hicache_storage.py   HiCacheStorage (the disk tier's interface), MemoryStorage, page_keys, kv_fingerprint
    hicache_manager.py   HiCacheManager: the request cycle over the tiers; CacheConfig, make_cache_manager
    offload.py           recompute or load back: break_even_tokens, offload_costs, LINKS

Imports only kvlab.memory.
"""
from __future__ import annotations

from .block_hash_cache import BlockHashCache, PrefixMatch, hash_block_tokens
from .cache_manager import Admission, CacheManager, ServeRecord, serve_request
from .hicache_manager import CacheConfig, HiCacheManager, make_cache_manager
from .hicache_storage import HiCacheStorage, MemoryStorage, kv_fingerprint, page_keys
from .hiradix_cache import WRITE_POLICIES, HiRadixCache
from .hiradix_node import TierSnapshot, TierStats, Transfer
from .lifecycle import LEGAL_EDGES, LifecycleTracker, replay
from .offload import LINKS, LinkSpec, break_even_tokens, offload_costs
from .radix_cache import (EVICTION_POLICIES, EvictionPolicy, EvictResult, InsertResult, MatchResult, RadixCache,
                          RadixKey, RadixStats, TreeNode)
from .radix_snapshot import NodeView, RadixSnapshot
from .schedule import SCHEDULE_POLICIES, order_by_shared_prefix, shared_prefix_lengths
from .stats import HitStats

__all__ = ["BlockHashCache", "PrefixMatch", "hash_block_tokens", "Admission", "CacheManager", "ServeRecord",
           "serve_request", "EVICTION_POLICIES", "EvictionPolicy", "EvictResult", "InsertResult", "MatchResult",
           "RadixCache", "RadixKey", "RadixStats", "TreeNode", "NodeView", "RadixSnapshot", "SCHEDULE_POLICIES",
           "order_by_shared_prefix", "shared_prefix_lengths", "HitStats",
           "CacheConfig", "HiCacheManager", "make_cache_manager", "HiCacheStorage", "MemoryStorage", "kv_fingerprint", "page_keys", "WRITE_POLICIES",
           "HiRadixCache", "TierSnapshot", "TierStats", "Transfer", "LEGAL_EDGES", "LifecycleTracker", "replay",
           "LINKS", "LinkSpec", "break_even_tokens", "offload_costs"]
