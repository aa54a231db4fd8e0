"""kvlab.memory: the physical layer (pure Python, no torch).

    events.py          Event, EventLog, NullLog / NO_LOG: every state change, recorded cheaply
    ids.py             check_int, as_ids: the one rule for ids, positions and counts
    kvspec.py          KVSpec, GPUSpec, MODELS, GPUS: how big the KV cache is
    contiguous.py      ContiguousArena: the pre-vLLM baseline (one range per request)
    block_pool.py      BlockAllocator and the memory errors: blocks with reference counts
    block_table.py     BlockTable, translate, slot_mapping, blocks_needed: where a token lives
    block_manager.py   BlockManager: the only code that changes a block table
    snapshot.py        MemorySnapshot: the pool frozen for pictures and tests

Imports nothing from the layers above (reuse, compute, sim, viz, check).
"""
from __future__ import annotations

from .block_manager import BlockManager
from .block_pool import BlockAllocator, DoubleFree, KVCacheError, NotABlockId, OutOfBlocks, UnknownBlock
from .block_table import BlockTable, Translation, blocks_needed, slot_mapping, translate
from .buddy import BuddyAllocator, BuddyStats
from .contiguous import ContiguousArena, OutOfContiguousSpace
from .events import NO_LOG, Event, EventLog, NullLog
from .ids import as_ids, check_int
from .kvspec import GPUS, MODELS, GPUSpec, KVSpec, format_bytes, get_gpu, get_model
from .snapshot import MemorySnapshot

__all__ = [
    "BlockManager", "BlockAllocator", "DoubleFree", "KVCacheError", "NotABlockId", "OutOfBlocks", "UnknownBlock",
    "BlockTable", "Translation", "blocks_needed", "slot_mapping", "translate",
    "ContiguousArena", "OutOfContiguousSpace", "Event", "EventLog", "NullLog", "NO_LOG",
    "as_ids", "check_int", "GPUS", "MODELS", "GPUSpec", "KVSpec", "format_bytes", "get_gpu", "get_model",
    "MemorySnapshot", "BuddyAllocator", "BuddyStats",
]
