"""PagedAttention's memory policy: blocks on demand from a BlockManager, optionally shared by forks.

``paged``: every sequence (each of n samples or beams too) gets its own blocks as it grows.
``paged-share``: parallel samples fork the prompt's table and beams fork their parents'
(vLLM's copy-on-write), so shared blocks are held once.
``vllm``: ``paged`` with the scheduler of the vLLM the paper measured (v0.1, 2023: ``server``):
prompt steps run on their own, never beside decode steps, at most 2,560 prompt tokens a step
(``max_num_batched_tokens``); memory as ``paged`` (the 1% watermark, preemption by recomputation).

Mirrors vLLM v0 ``vllm/core/block_manager.py`` (``can_allocate`` = ``admit``'s check with the
watermark, ``append_slots`` = ``grow``, ``fork``, ``free``) over kvlab's
:class:`~kvlab.memory.block_manager.BlockManager` (nano-vllm's ``block_manager.py``).

Example (a budget of 64 slots in blocks of 16; one 20-token request):
    >>> from kvlab.sim.workloads import TraceRequest
    >>> p = PagedPolicy(capacity=64, block_size=16)
    >>> r = SimRequest(TraceRequest(0, 0.0, 20, 5))
    >>> p.admit(r), r.seqs[0].cap         # 21 slots needed: 2 blocks
    (True, 32)
    >>> p.usage().held_slots
    32
"""
from __future__ import annotations

from typing import Iterable

import numpy as np

from ...memory.block_manager import BlockManager
from ...memory.block_pool import OutOfBlocks
from ...memory.block_table import BlockTable, blocks_needed
from ...memory.events import NO_LOG
from ..workloads import TraceRequest
from .base import MemoryPolicy, SimRequest, SimSequence, Usage

__all__ = ["PagedPolicy", "table_cap", "VLLM_2023_SERVER"]

# vLLM v0.1 (2023) ``vllm/core/scheduler.py``: a step that admits prompts runs only them (``prompt_run``);
# ``SchedulerConfig.max_num_batched_tokens`` defaulted to 2,560.
VLLM_2023_SERVER = {"separate_prefill": True, "max_prefill_tokens": 2560}


def table_cap(mgr: BlockManager, t: BlockTable) -> int:
    """Slots ``t`` can fill without a new block: its capacity, or only its tokens when its last
    block is partial and shared (the next append copies it first)."""
    if t.num_tokens % t.block_size and mgr.blocks_to_append(t.seq_id, 1):  # partial, yet needs a block: a copy
        return t.num_tokens
    return len(t.block_ids) * t.block_size


