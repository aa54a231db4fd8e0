"""PagedAttention's physical layer: a block allocator and per-sequence block tables.

The KV cache is cut into ``num_blocks`` fixed-size blocks of ``block_size`` token slots.
A sequence owns a *block table* (块表): row ``i`` holds the physical block that stores
its logical block ``i``. Token position ``pos`` lives in logical block
``pos // block_size`` at offset ``pos % block_size``; its *slot* in the flat pool is
``physical_block * block_size + offset`` (vLLM's ``slot_mapping``).

Blocks are shared by reference counting (``ref_count``): ``fork`` (parallel sampling,
beam search) lets a child share every block of its parent, and a sequence that writes
into a block it shares first copies it (copy-on-write, 写时复制).

Names follow vLLM and nano-vllm: ``block_size``, ``num_blocks``, ``block_table``,
``slot_mapping``, ``ref_count``, ``allocate``, ``free``.

What this module does not handle: the K/V tensors themselves (see ``kvlab.kvstore``
and ``kvlab.kernels``: a ``cow`` returns the (src, dst) copy the KV store must do),
prefix caching (``kvlab.radix``, ``kvlab.prefix_cache``), and scheduling.

Every operation either succeeds completely or raises and leaves the allocator and the
table exactly as they were. Pure Python; no torch.

Example (the source notes' figure):
    >>> translate([3, 7, 1, 5, 9], pos=9, block_size=4, bytes_per_token=1)
    Translation(pos=9, logical_block=2, offset=1, physical_block=1, slot=5, byte_address=5)
"""
from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from .events import Event, EventLog

__all__ = [
    "KVCacheError",
    "OutOfBlocks",
    "DoubleFree",
    "UnknownBlock",
    "Translation",
    "translate",
    "blocks_needed",
    "slot_mapping",
    "BlockAllocator",
    "BlockTable",
    "BlockManager",
    "MemorySnapshot",
]


# --------------------------------------------------------------------------- errors
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
    """A block id outside ``[0, num_blocks)`` (or not an int)."""


# ---------------------------------------------------------------------- translation
@dataclass(frozen=True, slots=True)
class Translation:
    """The walk from a token position to its bytes in the paged KV pool."""

    pos: int
    logical_block: int
    offset: int
    physical_block: int
    slot: int
    byte_address: int

    def steps(self, block_size: int, bytes_per_token: int, base: int = 0) -> list[str]:
        """The walk as sentences, one per step (used by the CLI and the lessons)."""
        return [
            f"token position        pos = {self.pos}",
            f"logical block         pos // block_size = {self.pos} // {block_size} = {self.logical_block}  (L{self.logical_block})",
            f"offset in block       pos % block_size = {self.pos} % {block_size} = {self.offset}",
            f"block table lookup    block_table[{self.logical_block}] = {self.physical_block}  (L{self.logical_block} -> P{self.physical_block})",
            f"slot                  P x block_size + offset = {self.physical_block} x {block_size} + {self.offset} = {self.slot}",
            f"byte address          base(P{self.physical_block}) + offset x bytes_per_token = "
            f"{base + self.physical_block * block_size * bytes_per_token} + {self.offset} x {bytes_per_token} = {self.byte_address}",
        ]


def _check_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    return value


def translate(
    block_table: Sequence[int], pos: int, block_size: int, bytes_per_token: int = 1, base: int = 0
) -> Translation:
    """Translate token position ``pos`` through ``block_table``.

    ``base(P) = base + P * block_size * bytes_per_token`` is where physical block ``P``
    starts; the token's K and V start ``offset * bytes_per_token`` bytes after it.

    Example (block size 4, table L0->P3, L1->P7, L2->P1, L3->P5, L4->P9):
        >>> t = translate([3, 7, 1, 5, 9], 9, 4, bytes_per_token=1024)
        >>> (t.logical_block, t.offset, t.physical_block, t.slot)
        (2, 1, 1, 5)
        >>> t.byte_address == 1 * 4 * 1024 + 1 * 1024
        True

    Raises ValueError naming the value for ``block_size < 1``, ``bytes_per_token < 1``,
    a negative ``pos``, or a ``pos`` past the last block of the table.
    """
    _check_int("pos", pos)
    _check_int("block_size", block_size)
    _check_int("bytes_per_token", bytes_per_token)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if bytes_per_token < 1:
        raise ValueError(f"bytes_per_token must be >= 1, got {bytes_per_token}")
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    capacity = len(block_table) * block_size
    if pos >= capacity:
        raise ValueError(
            f"pos {pos} is past the block table: {len(block_table)} block(s) x block_size {block_size} "
            f"hold positions 0..{capacity - 1}"
        )
    logical_block, offset = divmod(pos, block_size)
    physical_block = block_table[logical_block]
    slot = physical_block * block_size + offset
    byte_address = base + slot * bytes_per_token
    return Translation(pos, logical_block, offset, physical_block, slot, byte_address)


