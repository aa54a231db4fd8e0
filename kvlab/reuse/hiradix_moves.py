"""Moving a node's KV between tiers: ``backup`` (device -> host), ``evict`` (device -> host or
gone), ``evict_host`` (host -> disk or gone), ``load_back`` (host or disk -> device). One concept
of :class:`kvlab.reuse.hiradix_cache.HiRadixCache`, kept in its own file; the placements these
moves keep consistent are described there. ``init_load_back`` is where the request cycle
(``CacheManager.admit``) calls in: the pages of a match off the device come back.

Mirrors SGLang ``mem_cache/hiradix_cache.py`` at commit 263bc85d: ``write_backup``, ``evict``
(``_evict_backuped`` / ``_evict_regular``), ``evict_host``, ``load_back``, ``init_load_back``.

Example (block size 1; write_back: a node is copied to the host only when evicted):
    >>> from kvlab.memory.block_pool import BlockAllocator
    >>> from kvlab.reuse.hiradix_cache import HiRadixCache
    >>> dev, host = BlockAllocator(4, 1), BlockAllocator(4, 1)
    >>> tree = HiRadixCache(dev, host, write_policy="write_back")
    >>> _ = tree.insert([1, 2], dev.allocate(2))
    >>> tree.evict(2).num_tokens, tree.placement(tree.root.children[1]), tree.host_size()
    (2, 'host', 2)
    >>> tree.evict_host(2).num_tokens, tree.num_nodes        # no storage tier: gone for good
    (2, 0)
"""
from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Sequence

from ..memory.block_pool import KVCacheError
from ..memory.ids import check_int
from .hiradix_node import HiMatchResult, Transfer
from .radix_node import EvictResult, TreeNode

if TYPE_CHECKING:
    from ..memory.block_pool import BlockAllocator

__all__ = ["TierMoves"]


class TierMoves:
    """HiRadixCache's moves between tiers (a mixin: the attributes are HiRadixCache's)."""

    allocator: BlockAllocator
    host_allocator: BlockAllocator
    host_value: dict[int, list[int]]
    disk_ref: dict[int, list[str]]

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
            self._num_nodes -= 1
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
