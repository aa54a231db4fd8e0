"""The vLLM paper's Orca baselines as the paper built them: a buddy-allocated run per sequence.

Each sequence reserves, when it is admitted, one contiguous run of blocks for its whole life
from a :class:`~kvlab.memory.buddy.BuddyAllocator`:

    reservation = run_blocks(ceil(min(prompt + estimate, max_len) / block_size))  blocks

where ``run_blocks`` rounds up to a power of two (the buddy allocator; its largest run is
``max_len`` = 2,048 tokens) and the length estimate is the policy's:

=================  =======================================  ===============================
policy             estimate of the output length            the paper's name (Sec. 6.1)
=================  =======================================  ===============================
``orca-max``       ``max_len`` (cacheflow's ``constant``)    Orca (Max)
``orca-pow2``      ``next_pow2(output)`` (``power2``)        Orca (Pow2): "over-reserves by
                                                             at most 2x"
``orca-oracle``    the true output length (``oracle``)       Orca (Oracle)
=================  =======================================  ===============================

The reservation always covers the request's final length, so a sequence never grows past it
and is never preempted. Scheduler (``server``): prompts join the running batch in the same
iteration as everyone's decode step, without a prompt-token budget (cacheflow's Orca scheduler
ignores ``max_num_batched_tokens``).

Memory categories (:class:`~kvlab.sim.policies.base.Usage`): slots up to the final length are
token states or reservation; the estimate's excess over the final length is internal
fragmentation; the buddy's rounding on top is ``rounding`` (with free and external
fragmentation, the paper's "external fragmentation & others").

Mirrors vLLM's pre-release ``cacheflow/master/block_manager.py`` (``BuddyBlockSpaceManager``:
``_compute_allocation_size``, ``can_allocate``, ``allocate``, ``free``) and
``cacheflow/master/scheduler.py`` (the Orca scheduler), in a pre-release version of
github.com/vllm-project/vllm (the one whose ``BuddyBlockSpaceManager`` takes a ``len_estimator``
of "constant", "power2" or "oracle"; later versions of the file, e.g. commit 38ed06a, hold only
the paged ``BlockSpaceManager``). The first-fit contiguous arena (``firstfit-*`` in ``contiguous.py``) is the ablation.

Example (983 blocks of 16 = 15,728 slots, the vLLM paper's Table 1 budget for OPT-13B):
    >>> from kvlab.sim.workloads import TraceRequest
    >>> p = OrcaPolicy(15_728, "orca-oracle")
    >>> r = SimRequest(TraceRequest(0, 0.0, 161, 338))       # 499 tokens: 32 blocks, a run of 32
    >>> p.admit(r), r.seqs[0].cap, p.usage().requested_slots
    (True, 512, 499)
    >>> q = OrcaPolicy(15_728, "orca-max")
    >>> sum(q.admit(SimRequest(TraceRequest(i, 0.0, 161, 338))) for i in range(9))   # 2,048 slots each
    7
"""
from __future__ import annotations

from typing import Iterable

from ...memory.block_table import blocks_needed
from ...memory.buddy import BuddyAllocator, next_pow2_blocks
from ...memory.contiguous import next_pow2
from ...memory.events import NO_LOG
from ..workloads import TraceRequest
from .base import BudgetTooSmall, MemoryPolicy, SimRequest, SimSequence, Usage

__all__ = ["OrcaPolicy", "ORCA_MODES"]

ORCA_MODES = ("orca-max", "orca-pow2", "orca-oracle")


