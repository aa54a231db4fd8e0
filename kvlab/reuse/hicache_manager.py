"""The request cycle over tiers: CacheManager with a host pool (and a disk tier) under its radix tree.

:class:`HiCacheManager` is :class:`~kvlab.reuse.cache_manager.CacheManager`'s cycle, unchanged
(it overrides none of its steps), over a :class:`~kvlab.reuse.hiradix_cache.HiRadixCache`: the
tiered tree plugs in where the plain cycle calls its tree, at one documented point for the
admission (``init_load_back``). What changes, step by step::

    admit(s, tokens)    match over the tiers: device pages, then host pages, then disk pages;
                        lock the device part; make room for the whole request (device eviction
                        keeps backed-up nodes on the host; write_back copies them there first);
                        then ``tree.init_load_back``: each disk page is read and checked (one
                        that is missing, corrupt or foreign is a miss: pruned here), storage is
                        asked for its longest run of pages for the rest of the prompt (a
                        restart, another engine), and the host and disk pages are loaded into
                        fresh device blocks (queued copies); the lock moves down: the request
                        adopts them like any hit
    cache_*_req         insert as before; write_through backs new nodes up (queued copies); a
                        node that was off the device and got recomputed takes the new blocks
    take_transfers()    the queued copies, in order, for the compute layer (the engine performs
                        them before each forward pass; pure-Python runs just drop them)

After every step the tree marks a lifecycle checkpoint (it subscribes to the cycle's events in
the log): each block whose state changed is one ``transition`` event (``kvlab.reuse.lifecycle``),
and ``check_integrity`` also checks that the tracker's states are the states of the pools now,
and that no illegal edge was taken.

The ownership rule of CacheManager holds on the device pool (``ref_count == tree + tables``);
on the host pool a block is held by at most one node and never by a table (``HiRadixCache``).

Mirrors SGLang's scheduler use of ``HiRadixCache`` (``match_prefix`` with ``host_hit_length``,
``init_load_back``, ``check_hicache_events``) and ``--hicache-ratio`` / ``--hicache-write-policy``.
Differences: copies are a queue drained synchronously, no prefetch thread; the load happens at
admission (SGLang loads in ``init_load_back`` when the request is scheduled: the same point), and
storage pages go straight to the device (SGLang prefetches them into the host pool first).

Example (block size 1, a device pool of 4 blocks, a host pool twice that):
    >>> cm = HiCacheManager(num_blocks=4, block_size=1, host_ratio=2, write_policy="write_through")
    >>> cm.admit("R1", [1, 2, 3]).prefix_len
    0
    >>> _ = cm.cache_finished_req("R1", [1, 2, 3])     # cached, and copied to the host
    >>> cm.admit("R2", [7, 8, 9]).prefix_len            # needs the device: R1's pages go (kept on the host)
    0
    >>> _ = cm.cache_finished_req("R2", [7, 8, 9])
    >>> a = cm.admit("R3", [1, 2, 3, 4])                # a host hit: loaded back, not recomputed
    >>> a.prefix_len, cm.tier_stats.loaded_tokens
    (3, 3)
    >>> [t.kind for t in cm.take_transfers()]
    ['write', 'write', 'load']
    >>> cm.check_integrity()
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..memory.block_pool import BlockAllocator
from ..memory.events import EventLog
from ..memory.ids import check_int
from .cache_manager import CacheManager
from .hicache_storage import HiCacheStorage
from .hiradix_cache import HiRadixCache
from .hiradix_node import TierSnapshot, TierStats, Transfer

__all__ = ["CacheConfig", "HiCacheManager", "make_cache_manager"]


MAX_HOST_BLOCKS = 1 << 24  # 16 M host blocks: far beyond any host pool a lesson or test builds


def _host_blocks(num_blocks: int, host_ratio: float | None, num_host_blocks: int | None) -> int:
    if num_host_blocks is not None:
        n = check_int("num_host_blocks", num_host_blocks, 1)
        if n > MAX_HOST_BLOCKS:
            raise ValueError(f"num_host_blocks {n} is more than {MAX_HOST_BLOCKS} (kvlab's bound)")
        return n
    if isinstance(host_ratio, bool) or not isinstance(host_ratio, (int, float)) or not math.isfinite(host_ratio) \
            or host_ratio <= 0:
        raise ValueError(f"host_ratio must be a number > 0 (host blocks per device block), got {host_ratio!r}")
    if num_blocks * host_ratio > MAX_HOST_BLOCKS:
        raise ValueError(f"host_ratio {host_ratio} x {num_blocks} device blocks is more than {MAX_HOST_BLOCKS} "
                         "host blocks (kvlab's bound)")
    n = int(num_blocks * host_ratio)
    if n < 1:
        raise ValueError(f"host_ratio {host_ratio} of {num_blocks} device blocks is no host block")
    return n


class HiCacheManager(CacheManager):
    """A device pool of ``num_blocks``, a host pool of ``host_ratio`` times as many blocks (or
    ``num_host_blocks``), the tiered radix tree over both, and the request cycle.

    ``write_policy``: "write_through" (default), "write_through_selective" (once
    ``write_through_threshold`` requests have inserted a node, SGLang's rule) or "write_back". ``storage``: a disk tier
    (``kvlab.reuse.hicache_storage.HiCacheStorage``), or None. ``load_back_threshold``: host or
    disk hits shorter than this many tokens are recomputed. ``track``: emit lifecycle transitions
    (default: unless ``log`` is a NullLog). ``storage_kw``: HiRadixCache's storage options
    (``prefetch_policy``, ``prefetch_threshold``, ``prefetch_timeout_s``, ``storage_write``,
    ``host_eviction_policy``). Other arguments as CacheManager's.
    """

    def __init__(self, num_blocks: int, block_size: int, *, host_ratio: float = 2.0, num_host_blocks: int | None = None,
                 write_policy: str = "write_through", storage: HiCacheStorage | None = None,
                 eviction_policy: str = "lru", log: EventLog | None = None, check_kv: bool = False,
                 write_through_threshold: int = 2, load_back_threshold: int = 1, track: bool | None = None,
                 **storage_kw) -> None:
        nh = _host_blocks(check_int("num_blocks", num_blocks, 1), host_ratio, num_host_blocks)
        allocator = BlockAllocator(num_blocks, block_size, log)
        tree = HiRadixCache(allocator, BlockAllocator(nh, block_size, allocator.log), block_size, eviction_policy,
                            check_kv, write_policy=write_policy, write_through_threshold=write_through_threshold,
                            load_back_threshold=load_back_threshold, storage=storage, track=track, **storage_kw)
        self._setup(allocator, tree)

    # ------------------------------------------------------------------ views
    @property
    def host_allocator(self) -> BlockAllocator:
        return self.tree.host_allocator

    @property
    def tier_stats(self) -> TierStats:
        return self.tree.tier_stats

    @property
    def write_policy(self) -> str:
        return self.tree.write_policy

    def snapshot_tiers(self, caption: str = "") -> TierSnapshot:
        """Both pools' block states now (for ``kvlab.viz.tier_view``)."""
        return self.tree.snapshot_tiers(caption)

    def take_transfers(self) -> list[Transfer]:
        """The copies queued since the last call, in the order they must run (see HiRadixCache)."""
        return self.tree.take_transfers()

    # ------------------------------------------------------------------ invariants
    def check_integrity(self) -> None:
        """CacheManager's checks (the device pool's ``ref_count == tree + tables``, locks on the
        tables' paths), the tree's placements and the host pool's rule, and the lifecycle: the
        tracker's states are the pools' states now, every transition taken was a legal edge."""
        super().check_integrity()
        tr = self.tree.tracker
        if tr is not None:
            assert tr.device == self.tree.device_states(), "lifecycle: device block states out of date"
            assert tr.host == self.tree.host_states(), "lifecycle: host block states out of date"
            live = {n.id: self.tree.placement(n) for n in self.tree.iter_nodes()}
            assert tr.nodes == live, "lifecycle: node placements out of date"


@dataclass(frozen=True)
class CacheConfig:
    """The cache's settings as one value, built once (by the engine) and passed down to
    :func:`make_cache_manager` and the tier copier (vLLM's ``CacheConfig``): the tree, and the
    tiers under it. A None tier option means the tiered tree's default.

    Example: ``CacheConfig(host_ratio=2, write_policy="write_back").tier_options()`` ->
    ``{'write_policy': 'write_back'}``."""

    radix: bool = True
    eviction_policy: str = "lru"
    host_ratio: float = 0.0
    num_host_blocks: int | None = None
    write_policy: str | None = None
    storage: Any = None
    prefetch_policy: str | None = None
    prefetch_threshold: int | None = None
    storage_write: str | None = None
    host_eviction_policy: str | None = None
    host_link: str = "pcie-gen5-x16"
    disk_link: str = "nvme-gen4"

    def tier_options(self) -> dict[str, Any]:
        """The tiered manager's options that were given (the None ones keep their defaults)."""
        names = ("num_host_blocks", "write_policy", "prefetch_policy", "prefetch_threshold", "storage_write",
                 "host_eviction_policy")
        return {k: getattr(self, k) for k in names if getattr(self, k) is not None}


def make_cache_manager(num_blocks: int, block_size: int, config: CacheConfig | None = None, *,
                       log: EventLog | None = None, check_kv: bool = False, **settings) -> CacheManager:
    """A CacheManager when ``config`` has no tier (``host_ratio`` 0, no ``num_host_blocks``, no
    storage: exactly the untiered manager), else a HiCacheManager. ``settings``: CacheConfig's
    fields, for a config built here (not together with ``config``).

    Example:
        >>> type(make_cache_manager(8, 4)).__name__, type(make_cache_manager(8, 4, host_ratio=2)).__name__
        ('CacheManager', 'HiCacheManager')
    """
    if config is not None and settings:
        raise TypeError(f"give the cache settings as config or as keywords, not both: {sorted(settings)}")
    c = config if config is not None else CacheConfig(**settings)
    given = c.tier_options()
    if not c.host_ratio and "num_host_blocks" not in given:
        if c.storage is not None or given:
            raise ValueError(f"{sorted(given) or ['storage']} need a host tier: give host_ratio > 0")
        return CacheManager(num_blocks, block_size, radix=c.radix, eviction_policy=c.eviction_policy, log=log,
                            check_kv=check_kv)
    if not c.radix:
        raise ValueError("tiers live under the radix tree: radix=False takes no host_ratio or storage")
    return HiCacheManager(num_blocks, block_size, host_ratio=c.host_ratio, storage=c.storage,
                          eviction_policy=c.eviction_policy, log=log, check_kv=check_kv, **given)
