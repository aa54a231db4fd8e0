"""Continuous batching over a memory policy: the simulated server loop.

Each **iteration** the server runs every admitted sequence one step: a newly admitted
request is prefilled (its prompt minus any cached prefix) and yields its first token;
every other running sequence decodes one token. A sequence that has produced ``g``
tokens holds ``prompt + g`` KV slots; a request finishes when it has produced its
output length, and its memory goes back at once.

Scheduling (vLLM's and SGLang's rules):
- **admission**: between iterations, waiting requests start in order while the policy
  can give them their prompt's slots (``max_batch`` sequences and ``max_prefill_tokens``
  prompt tokens per iteration at most). The first one that does not fit stops admission
  (no skipping ahead).
- **order**: ``"fcfs"`` (arrival order) or ``"cache-aware"`` (SGLang's
  longest-shared-prefix-first: the first ``cache_aware_window`` waiting requests sorted
  by their cached prefix length, ties by arrival).
- **preemption by recomputation**: when a running sequence needs a slot and there is
  none, the most recently admitted request is evicted (all its memory freed) and put
  back at the head of the queue; when it runs again it prefills prompt + what it had
  generated. Counted in ``SimResult.preemptions``. As in vLLM, no request is admitted
  in an iteration that preempted, and block policies admit only while a watermark of
  free blocks remains (``make_policy(watermark=0.01)``).

**Cost model** (a proxy for throughput and time to first token; documented, not measured):

    iteration time = overhead + (weights + KV of every running token) / (HBM bandwidth x bw_eff)
                     + 2 x params x (decoded + prefilled tokens) / (peak FLOPs x flops_eff)

Decode is memory bound (it reads all weights once per iteration and every cached K and
V); prefill is compute bound (2 FLOPs per parameter per token; attention's own FLOPs are
ignored). Defaults: overhead 2 ms, bw_eff 0.7, flops_eff 0.5, fp16 weights and the
GPU's dense fp16 tensor-core peak. For OPT-13B on an A100-40GB a decode step of 30
requests of 500 tokens comes to about 42 ms.

**Speed**: the loop jumps over iterations in which nothing but decoding happens. Each
sequence's length is ``base_len + iteration - base_it``; the scheduler wakes only at
events (an allocation a sequence will need, a finish, an arrival), found from a heap,
and adds the iterations in between to the metrics in closed form (all categories are
linear in the iteration there). Beam search with sharing steps every iteration.
``check=True`` steps every iteration and checks the allocator (and tree) each time.

Example:
    >>> from kvlab.sim.workloads import sharegpt
    >>> from kvlab.sim.policies import make_policy
    >>> r = simulate(sharegpt(50, rate=5.0, seed=1), make_policy("paged", capacity=8192), check=True)
    >>> r.num_requests, r.preemptions >= 0, 0 < r.breakdown(loaded=False)["token_states"] < 1
    (50, True, True)
"""
from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

from ..kvspec import KVSpec, get_gpu, get_model, GPUSpec
from .metrics import RequestRecord, RunMetrics, SimResult
from .policies import Group, MemoryPolicy, make_policy
from .workloads import Trace

__all__ = ["CostModel", "Budget", "simulate", "PEAK_FP16_FLOPS", "ORDERS"]

ORDERS = ("fcfs", "cache-aware")

# Dense fp16/bf16 tensor-core peaks from the vendors' spec sheets (FLOP/s).
PEAK_FP16_FLOPS = {"a100-40gb": 312e12, "a100-80gb": 312e12, "h100-80gb": 989e12, "h200": 989e12}


