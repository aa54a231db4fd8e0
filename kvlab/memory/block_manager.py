"""The block manager: the only code that changes a block table.

A :class:`BlockManager` keeps one :class:`~kvlab.memory.block_table.BlockTable` per sequence
over one :class:`~kvlab.memory.block_pool.BlockAllocator`. Every change to a table goes through
it, so each reference a table holds is taken and dropped in one place:

==================  ==========================================================================
``add_sequence``    a new table for ``num_tokens`` tokens (fresh blocks)
``adopt``           a new table that starts with blocks handed over by a prefix hit (one
                    reference taken on each: the table's own), then grows with fresh blocks
``append``          reserve slots for ``n`` more tokens: a fresh block when the last is full;
                    a shared, partial last block is copied first (copy-on-write, 写时复制),
                    and the ``(src, dst)`` copy is returned for the K/V tensors to perform
``write``           prepare to overwrite a written position (copy its block if shared)
``fork``            a child table that shares every block (ref counts + 1; parallel
                    sampling, beam search)
``share_prefix``    point the first blocks at other blocks holding the same tokens (the tree's
                    canonical copies after an insert found them cached); drops the replaced ones
``drop_blocks``     take full blocks out of the middle of a table (KV compression: StreamingLLM,
                    H2O); the table gets shorter, the blocks go back to the pool
``free``            release every block of a table (shared ones only lose a reference)
==================  ==========================================================================

One name per operation. The request cycle (``kvlab.reuse.cache_manager``) calls the same methods
with values that carry their checks: ``adopt`` takes the tree's match as :class:`HeldBlocks`
(blocks checked when the tree took them, held by the locked path) without checking them again;
``append(make_room=...)`` asks the cache manager to evict when the pool is short; ``free(seq_id,
handed_over=...)`` keeps the references the tree took over from a finishing table.

Each operation is all-or-nothing: it raises (``OutOfBlocks``, ``KeyError``, ``ValueError``) and
changes nothing, or it completes.

Mirrors nano-vllm ``nanovllm/engine/block_manager.py`` (``allocate`` = ``add_sequence``,
``may_append`` = ``append``, ``deallocate`` = ``free``) and vLLM's ``KVCacheManager``
(``allocate_slots``); kvlab adds ``fork``/copy-on-write (vLLM v0's ``BlockSpaceManager``).

Example (block size 4):
    >>> m = BlockManager(num_blocks=6, block_size=4)
    >>> m.add_sequence("A", 5).block_ids        # 5 tokens: 2 blocks
    [0, 1]
    >>> m.fork("A", "A2").block_ids             # shares both; no new block
    [0, 1]
    >>> m.allocator.ref_count[:2]
    [2, 2]
    >>> m.append("A2", 1)                       # A2 writes into shared, partial block 1: copy it
    [(1, 2)]
    >>> m.tables["A2"].block_ids, m.tables["A"].block_ids
    ([0, 2], [0, 1])
    >>> m.check_integrity()
"""
from __future__ import annotations

from typing import Callable, Iterable, Sequence

from .block_pool import BlockAllocator, HeldBlocks, KVCacheError, OutOfBlocks
from .block_table import BlockTable
from .events import EventLog
from .ids import as_ids, check_int, check_seq_id
from .snapshot import MemorySnapshot

__all__ = ["BlockManager"]


def _checked_table(seq_id: str, block_size: int, block_ids: list[int], num_tokens: int) -> BlockTable:
    """A table built from values this manager has checked already (a str id, block ids in use,
    a count that fits them): not checked again, as ``BlockTable(...)`` would.

    Example: ``_checked_table("R1", 4, [3, 7], 6)`` is ``BlockTable("R1", 4, [3, 7], 6)``."""
    t = object.__new__(BlockTable)
    t.seq_id, t.block_size, t.block_ids, t.num_tokens = seq_id, block_size, block_ids, num_tokens
    return t


