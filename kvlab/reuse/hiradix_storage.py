"""The hierarchical tree's storage side (L3): page keys of a node, saves, the disk check, and the
lookup of pages the tree does not hold (a restart, another engine on the same store).

:class:`StorageTier` is a part of :class:`~kvlab.reuse.hiradix_cache.HiRadixCache` (it uses the
tree's own fields); it is a separate file so that the tree's placement logic stays readable.

What it does, in the order of a request::

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

Example (block size 1; a store of pages saved by an earlier run of the same model):
    >>> from kvlab.memory.block_pool import BlockAllocator
    >>> from kvlab.reuse.hicache_storage import MemoryStorage, page_keys
    >>> from kvlab.reuse.hiradix_cache import HiRadixCache
    >>> store = MemoryStorage("fp")
    >>> for k in page_keys([1, 2, 3], 1, "fp"): store.add(k)
    >>> tree = HiRadixCache(BlockAllocator(8, 1), BlockAllocator(8, 1), storage=store)
    >>> node = tree.lookup_storage([1, 2, 3, 4], tree.root)
    >>> node.key, tree.placement(node), tree.tier_stats.storage_hit_tokens
    ([1, 2, 3], 'disk', 3)
"""
from __future__ import annotations

import time
from typing import Sequence

from ..memory.block_pool import KVCacheError
from ..memory.ids import check_int
from .hicache_storage import leading, page_keys
from .hiradix_node import Transfer
from .radix_node import TreeNode

__all__ = ["PREFETCH_POLICIES", "STORAGE_WRITES", "StorageTier"]

PREFETCH_POLICIES = ("best_effort", "wait_complete", "timeout")
STORAGE_WRITES = ("on_host_evict", "write_through")


class StorageTier:
    """The storage methods of HiRadixCache (see the module docstring)."""

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
        self._num_nodes += 1
        self._evictable_size += len(node.key)
        self._offloaded += len(node.key)
        self.disk_ref[node.id] = keys[:n]
        self._tiered[node.id] = node
        self.tier_stats.storage_hit_tokens += len(node.key)
        self.log.record("storage_hit", rid, (), node=node.id, num_tokens=len(node.key))
        self._note(node, "storage_hit", rid)
        return node
