"""PagedAttention's physical pool: ``num_blocks`` fixed-size KV blocks with reference counts.

The KV cache is cut into ``num_blocks`` blocks of ``block_size`` token slots. A block is in use
while its ``ref_count`` is positive; each holder (a sequence's block table, a radix-tree node)
holds one reference. The free blocks wait in a FIFO queue: ``allocate`` takes from the front,
a block whose count drops to zero joins the back, so a freed block is reused only after every
block that was free before it (nano-vllm's deque, vLLM's free-block queue).

Mirrors vLLM ``vllm/v1/core/block_pool.py`` (``BlockPool``: free queue, ``ref_cnt``) and
nano-vllm ``block_manager.py``; kvlab says ``ref_count`` for vLLM's ``ref_cnt`` and keeps no
hash here (the block-hash cache is ``kvlab.reuse.block_hash_cache``).

Every public operation either succeeds completely or raises and leaves the pool exactly as it
was. Each state change has a checked entry (``allocate``, ``incref``, ``free``: for ids that
come from outside) and a trusted twin without checks (``get_new_blocks``, ``touch``,
``free_blocks``, vLLM's names: for ``BlockManager`` and the radix tree, whose ids are blocks
they hold). A run of blocks is handed out and taken back in one step (a list slice and one pass over
the counts). Pure Python; no torch.

Not handled here: block tables (``kvlab.memory.block_table``, ``kvlab.memory.block_manager``),
the K/V tensors (``kvlab.compute.kv_tensors``), prefix caching (``kvlab.reuse``).

Example:
    >>> a = BlockAllocator(num_blocks=4, block_size=16)
    >>> a.allocate(2, owner="R1")
    [0, 1]
    >>> a.free([0])          # block 0 goes to the back of the free queue
    [0]
    >>> a.allocate(2, owner="R2")
    [2, 3]
    >>> a.allocate(1)
    [0]
    >>> a.num_free_blocks
    0
"""
from __future__ import annotations

from typing import Iterable, Sequence

from .events import EventLog
from .ids import as_ids, check_int

__all__ = ["KVCacheError", "OutOfBlocks", "DoubleFree", "UnknownBlock", "NotABlockId", "BlockAllocator",
           "HeldBlocks", "check_block_ids"]


def check_block_ids(block_ids: Iterable[int], num_blocks: int, what: str) -> list[int]:
    """``block_ids`` as a list of Python ints in ``0..num_blocks-1`` (the id rule of
    :mod:`kvlab.memory.ids`: numpy integers converted); :class:`NotABlockId` (a TypeError) for a
    bool, float, string or None, :class:`UnknownBlock` for an id out of range. For every pool
    that takes block ids back (this allocator, ``kvlab.reuse.block_hash_cache``).

    Example: ``check_block_ids([2, np.int64(0)], 4, "free") -> [2, 0]``; ``[True]`` and ``[4]``
    are refused."""
    try:
        ids = as_ids(block_ids, "block_ids")
    except TypeError as e:
        raise NotABlockId(f"{what}: {e}") from None
    except ValueError as e:
        raise UnknownBlock(f"{what}: {e}") from None
    if ids and max(ids) >= num_blocks:
        b = next(b for b in ids if b >= num_blocks)
        raise UnknownBlock(f"{what}: unknown block id {b} (valid ids are 0..{num_blocks - 1})")
    return ids


class HeldBlocks(list):
    """Block ids that a holder checked when it took them and still holds a reference on: the
    radix tree's match (``MatchResult.kv``, blocks of a path the caller has locked).
    :meth:`BlockManager.adopt <kvlab.memory.block_manager.BlockManager.adopt>` takes them without
    checking them again ("parse, don't validate", as ``RadixKey`` for tokens); a plain list is
    checked there. Build one only from blocks a holder of this pool holds.

    Example: ``HeldBlocks([4, 5])`` is the list ``[4, 5]``, marked as held."""

    __slots__ = ()


class KVCacheError(Exception):
    """Base class of kvlab's memory errors."""


class OutOfBlocks(KVCacheError):
    """Not enough free blocks; nothing was allocated."""

    def __init__(self, requested: int, free: int, what: str = "") -> None:
        self.requested, self.free = requested, free
        msg = f"out of blocks: asked for {requested} block(s), only {free} free"
        super().__init__(msg + (f" ({what})" if what else ""))


class DoubleFree(KVCacheError):
    """A block was freed more often than it was referenced."""


