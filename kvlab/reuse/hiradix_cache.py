"""SGLang's HiCache in kvlab: one radix tree whose nodes keep their KV on the device, the host, both, or disk.

The device pool (GPU memory, L1) is the tree's allocator as in :class:`RadixCache`; the host
pool (pinned DRAM, L2) is a second :class:`BlockAllocator` of the same block size, usually a
ratio of the device pool; a storage tier (disk, L3) is optional (``kvlab.reuse.hicache_storage``).
Each node has a **placement** (``kvlab.reuse.lifecycle``): ``device`` (``value`` holds its device
blocks), ``both`` (plus ``host_value``), ``host`` (only ``host_value``), ``disk`` (only a chunk).
Placements nest: a node on the device has its parent on the device; a node on the device or
the host has its parent on one of them. So a prompt's match is device pages, then host pages,
then disk pages (HiCache's ``last_device_node``, ``last_host_node``).

Write policies (SGLang's ``--hicache-write-policy``): ``write_through`` backs a node up to the
host as soon as it is cached; ``write_through_selective`` once ``write_through_threshold``
(default 2) requests have inserted it: counted at insert, once per request, as SGLang's
``_inc_hit_count`` (which skips chunked-prefill inserts) -- so the second request that caches a
prefix backs it up (kvlab counted matches before, one request later); ``write_back`` only when
device eviction would drop it. Device eviction (:meth:`evict`) takes unlocked nodes without a
device child, LRU first: a backed-up one keeps its host copy (``both -> host``), any other is
dropped. Host eviction (:meth:`evict_host`) takes host-only nodes without a host child, in the
host policy's order (LRU, or ARC: ``kvlab.reuse.host_policy``): saved to disk, page by page
(the storage side, below), when a storage tier is attached, else dropped for good. :meth:`load_back` gives host and disk pages fresh
device blocks on a hit. The tree never touches a tensor or a file: every copy is a queued
:class:`Transfer` (``write`` device->host, ``load`` host->device, ``save`` host->disk,
``fetch`` disk->device), which the compute layer performs in queue order before the next
forward pass (``take_transfers``), as it performs copy-on-write copies.

Ownership on the host pool: a host block's ``ref_count`` is 1 while exactly one node's
``host_value`` holds it and 0 otherwise; no block table ever holds a host block. The device
pool keeps the rule of ``kvlab.reuse.cache_manager`` (``ref_count == tree + tables``); a node
off the device holds no device block. :meth:`check_integrity` checks both, and the placements.

Mirrors SGLang ``python/sglang/srt/mem_cache/hiradix_cache.py`` at commit 263bc85d (a 0.5.x
tree; the file is gone from 0.5.23) (``write_backup``, ``_inc_hit_count``, ``evict``,
``evict_host``, ``load_back``, ``host_value``, ``backuped``, ``evicted``) and ``memory_pool_host.py`` (the host pool as a ratio of the device pool). kvlab
differs: copies are a queue, not a background thread; pages saved to disk stay in the tree as
disk nodes, and, as SGLang does, storage is also asked for the pages it does not hold at all
(``lookup_storage``); a device leaf that must be dropped while nodes below
it are off the device takes them with it.

The whole class is in this file, in sections: placements and the transfer queue, lifecycle
checkpoints, split/match/insert over the tiers, the moves between tiers, the storage side, and
invariants. It is longer than 800 lines because it is one class: SGLang's ``hiradix_cache.py`` is
one file too. Its plain data types are in ``hiradix_node.py``.

**The storage side (L3)**: page keys of a node, saves, the disk check, and the lookup of pages
the tree does not hold (a restart, another engine on the same store), in the order of a request::

    admission   match over the tiers (device, host, disk nodes)
                check_disk(beyond): each disk page is read and checked now (storage.prefetch:
                    kept in memory for the queued fetch); the first page that fails, or whose
                    save is still queued, ends the match there: a miss, that node leaves the tree
                lookup_storage(tokens, after): for the full pages after the match, the storage's
                    longest run of present pages (batch_exists), if at least prefetch_threshold
                    tokens; read per the stop policy; a new disk node under the match's end
                load_back: those pages get device blocks and a queued "fetch"
    eviction    host eviction saves a host-only node's pages (a queued "save" per node, one key
                a page); storage_write="write_through" also saves when a host copy is made

Stop policies (SGLang's ``--hicache-storage-prefetch-policy``): kvlab reads synchronously at
admission (no I/O thread), so ``wait_complete`` reads every page of the run found, ``timeout``
stops once ``prefetch_timeout_s`` measured seconds are spent (the pages read by then are used,
the rest recomputed), and ``best_effort`` (SGLang's default: never hold a request for its
prefetch) reads what one batch read returns, which here is the same as ``wait_complete``.
SGLang's own defaults are a 256-token ``prefetch_threshold`` and a timeout of 1 s + 0.25 s per
1,024 tokens (``unified_radix_cache.py``); kvlab's default threshold is one page, for lesson sizes.

Example (block size 1; write_back: a node is copied to the host only when evicted):
    >>> dev, host = BlockAllocator(4, 1), BlockAllocator(4, 1)
    >>> tree = HiRadixCache(dev, host, write_policy="write_back")
    >>> _ = tree.insert([1, 2], dev.allocate(2))
    >>> tree.evict(2).num_tokens, tree.placement(tree.root.children[1]), tree.host_size()
    (2, 'host', 2)
    >>> tree.evict_host(2).num_tokens, tree.num_nodes        # no storage tier: gone for good
    (2, 0)

Example (block size 1; a store of pages saved by an earlier run of the same model):
    >>> from kvlab.reuse.hicache_storage import MemoryStorage
    >>> store = MemoryStorage("fp")
    >>> for k in page_keys([1, 2, 3], 1, "fp"): store.add(k)
    >>> tree = HiRadixCache(BlockAllocator(8, 1), BlockAllocator(8, 1), storage=store)
    >>> node = tree.lookup_storage([1, 2, 3, 4], tree.root)
    >>> node.key, tree.placement(node), tree.tier_stats.storage_hit_tokens
    ([1, 2, 3], 'disk', 3)

Example (block size 1; write_through: every cached page is copied to the host at once):
    >>> dev, host = BlockAllocator(4, 1), BlockAllocator(8, 1)
    >>> tree = HiRadixCache(dev, host, write_policy="write_through")
    >>> _ = tree.insert([1, 2, 3], dev.allocate(3))
    >>> [(t.kind, t.src, t.dst) for t in tree.take_transfers()]       # device -> host
    [('write', (0, 1, 2), (0, 1, 2))]
    >>> tree.evict(3).num_tokens, tree.placement(tree.root.children[1])  # backed up: kept on the host
    (3, 'host')
    >>> m = tree.match_prefix([1, 2, 3, 4])
    >>> m.prefix_len, m.host_hit_length                                  # on the device / on the host
    (0, 3)
    >>> tree.load_back(list(m.beyond))
    [3, 0, 1]
    >>> [(t.kind, t.src, t.dst) for t in tree.take_transfers()]        # host -> device
    [('load', (0, 1, 2), (3, 0, 1))]
    >>> tree.check_integrity()
"""
from __future__ import annotations

