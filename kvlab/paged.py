"""Moved to ``kvlab.memory (block_pool, block_table, block_manager, snapshot)``; this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .memory.block_manager import BlockManager
from .memory.block_pool import BlockAllocator, DoubleFree, KVCacheError, OutOfBlocks, UnknownBlock
from .memory.block_table import BlockTable, Translation, blocks_needed, slot_mapping, translate
from .memory.snapshot import MemorySnapshot

__all__ = ["KVCacheError", "OutOfBlocks", "DoubleFree", "UnknownBlock", "Translation", "translate", "blocks_needed",
           "slot_mapping", "BlockAllocator", "BlockTable", "BlockManager", "MemorySnapshot"]
