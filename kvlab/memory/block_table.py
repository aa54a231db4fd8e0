"""Block tables (块表) and address translation: where a sequence's token ``pos`` lives.

A sequence's *block table* lists the physical blocks that hold its logical blocks: row ``i``
is the block of logical block ``i``. Token position ``pos`` lives in logical block
``pos // block_size`` at offset ``pos % block_size``; its *slot* in the flat pool is
``physical_block * block_size + offset`` (vLLM's ``slot_mapping``). A block table is a page
table: direct indexing, no search.

:class:`BlockTable` is plain data that everyone reads; only
:class:`kvlab.memory.block_manager.BlockManager` changes one (append, fork, copy-on-write,
adopt, free), so every reference a table holds is counted in exactly one place.

Mirrors vLLM's ``BlockTable`` rows and ``slot_mapping`` (``vllm/v1/worker/block_table.py``) and
nano-vllm's ``Sequence.block_table``.

Example (the source notes' figure):
    >>> translate([3, 7, 1, 5, 9], pos=9, block_size=4, bytes_per_token=1)
    Translation(pos=9, logical_block=2, offset=1, physical_block=1, slot=5, byte_address=5)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from .ids import as_ids, check_int, check_seq_id

__all__ = ["Translation", "translate", "slot_mapping", "blocks_needed", "BlockTable"]


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


def translate(block_table: Sequence[int], pos: int, block_size: int, bytes_per_token: int = 1,
              base: int = 0) -> Translation:
    """Translate token position ``pos`` through ``block_table``.

    ``base(P) = base + P * block_size * bytes_per_token`` is where physical block ``P``
    starts; the token's K and V start ``offset * bytes_per_token`` bytes after it.

    Example (block size 4, table L0->P3, L1->P7, L2->P1, L3->P5, L4->P9):
        >>> t = translate([3, 7, 1, 5, 9], 9, 4, bytes_per_token=1024)
        >>> (t.logical_block, t.offset, t.physical_block, t.slot)
        (2, 1, 1, 5)
        >>> t.byte_address == 1 * 4 * 1024 + 1 * 1024
        True

    Raises ValueError naming the value for ``block_size < 1``, ``bytes_per_token < 1``, a
    negative ``pos`` or ``base``, a ``pos`` past the last block of the table, and a table that
    is not a block table (a negative block id, or one physical block named twice: two logical
    blocks would share slots).
    """
    pos = check_int("pos", pos)
    block_size = check_int("block_size", block_size, 1)
    bytes_per_token = check_int("bytes_per_token", bytes_per_token, 1)
    base = check_int("base", base, 0)
    table = as_ids(block_table, "block_table")
    if len(set(table)) != len(table):
        dup = next(b for i, b in enumerate(table) if b in table[:i])
        raise ValueError(f"block_table names physical block {dup} twice ({table}); each logical block "
                         "needs a block of its own")
    if pos < 0:
        raise ValueError(f"pos must be >= 0, got {pos}")
    capacity = len(table) * block_size
    if pos >= capacity:
        raise ValueError(
            f"pos {pos} is past the block table: {len(table)} block(s) x block_size {block_size} "
            f"hold positions 0..{capacity - 1}"
        )
    logical_block, offset = divmod(pos, block_size)
    physical_block = table[logical_block]
    slot = physical_block * block_size + offset
    return Translation(pos, logical_block, offset, physical_block, slot, base + slot * bytes_per_token)


def slot_mapping(block_table: Sequence[int], start: int, end: int, block_size: int) -> list[int]:
    """Slots of positions ``start..end-1``: ``block_table[pos // block_size] * block_size + pos % block_size``.

    The pure form of :meth:`BlockTable.slot_mapping` (no range checks past the id rule of
    :mod:`kvlab.memory.ids`: a numpy table or numpy positions give plain ints), for callers that
    hold plain block-id lists, such as the model runner.

    Example: ``slot_mapping([3, 7, 1], 3, 6, 4) -> [15, 28, 29]``.
    """
    table = as_ids(block_table, "block_table")
    start, end = check_int("start", start, 0), check_int("end", end)
    block_size = check_int("block_size", block_size, 1)
    return _slots(table, start, end, block_size)


def _slots(block_ids: list[int], start: int, end: int, block_size: int) -> list[int]:
    """The slot formula itself, on values already checked."""
    return [block_ids[p // block_size] * block_size + p % block_size for p in range(start, end)]


def blocks_needed(num_tokens: int, block_size: int) -> int:
    """How many blocks hold ``num_tokens`` tokens: ceil(num_tokens / block_size).

    Example: ``blocks_needed(9, 4) -> 3``, ``blocks_needed(8, 4) -> 2``, ``blocks_needed(0, 4) -> 0``.
    """
    num_tokens = check_int("num_tokens", num_tokens, 0)
    block_size = check_int("block_size", block_size, 1)
    return -(-num_tokens // block_size)


@dataclass
class BlockTable:
    """The block table of one sequence: logical block ``i`` lives in ``block_ids[i]``, and
    ``num_tokens`` slots are written (or reserved). Read it; change it through its BlockManager.

    Example:
        >>> t = BlockTable("R1", 4, [3, 7, 1], 10)
        >>> t.translate(9).physical_block, t.slot_mapping(3, 6), t.capacity
        (1, [15, 28, 29], 12)
    """

    seq_id: str
    block_size: int
    block_ids: list[int] = field(default_factory=list)
    num_tokens: int = 0

    def __post_init__(self) -> None:  # the id rule (kvlab.memory.ids): plain ints and a str id
        check_seq_id(self.seq_id)
        self.block_size = check_int("block_size", self.block_size, 1)
        self.block_ids = as_ids(self.block_ids, "block_ids")
        self.num_tokens = check_int("num_tokens", self.num_tokens, 0)

    def __len__(self) -> int:
        return len(self.block_ids)

    @property
    def capacity(self) -> int:
        """Slots the table's blocks hold: len(block_ids) x block_size."""
        return len(self.block_ids) * self.block_size

    @property
    def num_full_blocks(self) -> int:
        return self.num_tokens // self.block_size

    def translate(self, pos: int, bytes_per_token: int = 1, base: int = 0) -> Translation:
        """Translate a position this sequence has written (``0 <= pos < num_tokens``)."""
        pos = check_int("pos", pos)
        if not 0 <= pos < self.num_tokens:
            raise ValueError(f"pos {pos} is outside sequence {self.seq_id}'s {self.num_tokens} token(s)")
        return translate(self.block_ids, pos, self.block_size, bytes_per_token, base)

    def slot_mapping(self, start: int = 0, end: int | None = None) -> list[int]:
        """Slots of positions ``start..end-1`` (default: every written token).

        Example: table [3, 7], block size 4, positions 3..5 -> [15, 28, 29].
        """
        end = self.num_tokens if end is None else end
        if type(start) is not int or type(end) is not int:  # the id rule; a plain int passes it as is
            start, end = check_int("start", start), check_int("end", end)
        if not 0 <= start <= end <= self.num_tokens:
            raise ValueError(f"slot range {start}..{end} is outside sequence {self.seq_id}'s {self.num_tokens} token(s)")
        return _slots(self.block_ids, start, end, self.block_size)  # the table's own ids: checked when it was made

    def check_integrity(self, ref_count: Sequence[int] | None = None) -> None:
        """Whole blocks for ``num_tokens``, no block twice; with ``ref_count``, every block in use."""
        assert len(self.block_ids) == -(-self.num_tokens // self.block_size), (
            f"{self.seq_id}: {len(self.block_ids)} blocks for {self.num_tokens} tokens (block_size {self.block_size})")
        assert len(set(self.block_ids)) == len(self.block_ids), f"{self.seq_id}: a block appears twice {self.block_ids}"
        if ref_count is not None:
            for b in self.block_ids:
                assert 0 <= b < len(ref_count), f"{self.seq_id}: block id {b} out of range"
                assert ref_count[b] >= 1, f"{self.seq_id}: holds free block {b}"