class OrcaPolicy(MemoryPolicy):
    """One buddy run per sequence, sized by the policy's length estimate (see the module docstring)."""

    server = {"max_prefill_tokens": None, "separate_prefill": False}

    def __init__(self, capacity: int, mode: str = "orca-max", block_size: int = 16, max_len: int = 2048) -> None:
        if mode not in ORCA_MODES:
            raise ValueError(f"unknown Orca mode {mode!r}; choose one of: {', '.join(ORCA_MODES)}")
        num_blocks = self._blocks(mode, capacity, block_size)
        self.mode, self.max_len = mode, max_len
        # the largest run holds max_len tokens (rounded up to block_size x a power of two)
        max_run = next_pow2_blocks(blocks_needed(max_len, block_size))
        self.buddy = BuddyAllocator(num_blocks, block_size, max_run * block_size, log=NO_LOG)
        self._empty = BuddyAllocator(num_blocks, block_size, max_run * block_size, log=NO_LOG)  # for validate
        self.will_use = self.requested = 0
        self._seqs: dict[str, tuple[int, int, int]] = {}  # sid -> (run start, final length, requested slots)
        self._usage: Usage | None = None

    def reservation(self, req: TraceRequest) -> int:
        """Token slots the estimate asks for: ``min(prompt + estimate, max_len)`` (before the rounding)."""
        out = req.output_len
        est = self.max_len if self.mode == "orca-max" else next_pow2(out) if self.mode == "orca-pow2" else out
        return min(req.prompt_len + est, self.max_len)

    def run_blocks(self, req: TraceRequest) -> int:
        """Blocks of the buddy run one sequence of ``req`` reserves: its reservation in blocks,
        rounded up to a power of two (the buddy allocator's run)."""
        return self.buddy.run_blocks(blocks_needed(self.reservation(req), self.block_size))

    _run_blocks = run_blocks  # the old name, still used by kvlab/check/l09_at_scale.py and lesson 09 (to go)

    def min_slots(self, req: TraceRequest) -> int:
        if req.total_len > self.max_len:
            raise BudgetTooSmall(f"request {req.req_id} has {req.total_len} tokens, more than max_len {self.max_len}")
        return self.run_blocks(req) * self.block_size * req.num_seqs

    def validate(self, req: TraceRequest) -> None:
        """Also refuse a request whose runs the empty pool does not have (a pool of ``n`` blocks
        has no run larger than the largest power of two <= n)."""
        super().validate(req)
        run = self.run_blocks(req)
        if not self._empty.can_allocate([run] * req.num_seqs):
            raise BudgetTooSmall(f"KV budget of {self.capacity:,} slots has no {req.num_seqs} free run(s) of {run} "
                                 f"blocks for request {req.req_id} (policy {self.name!r})")

    def admit(self, r: SimRequest) -> bool:
        req, bs = r.req, self.block_size
        need = blocks_needed(self.reservation(req), bs)
        n = req.num_seqs
        if not self.buddy.can_allocate([need] * n):
            return False
        final, asked = min(req.total_len, self.max_len), self.reservation(req)
        for i in range(n):
            sid = f"{r.gid}.{i}"
            start = self.buddy.allocate(need, sid)
            cap = self.buddy.run_size[start] * bs
            r.seqs.append(SimSequence(sid, r, r.prompt_now, 0, cap, start))
            self._seqs[sid] = (start, final, asked)
            self.will_use += final
            self.requested += asked
        self._usage = None
        return True

    def grow(self, s: SimSequence, need: int) -> bool:
        return need <= s.cap  # the run holds the whole request: growth never allocates

    def release(self, r: SimRequest, cur_len: int, finished: bool) -> None:
        for s in r.seqs:
            start, final, asked = self._seqs.pop(s.sid)
            self.buddy.free(start)
            self.will_use -= final
            self.requested -= asked
        r.seqs = []
        self._usage = None

    def busy(self) -> bool:
        return bool(self._seqs)

    def usage(self) -> Usage:
        if self._usage is None:
            b, bs = self.buddy, self.block_size
            ext = (b.num_free_blocks - b.largest_free_run) * bs
            self._usage = Usage(b.num_used_blocks * bs, self.will_use, 0, ext, requested_slots=self.requested)
        return self._usage

    def check(self, requests: Iterable[SimRequest]) -> None:
        self.buddy.check_integrity()
        live = {s.sid: s for r in requests for s in r.seqs}
        assert set(live) == set(self._seqs), "buddy allocator and simulation disagree on who is running"
        assert {o for _, _, o in self.buddy.allocated.values()} == set(live), "a run without its sequence"
        for sid, (start, final, asked) in self._seqs.items():
            size, _req, owner = self.buddy.allocated[start]
            assert owner == sid and final <= asked <= size * self.block_size == live[sid].cap, sid
        assert self.will_use == sum(f for _, f, _ in self._seqs.values())
        assert self.requested == sum(a for _, _, a in self._seqs.values())