def slot_mapping(block_table: Sequence[int], start: int, end: int, block_size: int) -> list[int]:
    """Slots of positions ``start..end-1``: ``block_table[pos // block_size] * block_size + pos % block_size``.

    The pure form of :meth:`BlockTable.slot_mapping` (no range checks), for callers that hold
    plain block-id lists, such as the model's paged forward pass.

    Example: ``slot_mapping([3, 7, 1], 3, 6, 4) -> [15, 28, 29]``.
    """
    return [block_table[p // block_size] * block_size + p % block_size for p in range(start, end)]


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """How many blocks hold ``num_tokens`` tokens: ceil(num_tokens / block_size).

    Example: ``blocks_needed(9, 4) -> 3``, ``blocks_needed(8, 4) -> 2``, ``blocks_needed(0, 4) -> 0``.
    """
    _check_int("num_tokens", num_tokens)
    _check_int("block_size", block_size)
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if num_tokens < 0:
        raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
    return -(-num_tokens // block_size)


# ------------------------------------------------------------------------ allocator
class BlockAllocator:
    """A pool of ``num_blocks`` physical blocks with reference counts.

    Free order (documented, deterministic): the free pool is a FIFO queue. It starts as
    ``0, 1, ..., num_blocks-1``; ``allocate`` takes from the front; a block whose ref
    count drops to zero goes to the back. So a freed block is reused only after every
    block that was free before it (as in nano-vllm's deque and vLLM's free-block queue).

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

    def __init__(self, num_blocks: int, block_size: int, log: EventLog | None = None) -> None:
        _check_int("num_blocks", num_blocks)
        _check_int("block_size", block_size)
        if num_blocks < 1:
            raise ValueError(f"num_blocks must be >= 1, got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.log = log if log is not None else EventLog()
        self.ref_count: list[int] = [0] * num_blocks
        self.owner: list[str | None] = [None] * num_blocks  # who allocated it (for pictures)
        self.free_block_ids: deque[int] = deque(range(num_blocks))
        # A block is used iff its ref_count is positive (no separate set to keep in step).

    # -- queries
    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - len(self.free_block_ids)

    def can_allocate(self, n: int) -> bool:
        return 0 <= n <= len(self.free_block_ids)

    def _validate_ids(self, block_ids: Iterable[int], what: str) -> list[int]:
        ids = block_ids if type(block_ids) is list else list(block_ids)
        nb = self.num_blocks
        for b in ids:  # plain loops: the hot path of a radix cache with page_size 1 (one block per token)
            if type(b) is not int or b < 0 or b >= nb:
                break
        else:
            return ids
        for b in ids:
            if isinstance(b, bool) or not isinstance(b, int) or not 0 <= b < nb:
                raise UnknownBlock(f"{what}: unknown block id {b!r} (valid ids are 0..{nb - 1})")
        return ids

    # -- state changes (all-or-nothing)
    def allocate(self, n: int, owner: str | None = None) -> list[int]:
        """Take ``n`` blocks from the front of the free queue, each with ref count 1.

        All or nothing: raises :class:`OutOfBlocks` (naming both numbers) and changes
        nothing when fewer than ``n`` are free.
        """
        _check_int("n", n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        if n > len(self.free_block_ids):
            raise OutOfBlocks(n, len(self.free_block_ids), f"owner {owner}" if owner else "")
        pop = self.free_block_ids.popleft
        ids = [pop() for _ in range(n)]
        rc, own = self.ref_count, self.owner
        for b in ids:
            rc[b] = 1
            own[b] = owner
        if ids:
            self.log.emit(Event("allocate", owner, tuple(ids)))
        return ids

    def incref(self, block_ids: Iterable[int], seq_id: str | None = None) -> None:
        """Add one reference to each used block (sharing: fork, prefix reuse)."""
        ids = self._validate_ids(block_ids, "incref")
        rc = self.ref_count
        for b in ids:
            if rc[b] == 0:
                raise KVCacheError(f"incref: block {b} is free; allocate it before sharing it")
        for b in ids:
            rc[b] += 1
        if ids:
            self.log.emit(Event("incref", seq_id, tuple(ids)))

    def free(self, block_ids: Iterable[int], seq_id: str | None = None) -> list[int]:
        """Drop one reference from each block; blocks reaching zero return to the pool.

        Returns the blocks that became free, in the order they joined the free queue.
        Raises (and changes nothing) for an unknown id, a block that is already free,
        or a block listed more times than it has references (the same block twice in
        one call is a double free unless its ref count is at least 2).
        """
        ids = self._validate_ids(block_ids, "free")
        rc = self.ref_count
        for b in ids:
            if rc[b] == 0:
                raise DoubleFree(f"free: block {b} is already free (double free)")
        if len(set(ids)) != len(ids):  # a block listed several times: it needs that many references
            wanted: dict[int, int] = {}
            for b in ids:
                wanted[b] = wanted.get(b, 0) + 1
            for b, k in wanted.items():
                if k > rc[b]:
                    raise DoubleFree(f"free: block {b} listed {k} times in one call but has ref_count {rc[b]} (double free)")
        released: list[int] = []
        own = self.owner
        for b in ids:
            c = rc[b] - 1
            rc[b] = c
            if not c:
                released.append(b)
                own[b] = None
        if released:
            self.free_block_ids.extend(released)
        if ids:
            self.log.emit(Event("free", seq_id, tuple(ids), {"released": released}))
        return released

    # -- invariants
    def check_integrity(self, holders: Iterable[Sequence[int]] | None = None) -> None:
        """Raise AssertionError unless the pool is consistent.

        free + used = total; no block both free and used; no duplicate in the free
        queue; a block is used iff its ref count is positive. With ``holders`` (each a
        list of block ids: every block table, every radix node...), every block's ref
        count must equal the number of times holders hold it.
        """
        free = list(self.free_block_ids)
        assert len(free) == len(set(free)), f"duplicate ids in the free queue: {free}"
        fs = set(free)
        assert all(0 <= b < self.num_blocks for b in fs), "free queue holds an unknown id"
        for b in range(self.num_blocks):
            rc = self.ref_count[b]
            assert rc >= 0, f"block {b} has negative ref_count {rc}"
            assert (rc == 0) == (b in fs), f"block {b}: ref_count {rc} but in free queue={b in fs}"
            assert rc > 0 or self.owner[b] is None, f"free block {b} still has owner {self.owner[b]!r}"
        # with the free queue inside 0..num_blocks-1, the loop above also gives free + used == total
        if holders is not None:
            counts = [0] * self.num_blocks
            for held in holders:
                for b in held:
                    counts[b] += 1
            bad = [(b, self.ref_count[b], counts[b]) for b in range(self.num_blocks) if counts[b] != self.ref_count[b]]
            assert not bad, "ref_count != holders for (block, ref_count, holders): " + str(bad[:8])

    def state(self) -> tuple:
        """Everything that defines the allocator, for 'nothing changed' checks in tests."""
        return (tuple(self.ref_count), tuple(self.owner), tuple(self.free_block_ids))


# ---------------------------------------------------------------------- block table
@dataclass
class BlockTable:
    """The block table of one sequence: logical block ``i`` lives in ``block_ids[i]``.

    Example (block size 4):
        >>> a = BlockAllocator(num_blocks=8, block_size=4)
        >>> t = BlockTable(a, "R1")
        >>> t.append_tokens(6)            # 6 tokens -> 2 blocks; no copies
        []
        >>> t.block_ids, t.num_tokens
        ([0, 1], 6)
        >>> child = t.fork("R1.1")        # shares both blocks; no new block
        >>> a.ref_count[:2]
        [2, 2]
        >>> child.append_tokens(1)        # writes into shared, partial block 1: copy it
        [(1, 2)]
        >>> child.block_ids, t.block_ids
        ([0, 2], [0, 1])
    """

    allocator: BlockAllocator
    seq_id: str
    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0

    @property
    def block_size(self) -> int:
        return self.allocator.block_size

    @property
    def log(self) -> EventLog:
        return self.allocator.log

    def __len__(self) -> int:
        return len(self.block_ids)

    # -- address translation
    def translate(self, pos: int, bytes_per_token: int = 1, base: int = 0) -> Translation:
        """Translate a position this sequence has written (``0 <= pos < num_tokens``)."""
        _check_int("pos", pos)
        if not 0 <= pos < self.num_tokens:
            raise ValueError(f"pos {pos} is outside sequence {self.seq_id}'s {self.num_tokens} token(s)")
        return translate(self.block_ids, pos, self.block_size, bytes_per_token, base)

    def slot_mapping(self, start: int = 0, end: int | None = None) -> list[int]:
        """Slots of positions ``start..end-1`` (default: every written token).

        Example: table [3, 7], block size 4, positions 3..5 -> [15, 28, 29].
        """
        end = self.num_tokens if end is None else end
        _check_int("start", start)
        _check_int("end", end)
        if not 0 <= start <= end <= self.num_tokens:
            raise ValueError(f"slot range {start}..{end} is outside sequence {self.seq_id}'s {self.num_tokens} token(s)")
        return slot_mapping(self.block_ids, start, end, self.block_size)

    # -- growth and copy-on-write
    def blocks_to_append(self, n: int) -> int:
        """How many fresh blocks ``append_tokens(n)`` would take (copy-on-write included)."""
        cow, new = self._append_plan(n)
        return cow + new

    def _append_plan(self, n: int) -> tuple[bool, int]:
        """(copy the last block first?, new blocks past the table's end) for appending ``n`` tokens."""
        _check_int("n", n)
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        new = -(-(self.num_tokens + n) // self.block_size) - len(self.block_ids)  # blocks_needed(...) - held
        return n > 0 and self.last_block_shared_and_partial(), new

    def last_block_shared_and_partial(self) -> bool:
        """True when the next append must first copy the last block (copy-on-write)."""
        return (
            bool(self.block_ids)
            and self.num_tokens % self.block_size != 0
            and self.allocator.ref_count[self.block_ids[-1]] > 1
        )

    def append_tokens(self, n: int) -> list[tuple[int, int]]:
        """Reserve slots for ``n`` more tokens; returns the block copies to perform.

        A new block is taken only when the last one is full. If the last block is
        partial and shared with another sequence, this sequence is about to write into
        it, so it gets a private copy first: the result is ``[(src, dst)]`` and the KV
        store must copy block ``src`` to ``dst`` before writing. Writing at an exact block
        boundary copies nothing (the shared full block is never written again).

        All or nothing: raises :class:`OutOfBlocks` and changes nothing when the pool
        cannot supply every block needed (the copy included).
        """
        cow, new = self._append_plan(n)
        if cow + new > self.allocator.num_free_blocks:
            raise OutOfBlocks(cow + new, self.allocator.num_free_blocks, f"append {n} token(s) to {self.seq_id}")
        copies = [self._copy_on_write(len(self.block_ids) - 1)] if cow else []
        fresh = self.allocator.allocate(new, owner=self.seq_id) if new > 0 else []
        self.block_ids.extend(fresh)
        start = self.num_tokens
        self.num_tokens += n
        if n > 0:
            self.log.emit(Event("append", self.seq_id, tuple(fresh), {"start": start, "num_tokens": n}))
        return copies

    def _copy_on_write(self, logical_block: int) -> tuple[int, int]:
        src = self.block_ids[logical_block]
        (dst,) = self.allocator.allocate(1, owner=self.seq_id)
        self.block_ids[logical_block] = dst
        self.allocator.free([src], seq_id=self.seq_id)  # drop our reference to the shared one
        self.log.emit(Event("cow", self.seq_id, (src, dst), {"src": src, "dst": dst, "logical_block": logical_block}))
        return (src, dst)

    def write(self, pos: int) -> list[tuple[int, int]]:
        """Prepare to overwrite position ``pos`` (already written): copy its block if shared.

        Returns ``[(src, dst)]`` when a copy was needed, else ``[]``. (Beam search rewrites
        tokens of a shared block; plain decoding only appends.)
        """
        _check_int("pos", pos)
        if not 0 <= pos < self.num_tokens:
            raise ValueError(f"pos {pos} is outside sequence {self.seq_id}'s {self.num_tokens} token(s)")
        lb = pos // self.block_size
        if self.allocator.ref_count[self.block_ids[lb]] == 1:
            return []
        if self.allocator.num_free_blocks < 1:
            raise OutOfBlocks(1, 0, f"copy-on-write of L{lb} for {self.seq_id}")
        return [self._copy_on_write(lb)]

    # -- sharing and release
    def fork(self, child_seq_id: str) -> "BlockTable":
        """A child that shares every block (ref counts rise by one; no block is taken)."""
        self.allocator.incref(self.block_ids, seq_id=child_seq_id)
        child = BlockTable(self.allocator, child_seq_id, list(self.block_ids), self.num_tokens)
        self.log.emit(Event("fork", child_seq_id, tuple(self.block_ids), {"parent": self.seq_id}))
        return child

    def free(self) -> list[int]:
        """Release every block (shared ones only lose a reference); returns blocks freed."""
        ids, n = self.block_ids, self.num_tokens
        self.block_ids, self.num_tokens = [], 0  # the table lets go first, so snapshots never show it holding freed blocks
        try:
            released = self.allocator.free(ids, seq_id=self.seq_id) if ids else []
        except KVCacheError:
            self.block_ids, self.num_tokens = ids, n
            raise
        self.log.emit(Event("free_seq", self.seq_id, tuple(ids), {"released": released}))
        return released

    def check_integrity(self) -> None:
        assert len(self.block_ids) == blocks_needed(self.num_tokens, self.block_size), (
            f"{self.seq_id}: {len(self.block_ids)} blocks for {self.num_tokens} tokens (block_size {self.block_size})"
        )
        for b in self.block_ids:
            assert 0 <= b < self.allocator.num_blocks, f"{self.seq_id}: block id {b} out of range"
            assert self.allocator.ref_count[b] >= 1, f"{self.seq_id}: holds free block {b}"
        assert len(set(self.block_ids)) == len(self.block_ids), f"{self.seq_id}: a block appears twice {self.block_ids}"


# --------------------------------------------------------------------------- manager
@dataclass(frozen=True)
class MemorySnapshot:
    """The paged pool at one moment, as plain data for pictures and tests.

    ``owner[b]``: the sequence that allocated block b (None when free);
    ``tables``: each live sequence's block table; ``tokens_in_block[b]``: how many of
    block b's slots hold a token (for the last, partial block of a sequence).
    """

    num_blocks: int
    block_size: int
    ref_count: tuple[int, ...]
    owner: tuple[str | None, ...]
    tables: dict[str, tuple[int, ...]]
    num_tokens: dict[str, int]
    tokens_in_block: tuple[int, ...]
    free_block_ids: tuple[int, ...]
    caption: str = ""

    @classmethod
    def of(
        cls,
        allocator: BlockAllocator,
        tables: dict[str, Sequence[int]],
        num_tokens: dict[str, int],
        caption: str = "",
    ) -> "MemorySnapshot":
        """Freeze ``allocator`` with the block tables that hold its blocks.

        ``tables[s]`` holds ``num_tokens[s]`` tokens, so its block ``i`` is filled with
        ``min(block_size, num_tokens[s] - i * block_size)`` of them; a block held by several
        tables counts its fullest holder.
        """
        bs = allocator.block_size
        filled = [0] * allocator.num_blocks
        for s, ids in tables.items():
            n = num_tokens[s]
            for i, b in enumerate(ids):
                filled[b] = max(filled[b], min(bs, n - i * bs))
        return cls(
            num_blocks=allocator.num_blocks,
            block_size=bs,
            ref_count=tuple(allocator.ref_count),
            owner=tuple(allocator.owner),
            tables={s: tuple(ids) for s, ids in tables.items()},
            num_tokens=dict(num_tokens),
            tokens_in_block=tuple(filled),
            free_block_ids=tuple(allocator.free_block_ids),
            caption=caption,
        )

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_block_ids)

    def check_integrity(self) -> None:
        """Re-check the invariants on the frozen data (the stepper calls this)."""
        counts = [0] * self.num_blocks
        for ids in self.tables.values():
            for b in ids:
                counts[b] += 1
        fs = set(self.free_block_ids)
        assert len(fs) == len(self.free_block_ids), "duplicate free ids"
        for b in range(self.num_blocks):
            assert (b in fs) == (self.ref_count[b] == 0), f"block {b}: free={b in fs} ref_count={self.ref_count[b]}"
            assert counts[b] <= self.ref_count[b], f"block {b}: held {counts[b]} times, ref_count {self.ref_count[b]}"


class BlockManager:
    """Block tables for many sequences over one allocator (nano-vllm's BlockManager).

    ``record=True`` keeps a :class:`MemorySnapshot` after every event in
    ``self.snapshots`` (frames for the visualizer).

    Example:
        >>> m = BlockManager(num_blocks=6, block_size=4)
        >>> m.add_sequence("A", 5).block_ids
        [0, 1]
        >>> m.fork("A", "A2").block_ids
        [0, 1]
        >>> m.append("A2", 1)
        [(1, 2)]
        >>> m.check_integrity()
    """

    def __init__(self, num_blocks: int, block_size: int, log: EventLog | None = None, record: bool = False) -> None:
        self.allocator = BlockAllocator(num_blocks, block_size, log)
        self.tables: dict[str, BlockTable] = {}
        self.snapshots: list[MemorySnapshot] = []
        if record:
            self.snapshots.append(self.snapshot("start"))
            self.log.subscribe(lambda e: self.snapshots.append(self.snapshot(e.describe())))

    @property
    def log(self) -> EventLog:
        return self.allocator.log

    @property
    def block_size(self) -> int:
        return self.allocator.block_size

    @property
    def num_blocks(self) -> int:
        return self.allocator.num_blocks

    def _get(self, seq_id: str) -> BlockTable:
        if seq_id not in self.tables:
            raise KeyError(f"unknown sequence {seq_id!r}; live sequences: {sorted(self.tables)}")
        return self.tables[seq_id]

    def can_allocate(self, num_tokens: int) -> bool:
        return blocks_needed(num_tokens, self.block_size) <= self.allocator.num_free_blocks

    def add_sequence(self, seq_id: str, num_tokens: int = 0) -> BlockTable:
        """A new sequence with ``num_tokens`` prompt tokens (all-or-nothing)."""
        if seq_id in self.tables:
            raise ValueError(f"sequence {seq_id!r} already exists")
        table = BlockTable(self.allocator, seq_id)
        self.tables[seq_id] = table
        try:
            table.append_tokens(num_tokens)  # raises OutOfBlocks before any change
        except Exception:
            del self.tables[seq_id]
            raise
        return table

    def append(self, seq_id: str, n: int = 1) -> list[tuple[int, int]]:
        return self._get(seq_id).append_tokens(n)

    def fork(self, parent: str, child: str) -> BlockTable:
        if child in self.tables:
            raise ValueError(f"sequence {child!r} already exists")
        t = self._get(parent).fork(child)
        self.tables[child] = t
        return t

    def free(self, seq_id: str) -> list[int]:
        table = self._get(seq_id)
        del self.tables[seq_id]  # gone before its events, so snapshots never show a half-freed table
        try:
            return table.free()
        except KVCacheError:
            self.tables[seq_id] = table
            raise

    def check_integrity(self, extra_holders: Iterable[Sequence[int]] = ()) -> None:
        for t in self.tables.values():
            t.check_integrity()
        self.allocator.check_integrity([t.block_ids for t in self.tables.values()] + list(extra_holders))

    def snapshot(self, caption: str = "") -> MemorySnapshot:
        return MemorySnapshot.of(
            self.allocator,
            {s: t.block_ids for s, t in self.tables.items()},
            {s: t.num_tokens for s, t in self.tables.items()},
            caption,
        )
