"""A frozen picture of the paged pool: what the visualizer draws and tests compare.

Not handled here: drawing (``kvlab.viz.memory_map``).

Example:
    >>> from kvlab.memory.block_manager import BlockManager
    >>> m = BlockManager(num_blocks=4, block_size=4)
    >>> _ = m.add_sequence("A", 5)
    >>> s = m.snapshot("A has 5 tokens")
    >>> s.tables, s.tokens_in_block, s.num_free_blocks
    ({'A': (0, 1)}, (4, 1, 0, 0), 2)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

__all__ = ["MemorySnapshot"]


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
    def of(cls, allocator, tables: dict[str, Sequence[int]], num_tokens: dict[str, int],
           caption: str = "") -> "MemorySnapshot":
        """Freeze ``allocator`` (a BlockAllocator) with the block tables that hold its blocks.

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
