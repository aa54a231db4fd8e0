"""SGLang's RadixAttention as a memory policy: the request cycle of CacheManager, at scale.

Every step goes through :class:`~kvlab.reuse.cache_manager.CacheManager` (the one request
cycle, the ownership rule ``ref_count == tree + tables``):

===============  ==========================================================================
simulation       CacheManager
===============  ==========================================================================
admit            ``admit(sid, tokens, num_tokens=prompt_now + 1)``: match (at least one token
                 left to compute), lock, adopt the matched blocks, allocate the rest
                 (evicting LRU leaves when short); then ``cache_unfinished_req(sid, tokens)``
                 right after the prompt, so requests running at the same time share it.
                 n > 1 samples (or beams): sample 0 is admitted with ``prompt_now`` slots and
                 cached, the others ``fork`` it, then each appends one slot (their first
                 tokens differ; a shared partial page is copied)
grow             ``append(sid, n)`` (evicting when short)
preempt, finish  ``cache_finished_req(sid, computed tokens)``: what the request computed
                 (every token but its newest) stays cached, on preemption too, as the
                 engine does; sample 0 carries the trace's ids, the other samples cache none
===============  ==========================================================================

Requests without token ids (``prompt is None``) pass ``tokens=None``: nothing matched or
cached, the pool is used as ``paged`` uses it. Beams are independent forks here (no beam
reordering: that is ``paged-share``).

Mirrors SGLang ``python/sglang/srt/managers/schedule_batch.py`` / ``scheduler.py`` calling
``radix_cache.py`` (``match_prefix``, ``cache_unfinished_req``, ``cache_finished_req``), with
vLLM's admission watermark.

Example (page size 4; R1 and R2 share 8 prompt tokens; R2 runs after R1 finished):
    >>> from kvlab.sim.workloads import TraceRequest
    >>> p = RadixPolicy(capacity=64, block_size=4)
    >>> r1 = SimRequest(TraceRequest(1, 0.0, 10, 2, tuple(range(10)), (50, 51)))
    >>> p.admit(r1), len(p.tree.tree_block_ids())     # the prompt's 2 full pages are cached at once
    (True, 2)
    >>> p.release(r1, cur_len=12, finished=True)       # 11 tokens computed: 2 full pages
    >>> r2 = SimRequest(TraceRequest(2, 0.0, 10, 2, tuple(range(8)) + (7, 7), (60, 61)))
    >>> p.admit(r2), r2.hit
    (True, 8)
    >>> p.check([r2])
"""
from __future__ import annotations

from typing import Iterable

from ...memory.events import NO_LOG
from ...reuse.cache_manager import CacheManager
from ...reuse.radix_cache import RadixCache
from .base import MemoryPolicy, SimRequest, SimSequence, Usage

__all__ = ["RadixPolicy"]


class RadixPolicy(MemoryPolicy):
    """SGLang's RadixAttention over the paged pool (``page_size == block_size``), through CacheManager."""

    uses_tokens = True

    def __init__(self, capacity: int, block_size: int = 16, eviction_policy: str = "lru") -> None:
        num_blocks = self._blocks("radix", capacity, block_size)
        self.cm = CacheManager(num_blocks, block_size, eviction_policy=eviction_policy, log=NO_LOG)
        self.alloc = self.cm.allocator
        self.tree: RadixCache = self.cm.tree
        self.prefix_cache = self.tree

    def admit(self, r: SimRequest) -> bool:
        p, n, bs, cm = r.prompt_now, r.req.num_seqs, self.block_size, self.cm
        toks = r.tokens_now()
        if toks is not None:
            toks = list(toks)  # validated once by admit; cache_* reuse it
        wm = self._watermark()
        sid0 = f"{r.gid}.0"
        a = cm.admit(sid0, toks, p + 1 if n == 1 else p)
        if a is None:
            return False
        more = 0 if n == 1 else n - (p % bs != 0)  # each sample's own slot p (a copy of a partial block)
        if more + wm and not cm.make_room(more + wm, sid0):
            cm.free(sid0)  # nothing was computed: cache nothing
            return False
        if toks is not None:
            cm.cache_unfinished_req(sid0, toks)
        sids = [sid0] + [f"{r.gid}.{i}" for i in range(1, n)]
        for sid in sids[1:]:
            cm.fork(sid0, sid)
        if n > 1:
            for sid in sids:
                cm.append(sid, 1)  # room was made above: never None
        r.hit = a.prefix_len
        for sid in sids:
            t = cm.table(sid)  # no shared partial block (the samples copied theirs): cap = capacity
            r.seqs.append(SimSequence(sid, r, p, 0, len(t.block_ids) * bs, t))
            self.logical_blocks += len(t.block_ids)
        return True

    def grow(self, s: SimSequence, need: int) -> bool:
        t = s.table
        before = len(t.block_ids)
        if self.cm.append(s.sid, need - t.num_tokens) is None:
            return False
        self.logical_blocks += len(t.block_ids) - before
        s.cap = len(t.block_ids) * self.block_size  # never a shared partial block here (see check)
        return True

    def sync(self, s: SimSequence, cur_len: int) -> None:
        t = s.table
        if cur_len > t.num_tokens:
            before = len(t.block_ids)
            copies = self.cm.append(s.sid, cur_len - t.num_tokens)
            assert copies == [] and len(t.block_ids) == before, f"{s.sid}: syncing to {cur_len} tokens took a block"

    def release(self, r: SimRequest, cur_len: int, finished: bool) -> None:
        """Finish and preemption alike: cache the computed tokens (``cur_len - 1``: the newest
        token's KV is not written yet), free the tables, unlock."""
        cm = self.cm
        toks = r.tokens_upto(cur_len - 1)
        for i, s in enumerate(r.seqs):
            if i == 0 and toks is not None:
                toks = list(toks)
                self.sync(s, len(toks))  # the table's lazy length catches up (no new block)
                self.logical_blocks -= len(s.table.block_ids)
                cm.cache_finished_req(s.sid, toks)
            else:
                self.logical_blocks -= len(s.table.block_ids)
                cm.cache_finished_req(s.sid, None)
        r.seqs = []

    def usage(self) -> Usage:
        """Tree blocks no running table uses are ``cached``; every other used block is held by
        tables (matched blocks are the tree's and the tables': counted once, as physical)."""
        bs = self.block_size
        cached = self.tree.evictable_size()  # whole pages
        physical = self.alloc.num_used_blocks - cached // bs
        return Usage(physical * bs, None, cached, 0, (self.logical_blocks - physical) * bs, self.logical_blocks,
                     physical)

    def check(self, requests: Iterable[SimRequest]) -> None:
        self.cm.check_integrity()  # ref_count == tree + tables, locks on the tables' paths
        live = {s.sid for r in requests for s in r.seqs}
        assert live == set(self.cm.tables), "cache manager and simulation disagree on who is running"
        assert self.logical_blocks == sum(len(t.block_ids) for t in self.cm.tables.values())
        held = {b for t in self.cm.tables.values() for b in t.block_ids}
        assert self.usage().physical_blocks == len(held), "a table uses a tree block that is not locked"
        bm = self.cm.block_manager
        assert not any(t.num_tokens % t.block_size and bm.blocks_to_append(sid, 1) for sid, t in bm.tables.items()), \
            "a shared partial block"
