"""Moved to ``kvlab.reuse.block_hash_cache`` (``PrefixCache`` is now ``BlockHashCache``, with vLLM's
method names); this module re-exports it for one release (kvlab 0.2). Import from there."""
from __future__ import annotations

from .reuse.block_hash_cache import (ROOT_HASH, Block, BlockHashCache, PrefixCacheStats, PrefixEvictResult,
                                     PrefixMatch, hash_block_tokens)

__all__ = ["ROOT_HASH", "hash_block_tokens", "Block", "PrefixMatch", "PrefixEvictResult", "PrefixCacheStats",
           "PrefixCache"]


class PrefixCache(BlockHashCache):
    """``BlockHashCache`` under its old name, with the old method names ``cache_blocks`` and ``free``."""

    def cache_blocks(self, tokens, block_ids, rid=None, block_hashes=None) -> int:
        return self.cache_full_blocks(tokens, block_ids, rid, block_hashes)

    def free(self, block_ids, rid=None) -> list[int]:
        return self.free_blocks(block_ids, rid)