class UnknownBlock(KVCacheError, ValueError):
    """A block id outside ``[0, num_blocks)`` (or not an int: :class:`NotABlockId`)."""


class NotABlockId(UnknownBlock, TypeError):
    """A block id that is not an int (a float, a bool, a string, None): also a TypeError, as
    everywhere else in kvlab (kvlab.memory.ids)."""


class BlockAllocator:
    """A pool of ``num_blocks`` physical blocks with reference counts (vLLM's BlockPool).

    ``ref_count[b]``: holders of block b (0 = free). ``owner[b]``: who allocated it (for
    pictures; None when free). ``free_block_ids``: the free queue, front first; ``num_free_blocks``: its length.
    ``log``: where events go (a fresh :class:`EventLog` by default; ``NO_LOG`` records nothing).
    """

    def __init__(self, num_blocks: int, block_size: int, log: EventLog | None = None) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self.log = log if log is not None else EventLog()
        self.ref_count: list[int] = [0] * num_blocks
        self.owner: list[str | None] = [None] * num_blocks
        # The free queue is the never-used blocks _fresh..num_blocks-1 (always at its front), then
        # the freed ones in the order they were freed, _free[_head:]: no list of every id up front.
        self._fresh = 0
        self._free: list[int] = []
        self._head = 0
        self.num_free_blocks = num_blocks  # the length of that queue (read it; the allocator keeps it)

    # ------------------------------------------------------------------ queries
    @property
    def free_block_ids(self) -> list[int]:
        """The free queue, front (next to be allocated) first (a copy)."""
        return list(range(self._fresh, self.num_blocks)) + self._free[self._head:]

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    def can_allocate(self, n: int) -> bool:
        return 0 <= check_int("n", n) <= self.num_free_blocks

    def _validate(self, block_ids: Iterable[int], what: str) -> list[int]:
        return check_block_ids(block_ids, self.num_blocks, what)

    # ------------------------------------------------------------------ state changes (all or nothing)
    def allocate(self, n: int, owner: str | None = None) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, each with ref count 1.

        All or nothing: raises :class:`OutOfBlocks` (naming both numbers) and changes nothing
        when fewer than ``n`` are free.
        """
        n = check_int("n", n, 0)
        if n > self.num_free_blocks:
            raise OutOfBlocks(n, self.num_free_blocks, f"owner {owner}" if owner else "")
        return self.get_new_blocks(n, owner)

    def get_new_blocks(self, n: int, owner: str | None, record: bool = True) -> list[int]:
        """The trusted path of :meth:`allocate` (vLLM's ``BlockPool.get_new_blocks``): no checks,
        for callers that know ``n`` free blocks are there (``BlockManager`` after its own count,
        the tiered tree after host eviction). ``record=False``: the caller records a higher-level
        event that says it (``append``, ``cow``, ``write``)."""
        f = self._fresh
        k = min(n, self.num_blocks - f)
        ids = list(range(f, f + k))  # never-used blocks first (the front of the queue): one run
        self._fresh = f + k
        rc, own = self.ref_count, self.owner
        rc[f:f + k] = [1] * k
        own[f:f + k] = [owner] * k
        if k < n:
            h = self._head
            reused = self._free[h:h + n - k]
            self._head = h + n - k
            if self._head > 4096 and self._head * 2 > len(self._free):  # compact: amortised O(1) per block
                del self._free[:self._head]
                self._head = 0
            for b in reused:
                rc[b] = 1
                own[b] = owner
            ids += reused
        self.num_free_blocks -= len(ids)
        if ids and record:
            self.log.record("allocate", owner, ids)
        return ids

    def incref(self, block_ids: Iterable[int], seq_id: str | None = None) -> None:
        """Add one reference to each used block (sharing: fork, a prefix hit)."""
        ids = self._validate(block_ids, "incref")
        rc = self.ref_count
        for b in ids:
            if rc[b] == 0:
                raise KVCacheError(f"incref: block {b} is free; allocate it before sharing it")
        self.touch(ids, seq_id)

    def touch(self, ids: list[int], seq_id: str | None, record: bool = True) -> None:
        """The trusted path of :meth:`incref` (vLLM's ``BlockPool.touch``): one more reference on
        each of ``ids``, no checks, for blocks a table or the tree already holds. ``record=False``:
        the caller records a higher-level event that says it (``adopt``, ``fork``, ``insert``).
        (vLLM's ``touch`` also takes a cached block with ``ref_cnt`` 0 out of the free queue; here a
        cached block is never free: the tree holds a reference.)"""
        rc = self.ref_count
        for b in ids:
            rc[b] += 1
        if ids and record:
            self.log.record("incref", seq_id, ids)

    def free(self, block_ids: Iterable[int], seq_id: str | None = None) -> list[int]:
        """Drop one reference from each block; blocks reaching zero return to the pool.

        Returns the blocks that became free, in the order they joined the free queue.
        Raises (and changes nothing) for an unknown id, a block that is already free,
        or a block listed more times than it has references (the same block twice in
        one call is a double free unless its ref count is at least 2).
        """
        ids = self._validate(block_ids, "free")
        rc = self.ref_count
        for b in ids:
            if rc[b] == 0:
                raise DoubleFree(f"free: block {b} is already free (double free)")
        if len(set(ids)) != len(ids):  # a block listed several times needs that many references
            wanted: dict[int, int] = {}
            for b in ids:
                wanted[b] = wanted.get(b, 0) + 1
            for b, k in wanted.items():
                if k > rc[b]:
                    raise DoubleFree(f"free: block {b} listed {k} times in one call but has ref_count {rc[b]} (double free)")
        return self.free_blocks(ids, seq_id)

    def free_blocks(self, ids: list[int], seq_id: str | None, record: bool = True, held: int = 0) -> list[int]:
        """The trusted path of :meth:`free` (vLLM's ``BlockPool.free_blocks``): one reference less on
        each of ``ids``, no checks, for references a table or the tree is known to hold; returns
        the blocks that became free (``record=False``: the caller records ``free_seq``, ``evict``
        or ``insert`` instead). ``held``: the first ``held`` ids are blocks another holder keeps a
        reference on (a finishing table's matched prefix, which the radix tree holds): none of
        them can become free, so they skip the test for zero.

        Example: blocks 0 and 1 held twice (a table and the tree), block 2 once:
        ``free_blocks([0, 1, 2], "R1", held=2) -> [2]``."""
        rc, own = self.ref_count, self.owner
        released: list[int] = []
        if held:  # a loop made fast on purpose: the hot path of every cache hit (~400 blocks at page 1)
            for b in (ids if held == len(ids) else ids[:held]):  # (a copy only when there is a rest)
                rc[b] -= 1
            ids_left = ids[held:] if held < len(ids) else ()
        else:
            ids_left = ids
        for b in ids_left:
            c = rc[b] - 1
            rc[b] = c
            if not c:
                released.append(b)
                own[b] = None
        if released:
            self._free += released
            self.num_free_blocks += len(released)
        if ids and record:
            self.log.record("free", seq_id, ids, released=released)
        return released

    # ------------------------------------------------------------------ invariants
    def check_integrity(self, holders: Iterable[Sequence[int]] | None = None) -> None:
        """Raise AssertionError unless the pool is consistent.

        free + used = total; no block both free and used; no duplicate in the free queue; a
        block is used iff its ref count is positive. With ``holders`` (each a list of block ids:
        every block table, every radix node...), every block's ref count must equal the number
        of times holders hold it: ``ref_count == tree + tables``, with no block that nobody holds.
        """
        free = self.free_block_ids
        assert len(free) == len(set(free)), f"duplicate ids in the free queue: {free}"
        assert self.num_free_blocks == len(free), f"num_free_blocks {self.num_free_blocks} != {len(free)} in the queue"
        fs = set(free)
        assert all(type(b) is int and 0 <= b < self.num_blocks for b in fs), "free queue holds an unknown id"
        for b in range(self.num_blocks):
            rc = self.ref_count[b]
            assert type(rc) is int and rc >= 0, f"block {b} has ref_count {rc!r}"
            assert (rc == 0) == (b in fs), f"block {b}: ref_count {rc} but in free queue={b in fs}"
            assert rc > 0 or self.owner[b] is None, f"free block {b} still has owner {self.owner[b]!r}"
        if holders is not None:
            counts = [0] * self.num_blocks
            for held in holders:
                for b in held:
                    assert type(b) is int and 0 <= b < self.num_blocks, f"a holder holds {b!r}, not a block id"
                    counts[b] += 1
            bad = [(b, self.ref_count[b], counts[b]) for b in range(self.num_blocks) if counts[b] != self.ref_count[b]]
            assert not bad, "ref_count != holders for (block, ref_count, holders): " + str(bad[:8])

    def state(self) -> tuple:
        """Everything that defines the pool, for 'nothing changed' checks in tests."""
        return (tuple(self.ref_count), tuple(self.owner), tuple(self.free_block_ids))
