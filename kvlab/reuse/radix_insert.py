"""Inserting into the radix tree: ``insert`` (checked) and its trusted twin (one concept of
:class:`kvlab.reuse.radix_cache.RadixCache`, kept in its own file).

``insert(tokens, kv)`` caches ``tokens`` whose KV is in blocks ``kv``: it walks down as far as the
tree already holds them (splitting a node where the walk ends inside it), hands back duplicates
(blocks passed for tokens that were already cached elsewhere) and hangs the rest under the node
where the walk ended as one new leaf. Mirrors SGLang ``radix_cache.py`` ``insert`` /
``_insert_helper``.

Example (page_size 1):
    >>> from kvlab.memory.block_pool import BlockAllocator
    >>> from kvlab.reuse.radix_cache import RadixCache
    >>> a = BlockAllocator(num_blocks=8, block_size=1)
    >>> tree = RadixCache(a)
    >>> tree.insert([1, 2, 3], a.allocate(3)).prefix_len
    0
    >>> r = tree.insert([1, 2, 4], a.allocate(3))   # block 3 duplicates cached token 1, 4 token 2
    >>> r.prefix_len, r.kv, r.freed
    (2, [0, 1, 5], [3, 4])
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

from ..memory.block_pool import DoubleFree, KVCacheError, UnknownBlock
from ..memory.events import pack_ids
from ..memory.ids import as_ids
from .radix_node import InsertResult, TreeNode

if TYPE_CHECKING:
    from ..memory.block_pool import BlockAllocator
    from .radix_node import RadixStats

__all__ = ["RadixInsertion"]


class RadixInsertion:
    """RadixCache's insertion (a mixin: the attributes below are RadixCache's)."""

    allocator: BlockAllocator
    page_size: int
    root: TreeNode
    stats: RadixStats
    _tree_blocks: set[int] | None

    def insert(self, tokens: Sequence[int], kv: Sequence[int], rid: str | None = None, *,
               share: bool = False) -> InsertResult:
        """Cache ``tokens`` whose KV is in blocks ``kv``; returns how much was already cached.

        ``kv`` covers all of ``tokens`` (one block per token when page_size is 1, one per full
        page otherwise: ``len(kv) == len(tokens) // page_size``; a trailing partial page is not
        cached). Blocks passed for tokens that were already cached, and that differ from the
        tree's, are duplicates; use ``result.kv`` from now on.

        ``share=False`` (SGLang's ``insert``): the tree takes over the caller's reference on the
        blocks of the new suffix, and hands the duplicates back to the allocator (``freed``).
        ``share=True`` (a running block table keeps its blocks, see ``CacheManager``): the tree
        takes a reference of its own on the new blocks and leaves the duplicates to the caller.

        Raises (changing nothing): TypeError for a non-int token or block id, ValueError for a
        kv of the wrong length, KVCacheError for an unknown block id and (with ``check_kv``,
        the default) for a new block that is free or already owned by the tree.
        """
        key = as_ids(tokens)
        kv = as_ids(kv, "kv")
        ps = self.page_size
        if len(kv) != len(key) // ps:
            raise ValueError(f"kv has {len(kv)} block id(s) but {len(key)} token(s) with page_size {ps} "
                             f"need {len(key) // ps}")
        key = key[:len(kv) * ps] if ps > 1 else key
        node, pos, child, m = self._walk(key, len(key))
        end = pos + m
        tree_kv = self.path_kv(node)
        if child is not None:
            tree_kv += child.value[:m // ps]
        nb = end // ps
        dups = [b for b, t in zip(kv[:nb], tree_kv) if b != t] if kv[:nb] != tree_kv else []
        self._validate_insert(kv[nb:], dups, share)
        return self.insert_key(key, kv, rid, share, (node, pos, child, m))

    def _validate_insert(self, new_blocks: list[int], dups: list[int], share: bool) -> None:
        nblocks, rc, tree_blocks = self.allocator.num_blocks, self.allocator.ref_count, self._tree_blocks
        for b in new_blocks + dups:
            if b >= nblocks:
                raise UnknownBlock(f"insert: unknown block id {b} (valid ids are 0..{nblocks - 1})")
        if len(set(new_blocks)) != len(new_blocks):
            raise KVCacheError(f"insert: a block id appears twice in kv's new part {new_blocks}")
        for b in new_blocks:
            if rc[b] == 0:
                raise KVCacheError(f"insert: block {b} is free; allocate it before inserting it")
        if tree_blocks is not None and not tree_blocks.isdisjoint(new_blocks):
            b = next(b for b in new_blocks if b in tree_blocks)
            raise KVCacheError(f"insert: block {b} is already owned by the tree (it would be kept twice)")
        if dups and not share:
            counts: dict[int, int] = {}
            for b in dups:
                counts[b] = counts.get(b, 0) + 1
            for b, c in counts.items():
                if tree_blocks is not None and b in tree_blocks:
                    raise KVCacheError(f"insert: duplicate block {b} passed for cached tokens is owned by the "
                                       "tree at another position; freeing it would corrupt the cache")
                if rc[b] < c:
                    raise DoubleFree(f"insert: duplicate block {b} is listed {c} time(s) but has ref_count {rc[b]}")
            if not set(dups).isdisjoint(new_blocks):
                raise KVCacheError("insert: a block is passed both as a duplicate and as new KV")

    def insert_key(self, key: list, kv: list[int], rid: str | None, share: bool, walk: tuple | None = None) -> InsertResult:
        """The trusted path of :meth:`insert`: no validation, ``key`` holds whole pages (a list of
        ints) and ``kv`` one valid block per page (the cache manager's path: its blocks come from
        block tables it owns). ``walk``: the
        result of ``_walk(key)`` when the caller has it already."""
        ps = self.page_size
        node, pos, child, m = walk if walk is not None else self._walk(key, len(key))
        end = pos + m
        if child is not None:
            node = self._split(child, m)
        tree_kv = self.path_kv(node)
        nb = end // ps
        freed: list[int] = []
        d: list[int] = []
        if kv[:nb] != tree_kv:
            d = [b for b, t in zip(kv[:nb], tree_kv) if b != t]
            if not share:
                self.allocator.free_blocks(d, rid, record=False)  # the insert event lists them as freed
                freed = d
        new_blocks = kv[nb:]
        t = self._tick()
        n = node
        while n is not self.root:
            n.last_access_time = t
            n = n.parent
        if end < len(key):
            if share:
                self.allocator.touch(new_blocks, rid, record=False)  # the insert event says it
            leaf = TreeNode(self._next_id, key[end:], new_blocks, node, t)
            self._next_id += 1
            node.children[self._child_key(leaf.key)] = leaf  # node's heap entry, if any, goes stale
            self._num_nodes += 1
            self._evictable_size += len(leaf.key)  # a new leaf is unlocked
            if self._tree_blocks is not None:
                self._tree_blocks.update(new_blocks)
            self._push(leaf)
            node = leaf
        elif node is not self.root and not node.children and node.lock_ref == 0:
            self._push(node)  # access time changed
        s = self.stats
        s.num_inserts += 1
        s.inserted_tokens += len(key) - end
        s.duplicate_tokens += len(d) * ps
        self.log.add("insert", rid, new_blocks, end, len(key), node.id, pack_ids(freed))
        return InsertResult(end, tree_kv + new_blocks, freed, node, d)
