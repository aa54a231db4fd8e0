"""Continuous batching over a memory policy: the simulated server loop, one named step at a time.

Each **iteration** the server runs every admitted sequence one step: a newly admitted request
is prefilled (its prompt minus any cached prefix) and yields its first token; every other
running sequence decodes one token. A sequence that has produced ``g`` tokens holds
``prompt + g`` KV slots; a request finishes when it has produced its output length, and its
memory goes back at once.

Between two iterations a :class:`Simulation` runs its steps in this order (``step``):

=============  ==============================================================================
``finish``     requests whose last token came out leave; their memory goes back
``grow``       a sequence about to pass its slots asks the policy for more; when there are none
               the most recently admitted other request is preempted (``preempt``)
``preempt``    by recomputation: all the request's memory goes back (a prefix cache keeps what
               it computed), it returns to the head of the queue and later prefills prompt +
               what it had generated. As in vLLM, no request is admitted in an iteration that
               preempted
``arrive``     requests whose release time has come join the waiting queue
``admit``      waiting requests start in order while the policy can give them their prompt's
               slots (``max_batch`` sequences and ``max_prefill_tokens`` prompt tokens per
               iteration at most); the first that does not fit stops admission (no skipping
               ahead). Order: ``"fcfs"`` (arrival) or ``"cache-aware"`` (SGLang's
               longest-prefix-match: the first ``cache_aware_window`` waiting requests sorted
               by their cached prefix, ties by queue order, from ``kvlab.reuse.schedule``).
               ``separate_prefill`` (vLLM 2023): the admitted prompts run in a step of their own
               (the cost model charges it), counted in ``RunMetrics.prompt_steps``
``advance``    run k iterations at once and account them (below)
=============  ==============================================================================

**Speed**: the loop jumps over iterations in which nothing but decoding happens. Each
sequence's length is ``base_len + iteration - base_it``; the simulation wakes only at events
(an allocation a sequence will need, a finish, an arrival), kept in a heap, and adds the
iterations in between to the metrics in closed form (all categories are linear in the
iteration there; the cost model sums them, :mod:`kvlab.sim.cost`). Beam search with sharing
steps every iteration. ``check=True`` steps every iteration and checks the policy's structure
(allocator, tables, tree) each time.

This module is longer than 450 lines: the named steps and the closed-form jump over iterations
share one state, and they read best as one class.

Mirrors vLLM v0 ``vllm/core/scheduler.py`` (``_schedule_prefills`` with the watermark,
``_preempt`` by recomputation of the newest request, no prefill in a step that preempted) and
SGLang ``python/sglang/srt/managers/scheduler.py`` with ``schedule_policy.py`` (``lpm``).

Example:
    >>> from kvlab.sim.workloads import sharegpt
    >>> from kvlab.sim.policies import make_policy
    >>> r = simulate(sharegpt(50, rate=5.0, seed=1), make_policy("paged", capacity=8192), check=True)
    >>> r.num_requests, r.preemptions >= 0, 0 < r.breakdown(loaded=False)["token_states"] < 1
    (50, True, True)
"""
from __future__ import annotations

import heapq
import time
from collections import deque

import numpy as np

from ..reuse.schedule import order_by_shared_prefix
from .cost import CostModel
from .metrics import RequestRecord, RunMetrics, SimResult
from .policies import MemoryPolicy, SimRequest, SimSequence, make_policy
from .workloads import Trace

__all__ = ["Simulation", "simulate", "ORDERS"]

ORDERS = ("fcfs", "cache-aware")

FINISH, BEAM, GROW = 0, 1, 2  # event kinds, in the order they are handled at one boundary


def _tokens_of(r: SimRequest) -> tuple[int, ...]:
    toks = r.tokens_now()
    return toks if toks is not None else ()


