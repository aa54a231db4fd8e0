"""vLLM's automatic prefix caching as a memory policy: BlockHashCache is the pool.

Admission: ``match_for_prefill`` (whole cached blocks), ``allocate`` the table (it ``touch``-es
the hits: shared by ref count), then ``cache_full_blocks`` of the prompt right away (so
concurrent requests share them, as vLLM does after each step). Finish: ``cache_full_blocks`` of
prompt + output, then ``free_blocks``; freed cached blocks wait in the LRU free queue until
reused. Preemption frees without caching (vLLM caches a block when it is full, here only at
admission and finish). Requests without token ids never hit.

Mirrors vLLM v1 ``vllm/v1/core/kv_cache_manager.py`` (``get_computed_blocks`` =
``match_for_prefill``, ``allocate_slots`` = ``allocate``, ``free``) over
:class:`~kvlab.reuse.block_hash_cache.BlockHashCache` (``block_pool.py``'s names).

Example (block size 4; R2 reuses the two full blocks R1 cached):
    >>> from kvlab.sim.workloads import TraceRequest
    >>> p = BlockHashPolicy(capacity=64, block_size=4)
    >>> r1 = SimRequest(TraceRequest(1, 0.0, 10, 2, tuple(range(10)), (50, 51)))
    >>> p.admit(r1)
    True
    >>> p.release(r1, cur_len=12, finished=True)
    >>> r2 = SimRequest(TraceRequest(2, 0.0, 10, 2, tuple(range(8)) + (7, 7), (60, 61)))
    >>> p.admit(r2), r2.hit
    (True, 8)
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ...memory.block_pool import OutOfBlocks
from ...memory.block_table import blocks_needed
from ...memory.events import NO_LOG
from ...reuse.block_hash_cache import BlockHashCache, PrefixMatch
from .base import MemoryPolicy, SimRequest, SimSequence, Usage

__all__ = ["BlockHashPolicy"]


class _Peek:
    """The read-only lookup the cache-aware order asks for (RadixCache's ``peek_prefix_len``)."""

    def __init__(self, pc: BlockHashCache) -> None:
        self.pc = pc

    def peek_prefix_len(self, tokens: Sequence[int]) -> int:
        return self.pc.match_prefix(tokens, record_stats=False).prefix_len


class BlockHashPolicy(MemoryPolicy):
    """vLLM's automatic prefix caching; a sequence's ``table`` is its list of block ids."""

    uses_tokens = True

    def __init__(self, capacity: int, block_size: int = 16) -> None:
        num_blocks = self._blocks("block-hash", capacity, block_size)
        self.pc = BlockHashCache(num_blocks, block_size, log=NO_LOG)
        self.prefix_cache = _Peek(self.pc)
        self._empty = PrefixMatch(0, [], [])

    def admit(self, r: SimRequest) -> bool:
        p, n, pc = r.prompt_now, r.req.num_seqs, self.pc
        toks = r.tokens_now()
        m = pc.match_for_prefill(toks, r.gid) if toks is not None else self._empty
        need = n * (blocks_needed(p + 1, self.block_size) - len(m.block_ids))
        hits_free = sum(1 for b in m.block_ids if pc.blocks[b].ref_cnt == 0)
        if need + self._watermark() > pc.num_free_blocks - hits_free:
            return False
        tables: list[list[int]] = []
        try:
            for _ in range(n):
                tables.append(pc.allocate(p + 1, m, r.gid))
        except OutOfBlocks:
            for t in tables:
                pc.free_blocks(t, r.gid)
            return False
        if toks is not None:
            pc.cache_full_blocks(toks, tables[0], r.gid, block_hashes=m.block_hashes)
        r.hit = m.prefix_len
        for i, t in enumerate(tables):
            r.seqs.append(SimSequence(f"{r.gid}.{i}", r, p, 0, len(t) * self.block_size, t))
            self.logical_blocks += len(t)
        return True

    def grow(self, s: SimSequence, need: int) -> bool:
        k = blocks_needed(need, self.block_size) - len(s.table)
        try:
            new = self.pc.allocate(k * self.block_size, self._empty, s.sid)
        except OutOfBlocks:
            return False
        s.table += new
        s.cap = len(s.table) * self.block_size
        self.logical_blocks += k
        return True

    def release(self, r: SimRequest, cur_len: int, finished: bool) -> None:
        req = r.req
        for i, s in enumerate(r.seqs):
            if finished and i == 0 and req.prompt is not None:
                seq = req.prompt + (req.output or ())[:cur_len - req.prompt_len]
                self.pc.cache_full_blocks(seq[:cur_len], s.table, r.gid)
            self.pc.free_blocks(s.table, s.sid)
            self.logical_blocks -= len(s.table)
        r.seqs = []

    def usage(self) -> Usage:
        bs = self.block_size
        used = self.pc.num_blocks - self.pc.num_free_blocks
        return Usage(used * bs, None, self.pc.evictable_size(), 0, (self.logical_blocks - used) * bs,
                     self.logical_blocks, used)

    def check(self, requests: Iterable[SimRequest]) -> None:
        tables = [s.table for r in requests for s in r.seqs]
        self.pc.check_integrity(holders=tables)
        assert self.logical_blocks == sum(len(t) for t in tables)
