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
(``kvlab.reuse.hiradix_storage``), when a storage tier is attached, else dropped for good. :meth:`load_back` gives host and disk pages fresh
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

The class is written in three files, one concept each: this one (placements, the transfer
queue, lifecycle checkpoints, split/match/insert over the tiers, invariants),
``hiradix_moves.py`` (:class:`TierMoves`: ``backup``, ``evict``, ``evict_host``, ``load_back``:
every move of a node between tiers) and ``hiradix_storage.py`` (:class:`StorageTier`: the disk
side). Its plain data types are in ``hiradix_node.py``.

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

from typing import Iterable, Sequence

from ..memory.block_pool import BlockAllocator, KVCacheError
from ..memory.events import Event, NullLog
from ..memory.ids import check_int
from .hicache_storage import HiCacheStorage
from .hiradix_moves import TierMoves
from .hiradix_node import HiMatchResult, TierSnapshot, TierStats, Transfer
from .hiradix_storage import PREFETCH_POLICIES, StorageTier
from .lifecycle import LifecycleTracker
from .host_policy import make_host_policy
from .radix_cache import InsertResult, RadixCache, TreeNode

__all__ = ["WRITE_POLICIES", "Transfer", "TierStats", "HiMatchResult", "TierSnapshot", "HiRadixCache"]  # types: hiradix_node

WRITE_POLICIES = ("write_through", "write_through_selective", "write_back")
CYCLE_STEPS = frozenset({"admit", "append", "fork", "cache", "free_seq"})  # events that end a step of the cycle


class HiRadixCache(StorageTier, TierMoves, RadixCache):
    """A radix tree over a device pool (``allocator``) and a host pool (``host_allocator``).

    ``write_policy``: one of WRITE_POLICIES. ``write_through_threshold``: for
    ``write_through_selective``, the number of requests that must have inserted a node before it
    is backed up (SGLang's rule and default: counted at insert, 2). ``load_back_threshold``: fewer
    host/disk tokens than this on a match are recomputed instead of loaded (SGLang's
    ``load_back_threshold``). ``storage``: a HiCacheStorage for the disk tier, or None.
    ``prefetch_policy``, ``prefetch_threshold``, ``prefetch_timeout_s``, ``storage_write``: how
    pages come from and go to storage (``kvlab.reuse.hiradix_storage``). ``host_eviction_policy``:
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
        return TierSnapshot(tuple(self.device_states()), tuple(self.host_states()), tuple(dev), tuple(host), places,
                            caption)

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

    def match_key(self, key: list, limit: int, rid: str | None = None, record_stats: bool = True) -> HiMatchResult:
        """RadixCache's match (split, refresh), then the part of it off the device; a selective
        write-through backs up the matched device nodes hit often enough."""
        self._protected_host = set()
        m = super().match_key(key, limit, rid, False)
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

    def insert_key(self, key: list, kv: list[int], rid: str | None, share: bool, walk: tuple | None = None) -> InsertResult:
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
        res = super().insert_key(key, kv, rid, share, walk)
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

    # ------------------------------------------------------------------ integrity
    def check_integrity(self, holders: Iterable[Sequence[int]] = ()) -> None:
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
        assert count == self._num_nodes, f"num_nodes {self._num_nodes} != {count}"
        assert unlocked == self._evictable_size and locked == self._protected_size, "evictable/protected sizes"
        assert offloaded == self._offloaded, f"offloaded tokens {self._offloaded} != {offloaded}"
        assert set(self.host_value) | set(self.disk_ref) == set(self._tiered) <= live, "side tables name dead nodes"
        assert set(self._inserted_by) <= live, "insert counts name dead nodes"
        assert set(self._lock_targets) <= live and self._protected_host <= live, "a lock or protection on a dead node"
        assert self._tree_blocks is None or seen_dev == self._tree_blocks, "the tree's block set is out of date"
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