class PagedPolicy(MemoryPolicy):
    """Blocks on demand from a :class:`BlockManager`; ``share=True`` forks samples and beams."""

    def __init__(self, capacity: int, block_size: int = 16, share: bool = False, name: str | None = None) -> None:
        name = name or ("paged-share" if share else "paged")
        num_blocks = self._blocks(name, capacity, block_size)
        if name == "vllm":
            self.server = VLLM_2023_SERVER
        self.shares_forks = share
        self._forks = 0
        self.mgr = BlockManager(num_blocks, block_size, log=NO_LOG)
        self.alloc = self.mgr.allocator

    def min_slots(self, req: TraceRequest) -> int:
        bs = self.block_size
        if self.shares_forks and req.num_seqs > 1:
            return (blocks_needed(req.prompt_len, bs) + req.num_seqs * blocks_needed(req.output_len + 1, bs)) * bs
        return blocks_needed(req.total_len, bs) * bs * req.num_seqs

    def admit(self, r: SimRequest) -> bool:
        p, n, bs, mgr = r.prompt_now, r.req.num_seqs, self.block_size, self.mgr
        if self.shares_forks and n > 1:
            need = blocks_needed(p, bs) + (n if p % bs == 0 else n - 1)
        else:
            need = blocks_needed(p + 1, bs) * n
        if need > self.alloc.num_free_blocks - self._watermark():
            return False
        if self.shares_forks and n > 1:
            parent = mgr.add_sequence(f"{r.gid}.0", p)
            tables = [parent] + [mgr.fork(parent.seq_id, f"{r.gid}.{i}") for i in range(1, n)]
            for t in tables:
                mgr.append(t.seq_id, 1)  # the first copies the shared partial last block
        else:
            tables = [mgr.add_sequence(f"{r.gid}.{i}", p + 1) for i in range(n)]
        for t in tables:
            r.seqs.append(SimSequence(t.seq_id, r, p, 0, table_cap(mgr, t), t))
            self.logical_blocks += len(t.block_ids)
        return True

    def grow(self, s: SimSequence, need: int) -> bool:
        t: BlockTable = s.table
        before = len(t.block_ids)
        if not self.shares_forks:  # no block is shared: the plan is whole blocks, checked without raising
            if -(-need // self.block_size) - before > self.alloc.num_free_blocks:
                return False
            self.mgr.append(s.sid, need - t.num_tokens)
            self.logical_blocks += len(t.block_ids) - before
            s.cap = len(t.block_ids) * self.block_size
            return True
        try:
            self.mgr.append(s.sid, need - t.num_tokens)
        except OutOfBlocks:
            return False
        self.logical_blocks += len(t.block_ids) - before
        s.cap = table_cap(self.mgr, t)
        return True

    def sync(self, s: SimSequence, cur_len: int) -> None:
        t: BlockTable = s.table
        if cur_len > t.num_tokens:
            before = len(t.block_ids)
            copies = self.mgr.append(s.sid, cur_len - t.num_tokens)
            assert not copies and len(t.block_ids) == before, f"{s.sid}: syncing to {cur_len} tokens took a block"

    def beam_reorder(self, r: SimRequest, cur_len: int, rng: np.random.Generator, decay: float) -> None:
        """One beam-search step's bookkeeping: the k new beams pick parents among the k
        current beams (beam i with weight ``decay**i``: the best beams get most children).
        A parent with one child continues as it is; each extra child is a ``fork`` (shares
        every block); a parent with no child is freed. The append that follows copies a
        shared partial last block (copy-on-write)."""
        k = len(r.seqs)
        w = decay ** np.arange(k)
        children = np.bincount(rng.choice(k, size=k, p=w / w.sum()), minlength=k)
        old, new = r.seqs, []
        for s, c in zip(old, children):
            if c:
                self.sync(s, cur_len)
                s.base_len, s.base_it = cur_len, 0
                new.append(s)
                for _ in range(1, c):
                    self._forks += 1
                    t = self.mgr.fork(s.sid, f"{r.gid}.f{self._forks}")
                    new.append(SimSequence(t.seq_id, r, cur_len, 0, table_cap(self.mgr, t), t))
                    self.logical_blocks += len(t.block_ids)
        for s, c in zip(old, children):
            if not c:
                self.logical_blocks -= len(s.table.block_ids)
                self.mgr.free(s.sid)
        for s in new:
            s.cap = table_cap(self.mgr, s.table)
        r.seqs = new

    def release(self, r: SimRequest, cur_len: int, finished: bool) -> None:
        for s in r.seqs:
            self.logical_blocks -= len(s.table.block_ids)
            self.mgr.free(s.sid)
        r.seqs = []

    def usage(self) -> Usage:
        used = self.alloc.num_used_blocks
        saved = self.logical_blocks - used
        return Usage(used * self.block_size, None, 0, 0, saved * self.block_size, self.logical_blocks, used)

    def check(self, requests: Iterable[SimRequest]) -> None:
        self.mgr.check_integrity()
        live = {s.sid for r in requests for s in r.seqs}
        assert live == set(self.mgr.tables), "block manager and simulation disagree on who is running"
        assert self.logical_blocks == sum(len(t.block_ids) for t in self.mgr.tables.values())
