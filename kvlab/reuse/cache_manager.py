"""The request cycle, written once: match, lock, allocate (evicting when short), cache, free, unlock.

OWNERSHIP (the rule every part of kvlab follows; :meth:`CacheManager.check_integrity` checks it)

======================  =====================================================================
state                   who may change it
======================  =====================================================================
a block's ``ref_count``  the allocator, on behalf of its holders: **one reference for the radix
                        tree if a node holds the block + one per running block table that uses
                        it** (matched blocks included), so ``ref_count == tree + tables``
a block table           only :class:`~kvlab.memory.block_manager.BlockManager`
tree nodes, locks       only :class:`~kvlab.reuse.radix_cache.RadixCache`, called from here
the request cycle       only this class: the engine, the simulator's radix policy,
                        ``serve_request`` and the lessons all call it
======================  =====================================================================

A running sequence holds one lock (``inc_lock_ref``) on the deepest tree node its table uses,
so nothing it reads can be evicted; its table starts with exactly that node's path of blocks.

One sequence's blocks through the cycle (block size 4; ``m`` matched tokens, ``c`` computed)::

    admit(s, tokens)         tree.match_prefix(key, limit=len - 1) -> m tokens cached (at least one
                             token is left to compute), lock the node where the match ends,
                             make room (evict LRU leaves when short; None, no block taken or
                             evicted, when it cannot fit), tree.init_load_back (tiers only),
                             adopt the matched blocks into a new table (+1 ref each),
                             allocate the rest

        tokens  |<---- m matched ---->|<------- to compute ------->|
        table   [ tree's  | tree's    | own      | own      | own  ]
                  ref 2     ref 2       ref 1      ref 1      ref 1 (partial)

    cache_unfinished_req(s, tokens)   (after prefill)
    cache_finished_req(s, tokens)     (finished or preempted; both are one method, ``_cache_req``)
                             insert the computed full pages; then keep the table, switched to
                             the tree's blocks, and move the lock down (unfinished), or free it
                             and unlock (finished); the table region by region: ``cache_req``

    append(s, n)             reserve n more slots (copy-on-write of a shared partial block;
                             evict when short; None and nothing changed when it cannot fit)
    fork(s, child)           n > 1 samples: the child shares every block and locks the node too
                             (and the pages a fork caches later: "forks and the tree" below)
    free(s)                  abort: release the table and the lock, cache nothing

The tokens a sequence was admitted with, or has cached, only grow: a ``cache_*_req`` list that
is shorter, or differs at a known position, is a ValueError naming the sequence and the position
(nothing changed). Otherwise the tree could map other tokens to blocks that hold this KV, and a
later request would be served the wrong KV.

With tiers, ``HiCacheManager`` runs this same cycle, unchanged, over a ``HiRadixCache``, which
plugs in at one point: ``tree.init_load_back`` in ``admit`` loads the match's host and disk pages
back (the plain tree returns the match as it is).

Each step validates what comes from outside once, then passes values that carry their checks:
the tokens as a :class:`~kvlab.reuse.radix_cache.RadixKey` (``admit`` checks the prompt;
``cache_*_req`` check only the tokens past the known ones), the blocks as the sequence's
``BlockTable``; the tree takes both without checking them again, and the block manager takes the
tree's match as ``HeldBlocks`` (``adopt``). One name per operation: the same ``adopt``,
``append`` (``make_room=``) and ``free`` (``handed_over=``) that every caller uses.

Mirrors mini-sglang ``python/minisgl/scheduler/cache.py`` (``CacheManager.cache_req``, read at
commit 0467802d) and SGLang ``radix_cache.py`` (``cache_finished_req``, ``cache_unfinished_req``,
``match_prefix``), with reference counts where SGLang hands slots between tree and request.

Example (block size 1; R2 hits the 3 tokens R1 cached):
    >>> cm = CacheManager(num_blocks=16, block_size=1)
    >>> a = cm.admit("R1", [1, 2, 3, 4])
    >>> a.prefix_len, a.table.block_ids
    (0, [0, 1, 2, 3])
    >>> cm.cache_finished_req("R1", [1, 2, 3, 4]).prefix_len   # nothing was cached before
    0
    >>> b = cm.admit("R2", [1, 2, 3, 9])
    >>> b.prefix_len, b.table.block_ids, cm.allocator.ref_count[:5]
    (3, [0, 1, 2, 4], [2, 2, 2, 1, 1])
    >>> cm.check_integrity()
    >>> cm.cache_finished_req("R2", [1, 2, 3, 9]).prefix_len
    3
    >>> print(cm.tree.pretty())
    root
    └── [1 2 3] kv=[0-2]
        ├── [4] kv=[3]
        └── [9] kv=[4]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

from ..memory.block_manager import BlockManager
from ..memory.block_pool import BlockAllocator, OutOfBlocks
from ..memory.block_table import BlockTable
from ..memory.events import EventLog
from ..memory.ids import as_ids, check_int, check_seq_id
from ..memory.snapshot import MemorySnapshot
from .radix_cache import InsertResult, RadixCache, RadixKey, TreeNode

__all__ = ["Admission", "CacheManager", "ServeRecord", "serve_request"]


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


@dataclass(frozen=True)
class Admission:
    """A sequence that got its blocks: ``prefix_len`` tokens were cached (their blocks adopted),
    ``table`` holds ``table.num_tokens`` slots, ``evicted_tokens`` were evicted to make room.
    ``tokens``: the admitted tokens as the checked :class:`RadixKey` (None for a length-only
    admit); ``tokens.plus(answer)`` is the key to cache when the sequence ends, and only the
    answer's tokens are checked there."""

    seq_id: str
    prefix_len: int
    table: BlockTable
    evicted_tokens: int = 0
    tokens: RadixKey | None = None

    @property
    def matched_kv(self) -> list[int]:
        return self.table.block_ids[:self.prefix_len // self.table.block_size]


class CacheManager:
    """One pool, its block tables and (``radix=True``) the radix tree over it, and the request cycle.

    ``block_size`` is also the tree's page size. ``log``: where every event goes (a fresh
    EventLog by default; ``NO_LOG`` records nothing). ``radix=False``: plain paged memory (no
    matching, nothing cached), the same cycle otherwise. ``check_kv``: the tree's own set of its
    blocks, for its public ``insert`` checks (off by default: this class inserts only blocks of
    tables it owns; ``check_integrity`` checks the tree's blocks either way).
    """

    def __init__(self, num_blocks: int | None = None, block_size: int | None = None, *, radix: bool = True,
                 eviction_policy: str = "lru", log: EventLog | None = None, check_kv: bool = False,
                 tree: RadixCache | None = None) -> None:
        if tree is None:
            if num_blocks is None or block_size is None:
                raise TypeError("give num_blocks and block_size, or tree= (a manager over that tree and its allocator)")
            allocator = BlockAllocator(num_blocks, block_size, log)
            tree = RadixCache(allocator, block_size, eviction_policy, check_kv) if radix else None
        elif num_blocks is not None or block_size is not None:
            raise TypeError("give num_blocks and block_size, or tree=, not both")
        self._setup(tree.allocator if tree is not None else allocator, tree)

    def _setup(self, allocator: BlockAllocator, tree: RadixCache | None) -> None:
        self.allocator = allocator
        self.log: EventLog = allocator.log          # the allocator's (read it)
        self.num_blocks: int = allocator.num_blocks
        self.block_manager = BlockManager(allocator=allocator)
        self.tree = tree
        self.block_size = allocator.block_size
        self._locks: dict[str, TreeNode] = {}       # running sequence -> the node it locks
        self._tokens: dict[str, RadixKey] = {}      # running sequence -> its checked tokens (for cache_*)
        self._forked: set[str] = set()              # running sequences that were forked or are forks

    # ------------------------------------------------------------------ queries
    @property
    def tables(self) -> dict[str, BlockTable]:
        """The running sequences' block tables (read them; change them through this class)."""
        return self.block_manager.tables

    def table(self, seq_id: str) -> BlockTable:
        return self.block_manager.table(seq_id)

    def lock_node(self, seq_id: str) -> TreeNode | None:
        """The tree node ``seq_id`` locks (None without a tree)."""
        self.block_manager.table(seq_id)
        return self._locks.get(seq_id)

    def cached_prefix_len(self, tokens: Sequence[int]) -> int:
        """Tokens of ``tokens`` the tree holds, changing nothing (for scheduling order)."""
        return self.tree.peek_prefix_len(tokens) if self.tree is not None else 0

    def available_blocks(self) -> int:
        """Free blocks plus those eviction could free now (unlocked cached pages)."""
        ev = self.tree.evictable_size() // self.block_size if self.tree is not None else 0
        return self.allocator.num_free_blocks + ev

    # ------------------------------------------------------------------ the cycle
    def make_room(self, num_blocks: int, seq_id: str | None = None) -> bool:
        """Evict unlocked tree leaves until ``num_blocks`` blocks are free; True when they are.
        Evicts nothing when even evicting every unlocked leaf would not be enough (as SGLang
        checks free + evictable first)."""
        if type(num_blocks) is not int or num_blocks < 0:  # the id rule (a plain int >= 0 passes as is)
            num_blocks = check_int("num_blocks", num_blocks, 0)
        free = self.allocator.num_free_blocks
        if num_blocks <= free:
            return True
        if num_blocks > self.available_blocks():
            return False
        self.tree.evict((num_blocks - free) * self.block_size, seq_id)
        return num_blocks <= self.allocator.num_free_blocks

    def admit(self, seq_id: str, tokens: Sequence[int] | None, num_tokens: int | None = None) -> Admission | None:
        """Give ``seq_id`` a table for ``num_tokens`` slots (default ``len(tokens)``): match the
        longest cached prefix of ``tokens`` (capped so at least one token is computed), lock it,
        adopt its blocks, allocate the rest, evicting when short.

        Returns None when the pool cannot hold it even after eviction: no block is allocated or
        evicted and the lock is dropped again (the match itself has run: it may have split a node
        and refreshed the access time of the matched path, as a lookup in SGLang does). ``tokens=None``: ids unknown (the simulator's length-only
        requests): nothing is matched, ``num_tokens`` slots are allocated.
        """
        if (seq_id if type(seq_id) is str else check_seq_id(seq_id)) in self.block_manager.tables:
            raise ValueError(f"sequence {seq_id!r} already runs")
        if tokens is None:
            key = None
        else:  # the one check of these tokens (a RadixKey was checked when it was made: copied only)
            key = tokens.prefix(len(tokens)) if type(tokens) is RadixKey else RadixKey(tokens)
        n = num_tokens if num_tokens is not None else len(key or ())
        if type(n) is not int or n < 1:
            n = check_int("num_tokens", n, 1)
        if key is not None and n < len(key):
            raise ValueError(f"num_tokens {n} is fewer than the {len(key)} tokens to admit")
        node, prefix_len, kv, m = None, 0, [], None
        if self.tree is not None and key:
            m = self.tree.match_prefix(key, seq_id, limit=len(key) - 1)
            prefix_len, kv = m.prefix_len, m.kv
            if m.last_node is not self.tree.root:  # a lock on the root protects nothing
                node = m.last_node
                self.tree.inc_lock_ref(node, seq_id)
        need = -(-n // self.block_size) - len(kv)
        before = self.tree.stats.evicted_tokens if self.tree is not None else 0
        if need > self.allocator.num_free_blocks and not self.make_room(need, seq_id):  # evict only when short
            if node is not None:
                self.tree.dec_lock_ref(node, seq_id)
            return None
        if m is not None:  # the one point where tiers plug in (the plain tree returns m itself)
            loaded = self.tree.init_load_back(m, key, len(key) - 1, seq_id)
            if loaded is not m:  # host or disk pages came back: the lock moved down to their last node
                node, prefix_len, kv = loaded.last_node, loaded.prefix_len, loaded.kv
        table = self.block_manager.adopt(seq_id, kv, prefix_len, n - prefix_len)  # kv: HeldBlocks, not checked again
        if node is not None:
            self._locks[seq_id] = node
        if key is not None:
            self._tokens[seq_id] = key  # a RadixKey holds a copy: never the caller's list
        evicted = (self.tree.stats.evicted_tokens - before) if self.tree is not None else 0
        self.log.add(("admit", seq_id, (), (prefix_len, n)))
        return Admission(seq_id, prefix_len, table, evicted, key)

    def append(self, seq_id: str, n: int = 1) -> list[tuple[int, int]] | None:
        """Reserve ``n`` more slots for ``seq_id``, evicting when short; returns the copy-on-write
        block copies to perform, or None (nothing changed) when the pool cannot supply them."""
        try:
            return self.block_manager.append(seq_id, n, make_room=lambda k: self.make_room(k, seq_id))
        except OutOfBlocks:  # make_room evicted nothing: nothing changed
            return None

    def fork(self, parent: str, child: str) -> BlockTable:
        """``child`` shares every block of ``parent`` (parallel samples) and locks the same node.

        When one of them later caches pages the other still uses, the other locks them too
        (see "forks and the tree" below). Example (block size 1): P holds [1..8], its fork C
        grows to 12 tokens and finishes first:
            >>> cm = CacheManager(12, 1)
            >>> _ = cm.admit("P", [1, 2, 3, 4, 5, 6, 7, 8]); _ = cm.fork("P", "C"); _ = cm.append("C", 4)
            >>> _ = cm.cache_finished_req("C", list(range(1, 13)))
            >>> print(cm.tree.pretty())          # P locks the first 8 tokens it still uses
            root
            └── [1 2 3 4 5 6 7 8] kv=[0-7] lock=1
                └── [9 10 11 12] kv=[8-11]
            >>> cm.available_blocks()            # only C's own 4 blocks would come free
            4
        """
        table = self.block_manager.fork(parent, child)
        self._forked.update((parent, child))  # only these can share blocks past their locked paths
        node = self._locks.get(parent)
        if node is not None:
            self.tree.inc_lock_ref(node, child)
            self._locks[child] = node
        if parent in self._tokens:
            self._tokens[child] = self._tokens[parent]
        return table

    def _key(self, t: BlockTable, tokens: Sequence[int], keep: bool = True) -> RadixKey:
        """``tokens`` checked against what the sequence of table ``t`` holds: ids (a numpy array is fine), at most
        the table's slots, and an extension of the tokens it was admitted with or cached before.
        Those only grow: a shorter list, or one that differs at a known position, would let the
        tree map other tokens to blocks that hold this KV. The key returned is never the caller's
        own list when it is kept (``keep``: a caller that appends to it later changes nothing
        here). A :class:`RadixKey` (``Admission.tokens.plus(answer)``) was checked when it was
        made: it is only compared with the known tokens, and with ``keep=False`` (a finishing
        sequence, whose key is used only during the call: the tree keeps slices of it) it is
        not copied either.

        Example: admitted [1, 2, 3] -> [1, 2, 3, 4] is the key; [1, 2] and [1, 9, 3] are refused
        (ValueError naming the sequence and position 2, resp. 1)."""
        seq_id = t.seq_id
        known = self._tokens.get(seq_id)
        if known is not None:
            if type(tokens) is RadixKey:  # checked when it was made (``Admission.tokens.plus(answer)``)
                key = (tokens.prefix(len(tokens)) if keep else tokens) if tokens[:len(known)] == known else None
            else:
                key = known.extended(tokens)  # only the tokens past the known ones are checked
            if key is None:
                raise ValueError(token_mismatch(seq_id, as_ids(tokens), known, "it holds"))
            if len(key) == len(known):
                return known
        else:
            key = RadixKey(tokens)
        if len(key) > t.num_tokens:
            raise ValueError(f"sequence {seq_id!r}: {len(key)} tokens but its table holds only {t.num_tokens} slots")
        return key

    def cache_unfinished_req(self, seq_id: str, tokens: Sequence[int]) -> InsertResult | None:
        """After prefill: cache the computed pages and keep running (:meth:`cache_req`,
        ``finished=False``; SGLang's name)."""
        return self._cache_req(seq_id, tokens, finished=False)

    def cache_finished_req(self, seq_id: str, tokens: Sequence[int] | None) -> InsertResult | None:
        """The sequence leaves, finished or preempted (:meth:`cache_req`, ``finished=True``;
        SGLang's name). ``tokens=None`` caches nothing (as :meth:`free`)."""
        if tokens is None:
            self.free(seq_id)
            return None
        return self._cache_req(seq_id, tokens, finished=True)

    def _cache_req(self, seq_id: str, tokens: Sequence[int], *, finished: bool) -> InsertResult | None:
        """The one place where a request's blocks go to the tree: insert the full pages of
        ``tokens`` (those whose KV is computed), then keep the sequence running
        (``finished=False``, after prefill: requests admitted later reuse its pages) or end it
        (``finished=True``: finished or preempted). Its table, region by region (block size 4)::

            tokens  |<- matched at admit ->|<----------- computed by this request ----------->|
            table   [  M  |  M  |  M  |  M  |  D  |  D  |  N  |  N  |  N  |  T (partial)      ]
                    |<----- matched ------>|<- duplicate ->|<-- newly cached -->|<- partial tail ->|

            region             is                            unfinished: after      finished: after
            M matched          the tree's block              table keeps its ref    table drops its ref
            D duplicate        its own copy of pages another  table switches to the  freed
                               request cached meanwhile      tree's; own freed
            N newly cached     its own, now in a new leaf    tree takes its own     tree takes over the
                                                             ref (ref_count 2)      table's ref (1)
            T partial tail     its own, not a whole page     kept (still written)   freed

        Unfinished, the lock moves down to the node where the cached pages end; finished, the
        lock is released and the table is gone. ``ref_count == tree + tables`` holds before and
        after. Forks that share the new pages lock them too (``_sharers``, ``_lock_sharers``).
        ``tokens`` must extend the ones the sequence was admitted with or cached (``_key``):
        ValueError, nothing changed, otherwise.

        Mirrors mini-sglang's ``cache_req(req, finished=...)``, with reference counts where it frees.

        Example: the module docstring's R2 (admitted [1, 2, 3, 9], 3 matched) finishes with
        ``[1, 2, 3, 9]``: M = blocks 0-2 (drop the table's ref: 1 left, the tree's), N = block 4
        (the tree takes over its ref), no D, no T."""
        table = self.block_manager.tables.get(seq_id)
        if table is None:
            table = self.block_manager.table(seq_id)  # raises the error naming the live sequences
        key = self._key(table, tokens, keep=not finished)
        full = len(key) // self.block_size if self.tree is not None else 0
        if full == 0:  # no whole page: nothing to cache
            if finished:
                self.free(seq_id)
            else:
                self._tokens[seq_id] = key
            return None
        sharers, ids = self._sharers(table, key, full) if seq_id in self._forked else ([], [])  # never forked: none
        table_ids = table.block_ids
        pages = key if full * self.block_size == len(key) else key.prefix(full * self.block_size)
        # finished: the tree takes over the table's ref on N and frees D; unfinished: its own ref on N
        res = self.tree.insert(pages, table, seq_id, share=not finished)
        if finished:
            self._drop_cached(seq_id, res, table_ids, full)
            if sharers:
                self._lock_sharers(sharers, key, ids, res.kv)
            old = self._locks.pop(seq_id, None)
            self._tokens.pop(seq_id, None)
            self._forked.discard(seq_id)
            if old is not None:
                self.tree.dec_lock_ref(old, seq_id)
        else:
            self._keep_cached(seq_id, res, key)
            if sharers:
                self._lock_sharers(sharers, key, ids, res.kv)
        self.log.add(("cache", seq_id, (), (res.prefix_len, len(key), finished)))
        return res

    def _drop_cached(self, seq_id: str, res: InsertResult, table_ids: list[int], full: int) -> None:
        """cache_req(finished=True) after the insert: the table drops M and T and is gone (the tree
        freed D and took over N)."""
        end = res.prefix_len // self.block_size  # M and D end here
        handed = range(end, full)  # N: the tree took the table's reference over
        if res.duplicates:  # the tree freed D: the table's reference on them is used up too
            dup = set(res.duplicates)
            handed = [i for i in range(end) if table_ids[i] in dup] + list(handed)
        held, node = 0, self._locks.get(seq_id)  # the table starts with the blocks of its locked path,
        while node is not None and node.parent is not None:  # which the tree holds: count them (no copy)
            held += len(node.value)
            node = node.parent
        self.block_manager.free(seq_id, handed_over=handed, held=held)  # drops M and T (M: no test for zero)

    def _keep_cached(self, seq_id: str, res: InsertResult, key: RadixKey) -> None:
        """cache_req(finished=False) after the insert: the table takes the tree's blocks for D and
        the lock moves down to the node where the cached pages end."""
        self._tokens[seq_id] = key
        if res.duplicates:  # D: the table takes the tree's blocks (none: it holds them already)
            self.block_manager.share_prefix(seq_id, res.kv)
        old = self._locks.get(seq_id)
        if res.last_node is not old:
            self.tree.inc_lock_ref(res.last_node, seq_id)
            if old is not None:
                self.tree.dec_lock_ref(old, seq_id)
            self._locks[seq_id] = res.last_node

    def free(self, seq_id: str) -> list[int]:
        """Release ``seq_id``'s table and lock without caching anything; returns blocks freed."""
        released = self.block_manager.free(seq_id)
        node = self._locks.pop(seq_id, None)
        if node is not None:
            self.tree.dec_lock_ref(node, seq_id)
        self._tokens.pop(seq_id, None)
        self._forked.discard(seq_id)
        return released

    # ------------------------------------------------------------------ invariants and pictures
    # ------------------------------------------------------------------ forks and the tree
    # Forks and the radix tree: when one sequence caches pages that its forks still share.
    #
    # ``fork(P, C)`` gives C every block of P (parallel samples, beam search) until copy-on-write
    # separates them. When one of them later caches its full pages (``cache_unfinished_req`` or
    # ``cache_finished_req``), the tree takes blocks the other one's table still uses. Left like that,
    # those tree nodes would be unlocked, so ``available_blocks`` would count them as evictable and
    # ``make_room`` would evict them for nothing (the other table keeps each block alive). So, as part
    # of the same call, every sharer:
    #
    # * is checked first: if it holds other tokens for a shared page (both reserved the slots and one
    #   claims other tokens), the call is a ValueError and nothing changes (whoever caches shared
    #   slots first defines them);
    # * afterwards points its table at the tree's blocks for the pages it shares (duplicates go back
    #   to the pool), locks the node where they end (split there when it ends inside a node), and
    #   knows those tokens from now on.
    #
    # So a running table never uses a cached block past the node it locks, and every unlocked cached
    # block is one that eviction frees (``CacheManager.check_integrity`` checks it).
    def _sharers(self, table: BlockTable, key: RadixKey, full: int) -> tuple[list[str], list[int]]:
        """Before the forked sequence of ``table`` caches ``full`` pages of ``key``: the other running sequences whose
        tables share one of its own blocks among them, and its first ``full`` block ids (a copy; [] when there is none).
        ValueError, nothing changed, when a sharer holds other tokens for a shared page."""
        seq_id = table.seq_id
        ids = table.block_ids[:full]
        node = self._locks.get(seq_id)
        start = len(node.path_kv()) if node is not None else 0  # pages it already locks
        rc = self.allocator.ref_count
        if max(map(rc.__getitem__, ids[start:]), default=1) == 1:  # no block of its own is shared
            return [], ids
        own = set(ids[start:])
        sharers = []
        for s, t in self.block_manager.tables.items():
            last = max((i for i, b in enumerate(t.block_ids[:full]) if b in own and b == ids[i]), default=-1)
            if s == seq_id or last < 0:
                continue
            known, n = self._tokens.get(s), (last + 1) * self.block_size
            if known is not None:
                theirs, mine = known[:n], key[:min(n, len(known))]
                if theirs != mine:
                    raise ValueError(token_mismatch(seq_id, mine, theirs, f"{s!r}, which shares that block, holds"))
            sharers.append(s)
        return sharers, ids

    def _lock_sharers(self, sharers: list[str], key: RadixKey, ids: list[int], tree_kv: list[int]) -> None:
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
            if k <= (len(old.path_kv()) if old is not None else 0):
                continue
            self.block_manager.share_prefix(s, tree_kv[:k])
            node = tree.match_prefix(key, s, limit=k * ps, record_stats=False).last_node  # split there
            tree.inc_lock_ref(node, s)
            if old is not None:
                tree.dec_lock_ref(old, s)
            self._locks[s] = node
            if len(self._tokens.get(s) or ()) < k * ps:
                self._tokens[s] = key.prefix(k * ps)

    def check_integrity(self) -> None:
        """The ownership rule, exactly: ``ref_count == tree + tables`` for every block; every
        table consistent; every running sequence's table starts with the blocks of the path it
        locks and uses no other cached block (so every unlocked cached block is one eviction
        frees: ``available_blocks`` is exact); the tree consistent."""
        tables = self.block_manager.tables
        in_tree = set(self.tree.tree_block_ids()) if self.tree is not None else set()
        for s, t in tables.items():
            t.check_integrity(self.allocator.ref_count)
            node = self._locks.get(s)
            if node is not None:
                path = node.path_kv()
                assert path == t.block_ids[:len(path)], f"{s}: its table does not start with the path it locks"
            if self.tree is not None:
                stray = in_tree.intersection(t.block_ids[len(path) if node is not None else 0:])
                assert not stray, (f"{s}: uses cached block(s) {sorted(stray)} past the node it locks "
                                   "(evicting them would free nothing)")
        assert set(self._locks) <= set(tables), "a lock is held for a sequence that does not run"
        assert set(self._tokens) <= set(tables), "tokens kept for a sequence that does not run"
        assert self._forked <= set(tables), "a fork is remembered for a sequence that does not run"
        holders = [t.block_ids for t in tables.values()]
        if self.tree is not None:
            self.tree.check_integrity(holders, locks=self._locks.values())
        else:
            self.allocator.check_integrity(holders)

    def snapshot(self, caption: str = "") -> MemorySnapshot:
        """The pool with every running table, plus the tree's blocks as the holder "tree"."""
        extra = None
        if self.tree is not None:
            extra = {"tree": (self.tree.tree_block_ids(), self.tree.total_size())}
        return self.block_manager.snapshot(caption, extra)


# --------------------------------------------------------------------------- one request at once
@dataclass(frozen=True)
class ServeRecord:
    """One request through the cache: matched, prefilled (missed) and cached afterwards."""

    rid: str | None
    prompt_len: int
    output_len: int
    matched_len: int
    prefill_len: int
    matched_kv: tuple[int, ...]
    new_kv: tuple[int, ...]
    evicted_tokens: int
    insert: InsertResult | None


def serve_request(tree: RadixCache | CacheManager, prompt: Sequence[int], output: Sequence[int] = (),
                  rid: str | None = None, while_running: Callable[[Admission], None] | None = None) -> ServeRecord:
    """One request's whole cycle at once, through :class:`CacheManager`: admit the prompt (and
    room for ``output``), then cache prompt + output as finished. No model runs: only the memory
    bookkeeping happens. Raises OutOfBlocks, with nothing changed, when even eviction cannot
    make room. ``while_running(admission)`` is called between the two, while the request runs
    (its matched path locked, its new blocks allocated, nothing of it in the tree yet): a picture
    of that moment reads the state there (lesson 07's stepper).

    Example:
        >>> from kvlab.memory.block_pool import BlockAllocator
        >>> tree = RadixCache(BlockAllocator(num_blocks=16, block_size=1))
        >>> r = serve_request(tree, [1, 2, 3, 4], output=[5])
        >>> (r.matched_len, r.prefill_len)
        (0, 4)
        >>> r = serve_request(tree, [1, 2, 3, 9])
        >>> (r.matched_len, r.prefill_len, r.matched_kv)
        (3, 1, (0, 1, 2))
    """
    cm = tree if isinstance(tree, CacheManager) else CacheManager(tree=tree)
    prompt = as_ids(prompt, "prompt")
    seq = prompt + as_ids(output, "output")
    sid = rid if rid is not None else "request"
    a = cm.admit(sid, prompt, len(seq))
    if a is None:
        need = -(-len(seq) // cm.block_size)
        raise OutOfBlocks(need, cm.available_blocks(), f"request {rid}: even after eviction")
    matched = tuple(a.matched_kv)
    new = tuple(a.table.block_ids[len(matched):])
    if while_running is not None:
        while_running(a)
    res = cm.cache_finished_req(sid, seq)
    return ServeRecord(rid, len(prompt), len(seq) - len(prompt), a.prefix_len, len(prompt) - a.prefix_len,
                       matched, new, a.evicted_tokens, res)