class Simulation:
    """One run of ``trace`` through ``policy``; ``run()`` returns a :class:`SimResult`.

    The arguments are :func:`simulate`'s. State between steps: ``waiting`` (a deque of
    :class:`SimRequest`), ``running`` (admission order), ``it`` (iterations run), ``now``
    (simulated seconds), ``events`` (a heap of ``(iteration, kind, admit_order, counter,
    object, version)``; an entry whose request has moved on is skipped).
    ``context_base + running_seqs * it`` = the running sequences' tokens before iteration ``it``.

    Example (the named steps, by hand):
        >>> from kvlab.sim.workloads import sharegpt
        >>> sim = Simulation(sharegpt(3, rate=float("inf"), seed=0), make_policy("paged", capacity=8192))
        >>> sim.arrive(), len(sim.waiting)
        (3, 3)
        >>> sim.admit() > 0, len(sim.running), len(sim.waiting)
        (True, 3, 0)
        >>> sim.run().num_requests
        3
    """

    def __init__(self, trace: Trace, policy: MemoryPolicy | str, *, capacity: int | None = None,
                 block_size: int = 16, order: str = "fcfs", cost: CostModel | None = None, seed: int = 0,
                 check: bool = False, progress: bool | None = None, max_batch: int = 256,
                 max_prefill_tokens: int | None = None, cache_aware_window: int = 256, beam_decay: float = 0.5,
                 timeline_points: int = 400, max_iterations: int = 50_000_000,
                 separate_prefill: bool | None = None) -> None:
        self._t0 = time.perf_counter()
        if isinstance(policy, str):
            if capacity is None:
                raise ValueError("give capacity (token slots) with a policy name")
            policy = make_policy(policy, capacity, block_size, max_len=max(2048, trace.max_total_len))
        if policy.busy():
            raise ValueError(f"policy {policy.name!r} still holds sequences from another run; make a fresh one")
        if order not in ORDERS:
            raise ValueError(f"unknown order {order!r}; choose one of {ORDERS}")
        server = policy.server  # the scheduler of the system the policy stands for (None: no prompt budget)
        if max_prefill_tokens is None:
            max_prefill_tokens = server.get("max_prefill_tokens", 8192) or 2**62
        separate_prefill = bool(server.get("separate_prefill")) if separate_prefill is None else separate_prefill
        if max_batch < 1 or max_prefill_tokens < 1:
            raise ValueError(f"max_batch and max_prefill_tokens must be >= 1, got {max_batch}, {max_prefill_tokens}")
        reqs = trace.requests
        for r in reqs:
            if r.prompt_len < 1 or r.output_len < 1:
                raise ValueError(f"request {r.req_id}: prompt_len and output_len must be >= 1, got {r.prompt_len}, "
                                 f"{r.output_len}")
            if r.num_seqs > max_batch:
                raise ValueError(f"request {r.req_id} has {r.num_seqs} sequences, more than max_batch {max_batch}")
            policy.validate(r)
        ids = [r.req_id for r in reqs]
        if len(set(ids)) != len(ids):
            raise ValueError("request ids must be unique")
        self.trace, self.policy, self.order, self.check = trace, policy, order, check
        self.separate_prefill = separate_prefill
        self.cost = cost or CostModel.for_model("opt-13b", "a100-40gb")
        self.seed, self.progress, self.beam_decay = seed, progress, beam_decay
        self.max_batch, self.max_prefill_tokens, self.cache_aware_window = max_batch, max_prefill_tokens, cache_aware_window
        self.timeline_points, self.max_iterations = timeline_points, max_iterations
        self.rng = np.random.default_rng(seed)
        self.requests = {r.req_id: SimRequest(r, arrival=r.arrival) for r in reqs}
        self.children: dict[int, list[int]] = {}  # multi-turn: the turns released by a finish
        self.pending: list[tuple[float, int]] = []  # heap of (release time, req_id)
        for r in reqs:
            if r.parent is None:
                self.pending.append((r.arrival, r.req_id))
            else:
                if r.parent not in self.requests:
                    raise ValueError(f"request {r.req_id}: parent {r.parent} is not in the trace")
                self.children.setdefault(r.parent, []).append(r.req_id)
        heapq.heapify(self.pending)
        self.release_time: dict[int, float] = {}
        self.waiting: deque[SimRequest] = deque()
        self.running: dict[str, SimRequest] = {}
        self.events: list = []
        self._counter = 0  # a tie-breaker: events never compare their objects
        self.finish_it: dict[str, int] = {}  # gid -> the iteration that yields its last token
        self.running_seqs = self.context_base = self.it = 0
        self.now = 0.0
        self._admitted = 0
        self.metrics = RunMetrics(policy.capacity)
        self.records: list[RequestRecord] = []
        self.preemptions = self.prompt_tokens = self.hit_tokens = self.prefill_tokens = self.output_tokens = 0
        self.timeline: list = []
        self._stride, self._next_sample, self._bar = 1, 0, None
        self.dirty = True  # admission may succeed now (something changed since it last failed)
        self.preempted_now = self.budget_hit = False
        self.admitted_now = 0  # requests the last ``admit`` started

    # ------------------------------------------------------------------ events
    def _push(self, e: int, kind: int, obj, r: SimRequest) -> None:
        self._counter += 1
        heapq.heappush(self.events, (e, kind, r.admit_order, self._counter, obj, r.version))

    def _schedule_grow(self, s: SimSequence, r: SimRequest) -> None:
        """The iteration at which ``s`` fills its slots (if it does before it finishes)."""
        if (e := s.base_it + (s.cap - s.base_len)) <= self.finish_it[r.gid]:
            self._push(e, GROW, s, r)

    def _drop(self, r: SimRequest) -> None:
        """Take ``r`` out of the running set (its pending events go stale)."""
        del self.running[r.gid]
        self.running_seqs -= len(r.seqs)
        self.context_base -= sum(s.base_len - s.base_it for s in r.seqs)
        r.version += 1

    # ------------------------------------------------------------------ the named steps
    def arrive(self) -> int:
        """Requests released by now join the waiting queue; returns how many."""
        pending, n = self.pending, 0
        while pending and pending[0][0] <= self.now:
            t_rel, rid = heapq.heappop(pending)
            self.release_time[rid] = t_rel
            self.waiting.append(self.requests[rid])
            n += 1
        if n:
            self.dirty = True
        return n

    def _order_cache_aware(self) -> None:
        """The first ``cache_aware_window`` waiting requests, longest cached prefix first (ties:
        queue order), by ``kvlab.reuse.schedule``'s lpm over the policy's cache."""
        waiting = self.waiting
        head = [waiting.popleft() for _ in range(min(len(waiting), self.cache_aware_window))]
        ordered = order_by_shared_prefix(head, tree=self.policy.prefix_cache, policy="lpm", tokens_of=_tokens_of)
        waiting.extendleft(reversed(ordered))

    def admit(self) -> int:
        """Start waiting requests in order while they fit; returns the prompt tokens to compute."""
        waiting, running, policy, it = self.waiting, self.running, self.policy, self.it
        if self.order == "cache-aware" and policy.uses_tokens and len(waiting) > 1:
            self._order_cache_aware()
        prefill = 0
        self.admitted_now = 0
        while waiting:
            r = waiting[0]
            if self.running_seqs + r.req.num_seqs > self.max_batch:
                break
            if prefill and prefill + r.prompt_now > self.max_prefill_tokens:
                self.budget_hit = True  # the rest waits for the next iteration's prefill budget
                break
            if not policy.admit(r):
                break
            waiting.popleft()
            self._admitted += 1
            self.admitted_now += 1
            r.admit_it, r.admit_order = it, self._admitted
            running[r.gid] = r
            for s in r.seqs:
                s.base_it = it
                self.running_seqs += 1
                self.context_base += s.base_len - it
            fin = self.finish_it[r.gid] = it + (r.req.output_len - r.generated) - 1
            if r.req.beam_width > 1 and policy.shares_forks:
                if fin >= it + 1:
                    self._push(it + 1, BEAM, r, r)
            else:
                for s in r.seqs:
                    self._schedule_grow(s, r)
            self._push(fin + 1, FINISH, r, r)
            if r.first_token_time is None:
                r.first_hit = r.hit
            self.prompt_tokens += r.prompt_now
            self.hit_tokens += r.hit
            computed = r.prompt_now - r.hit
            self.prefill_tokens += computed
            prefill += computed
        return prefill

    def grow(self, s: SimSequence, need: int) -> bool:
        """Give ``s`` room for ``need`` tokens, preempting later requests if needed; False when
        its own request had to be preempted."""
        return self.policy.grow(s, need) or self._grow_preempting(s, need)

    def _grow_preempting(self, s: SimSequence, need: int) -> bool:
        """``grow`` after the policy said no: preempt the newest other request until it says yes."""
        r, running = s.request, self.running
        while True:
            victim = next((running[gid] for gid in reversed(running) if gid != r.gid), None)
            self.preempt(victim or r)
            if victim is None:
                return False
            if self.policy.grow(s, need):
                return True

    def preempt(self, r: SimRequest) -> None:
        """Free everything ``r`` holds and put it back at the head of the queue (recompute later)."""
        self.preempted_now = True
        cur = r.seqs[0].len_at(self.it)
        r.generated += self.it - r.admit_it
        self._drop(r)
        self.policy.release(r, cur, finished=False)
        r.preemptions += 1
        self.preemptions += 1
        self.waiting.appendleft(r)

    def finish(self, r: SimRequest) -> None:
        """``r`` produced its last token: free its memory, record it, release its next turns."""
        cur = r.seqs[0].len_at(self.it)
        self._drop(r)
        self.policy.release(r, cur, finished=True)
        now = r.finish_time = self.now
        q = r.req
        self.output_tokens += q.output_len * q.num_seqs
        self.records.append(RequestRecord(q.req_id, self.release_time.get(q.req_id, q.arrival), r.first_token_time,
                                          now, q.prompt_len, q.output_len, r.first_hit, r.preemptions))
        for c in self.children.get(q.req_id, ()):
            cr = self.requests[c].req
            heapq.heappush(self.pending, (max(cr.arrival, now + cr.think_time), c))
        if self._bar is not None:
            self._bar.update(1)

    def _beam_step(self, r: SimRequest) -> None:
        """Beam search with sharing: reorder the beams (forks, frees), then one slot each."""
        it = self.it
        cur = r.seqs[0].len_at(it)
        self.policy.beam_reorder(r, cur, self.rng, self.beam_decay)
        for s in r.seqs:
            s.base_it = it
        for s in list(r.seqs):
            if not self.grow(s, cur + 1):
                return
        if it + 1 <= self.finish_it[r.gid]:
            self._push(it + 1, BEAM, r, r)

    def _due_events(self) -> None:
        """Finishes of the last iteration and growth needed by the next, in heap order."""
        events, running, it, policy_grow = self.events, self.running, self.it, self.policy.grow
        pop, push, finish_it = heapq.heappop, heapq.heappush, self.finish_it
        while events and events[0][0] <= it:
            _, kind, _, _, obj, ver = pop(events)
            if kind == GROW:  # the common case, inlined: grow (the named step), then its next event
                r = obj.request
                if ver != r.version or r.gid not in running:
                    continue
                need = obj.base_len + it - obj.base_it + 1
                if policy_grow(obj, need) or self._grow_preempting(obj, need):
                    e = obj.base_it + (obj.cap - obj.base_len)
                    if e <= finish_it[r.gid]:
                        self._counter += 1
                        push(events, (e, GROW, r.admit_order, self._counter, obj, ver))
                else:
                    self.dirty = True
                continue
            if ver != obj.version or obj.gid not in running:
                continue
            if kind == FINISH:
                self.finish(obj)
            else:
                self._beam_step(obj)
            self.dirty = True

    # ------------------------------------------------------------------ the loop
    def step(self) -> bool:
        """One boundary between iterations: events, arrivals, admission, then ``advance``.
        Returns False when every request has finished."""
        self.preempted_now = self.budget_hit = False
        if self.events and self.events[0][0] <= self.it:
            self._due_events()
        if self.pending and self.pending[0][0] <= self.now:
            self.arrive()
        prefill = 0
        if self.dirty and self.waiting and (not self.preempted_now or not self.running):
            prefill = self.admit()  # vLLM: no prefill in a step that preempted
        self.dirty = (self.preempted_now or self.budget_hit) and bool(self.waiting)
        if not self.running:
            if self.pending:
                self.now = max(self.now, self.pending[0][0])
                self.dirty = True
                return True
            if self.waiting:
                raise RuntimeError("requests are waiting but nothing runs and nothing can be admitted")
            return False
        self.advance(prefill)
        return True

    def advance(self, prefill: int) -> int:
        """Run iterations up to the next event (one when checking or when admission should be
        retried; fewer when an arrival comes first) and add them to the metrics in closed form.
        ``prefill``: prompt tokens computed in the first. Returns the number of iterations."""
        events, running, cost = self.events, self.running, self.cost
        while events:  # drop stale entries so the next event is a live one
            top = events[0]
            r = top[4] if top[1] != GROW else top[4].request
            if top[5] == r.version and r.gid in running:
                break
            heapq.heappop(events)
        it, now, B, sep = self.it, self.now, self.running_seqs, self.separate_prefill
        k = max(1, events[0][0] - it) if events else 1
        ctx0 = self.context_base + B * it
        if self.check or self.dirty:
            k = 1
        span = cost.span(k, B, ctx0, prefill, sep)
        pending = self.pending
        if pending and now + span > pending[0][0] and k > 1:
            k = min(k, cost.iterations_until(pending[0][0] - now, B, ctx0, prefill, sep))
            span = cost.span(k, B, ctx0, prefill, sep)
        u = self.policy.usage()
        self.metrics.add_segment(k, len(running), B, ctx0 + B + B * (k - 1) / 2, u.held_slots, u.will_use_slots,
                                 u.cached_slots, u.external_fragmentation, u.dup_slots, u.logical_blocks,
                                 u.physical_blocks, bool(self.waiting), u.requested_slots)
        if it >= self._next_sample:
            self._sample(u, ctx0 + B)
        self.now = now + span
        if prefill:
            if sep:
                self.metrics.prompt_steps += 1
                self.metrics.sum_prompt_requests += self.admitted_now
            t1 = now + cost.span(1, B, ctx0, prefill, sep)
            for r in running.values():
                if r.admit_it == it and r.first_token_time is None:
                    r.first_token_time = t1
        self.it = it = it + k
        if self.check:
            self._check()
        if it > self.max_iterations:
            raise RuntimeError(f"simulation passed {self.max_iterations} iterations; is the budget too small?")
        return k

    def _sample(self, u, tokens: int) -> None:
        """One timeline row (thinned to about ``timeline_points`` rows by doubling the stride)."""
        tl = self.timeline
        tl.append((self.now, self.it, len(self.running), len(self.waiting), tokens - u.dup_slots, u.held_slots,
                   u.will_use_slots, u.cached_slots, u.external_fragmentation, u.logical_blocks - u.physical_blocks,
                   u.requested_slots))
        self._next_sample = self.it + self._stride
        if len(tl) > 2 * self.timeline_points:
            tl[:] = tl[::2]
            self._stride *= 2

    def _check(self) -> None:
        """Bring the policy's lengths up to date and check its structure (``check=True``)."""
        policy, it = self.policy, self.it
        for r in self.running.values():
            for s in r.seqs:
                policy.sync(s, s.len_at(it))
        policy.check(list(self.running.values()))
        ts_now = self.context_base + self.running_seqs * it - policy.usage().dup_slots
        assert ts_now <= policy.capacity, f"token states {ts_now} exceed capacity {policy.capacity}"

    def run(self) -> SimResult:
        """Step until every request has finished; returns the result."""
        if self.progress or (self.progress is None and len(self.requests) >= 5000):
            try:
                from tqdm.auto import tqdm

                self._bar = tqdm(total=len(self.requests), desc=f"simulate {self.policy.name}", unit="req",
                                 leave=False)
            except ImportError:  # pragma: no cover
                self._bar = None
        try:
            while self.step():
                pass
        finally:
            if self._bar is not None:
                self._bar.close()
                self._bar = None
        return self.result()

    def result(self) -> SimResult:
        records = sorted(self.records, key=lambda r: r.req_id)
        p = self.policy
        return SimResult(p.name, self.trace.name, self.order, p.capacity, p.block_size, self.metrics, records, self.now,
                         self.preemptions, self.prompt_tokens, self.hit_tokens, self.prefill_tokens, self.output_tokens,
                         p.bytes_copied, self.timeline, time.perf_counter() - self._t0,
                         {"max_batch": self.max_batch, "max_prefill_tokens": self.max_prefill_tokens, "seed": self.seed,
                          "cost": self.cost, "separate_prefill": self.separate_prefill})


