"""Forks and the radix tree: when one sequence caches pages that its forks still share.

``fork(P, C)`` gives C every block of P (parallel samples, beam search) until copy-on-write
separates them. When one of them later caches its full pages (``cache_unfinished_req`` or
``cache_finished_req``), the tree takes blocks the other one's table still uses. Left like that,
those tree nodes would be unlocked, so ``available_blocks`` would count them as evictable and
``make_room`` would evict them for nothing (the other table keeps each block alive). So, as part
of the same call, every sharer:

* is checked first: if it holds other tokens for a shared page (both reserved the slots and one
  claims other tokens), the call is a ValueError and nothing changes (whoever caches shared
  slots first defines them);
* afterwards points its table at the tree's blocks for the pages it shares (duplicates go back
  to the pool), locks the node where they end (split there when it ends inside a node), and
  knows those tokens from now on.

So a running table never uses a cached block past the node it locks, and every unlocked cached
block is one that eviction frees (``CacheManager.check_integrity`` checks it).

Example (block size 1): P holds [1..8], its fork C grows to 12 tokens and finishes first:
    >>> from kvlab.reuse.cache_manager import CacheManager
    >>> cm = CacheManager(12, 1)
    >>> _ = cm.admit("P", [1, 2, 3, 4, 5, 6, 7, 8]); _ = cm.fork("P", "C"); _ = cm.append("C", 4)
    >>> _ = cm.cache_finished_req("C", list(range(1, 13)))
    >>> print(cm.tree.pretty())          # P locks the first 8 tokens it still uses
    root
    └── [1 2 3 4 5 6 7 8] kv=[0-7] lock=1
        └── [9 10 11 12] kv=[8-11]
    >>> cm.available_blocks()            # only C's own 4 blocks would come free
    4

This module holds the mixin :class:`ForkSharing` (methods of ``CacheManager``, kept apart to
keep that file short) and :func:`token_mismatch`, the one error message for a token list that
does not extend what a sequence holds.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the mixin's attributes, set by CacheManager
    from ..memory.block_manager import BlockManager
    from ..memory.block_pool import BlockAllocator
    from .radix_cache import RadixCache, TreeNode

__all__ = ["ForkSharing", "token_mismatch"]


def token_mismatch(seq_id: str, key: list[int], known: list[int], holder: str = "it holds") -> str:
    """The ValueError message for a token list ``key`` that does not extend ``known``: the first
    position where they differ, or where ``key`` ends too early.

    Example: ``token_mismatch("A", [1, 9], [1, 2, 3])`` -> "sequence 'A': tokens differ at
    position 1 (got 9, it holds 2 there); ..."."""
    i = next((i for i, (a, b) in enumerate(zip(key, known)) if a != b), len(key))
    what = (f"the list is shorter: {len(key)} token(s), {holder} {len(known)}" if i == len(key)
            else f"got {key[i]}, {holder} {known[i]} there")
    return (f"sequence {seq_id!r}: tokens differ at position {i} ({what}); the tokens a sequence was "
            "admitted with or has cached can only grow")


class ForkSharing:
    """The two steps around an insert of ``cache_*_req`` that keep forks locked (see the module)."""

    tree: RadixCache | None
    allocator: BlockAllocator
    block_manager: BlockManager
    block_size: int
    _locks: dict[str, TreeNode]
    _tokens: dict[str, list[int]]

    def _sharers(self, seq_id: str, key: list[int], full: int) -> tuple[list[str], list[int]]:
        """Before ``seq_id`` caches ``full`` pages of ``key``: the other running sequences whose
        tables share one of its own blocks among them, and its first ``full`` block ids (a copy).
        ValueError, nothing changed, when a sharer holds other tokens for a shared page."""
        ids = self.block_manager.table(seq_id).block_ids[:full]
        node = self._locks.get(seq_id)
        start = len(self.tree.path_kv(node)) if node is not None else 0  # pages it already locks
        rc = self.allocator.ref_count
        if all(rc[b] == 1 for b in ids[start:]):  # the usual case: nobody shares them
            return [], ids
        own = set(ids[start:])
        sharers = []
        for s, t in self.block_manager.tables.items():
            last = max((i for i, b in enumerate(t.block_ids[:full]) if b in own and b == ids[i]), default=-1)
            if s == seq_id or last < 0:
                continue
            known, n = self._tokens.get(s), (last + 1) * self.block_size
            if known is not None and known[:n] != key[:min(n, len(known))]:
                raise ValueError(token_mismatch(seq_id, key[:min(n, len(known))], known[:n],
                                                f"{s!r}, which shares that block, holds"))
            sharers.append(s)
        return sharers, ids

    def _lock_sharers(self, sharers: list[str], key: list[int], ids: list[int], tree_kv: list[int]) -> None:
        """After the insert (``ids``: the inserting table's blocks before it, ``tree_kv``: the
        tree's blocks for the same pages): each sharer switches to the tree's blocks for the pages
        it shares, locks the node where they end and knows those tokens."""
        tree, ps = self.tree, self.block_size
        for s in sharers:
            t = self.block_manager.tables[s]
            lim = min(len(tree_kv), t.num_tokens // ps)
            k = 0
            while k < lim and t.block_ids[k] in (tree_kv[k], ids[k]):
                k += 1
            old = self._locks.get(s)
            if k <= (len(tree.path_kv(old)) if old is not None else 0):
                continue
            self.block_manager.share_prefix(s, tree_kv[:k])
            node = tree.split_at(key, k * ps)
            tree.inc_lock_ref(node, s)
            if old is not None:
                tree.dec_lock_ref(old, s)
            self._locks[s] = node
            if len(self._tokens.get(s) or ()) < k * ps:
                self._tokens[s] = key[:k * ps]
