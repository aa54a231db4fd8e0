"""Moved to one checker module per lesson (``kvlab.check.l00_start``, ``l02_how_big``,
``l03_contiguous``, ``l04_paging``); this module re-exports them for one release (kvlab 0.2).
Use ``kvlab.check.<name>``."""
from __future__ import annotations

from .l00_start import block_and_offset, common_prefix_len
from .l02_how_big import kv_cache_bytes, requests_that_fit
from .l03_contiguous import external_fragmentation, first_fit, reservation
from .l04_paging import block_allocator, blocks_needed, blocks_to_append, translate

__all__ = ["block_and_offset", "common_prefix_len", "kv_cache_bytes", "requests_that_fit", "reservation", "first_fit",
           "external_fragmentation", "translate", "blocks_needed", "blocks_to_append", "block_allocator"]