def simulate(trace: Trace, policy: MemoryPolicy | str, *, capacity: int | None = None, block_size: int = 16,
             order: str = "fcfs", cost: CostModel | None = None, seed: int = 0, check: bool = False,
             progress: bool | None = None, max_batch: int = 256, max_prefill_tokens: int | None = None,
             cache_aware_window: int = 256, beam_decay: float = 0.5, timeline_points: int = 400,
             max_iterations: int = 50_000_000, separate_prefill: bool | None = None) -> SimResult:
    """Run ``trace`` through ``policy`` (a fresh :class:`MemoryPolicy`, or a name plus ``capacity``).

    A policy keeps its state after the run (a radix or block-hash policy keeps its cache,
    so a second trace can start warm); one that still holds sequences is refused.

    ``max_prefill_tokens`` and ``separate_prefill`` (prompt steps apart, as vLLM in 2023) default
    to the policy's ``server`` (``vllm``: 2,560 and True; ``orca-*``: no limit; others 8,192).

    Returns a :class:`SimResult`. Deterministic: the same arguments give the same result
    (``seed`` drives beam-search parent choices only). ``progress``: a tqdm bar over
    finished requests (default: on for 5,000 requests or more).
    Raises ValueError for an unknown order, BudgetTooSmall when a request cannot fit even
    an empty budget.
    """
    return Simulation(trace, policy, capacity=capacity, block_size=block_size, order=order, cost=cost, seed=seed,
                      check=check, progress=progress, max_batch=max_batch, max_prefill_tokens=max_prefill_tokens,
                      cache_aware_window=cache_aware_window, beam_decay=beam_decay, timeline_points=timeline_points,
                      max_iterations=max_iterations, separate_prefill=separate_prefill).run()