class BlockManager:
    """Block tables for many sequences over one allocator.

    Give ``num_blocks`` and ``block_size`` (a new allocator), or ``allocator=`` to share one
    (the cache manager puts a radix tree on the same pool). ``record=True`` keeps a
    :class:`MemorySnapshot` after every event in ``self.snapshots`` (frames for the visualizer).
    """

    def __init__(self, num_blocks: int | None = None, block_size: int | None = None, log: EventLog | None = None,
                 record: bool = False, *, allocator: BlockAllocator | None = None) -> None:
        if allocator is None:
            if num_blocks is None or block_size is None:
                raise TypeError("give num_blocks and block_size, or allocator=")
            allocator = BlockAllocator(num_blocks, block_size, log)
        self.allocator = allocator
        self.log: EventLog = allocator.log          # the allocator's, as are these two (read them)
        self.block_size: int = allocator.block_size
        self.num_blocks: int = allocator.num_blocks
        self.tables: dict[str, BlockTable] = {}
        self.snapshots: list[MemorySnapshot] = []
        if record:
            self.snapshots.append(self.snapshot("start"))
            self.log.subscribe(lambda e: self.snapshots.append(self.snapshot(e.describe())))

    def table(self, seq_id: str) -> BlockTable:
        """The table of ``seq_id`` (KeyError naming the live sequences when unknown)."""
        try:
            return self.tables[seq_id]
        except KeyError:
            check_seq_id(seq_id)
            raise KeyError(f"unknown sequence {seq_id!r}; live sequences: {sorted(self.tables)}") from None

    def _new_id(self, seq_id: str) -> None:
        if (seq_id if type(seq_id) is str else check_seq_id(seq_id)) in self.tables:
            raise ValueError(f"sequence {seq_id!r} already exists")

    # ------------------------------------------------------------------ queries
    def can_allocate(self, num_tokens: int) -> bool:
        """Would a new sequence of ``num_tokens`` tokens fit in the free blocks?"""
        return -(-check_int("num_tokens", num_tokens, 0) // self.block_size) <= self.allocator.num_free_blocks

    def _plan_append(self, t: BlockTable, n: int, what: str = "n") -> tuple[int, bool, int]:
        """What appending ``n`` tokens to table ``t`` takes, changing nothing: (``n`` as a checked
        int, copy the last block first?, new blocks past the table's end). Use the returned ``n``
        from here on: a numpy count must never reach the table (``np.uint8(200)`` would wrap)."""
        if type(n) is not int or n < 0:  # the id rule (kvlab.memory.ids) for anything but a plain count
            n = check_int(what, n, 0)
        new = -(-(t.num_tokens + n) // self.block_size) - len(t.block_ids)
        cow = n > 0 and bool(t.block_ids) and t.num_tokens % self.block_size != 0 \
            and self.allocator.ref_count[t.block_ids[-1]] > 1
        return n, cow, new

    def blocks_to_append(self, seq_id: str, n: int = 1) -> int:
        """How many fresh blocks ``append(seq_id, n)`` would take, copy-on-write included (a
        partial last block that is shared is copied first: then ``blocks_to_append(s, 1)`` is 1
        although the block has room)."""
        _n, cow, new = self._plan_append(self.table(seq_id), n)
        return cow + new

    # ------------------------------------------------------------------ creating tables
    def add_sequence(self, seq_id: str, num_tokens: int = 0) -> BlockTable:
        """A new sequence with ``num_tokens`` prompt tokens, all in fresh blocks."""
        return self.adopt(seq_id, [], 0, num_tokens)

    def adopt(self, seq_id: str, block_ids: Sequence[int], num_tokens: int | None = None,
              extra_tokens: int = 0) -> BlockTable:
        """A new table whose first blocks are ``block_ids`` (already in use: cached blocks a prefix
        hit hands over), holding ``num_tokens`` tokens (default: every slot of them), then
        ``extra_tokens`` more slots in fresh blocks.

        The table takes its own reference on each handed-over block, so afterwards
        ``ref_count`` = the tree's reference + one per table. ``block_ids`` as :class:`HeldBlocks`
        (the tree's match) are taken as they are; any other sequence is checked here (ids in
        range, none twice, every one in use). All or nothing: OutOfBlocks, nothing changed, when
        the pool cannot supply the blocks ``extra_tokens`` more slots need.

        Example: ``adopt("R2", [4, 5], extra_tokens=3)`` with block size 4 -> table [4, 5, 0],
        8 + 3 = 11 tokens.
        """
        self._new_id(seq_id)
        bs = self.block_size
        ids = list(block_ids) if type(block_ids) is HeldBlocks else self._in_use(seq_id, block_ids)
        n = len(ids) * bs if num_tokens is None else num_tokens
        if type(n) is not int or n < 0:
            n = check_int("num_tokens", n, 0)
        if -(-n // bs) != len(ids):
            raise ValueError(f"adopt {seq_id}: {len(ids)} block(s) cannot hold exactly {n} token(s) (block_size {bs})")
        t = _checked_table(seq_id, bs, ids, n)  # ``ids`` and ``n`` are checked already
        extra, cow, new = self._plan_append(t, extra_tokens, "extra_tokens")
        if cow + new > self.allocator.num_free_blocks:
            raise OutOfBlocks(cow + new, self.allocator.num_free_blocks, f"a table for {seq_id}")
        self.tables[seq_id] = t
        if ids:
            self.allocator.touch(ids, seq_id, record=False)
            self.log.add(("adopt", seq_id, tuple(ids), (n,)))
        if extra:
            self._apply_append(t, extra, cow, new)
        return t

    def _in_use(self, seq_id: str, block_ids: Sequence[int]) -> list[int]:
        """``block_ids`` checked for :meth:`adopt`: a list of ids in range, none twice, all in use."""
        ids = list(as_ids(block_ids, "block_ids"))
        if ids:
            rc = self.allocator.ref_count
            if max(ids) >= self.num_blocks:
                raise KVCacheError(f"adopt {seq_id}: unknown block id {max(ids)} (valid ids are 0..{self.num_blocks - 1})")
            if len(set(ids)) != len(ids):
                raise ValueError(f"adopt {seq_id}: a block appears twice in {ids}")
            free = [b for b in ids if rc[b] == 0]
            if free:
                raise KVCacheError(f"adopt {seq_id}: block {free[0]} is free; only blocks in use can be handed over")
        return ids

    def fork(self, parent: str, child: str) -> BlockTable:
        """A child that shares every block of ``parent`` (ref counts rise by one; no block taken)."""
        self._new_id(child)
        p = self.table(parent)
        self.allocator.touch(p.block_ids, child, record=False)
        t = _checked_table(child, self.block_size, list(p.block_ids), p.num_tokens)
        self.tables[child] = t
        self.log.add(("fork", child, tuple(p.block_ids), (parent,)))
        return t

    # ------------------------------------------------------------------ growing and writing
    def append(self, seq_id: str, n: int = 1, make_room: Callable[[int], bool] | None = None) -> list[tuple[int, int]]:
        """Reserve slots for ``n`` more tokens; returns the block copies to perform.

        A new block is taken only when the last one is full. If the last block is partial and
        shared with another sequence, this sequence is about to write into it, so it gets a
        private copy first: the result is ``[(src, dst)]`` and the K/V tensors must copy block
        ``src`` to ``dst`` before writing. Writing at an exact block boundary copies nothing
        (a shared full block is never written again).

        ``make_room(k)``: called when fewer than the ``k`` blocks needed are free, to free some
        (the cache manager evicts tree leaves); the free blocks are counted again afterwards, so
        what it returns does not matter. All or nothing: raises :class:`OutOfBlocks` and changes
        nothing (beyond what ``make_room`` freed) when the pool cannot supply every block needed
        (the copy included).
        """
        t = self.table(seq_id)
        n, cow, new = self._plan_append(t, n)
        if cow + new > self.allocator.num_free_blocks and make_room is not None:
            make_room(cow + new)
        if cow + new > self.allocator.num_free_blocks:
            raise OutOfBlocks(cow + new, self.allocator.num_free_blocks, f"append {n} token(s) to {seq_id}")
        return self._apply_append(t, n, cow, new)

    def _apply_append(self, t: BlockTable, n: int, cow: bool, new: int) -> list[tuple[int, int]]:
        """Perform the plan ``(n, cow, new)`` of :meth:`_plan_append`; ``cow + new`` blocks are free."""
        copies = [self._copy_on_write(t, len(t.block_ids) - 1)] if cow else []
        fresh = self.allocator.get_new_blocks(new, t.seq_id, record=False) if new > 0 else []
        t.block_ids += fresh
        start = t.num_tokens
        t.num_tokens += n
        if n > 0:
            self.log.add(("append", t.seq_id, tuple(fresh), (start, n)))
        return copies

    def _copy_on_write(self, t: BlockTable, logical_block: int) -> tuple[int, int]:
        src = t.block_ids[logical_block]
        (dst,) = self.allocator.get_new_blocks(1, t.seq_id, record=False)
        t.block_ids[logical_block] = dst
        self.allocator.free_blocks([src], t.seq_id, record=False)  # drop our reference to the shared one
        self.log.add(("cow", t.seq_id, (src, dst), (src, dst, logical_block)))
        return (src, dst)

    def write(self, seq_id: str, pos: int) -> list[tuple[int, int]]:
        """Prepare to overwrite position ``pos`` (already written): copy its block if shared.

        Returns ``[(src, dst)]`` when a copy was needed, else ``[]``. (Beam search rewrites
        tokens of a shared block; plain decoding only appends.)
        """
        t = self.table(seq_id)
        pos = check_int("pos", pos)
        if not 0 <= pos < t.num_tokens:
            raise ValueError(f"pos {pos} is outside sequence {seq_id}'s {t.num_tokens} token(s)")
        lb = pos // self.block_size
        if self.allocator.ref_count[t.block_ids[lb]] == 1:
            return []
        if self.allocator.num_free_blocks < 1:
            raise OutOfBlocks(1, 0, f"copy-on-write of L{lb} for {seq_id}")
        return [self._copy_on_write(t, lb)]

    def share_prefix(self, seq_id: str, block_ids: Sequence[int]) -> list[int]:
        """Point the table's first ``len(block_ids)`` logical blocks at ``block_ids`` (blocks in
        use that hold the same tokens, such as the radix tree's copies): take a reference on each
        that differs, drop the one on the block it replaces. Only full blocks can be switched.
        Returns the replaced blocks that became free.

        Example: R2 computed blocks [6, 7] for a prefix that R1 cached first in [2, 3] ->
        ``share_prefix("R2", [2, 3])`` makes R2's table [2, 3, ...] and frees 6 and 7.
        """
        t = self.table(seq_id)
        ids = block_ids if type(block_ids) is HeldBlocks else as_ids(block_ids, "block_ids")
        full = t.num_tokens // t.block_size
        if len(ids) > full:
            raise ValueError(f"share_prefix {seq_id}: {len(ids)} block(s) but only {full} full")
        old = t.block_ids[:len(ids)]
        if old == ids:
            return []
        rc = self.allocator.ref_count
        take = [b for b, o in zip(ids, old) if b != o]
        drop = [o for b, o in zip(ids, old) if b != o]
        if max(take) >= self.num_blocks or any(rc[b] == 0 for b in take):
            raise KVCacheError(f"share_prefix {seq_id}: every block must be in use, got {take}")
        if set(take) & (set(t.block_ids) - set(drop)) or len(set(ids)) != len(ids):
            raise ValueError(f"share_prefix {seq_id}: a block would appear twice in the table")
        self.allocator.touch(take, seq_id, record=False)
        t.block_ids[:len(ids)] = ids
        released = self.allocator.free_blocks(drop, seq_id, record=False)
        self.log.add(("share_prefix", seq_id, tuple(take), (tuple(drop), tuple(released))))
        return released

    def drop_blocks(self, seq_id: str, logical_blocks: Sequence[int]) -> list[int]:
        """Remove the full logical blocks ``logical_blocks`` from ``seq_id``'s table (KV compression):
        the later blocks move up, ``num_tokens`` drops by ``block_size`` per block, and each removed
        block loses this table's reference (returned: those that became free).

        After a drop, slot ``i`` of the table no longer holds position ``i``: the caller decides each
        kept token's RoPE position, its original one or (StreamingLLM's paper) its new slot, and
        re-rotates the stored keys if it moves them (see ``kvlab.compute.kv_compress``).
        Only full blocks can go (the last, partial block is still being written). All or nothing.

        Example (block size 4, 14 tokens in [0, 1, 2, 3]): ``drop_blocks("A", [1, 2])`` -> [1, 2];
        the table is [0, 3] with 6 tokens (positions 0-3 and 12-13).
        """
        t = self.table(seq_id)
        drop = as_ids(logical_blocks, "logical_blocks")
        if len(set(drop)) != len(drop):
            raise ValueError(f"drop_blocks {seq_id}: a logical block appears twice in {drop}")
        bad = [i for i in drop if not 0 <= i < t.num_full_blocks]
        if bad:
            raise ValueError(f"drop_blocks {seq_id}: logical block {bad[0]} is not a full block of the table "
                             f"(full blocks: 0..{t.num_full_blocks - 1} of {len(t.block_ids)})")
        if not drop:
            return []
        gone = set(drop)
        ids = [t.block_ids[i] for i in sorted(gone)]
        t.block_ids = [b for i, b in enumerate(t.block_ids) if i not in gone]
        t.num_tokens -= len(ids) * self.block_size
        released = self.allocator.free_blocks(ids, seq_id, record=False)
        self.log.add(("drop", seq_id, tuple(ids), (tuple(sorted(gone)), tuple(released))))
        return released

    # ------------------------------------------------------------------ release
    def free(self, seq_id: str, handed_over: Sequence[int] = (), held: int = 0) -> list[int]:
        """Release every block of ``seq_id`` (shared ones only lose a reference); returns blocks freed.

        ``handed_over``: logical blocks (positions in the table) whose reference is not dropped,
        because another holder took it over: a finishing request's newly cached pages, which the
        radix tree now holds, and its duplicates, which the tree freed (``CacheManager``). A
        ``range`` is checked in O(1). ``held``: the table's first ``held`` blocks are ones another
        holder keeps (the radix tree's path the sequence locks): they lose this table's reference
        and cannot become free (the allocator skips their test for zero); they cannot be handed
        over. ValueError, nothing changed, for a position outside the table or listed twice.

        Example: table [4, 5, 6], ``free("R1", handed_over=range(1, 3))`` drops only block 4's reference.
        """
        t = self.table(seq_id)
        ids = t.block_ids
        if type(held) is not int or held < 0:
            held = check_int("held", held, 0)
        if type(handed_over) is range and handed_over.step == 1:
            if handed_over and not held <= handed_over.start < handed_over.stop <= len(ids):
                raise ValueError(f"free {seq_id}: handed_over {handed_over} is outside its {len(ids)} block(s) "
                                 f"past the {held} held one(s)")
            if not handed_over:
                drop = ids
            elif handed_over.stop == len(ids):  # nothing after the handed-over run: one copy, not three lists
                drop = ids[:handed_over.start]
            else:
                drop = ids[:handed_over.start] + ids[handed_over.stop:]
        else:
            kept = as_ids(handed_over, "handed_over")
            if len(set(kept)) != len(kept) or any(not held <= i < len(ids) for i in kept):
                raise ValueError(f"free {seq_id}: handed_over {kept} names a position twice or outside its "
                                 f"{len(ids)} block(s) past the {held} held one(s)")
            gone = set(kept)
            drop = [b for i, b in enumerate(ids) if i not in gone] if gone else ids
        if held > len(ids):
            raise ValueError(f"free {seq_id}: held {held} is more than its {len(ids)} block(s)")
        del self.tables[seq_id]  # gone before its events, so snapshots never show a half-freed table
        released = self.allocator.free_blocks(drop, seq_id, record=False, held=held) if drop else []
        self.log.add(("free_seq", seq_id, tuple(released), (len(ids), len(ids) - len(drop))))  # block_ids: those back in the pool
        return released

    # ------------------------------------------------------------------ invariants and pictures
    def check_integrity(self, extra_holders: Iterable[Sequence[int]] = ()) -> None:
        """Every table consistent, and ``ref_count`` = tables (+ ``extra_holders``, e.g. tree nodes)."""
        rc = self.allocator.ref_count
        for s, t in self.tables.items():
            assert t.seq_id == s and t.block_size == self.block_size, f"table {s} is filed wrongly"
            t.check_integrity(rc)
        self.allocator.check_integrity([t.block_ids for t in self.tables.values()] + list(extra_holders))

    def snapshot(self, caption: str = "", extra: dict[str, tuple[Sequence[int], int]] | None = None) -> MemorySnapshot:
        """The pool with every table, frozen. ``extra``: more holders as {name: (blocks, tokens)}
        (the cache manager adds the radix tree's blocks as "tree")."""
        tables = {s: t.block_ids for s, t in self.tables.items()}
        num_tokens = {s: t.num_tokens for s, t in self.tables.items()}
        for name, (ids, n) in (extra or {}).items():
            tables[name], num_tokens[name] = ids, n
        return MemorySnapshot.of(self.allocator, tables, num_tokens, caption)