import heapq
import time
from typing import Iterable, Sequence

from ..memory.block_pool import BlockAllocator, KVCacheError
from ..memory.events import Event, NullLog
from ..memory.ids import check_int
from .hicache_storage import HiCacheStorage
from .hicache_storage import leading, page_keys
from .hiradix_node import HiMatchResult, TierSnapshot, TierStats, Transfer
from .lifecycle import LifecycleTracker
from .host_policy import make_host_policy
from .radix_cache import RadixCache
from .radix_cache import EvictResult, InsertResult, TreeNode

__all__ = ["WRITE_POLICIES", "PREFETCH_POLICIES", "STORAGE_WRITES", "HiRadixCache"]  # types: hiradix_node

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
STORAGE_WRITES = ("on_host_evict", "write_through")
CYCLE_STEPS = frozenset({"admit", "append", "fork", "cache", "free_seq"})  # events that end a step of the cycle


class HiRadixCache(RadixCache):
    """A radix tree over a device pool (``allocator``) and a host pool (``host_allocator``).

    ``write_policy``: one of WRITE_POLICIES. ``write_through_threshold``: for
    ``write_through_selective``, the number of requests that must have inserted a node before it
    is backed up (SGLang's rule and default: counted at insert, 2). ``load_back_threshold``: fewer
    host/disk tokens than this on a match are recomputed instead of loaded (SGLang's
    ``load_back_threshold``). ``storage``: a HiCacheStorage for the disk tier, or None.
    ``prefetch_policy``, ``prefetch_threshold``, ``prefetch_timeout_s``, ``storage_write``: how
    pages come from and go to storage (the storage side in the module docstring). ``host_eviction_policy``:
    the order host-only nodes leave the host pool (default: the device's ``eviction_policy``).
    ``track``: emit lifecycle transitions (default: unless the log is a NullLog; True with a NullLog is a
    ValueError).
    """

    def __init__(self, allocator: BlockAllocator, host_allocator: BlockAllocator, page_size: int = 1,
                 eviction_policy: str = "lru", check_kv: bool = True, *, write_policy: str = "write_through",
                 write_through_threshold: int = 2, load_back_threshold: int = 1,
                 storage: HiCacheStorage | None = None, track: bool | None = None,
                 prefetch_policy: str = "wait_complete", prefetch_threshold: int = 1,
                 prefetch_timeout_s: float = 1.0, storage_write: str = "on_host_evict",
                 host_eviction_policy: str | None = None) -> None:
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"unknown write_policy {write_policy!r}; choose one of {WRITE_POLICIES}")
        if not isinstance(host_allocator, BlockAllocator) or host_allocator.block_size != allocator.block_size:
            raise ValueError("host_allocator must be a BlockAllocator with the device pool's block_size "
                             f"{allocator.block_size}, got {host_allocator!r}")
        if host_allocator is allocator:
            raise ValueError("host_allocator is the device pool itself: the host tier needs its own BlockAllocator")
        if storage is not None and not isinstance(storage, HiCacheStorage):
            raise TypeError("storage must have fingerprint, exists, batch_exists, prefetch, add, remove "
                            f"(a HiCacheStorage), got {storage!r}")
        self._storage_options(prefetch_policy, prefetch_threshold, prefetch_timeout_s, storage_write)
        self.write_through_threshold = check_int("write_through_threshold", write_through_threshold, 1)
        self.load_back_threshold = check_int("load_back_threshold", load_back_threshold, 0)
        super().__init__(allocator, page_size, eviction_policy, check_kv)
        self._tree_blocks = set() if check_kv else None  # kept from the start: device blocks come and go
        self.host_allocator = host_allocator
        self.write_policy = write_policy
        self.storage = storage
        self.tier_stats = TierStats()
        self.host_value: dict[int, list[int]] = {}        # node id -> its host blocks (SGLang's host_value)
        self.disk_ref: dict[int, list[str]] = {}          # node id -> its pages' storage keys (placement disk)
        self._saving: set[str] = set()                    # page keys a queued "save" writes
        self._inserted_by: dict[int, set] = {}            # node id -> requests that inserted it (selective)
        self.host_policy = make_host_policy(host_eviction_policy or eviction_policy, host_allocator.num_blocks)
        self._tiered: dict[int, TreeNode] = {}            # nodes with a host copy or a disk chunk
        self._offloaded = 0                               # tokens of nodes off the device
        self._transfers: list[Transfer] = []
        self._loading: set[int] = set()                   # device blocks a queued copy writes
        self._writing: set[int] = set()                   # host blocks a queued copy writes
        self._protected_host: set[int] = set()            # nodes a running admission is about to load
        track = not isinstance(allocator.log, NullLog) if track is None else track
        if track and isinstance(allocator.log, NullLog):
            raise ValueError("track=True needs an EventLog to record transitions in (the pool's log is a NullLog)")
        self.tracker = LifecycleTracker(self.log, allocator.num_blocks, host_allocator.num_blocks) if track else None
        if self.tracker is not None:  # a checkpoint after each step of the request cycle (see checkpoint)
            self.log.subscribe(self._after_step)

    # ------------------------------------------------------------------ placement
    def placement(self, node: TreeNode) -> str:
        """"device", "both", "host" or "disk" (see the module docstring)."""
        if node.value:
            return "both" if node.id in self.host_value else "device"
        return "host" if node.id in self.host_value else "disk"

    def _note(self, node: TreeNode, cause: str, rid: str | None, dst: str | None = None) -> None:
        if self.tracker is not None:
            self.tracker.node(node.id, dst or self.placement(node), cause, node.value or self.host_value.get(node.id, ()),
                              rid)

    def evictable_size(self) -> int:
        """Device tokens eviction could free now (unlocked nodes on the device)."""
        return self._evictable_size - self._offloaded

    def total_size(self) -> int:
        """Tokens on the device."""
        return self._evictable_size + self._protected_size - self._offloaded

    def host_size(self) -> int:
        """Tokens with a host copy (placement both or host)."""
        return sum(len(self._tiered[i].key) for i in self.host_value)

    def disk_size(self) -> int:
        """Tokens only on disk."""
        return sum(len(self._tiered[i].key) for i in self.disk_ref)

    def _prefix_tokens(self, node: TreeNode) -> list[int]:
        parts = []
        n = node
        while n is not self.root:
            parts.append(n.key)
            n = n.parent
        return [t for p in reversed(parts) for t in p]

    def _content(self, node: TreeNode) -> str:
        """What ``node``'s KV is (its whole prefix), for the host policy's ghosts."""
        return str(hash(tuple(self._prefix_tokens(node))))

    def _queue(self, t: Transfer) -> None:
        self._transfers.append(t)
        if t.kind == "write":
            self._writing.update(t.dst)
        elif t.kind in ("load", "fetch"):
            self._loading.update(t.dst)
        elif t.kind == "save":
            self._saving.update(t.keys)

    def take_transfers(self) -> list[Transfer]:
        """The queued copies, in the order they must run (and clear the queue: they are done)."""
        out, self._transfers = self._transfers, []
        self._loading.clear()
        self._writing.clear()
        self._saving.clear()
        self.checkpoint("transfers done")
        return out

    @property
    def pending_transfers(self) -> list[Transfer]:
        return list(self._transfers)

    # ------------------------------------------------------------------ lifecycle
    def device_states(self) -> list[str]:
        """Each device block's lifecycle state (kvlab.reuse.lifecycle.DEVICE_STATES)."""
        rc, tree, load = self.allocator.ref_count, set(self.tree_block_ids()), self._loading
        return ["free" if not c else ("loading" if b in load else "locked" if c >= 2 else "cached") if b in tree
                else "allocated" for b, c in enumerate(rc)]

    def host_states(self) -> list[str]:
        """Each host block's lifecycle state (kvlab.reuse.lifecycle.HOST_STATES)."""
        out = ["free"] * self.host_allocator.num_blocks
        for nid, hv in self.host_value.items():
            s = "backup" if self._tiered[nid].value else "host"
            for b in hv:
                out[b] = "writing" if b in self._writing else s
        return out

    def checkpoint(self, cause: str, rid: str | None = None, device: bool = True) -> None:
        """Emit the block transitions since the last checkpoint, each with ``cause``. The tree calls
        it after its own steps, and after each step of the request cycle that changes block
        states outside it: the events in :data:`CYCLE_STEPS` (``admit``, ``append``, ``fork``,
        ``cache``, ``free_seq``, recorded by the cache manager and ``BlockManager``), through a
        subscription to the log. So any CacheManager over this tree is tracked, unchanged."""
        if self.tracker is not None:
            if device:
                self.tracker.observe("device", self.device_states(), cause, rid)
            self.tracker.observe("host", self.host_states(), cause, rid)

    def _after_step(self, e: Event) -> None:
        if e.kind in CYCLE_STEPS:
            self.checkpoint(e.kind, e.seq_id)

    def snapshot_tiers(self, caption: str = "") -> TierSnapshot:
        dev = [0] * self.allocator.num_blocks
        host = [0] * self.host_allocator.num_blocks
        places = {}
        for n in self.iter_nodes():
            places[n.id] = self.placement(n)
            for b in n.value:
                dev[b] = n.id
            for b in self.host_value.get(n.id, ()):
                host[b] = n.id
        disk = sorted((n.id, len(n.key) // self.page_size) for n in self.iter_nodes() if places[n.id] == "disk")
        return TierSnapshot(tuple(self.device_states()), tuple(self.host_states()), tuple(dev), tuple(host), places,
                            caption, tuple(disk))

    # ------------------------------------------------------------------ split, match, insert
    def _split(self, child: TreeNode, m: int) -> TreeNode:
        new = super()._split(child, m)
        k = m // self.page_size
        if child.id in self.host_value:
            hv = self.host_value[child.id]
            self.host_value[new.id], self.host_value[child.id] = hv[:k], hv[k:]
        if child.id in self.disk_ref:
            keys = self.disk_ref[child.id]
            self.disk_ref[new.id], self.disk_ref[child.id] = keys[:k], keys[k:]
        if child.id in self._inserted_by:
            self._inserted_by[new.id] = set(self._inserted_by[child.id])
        if child.id in self.host_value:
            self.host_policy.split(child.id, new.id, k)
        if child.id in self._tiered:
            self._tiered[new.id] = new
        if child.id in self._protected_host:
            self._protected_host.add(new.id)
        self._note(new, "split", None)
        return new

    def _match(self, key: list, limit: int, rid: str | None, record_stats: bool) -> HiMatchResult:
        """RadixCache's match (split, refresh), then the part of it off the device; a selective
        write-through backs up the matched device nodes hit often enough."""
        self._protected_host = set()
        m = super()._match(key, limit, rid, False)
        node, beyond = m.last_node, []
        while node is not self.root and not node.value:
            beyond.append(node)
            node = node.parent
        beyond.reverse()
        host = sum(len(n.key) for n in beyond if n.id in self.host_value)
        disk = sum(len(n.key) for n in beyond) - host
        dev_len = m.prefix_len - host - disk
        self._protected_host = {n.id for n in beyond}  # until init_load_back or the next match (a refusal keeps it)
        n = m.last_node
        while n is not self.root:  # the host policy sees which host copies a request uses
            if n.id in self.host_value:
                self.host_policy.touch(n.id)
            n = n.parent
        if record_stats:
            s = self.stats
            s.num_matches += 1
            s.hit_tokens += m.prefix_len
            s.missed_tokens += len(key) - m.prefix_len
            self.tier_stats.host_hit_tokens += host
            self.tier_stats.disk_hit_tokens += disk
        return HiMatchResult(dev_len, m.kv, node, tuple(beyond), host, disk)

    def _insert(self, key: list, kv: list[int], rid: str | None, share: bool, walk: tuple | None = None) -> InsertResult:
        """RadixCache's insert, after giving the caller's blocks to matched nodes that are off the
        device (their KV was just recomputed: ``host -> both``, ``disk -> device``); then, for
        write_through, back up the path."""
        self.checkpoint("allocate", rid)
        node, pos, child, m = walk if walk is not None else self._walk(key, len(key))
        if child is not None and not child.value:
            node, pos, walk = self._split(child, m), pos + m, None
        if node is not self.root and not node.value:
            self._reattach(node, pos, kv, rid)
            walk = None
        known = self.tracker.nodes if self.tracker is not None else None
        res = super()._insert(key, kv, rid, share, walk)
        if known is not None and res.last_node.id not in known:
            self._note(res.last_node, "insert", rid)
        if self.write_policy != "write_back":
            path, n = [], res.last_node
            while n is not self.root:
                path.append(n)
                n = n.parent
            for n in reversed(path):
                if self.write_policy == "write_through_selective":  # SGLang's inc_hit_count at insert
                    seen = self._inserted_by.setdefault(n.id, set())
                    seen.add(rid if rid is not None else object())
                    if len(seen) < self.write_through_threshold:
                        continue
                if n.id not in self.host_value and not self.backup(n, rid, self.write_policy):
                    break
        self.checkpoint("insert", rid)
        return res

    def _reattach(self, node: TreeNode, end: int, kv: list[int], rid: str | None) -> None:
        """``node`` and the ancestors off the device (their tokens end at ``end``) take the
        caller's blocks for their positions, with a reference of the tree's own."""
        chain, n, e, ps = [], node, end, self.page_size
        while n is not self.root and not n.value:
            chain.append((n, e))
            e -= len(n.key)
            n = n.parent
        for n, e in reversed(chain):
            blocks = list(kv[(e - len(n.key)) // ps:e // ps])
            self.allocator.touch(blocks, rid, record=False)
            n.value = blocks
            self._offloaded -= len(n.key)
            if self._tree_blocks is not None:
                self._tree_blocks.update(blocks)
            if self.disk_ref.pop(n.id, None) is not None and n.id not in self.host_value:
                del self._tiered[n.id]
            self._note(n, "recompute", rid)
        self.checkpoint("recompute", rid)

    def reset(self) -> None:
        """Drop everything on every tier (raises if a node is still locked)."""
        if self._protected_size:
            raise KVCacheError(f"reset: {self._protected_size} token(s) are still locked")
        self._protected_host = set()
        for c in list(self.root.children.values()):
            dev = self._remove(c, "reset", None)
            self.allocator.free_blocks(dev, None, record=False)
            self._loading.difference_update(dev)

    # ------------------------------------------------------------------ moves between tiers
    # backup (device -> host), evict (device -> host or gone), evict_host (host -> disk or gone),
    # load_back (host or disk -> device); init_load_back is where CacheManager.admit calls in.
    # Mirrors SGLang's write_backup, evict (_evict_backuped / _evict_regular), evict_host,
    # load_back, init_load_back.
    def backup(self, node: TreeNode, rid: str | None = None, cause: str = "write_through") -> bool:
        """Copy a device node to the host (SGLang's ``write_backup``): host blocks (host eviction
        first when short) and a queued "write"; ``device -> both``. False, with nothing changed,
        when even host eviction cannot make room."""
        self._check_node(node, "backup")
        if node is self.root:
            raise KVCacheError("backup: the root holds no KV")
        n, ha = len(node.value), self.host_allocator
        if node.id in self.host_value:
            return True
        if not n or n > ha.num_blocks:
            return False
        if ha.num_free_blocks < n:
            if ha.num_free_blocks + self._host_evictable() < n:
                return False  # host eviction could not make room: evict nothing for nothing
            self.evict_host((n - ha.num_free_blocks) * self.page_size, rid)
            self.checkpoint(cause, rid, device=False)
            if ha.num_free_blocks < n:
                return False
        hv = ha.get_new_blocks(n, None, record=False)
        self.host_value[node.id] = hv
        self.host_policy.store(node.id, n, self._content(node))
        self._tiered[node.id] = node
        self._queue(Transfer("write", tuple(node.value), tuple(hv), node=node.id))
        self.tier_stats.written_tokens += len(node.key)
        self.log.record("write", rid, hv, node=node.id, src=list(node.value), policy=cause)
        self._note(node, cause, rid)
        self.checkpoint(cause, rid, device=False)
        if self.storage is not None and self.storage_write == "write_through":
            self._save_pages(node, hv, rid)  # queued after the write: it reads the host copy
        return True

    def _device_leaves(self) -> list[TreeNode]:
        return [n for n in self.iter_nodes()
                if n.value and not n.lock_ref and not any(c.value for c in n.children.values())]

    def evict(self, num_tokens: int, rid: str | None = None) -> EvictResult:
        """Free at least ``num_tokens`` device tokens from unlocked nodes with no child on the device,
        in policy order. A node with a host copy stays in the tree on the host (``both -> host``);
        write_back first copies one that has none; any other is dropped (with the nodes below it,
        all off the device). Frees less, and says so, when less is evictable."""
        num_tokens = check_int("num_tokens", num_tokens, 0)
        prio, root = self.policy.priority, self.root
        heap = [(prio(n), n.id, n) for n in self._device_leaves()]
        heapq.heapify(heap)
        freed, blocks, ids, kept = 0, [], [], []
        while freed < num_tokens and heap:
            _, _, x = heapq.heappop(heap)
            parent, ln, dev = x.parent, len(x.key), x.value
            if x.id not in self.host_value and self.write_policy == "write_back":
                self.backup(x, rid, "write_back")
            if x.id in self.host_value:
                x.value = []
                self._offloaded += ln
                if self._tree_blocks is not None:
                    self._tree_blocks.difference_update(dev)
                kept.append(x.id)
                self._note(x, "evict", rid)
                self.checkpoint("evict", rid, device=False)  # its host blocks: backup -> host
            else:
                self._remove(x, "evict", rid)
            self.allocator.free_blocks(dev, rid, record=False)
            self._loading.difference_update(dev)  # a queued copy into them is wasted now
            freed += ln
            blocks += dev
            ids.append(x.id)
            if parent is not root and not parent.lock_ref and not any(c.value for c in parent.children.values()):
                heapq.heappush(heap, (prio(parent), parent.id, parent))
        if blocks:
            self.stats.evicted_tokens += freed
            self.stats.evicted_nodes += len(ids)
        self.log.record("evict", rid, blocks, requested=num_tokens, num_tokens=freed, nodes=ids, kept_on_host=kept,
                        policy=self.policy.name)
        self.checkpoint("evict", rid)
        return EvictResult(num_tokens, freed, blocks, ids)

    def _remove(self, node: TreeNode, cause: str, rid: str | None) -> list[int]:
        """Take ``node`` and everything below it (all unlocked) out of the tree; free their host
        blocks; returns their device blocks (the caller frees those)."""
        del node.parent.children[self._child_key(node.key)]
        node.parent = None
        stack, dev = [node], []
        while stack:
            n = stack.pop()
            stack.extend(n.children.values())
            self.num_nodes -= 1
            self._evictable_size -= len(n.key)
            if n.value:
                dev += n.value
                if self._tree_blocks is not None:
                    self._tree_blocks.difference_update(n.value)
            else:
                self._offloaded -= len(n.key)
            hv = self.host_value.get(n.id)
            if hv:
                self.host_policy.evicted(n.id, "")
            self.host_value.pop(n.id, None)
            if hv:
                self.host_allocator.free_blocks(hv, rid, record=False)
                self._writing.difference_update(hv)
                self.tier_stats.host_dropped_tokens += len(n.key)
            self.disk_ref.pop(n.id, None)
            self._tiered.pop(n.id, None)
            self._inserted_by.pop(n.id, None)
            self._protected_host.discard(n.id)
            self._note(n, cause if n is node else "drop", rid, "evicted")
        self.checkpoint(cause, rid, device=False)  # host blocks freed with the nodes: host -> free, now
        return dev

    def _host_evictable(self) -> int:
        """Host blocks host eviction could free now (host-only nodes not about to be loaded)."""
        return sum(len(hv) for i, hv in self.host_value.items()
                   if not self._tiered[i].value and i not in self._protected_host)

    def _host_leaf(self, n: TreeNode) -> bool:
        return (not n.value and n.id in self.host_value and n.id not in self._protected_host
                and not any(c.id in self.host_value for c in n.children.values()))

    def evict_host(self, num_tokens: int, rid: str | None = None) -> EvictResult:
        """Free at least ``num_tokens`` host tokens (whole pages) from host-only nodes with no child
        on the host, in the host policy's order (``kvlab.reuse.host_policy``): each is saved to disk
        (``host -> disk``; a queued "save" unless the chunk exists already) with a storage tier,
        else dropped. Counts tokens, as :meth:`evict` and SGLang's ``evict_host(num_tokens)``;
        returns the tokens freed (less when less is evictable, and says so) and the host blocks."""
        num_tokens = check_int("num_tokens", num_tokens, 0)
        prio = self.host_policy.priority
        cands = {n.id: n for n in list(self._tiered.values()) if self._host_leaf(n)}
        freed, ids, blocks = 0, [], []
        while freed < num_tokens and cands:
            x = min(cands.values(), key=lambda n: (prio(n), n.id))  # asked again each time: ARC re-decides
            del cands[x.id]
            parent = x.parent
            self.host_policy.evicted(x.id, self._content(x))
            hv = self.host_value.pop(x.id)
            if self.storage is not None:
                self.disk_ref[x.id] = self._save_pages(x, hv, rid)
                self._note(x, "evict_host", rid)
            else:
                self.host_value[x.id] = hv  # _remove frees it with the node
                self._remove(x, "evict_host", rid)
                hv = []
            if hv:
                self.host_allocator.free_blocks(hv, rid, record=False)
                self._writing.difference_update(hv)
            freed += len(x.key)
            blocks += hv
            ids.append(x.id)
            if parent is not self.root and self._host_leaf(parent):
                cands[parent.id] = parent
        self.log.record("evict_host", rid, blocks, requested=num_tokens,
                        num_tokens=freed, nodes=ids, to_disk=self.storage is not None)
        self.checkpoint("evict_host", rid, device=False)
        return EvictResult(num_tokens, freed, blocks, ids)

    # ------------------------------------------------------------------ load back
    def init_load_back(self, m: HiMatchResult, key: list, limit: int, rid: str | None = None) -> HiMatchResult:
        """The match a request adopts, once the cache manager has made room (called by
        ``CacheManager.admit``; SGLang's ``init_load_back``): the disk pages of ``m.beyond`` are read
        and checked (``check_disk``: a page that fails ends the match there), storage is asked for
        the pages of ``key[:limit]`` the tree does not hold (``lookup_storage``), and when at least
        ``load_back_threshold`` tokens are off the device they get fresh device blocks
        (``load_back``: queued copies) and the lock moves from ``m.last_node`` down to the last of
        them. Otherwise ``m`` itself (the host and disk hits are recomputed: ``skipped_tokens``).
        The room made covers these blocks: they are part of the request's blocks not matched on
        the device."""
        self.checkpoint("match", rid)
        beyond = self.check_disk(m.beyond, rid) if m.beyond else []
        if self.storage is not None:  # L3: pages the tree does not hold at all
            found = self.lookup_storage(key[:limit], beyond[-1] if beyond else m.last_node, rid)
            if found is not None:
                beyond.append(found)
                self.checkpoint("storage_hit", rid)
        tokens = sum(len(n.key) for n in beyond)
        if not beyond or tokens < self.load_back_threshold:
            self.tier_stats.skipped_tokens += tokens
            self._protected_host = set()
            return m
        blocks = self.load_back(beyond, rid)
        last = beyond[-1]
        self.inc_lock_ref(last, rid)
        if m.last_node is not self.root:
            self.dec_lock_ref(m.last_node, rid)
        return HiMatchResult(m.prefix_len + tokens, m.kv + blocks, last)

    def load_back(self, nodes: Sequence[TreeNode], rid: str | None = None) -> list[int]:
        """Give ``nodes`` (a match's ``beyond``, top down, none on the device) fresh device blocks
        and queue their copies ("load" from the host, "fetch" from disk); ``host -> both``,
        ``disk -> device``. The caller makes room first: raises OutOfBlocks (nothing changed) when
        the pool is short. Returns the new device blocks."""
        nodes = list(nodes)
        for i, n in enumerate(nodes):
            self._check_node(n, "load_back")
            if n is self.root:
                raise KVCacheError("load_back: the root holds no KV")
            parent_ok = (n.parent is self.root or n.parent.value) if i == 0 else n.parent is nodes[i - 1]
            if n.value or not parent_ok:
                raise KVCacheError(f"load_back: node {n.id} is on the device or does not continue the path")
        total = sum(len(n.key) for n in nodes) // self.page_size
        blocks = self.allocator.allocate(total, rid) if total else []
        off = 0
        for n in nodes:
            k = len(n.key) // self.page_size
            dev = blocks[off:off + k]
            off += k
            n.value = dev
            self._offloaded -= len(n.key)
            if self._tree_blocks is not None:
                self._tree_blocks.update(dev)
            if n.id in self.host_value:
                self._queue(Transfer("load", tuple(self.host_value[n.id]), tuple(dev), node=n.id))
                self.tier_stats.loaded_tokens += len(n.key)
            else:
                keys = self.disk_ref.pop(n.id)
                del self._tiered[n.id]
                self._queue(Transfer("fetch", (), tuple(dev), keys=tuple(keys), node=n.id))
                self.tier_stats.fetched_tokens += len(n.key)
            self._note(n, "load_back", rid)
        self._protected_host.difference_update(n.id for n in nodes)
        if nodes:
            self.log.record("load_back", rid, blocks, nodes=[n.id for n in nodes], num_tokens=total * self.page_size)
        self.checkpoint("load_back", rid)
        return blocks

    # ------------------------------------------------------------------ storage (L3)
    # (the order of a request and the stop policies: the module docstring)
    def _storage_options(self, policy: str, threshold: int, timeout_s: float, storage_write: str) -> None:
        if policy not in PREFETCH_POLICIES:
            raise ValueError(f"unknown prefetch_policy {policy!r}; choose one of {PREFETCH_POLICIES}")
        if storage_write not in STORAGE_WRITES:
            raise ValueError(f"unknown storage_write {storage_write!r}; choose one of {STORAGE_WRITES}")
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s >= 0 \
                or timeout_s == float("inf"):
            raise ValueError(f"prefetch_timeout_s must be a finite number >= 0, got {timeout_s!r}")
        self.prefetch_policy = policy
        self.prefetch_threshold = check_int("prefetch_threshold", threshold, 0)
        self.prefetch_timeout_s = float(timeout_s)
        self.storage_write = storage_write

    # ------------------------------------------------------------------ keys and saves
    def node_keys(self, node: TreeNode) -> list[str]:
        """The storage keys of ``node``'s pages (a hash chain over the whole prefix to its end)."""
        prefix = self._prefix_tokens(node)
        return page_keys(prefix, self.page_size, self.storage.fingerprint)[-(len(node.key) // self.page_size):]

    def _save_pages(self, node: TreeNode, host_blocks: Sequence[int], rid: str | None) -> list[str]:
        """Queue one "save" of the pages of ``node`` (held in ``host_blocks``) that storage does
        not hold yet; returns all its page keys."""
        keys = self.node_keys(node)
        todo = [(b, k) for b, k in zip(host_blocks, keys) if k not in self._saving and not self.storage.exists(k)]
        if todo:
            for _, k in todo:
                self.storage.add(k)
            self._queue(Transfer("save", tuple(b for b, _ in todo), (), keys=tuple(k for _, k in todo), node=node.id))
            self.tier_stats.saved_tokens += len(todo) * self.page_size
            self.log.record("save", rid, [b for b, _ in todo], node=node.id, num_pages=len(todo))
        return keys

    # ------------------------------------------------------------------ reads
    def _nodes_arg(self, nodes, what: str) -> list[TreeNode]:
        if isinstance(nodes, (str, bytes)) or not hasattr(nodes, "__iter__"):
            raise TypeError(f"{what}: expected a sequence of tree nodes, got {nodes!r}")
        nodes = list(nodes)
        for n in nodes:
            self._check_node(n, what)
            if n is self.root:
                raise KVCacheError(f"{what}: the root holds no KV")
        return nodes

    def _readable(self, keys: Sequence[str]) -> int:
        """How many of ``keys``, from the first, are read and checked now (kept for the fetch),
        under the stop policy. A page whose save is still queued is not readable yet."""
        keys = keys[:leading(keys, lambda k: k not in self._saving)]
        if self.storage is None or not keys:
            return 0
        if self.prefetch_policy != "timeout":
            return self.storage.prefetch(keys)
        t0, n = time.perf_counter(), 0
        while n < len(keys) and self.storage.prefetch(keys[n:n + 1]) == 1:
            n += 1
            if time.perf_counter() - t0 > self.prefetch_timeout_s:
                break
        return n

    def check_disk(self, nodes: Sequence[TreeNode], rid: str | None = None) -> list[TreeNode]:
        """``nodes`` (a match's ``beyond``) up to the first disk page that cannot be read now (missing,
        corrupt, foreign, or its save still queued); from that page on the node leaves the tree with
        everything below it (a miss, never a wrong answer). The pages kept are read and checked
        (``storage.prefetch``), so their fetch cannot fail."""
        nodes = self._nodes_arg(nodes, "check_disk")
        ps = self.page_size
        for i, n in enumerate(nodes):
            keys = self.disk_ref.get(n.id)
            if keys is None:
                continue
            ok = self._readable(keys)
            if ok == len(keys):
                continue
            bad = keys[ok]
            if self.storage is not None and bad not in self._saving:
                self.storage.remove(bad)
            self.tier_stats.disk_misses += 1
            self.log.record("disk_miss", rid, (), node=n.id, key=bad)
            kept = [self._split(n, ok * ps)] if ok else []   # the readable pages stay, as their own node
            self._remove(n, "miss", rid)
            return nodes[:i] + kept
        return nodes

    def lookup_storage(self, tokens: Sequence[int], after: TreeNode, rid: str | None = None) -> TreeNode | None:
        """The pages of ``tokens`` (the admission's key, capped) after ``after`` (where the match
        over the tiers ends) that storage holds, as a new disk node under ``after``; None when it
        holds fewer than ``prefetch_threshold`` tokens of them (or one page)."""
        if self.storage is None:
            return None
        self._check_node(after, "lookup_storage")
        ps, start = self.page_size, len(self._prefix_tokens(after))
        pages = len(tokens) // ps
        if (pages * ps - start) < max(ps, self.prefetch_threshold) or tokens[:start] != self._prefix_tokens(after):
            return None
        if self._child_key(list(tokens), start) in after.children:
            return None  # the tree holds more than the match used (a capped match): nothing to look up
        keys = page_keys(tokens[:pages * ps], ps, self.storage.fingerprint)[start // ps:]
        found = self.storage.batch_exists(keys)
        if not found or found * ps < self.prefetch_threshold:
            return None
        n = self._readable(keys[:found])
        if not n or n * ps < self.prefetch_threshold:
            return None
        node = TreeNode(self._next_id, list(tokens[start:start + n * ps]), [], after, self._tick())
        self._next_id += 1
        after.children[self._child_key(node.key)] = node
        self.num_nodes += 1
        self._evictable_size += len(node.key)
        self._offloaded += len(node.key)
        self.disk_ref[node.id] = keys[:n]
        self._tiered[node.id] = node
        self.tier_stats.storage_hit_tokens += len(node.key)
        self.log.record("storage_hit", rid, (), node=node.id, num_tokens=len(node.key))
        self._note(node, "storage_hit", rid)
        return node

    # ------------------------------------------------------------------ integrity
    def check_integrity(self, holders: Iterable[Sequence[int]] = (), locks: Iterable[TreeNode] | None = None) -> None:
        """Raise AssertionError unless the tree and both pools agree.

        The tree's structure (parents, page-aligned keys, children keyed by first page, lock
        counts, evictable and protected sizes); placements: every node has a copy, one block per
        page on each tier it is on, device nodes under device nodes, host-or-device nodes under
        host-or-device nodes, a locked node on the device; the device pool's rule (``ref_count ==
        tree + holders``, each block in one node) and the host pool's (each host block held by
        exactly one node, ``ref_count`` 1, nobody else); the side tables name live nodes only.
        """
        ps = self.page_size
        seen_dev: set[int] = set()
        seen_host: set[int] = set()
        unlocked = locked = offloaded = count = 0
        live: set[int] = set()
        for node in self._checked_nodes():  # parents, keys, child keys, lock counts: RadixCache's checks
            count += 1
            live.add(node.id)
            pages = len(node.key) // ps
            where = self.placement(node)
            hv = self.host_value.get(node.id)
            assert not node.value or len(node.value) == pages, f"node {node.id}: {len(node.value)} device blocks, {pages} pages"
            assert hv is None or len(hv) == pages, f"node {node.id}: {len(hv)} host blocks, {pages} pages"
            dk = self.disk_ref.get(node.id)
            assert dk is None or len(dk) == pages, f"node {node.id}: {len(dk)} page keys, {pages} pages"
            assert dk is None or (self.storage is not None and dk == self.node_keys(node)), \
                f"node {node.id}: its page keys are not the keys of its tokens"  # the KV it would fetch is its own
            assert (where == "disk") == (node.id in self.disk_ref), f"node {node.id} ({where}): disk_ref disagrees"
            assert where == "device" or self._tiered.get(node.id) is node, f"node {node.id} ({where}) not in _tiered"
            parent_where = "device" if node.parent is self.root else self.placement(node.parent)
            if node.value:
                assert parent_where in ("device", "both"), f"node {node.id} is on the device, its parent is {parent_where}"
            else:
                offloaded += len(node.key)
                assert hv is None or parent_where != "disk", f"node {node.id} is on the host, its parent only on disk"
            for b in node.value:
                assert b not in seen_dev, f"device block {b} held by two nodes"
                seen_dev.add(b)
            for b in hv or ():
                assert type(b) is int and b not in seen_host, f"host block {b!r} held twice (or not an id)"
                seen_host.add(b)
            if node.lock_ref:
                assert node.value, f"node {node.id} is locked but its KV is not on the device ({where})"
                locked += len(node.key)
            else:
                unlocked += len(node.key)
        assert count == self.num_nodes, f"num_nodes {self.num_nodes} != {count}"
        assert unlocked == self._evictable_size and locked == self._protected_size, "evictable/protected sizes"
        assert offloaded == self._offloaded, f"offloaded tokens {self._offloaded} != {offloaded}"
        assert set(self.host_value) | set(self.disk_ref) == set(self._tiered) <= live, "side tables name dead nodes"
        assert set(self._inserted_by) <= live, "insert counts name dead nodes"
        assert set(self._lock_targets) <= live and self._protected_host <= live, "a lock or protection on a dead node"
        assert self._tree_blocks is None or seen_dev == self._tree_blocks, "the tree's block set is out of date"
        self._check_locks(locks)
        self.allocator.check_integrity([n.value for n in self.iter_nodes()] + [list(h) for h in holders])
        self.host_allocator.check_integrity(list(self.host_value.values()))
        if self.tracker is not None:
            assert not self.tracker.illegal, f"illegal lifecycle transitions: {self.tracker.illegal[:4]}"

    def pretty_tiers(self, max_tokens: int = 12) -> str:
        """The tree as text with each node's placement and blocks per tier."""
        lines = ["root"]
        stack = [(c, "") for c in reversed(self.root.children.values())]
        while stack:
            n, pad = stack.pop()
            toks = " ".join(map(str, n.key[:max_tokens])) + (" ..." if len(n.key) > max_tokens else "")
            where = [f"dev={n.value}"] if n.value else []
            if n.id in self.host_value:
                where.append(f"host={self.host_value[n.id]}")
            if n.id in self.disk_ref:
                where.append(f"disk={self.disk_ref[n.id][0][:8]}..x{len(self.disk_ref[n.id])}")
            lock = f" lock={n.lock_ref}" if n.lock_ref else ""
            lines.append(f"{pad}[{toks}] {self.placement(n)} {' '.join(where)}{lock}")
            stack.extend((c, pad + "  ") for c in reversed(n.children.values()))
        return "\n".join(lines)