@dataclass(frozen=True)
class CostModel:
    """Iteration time (s) of a simulated server: see the module docstring.

    Example (OPT-13B on an A100-40GB, 30 sequences holding 15,000 tokens, no prefill):
        >>> c = CostModel.for_model("opt-13b", "a100-40gb")
        >>> round(c.iteration_time(decode_seqs=30, context_tokens=15_000, prefill_tokens=0) * 1000)
        42
    """

    weight_bytes: float
    bytes_per_token: int
    params: float
    hbm_bandwidth: float
    peak_flops: float
    overhead_s: float = 0.002
    bw_eff: float = 0.7
    flops_eff: float = 0.5

    @classmethod
    def for_model(cls, model: str | KVSpec, gpu: str | GPUSpec, **kw) -> "CostModel":
        spec = get_model(model) if isinstance(model, str) else model
        g = get_gpu(gpu) if isinstance(gpu, str) else gpu
        if spec.params_b is None:
            raise ValueError(f"model {spec.name!r} has no parameter count; the cost model needs one")
        params = spec.params_b * 1e9
        return cls(params * 2, spec.bytes_per_token, params, g.hbm_bandwidth, PEAK_FP16_FLOPS.get(g.name, 312e12), **kw)

    @property
    def _a(self) -> float:  # per iteration, fixed
        return self.overhead_s + self.weight_bytes / (self.hbm_bandwidth * self.bw_eff)

    @property
    def _c_tok(self) -> float:  # per token computed
        return 2 * self.params / (self.peak_flops * self.flops_eff)

    @property
    def _c_kv(self) -> float:  # per cached token read
        return self.bytes_per_token / (self.hbm_bandwidth * self.bw_eff)

    def iteration_time(self, decode_seqs: int, context_tokens: float, prefill_tokens: int = 0) -> float:
        return self._a + self._c_tok * (decode_seqs + prefill_tokens) + self._c_kv * context_tokens

    def span(self, k: int, seqs: int, ctx0: float, prefill_tokens: int) -> float:
        """Time of k iterations with ``seqs`` sequences whose context starts at ``ctx0`` tokens
        and grows by ``seqs`` per iteration; prefill only in the first one."""
        return (k * (self._a + self._c_tok * seqs) + self._c_kv * (k * ctx0 + seqs * k * (k - 1) / 2)
                + self._c_tok * prefill_tokens)

    def iterations_until(self, dt: float, seqs: int, ctx0: float, prefill_tokens: int) -> int:
        """Smallest k >= 1 with ``span(k) >= dt``."""
        a2 = self._c_kv * seqs / 2
        b = self._a + self._c_tok * seqs + self._c_kv * ctx0 - a2
        c = self._c_tok * prefill_tokens - dt
        if a2 > 0:
            k = (-b + math.sqrt(max(0.0, b * b - 4 * a2 * c))) / (2 * a2)
        else:
            k = -c / b
        k = max(1, int(math.ceil(k)))
        while k > 1 and self.span(k - 1, seqs, ctx0, prefill_tokens) >= dt:
            k -= 1
        while self.span(k, seqs, ctx0, prefill_tokens) < dt:
            k += 1
        return k


