"""Contiguous reservation on a first-fit arena: kvlab's grow-by-doubling policy and the ablation
of the paper's Orca baselines without their buddy allocator.

====================  =====================================================================
mode                  rule (:class:`~kvlab.memory.contiguous.ContiguousArena` policy)
====================  =====================================================================
``pow2``              arena ``"pow2"``: reserve the next power of two of the current length,
                      grow by doubling (moving and copying when the next range is taken);
                      kvlab's own growth policy, **not** the paper's Orca (Pow2)
``firstfit-max``      arena ``"max"``: reserve ``max_len`` slots per request
``firstfit-pow2``     arena ``"exact"`` told ``prompt + next_pow2(output)``
``firstfit-oracle``   arena ``"exact"`` told the true final length
====================  =====================================================================

The three ``firstfit-*`` modes use the Orca baselines' length estimates (``orca.py``) but place
each range first fit, in token slots, with no power-of-two rounding: the **ablation** that shows
what the paper's buddy allocator costs.

Mirrors the Orca baselines of the vLLM paper (Kwon et al., SOSP 2023, Sec. 6.1) minus their
allocator (vLLM's pre-release ``BuddyBlockSpaceManager``, which ``orca.py`` follows).

Example (a budget of 4,096 slots; a 100-token request that will write 50 more):
    >>> from kvlab.sim.workloads import TraceRequest
    >>> p = ContiguousPolicy(4096, "firstfit-oracle")
    >>> r = SimRequest(TraceRequest(0, 0.0, 100, 50))
    >>> p.admit(r), r.seqs[0].cap, p.usage().held_slots
    (True, 150, 150)
"""
from __future__ import annotations

from typing import Iterable

from ...memory.contiguous import ContiguousArena, OutOfContiguousSpace, next_pow2
from ...memory.events import NO_LOG
from ..workloads import TraceRequest
from .base import BudgetTooSmall, MemoryPolicy, SimRequest, SimSequence, Usage

__all__ = ["ContiguousPolicy", "CONTIGUOUS_MODES"]

# policy name -> the arena's reservation rule
CONTIGUOUS_MODES = {"pow2": "pow2", "firstfit-max": "max", "firstfit-pow2": "exact", "firstfit-oracle": "exact"}


class ContiguousPolicy(MemoryPolicy):
    """One contiguous range per sequence in a :class:`ContiguousArena` (first fit)."""

    def __init__(self, capacity: int, mode: str = "firstfit-max", max_len: int = 2048, bytes_per_token: int = 1) -> None:
        arena_mode = CONTIGUOUS_MODES.get(mode)
        if arena_mode is None:
            raise ValueError(f"unknown contiguous mode {mode!r}; choose {', '.join(CONTIGUOUS_MODES)}")
        self.name, self.mode, self.max_len = mode, mode, max_len
        self.capacity = capacity
        self.arena = ContiguousArena(capacity, arena_mode, max_len, bytes_per_token, log=NO_LOG)
        self.will_use = 0
        self._final: dict[str, int] = {}
        self._free = capacity  # slots not reserved (the arena recomputes it by a scan; we keep count)
        self._usage: Usage | None = None  # cached until the arena changes

    def _final_len(self, req: TraceRequest) -> int | None:
        if self.mode == "firstfit-oracle":
            return req.total_len
        if self.mode == "firstfit-pow2":
            return min(self.max_len, req.prompt_len + next_pow2(req.output_len))
        return None

    def min_slots(self, req: TraceRequest) -> int:
        if req.total_len > self.max_len:
            raise BudgetTooSmall(f"request {req.req_id} has {req.total_len} tokens, more than max_len {self.max_len}")
        per = {"firstfit-max": self.max_len, "firstfit-oracle": req.total_len, "firstfit-pow2": self._final_len(req),
               "pow2": next_pow2(req.total_len)}[self.mode]
        return min(per, self.max_len) * req.num_seqs

    def admit(self, r: SimRequest) -> bool:
        L = r.prompt_now + 1
        fin = self._final_len(r.req)
        if self.arena.reservation_for(L, fin) * r.req.num_seqs > self._free:
            return False  # not enough free slots at all: skip the arena's first-fit scan
        done: list[str] = []
        try:
            for i in range(r.req.num_seqs):
                sid = f"{r.gid}.{i}"
                res = self.arena.admit(sid, L, final_len=fin)
                done.append(sid)
                r.seqs.append(SimSequence(sid, r, L - 1, 0, res.reserved, sid))
        except OutOfContiguousSpace:
            for sid in done:
                self.arena.finish(sid)
            r.seqs.clear()
            return False
        for s in r.seqs:
            w = min(s.cap, r.req.total_len)
            self._final[s.sid] = w
            self.will_use += w
            self._free -= s.cap
        self._usage = None
        return True

    def grow(self, s: SimSequence, need: int) -> bool:
        res = self.arena.requests[s.sid]
        before = res.reserved
        target = self.arena.reservation_for(need, res.final_len) if self.arena.policy == "pow2" else need
        if need > res.reserved and target > self._free + res.reserved:
            return False  # no range could hold it even after moving: skip the scan
        try:
            self.arena.grow(s.sid, need - res.length)
        except OutOfContiguousSpace:
            return False
        if res.reserved != before:
            self._free -= res.reserved - before
            self._usage = None
        s.cap = res.reserved
        w = min(s.cap, s.request.req.total_len)
        self.will_use += w - self._final[s.sid]
        self._final[s.sid] = w
        return True

    def sync(self, s: SimSequence, cur_len: int) -> None:
        res = self.arena.requests[s.sid]
        if cur_len > res.length:
            self.arena.grow(s.sid, cur_len - res.length)  # within the reservation: never moves

    def release(self, r: SimRequest, cur_len: int, finished: bool) -> None:
        for s in r.seqs:
            self._free += self.arena.requests[s.sid].reserved
            self.arena.finish(s.sid)
            self.will_use -= self._final.pop(s.sid)
        r.seqs = []
        self._usage = None

    def busy(self) -> bool:
        return bool(self.arena.requests)

    @property
    def bytes_copied(self) -> int:
        return self.arena.bytes_copied

    def usage(self) -> Usage:
        if self._usage is None:
            self._usage = Usage(self.capacity - self._free, self.will_use, 0, self._free - self.arena.largest_free_range)
        return self._usage

    def check(self, requests: Iterable[SimRequest]) -> None:
        self.arena.check_integrity()
        assert self._free == self.arena.free_tokens, f"free count {self._free} != arena's {self.arena.free_tokens}"
        live = {s.sid for r in requests for s in r.seqs}
        assert live == set(self.arena.requests), "arena and simulation disagree on who is running"