@dataclass(frozen=True)
class Budget:
    """A KV budget in token slots, and where it came from.

    Example (the vLLM paper's setting: OPT-13B on an A100-40GB keeps about 12 GB for KV):
        >>> b = Budget.from_model("opt-13b", "a100-40gb", kv_bytes=12e9)
        >>> b.tokens, b.bytes_per_token
        (14648, 819200)
        >>> Budget.from_model("opt-13b", "a100-40gb").tokens   # 90% of 40 GiB minus fp16 weights
        15813
    """

    tokens: int
    bytes_per_token: int = 1
    source: str = ""

    @classmethod
    def from_model(cls, model: str | KVSpec, gpu: str | GPUSpec | None = None, utilization: float = 0.9,
                   kv_bytes: float | None = None) -> "Budget":
        spec = get_model(model) if isinstance(model, str) else model
        if kv_bytes is None:
            if gpu is None:
                raise ValueError("give a gpu or kv_bytes")
            g = get_gpu(gpu) if isinstance(gpu, str) else gpu
            kv_bytes = g.kv_budget_bytes(spec, utilization)
            src = f"{g.name}: {utilization:.0%} of {g.memory_bytes / 2**30:.0f} GiB minus {spec.name}'s fp16 weights"
        else:
            src = f"{kv_bytes / 1e9:.1f} GB given"
        if kv_bytes <= 0:
            raise ValueError(f"kv_bytes must be > 0, got {kv_bytes}")
        tokens = int(kv_bytes // spec.bytes_per_token)
        return cls(tokens, spec.bytes_per_token, f"{src} = {kv_bytes / 1e9:.2f} GB / {spec.bytes_per_token:,} B per token")


FINISH, BEAM, GROW = 0, 1, 2


def simulate(trace: Trace, policy: MemoryPolicy | str, *, capacity: int | None = None, block_size: int = 16,
             order: str = "fcfs", cost: CostModel | None = None, seed: int = 0, check: bool = False,
             progress: bool | None = None, max_batch: int = 256, max_prefill_tokens: int = 8192,
             cache_aware_window: int = 256, beam_decay: float = 0.5, timeline_points: int = 400,
             max_iterations: int = 50_000_000) -> SimResult:
    """Run ``trace`` through ``policy`` (a fresh :class:`MemoryPolicy`, or a name plus ``capacity``).

    A policy keeps its state after the run (a radix or block-hash policy keeps its cache,
    so a second trace can start warm); one that still holds sequences is refused.

    Returns a :class:`SimResult`. Deterministic: the same arguments give the same result
    (``seed`` drives beam-search parent choices only). ``progress``: a tqdm bar over
    finished requests (default: on for 5,000 requests or more).
    Raises ValueError for an unknown order, BudgetTooSmall when a request cannot fit even
    an empty budget.
    """
    t_wall = time.perf_counter()
    if isinstance(policy, str):
        if capacity is None:
            raise ValueError("give capacity (token slots) with a policy name")
        policy = make_policy(policy, capacity, block_size, max_len=max(2048, trace.max_total_len))
    if policy.busy():
        raise ValueError(f"policy {policy.name!r} still holds sequences from another run; make a fresh one")
    if order not in ORDERS:
        raise ValueError(f"unknown order {order!r}; choose one of {ORDERS}")
    if max_batch < 1 or max_prefill_tokens < 1:
        raise ValueError(f"max_batch and max_prefill_tokens must be >= 1, got {max_batch}, {max_prefill_tokens}")
    cost = cost or CostModel.for_model("opt-13b", "a100-40gb")
    reqs = trace.requests
    for r in reqs:
        if r.prompt_len < 1 or r.output_len < 1:
            raise ValueError(f"request {r.req_id}: prompt_len and output_len must be >= 1, got {r.prompt_len}, {r.output_len}")
        if r.num_seqs > max_batch:
            raise ValueError(f"request {r.req_id} has {r.num_seqs} sequences, more than max_batch {max_batch}")
        policy.validate(r)
    ids = [r.req_id for r in reqs]
    if len(set(ids)) != len(ids):
        raise ValueError("request ids must be unique")
    rng = np.random.default_rng(seed)
    groups = {r.req_id: Group(r, arrival=r.arrival) for r in reqs}
    children: dict[int, list[int]] = {}
    pending: list = []  # (release time, req_id)
    for r in reqs:
        if r.parent is None:
            pending.append((r.arrival, r.req_id))
        else:
            if r.parent not in groups:
                raise ValueError(f"request {r.req_id}: parent {r.parent} is not in the trace")
            children.setdefault(r.parent, []).append(r.req_id)
    heapq.heapify(pending)
    release: dict[int, float] = {}
    waiting: deque[Group] = deque()
    running: dict[str, Group] = {}
    events: list = []
    counter = 0
    finish_it: dict[str, int] = {}
    B = 0  # running sequences
    SB = 0  # sum of (base_len - base_it): token states before iteration it = SB + B * it
    it, now = 0, 0.0
    admit_counter = 0
    m = RunMetrics(policy.capacity)
    records: list[RequestRecord] = []
    preemptions = prompt_tokens = hit_tokens = prefill_total = output_tokens = 0
    timeline: list = []
    stride, next_sample = 1, 0
    beam_share = policy.shares_forks
    bar = None
    if progress or (progress is None and len(reqs) >= 5000):
        try:
            from tqdm.auto import tqdm

            bar = tqdm(total=len(reqs), desc=f"simulate {policy.name}", unit="req", leave=False)
        except ImportError:  # pragma: no cover
            bar = None

    def push(e: int, kind: int, okey: int, obj, g: Group) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(events, (e, kind, okey, counter, obj, g.version))

    def schedule_grow(s, g: Group) -> None:
        e = s.base_it + (s.cap - s.base_len)
        if e <= finish_it[g.gid]:
            push(e, GROW, g.admit_order, s, g)

    def drop(g: Group) -> None:
        nonlocal B, SB
        del running[g.gid]
        B -= len(g.seqs)
        SB -= sum(s.base_len - s.base_it for s in g.seqs)
        g.version += 1

    def preempt(g: Group) -> None:
        nonlocal preemptions, preempted_now
        preempted_now = True
        cur = g.seqs[0].len_at(it)
        g.generated += it - g.admit_it
        drop(g)
        policy.release(g, cur, finished=False)
        g.preemptions += 1
        preemptions += 1
        waiting.appendleft(g)

    def ensure(s, g: Group, need: int) -> bool:
        """Give ``s`` room for ``need`` tokens, preempting later requests if needed."""
        while not policy.grow(s, need):
            victim = None
            for gid in reversed(running):
                if gid != g.gid:
                    victim = running[gid]
                    break
            preempt(victim or g)
            if victim is None:
                return False
        return True

    def admit_waiting() -> int:
        nonlocal B, SB, admit_counter, prompt_tokens, hit_tokens, prefill_total, budget_hit
        if order == "cache-aware" and policy.uses_tokens and len(waiting) > 1:
            head = [waiting.popleft() for _ in range(min(len(waiting), cache_aware_window))]
            keyed = sorted(enumerate(head), key=lambda ig: (-policy.cached_prefix_len(ig[1]), ig[0]))
            for _, g in reversed(keyed):
                waiting.appendleft(g)
        prefill = 0
        while waiting:
            g = waiting[0]
            n = g.req.num_seqs
            if B + n > max_batch:
                break
            if prefill and prefill + g.prompt_now > max_prefill_tokens:
                budget_hit = True  # the rest waits for the next iteration's prefill budget
                break
            if not policy.admit(g):
                break
            waiting.popleft()
            admit_counter += 1
            g.admit_it, g.admit_order = it, admit_counter
            running[g.gid] = g
            for s in g.seqs:
                s.base_it = it
                B += 1
                SB += s.base_len - it
            finish_it[g.gid] = it + (g.req.output_len - g.generated) - 1
            if g.req.beam_width > 1 and beam_share:
                if finish_it[g.gid] >= it + 1:
                    push(it + 1, BEAM, g.admit_order, g, g)
            else:
                for s in g.seqs:
                    schedule_grow(s, g)
            push(finish_it[g.gid] + 1, FINISH, g.admit_order, g, g)
            prompt_tokens += g.prompt_now
            hit_tokens += g.hit
            computed = g.prompt_now - g.hit
            prefill_total += computed
            prefill += computed
        return prefill

    def finish(g: Group) -> None:
        nonlocal output_tokens
        cur = g.seqs[0].len_at(it)
        drop(g)
        policy.release(g, cur, finished=True)
        g.finish_time = now
        r = g.req
        output_tokens += r.output_len * r.num_seqs
        records.append(RequestRecord(r.req_id, release.get(r.req_id, r.arrival), g.first_token_time, now,
                                     r.prompt_len, r.output_len, g.first_hit, g.preemptions))
        for c in children.get(r.req_id, ()):
            cr = groups[c].req
            heapq.heappush(pending, (max(cr.arrival, now + cr.think_time), c))
        if bar is not None:
            bar.update(1)

    dirty = True
    preempted_now = budget_hit = False
    try:
        while True:
            preempted_now = budget_hit = False
            # 1. events due at this boundary: finishes of the last iteration, growth needed by the next
            while events and events[0][0] <= it:
                e, kind, _, _, obj, ver = heapq.heappop(events)
                g = obj if kind != GROW else obj.group
                if ver != g.version or g.gid not in running:
                    continue
                if kind == FINISH:
                    finish(g)
                    dirty = True
                elif kind == BEAM:
                    cur = g.seqs[0].len_at(it)
                    policy.beam_reorder(g, cur, rng, beam_decay)
                    for s in g.seqs:
                        s.base_it = it
                    ok = True
                    for s in list(g.seqs):
                        if not ensure(s, g, cur + 1):
                            ok = False
                            break
                    if ok and it + 1 <= finish_it[g.gid]:
                        push(it + 1, BEAM, g.admit_order, g, g)
                    dirty = True
                else:
                    s = obj
                    if ensure(s, g, s.len_at(it) + 1):
                        schedule_grow(s, g)
                    else:
                        dirty = True
            # 2. arrivals
            while pending and pending[0][0] <= now:
                t_rel, rid = heapq.heappop(pending)
                release[rid] = t_rel
                waiting.append(groups[rid])
                dirty = True
            # 3. admission
            prefill = 0
            if dirty and waiting and (not preempted_now or not running):  # vLLM: no prefill in a step that preempted
                n_before = len(running)
                prefill = admit_waiting()
                for g in list(running.values())[n_before:]:
                    if g.first_token_time is None:
                        g.first_hit = g.hit
            dirty = (preempted_now or budget_hit) and bool(waiting)
            if not running:
                if pending:
                    now = max(now, pending[0][0])
                    dirty = True
                    continue
                if waiting:
                    raise RuntimeError("requests are waiting but nothing runs and nothing can be admitted")
                break
            # 4. how many iterations until the next event
            while events and (events[0][5] != (g0 := (events[0][4] if events[0][1] != GROW else events[0][4].group)).version
                              or g0.gid not in running):
                heapq.heappop(events)
            k = events[0][0] - it if events else 1
            k = max(1, k)
            ctx0 = SB + B * it
            if check or dirty:  # admission is retried next iteration
                k = 1
            span = cost.span(k, B, ctx0, prefill)
            if pending and now + span > pending[0][0] and k > 1:
                k = min(k, cost.iterations_until(pending[0][0] - now, B, ctx0, prefill))
                span = cost.span(k, B, ctx0, prefill)
            # 5. account k iterations
            u = policy.usage()
            ts_mean = ctx0 + B + B * (k - 1) / 2
            m.add_segment(k, len(running), B, ts_mean, u.held_slots, u.will_use_slots, u.cached_slots,
                          u.external_fragmentation, u.dup_slots, u.logical_blocks, u.physical_blocks, bool(waiting))
            if it >= next_sample:
                ts_end = ctx0 + B
                timeline.append((now, it, len(running), len(waiting), ts_end - u.dup_slots, u.held_slots,
                                 u.will_use_slots, u.cached_slots, u.external_fragmentation,
                                 u.logical_blocks - u.physical_blocks))
                next_sample = it + stride
                if len(timeline) > 2 * timeline_points:
                    timeline[:] = timeline[::2]
                    stride *= 2
            t_first = now
            now += span
            if prefill:
                t1 = t_first + cost.span(1, B, ctx0, prefill)
                for g in running.values():
                    if g.admit_it == it and g.first_token_time is None:
                        g.first_token_time = t1
            it += k
            if check:
                for g in running.values():
                    for s in g.seqs:
                        policy.sync(s, s.len_at(it))
                policy.check(list(running.values()))
                ts_now = SB + B * it - policy.usage().dup_slots
                assert ts_now <= policy.capacity, f"token states {ts_now} exceed capacity {policy.capacity}"
            if it > max_iterations:
                raise RuntimeError(f"simulation passed {max_iterations} iterations; is the budget too small?")
    finally:
        if bar is not None:
            bar.close()
    records.sort(key=lambda r: r.req_id)
    bytes_copied = getattr(getattr(policy, "arena", None), "bytes_copied", 0)
    return SimResult(policy.name, trace.name, order, policy.capacity, policy.block_size, m, records, now,
                     preemptions, prompt_tokens, hit_tokens, prefill_total, output_tokens, bytes_copied, timeline,
                     time.perf_counter() - t_wall, {"max_batch": max_batch, "max_prefill_tokens": max_prefill_tokens,
                                                    "seed": seed, "cost": cost})
