"""A small continuous-batching engine: submit, step, run, over the cache manager and the model runner.

The engine only wires the parts together; each decision lives in one of them::

    Engine ─┬─ Scheduler ──── CacheManager ──── BlockManager, RadixCache
            │  (waiting,      (the request cycle: admit, append, fork,
            │   running,       cache_unfinished_req, cache_finished_req)
            │   preemption)
            ├─ ModelRunner ── PagedKVPool (the K/V tensors) + Llama
            └─ sample_next

Each :meth:`Engine.step`:

1. **arrive**: requests whose ``arrival_step`` has come join the waiting queue;
2. **schedule**: a prefill batch when anything can be admitted (the radix tree's longest match
   is reused; only the rest is computed), else one decode token for every running sequence
   (preempting the newest request when the pool is short, see ``kvlab.compute.scheduler``);
3. **run**: the copy-on-write copies, then one forward pass (``extend_attention`` for a
   prefill, ``paged_decode_attention`` for a decode) through the block tables;
4. **sample and postprocess**: after a prefill the computed tokens are cached at once and
   ``n > 1`` samples are forked; every sequence takes its token (its own temperature, top_p and
   seeded generator), and one that has all its tokens, or has just generated one of its
   ``stop_token_ids``, finishes (cached in the tree, blocks freed).

Between steps, :meth:`Engine.abort` ends a request wherever it is (a server's client went
away): running samples are cached and freed as at a finish, waiting ones leave the queue; and
:meth:`Engine.forget` drops a finished request from the engine's lists (a long-running server).

Every table and reference count is changed by the cache manager (``check=True`` runs its
``check_integrity`` after every step: ``ref_count == tree + tables``); this module changes none.

Recorded: per request (:class:`~kvlab.compute.sequence.RequestState`), time to first token,
tokens/s, prefill tokens computed and saved, preemptions; per step (:class:`StepRecord`), blocks
in use, running/waiting, tokens computed; and the event log (allocator, tree and cache-manager
events, plus the engine's ``arrive``, ``preempt``, ``finish``) that the visualizer replays.

Mirrors nano-vllm ``nanovllm/engine/llm_engine.py`` (``add_request`` = ``submit``, ``step``,
``generate`` = ``run``) and SGLang's scheduler loop (``event_loop_normal``). Differences: requests
arrive at engine steps (a reproducible clock) and the radix tree reuses prefixes across them.

**Tiers** (``host_ratio > 0``): the cache manager is a ``HiCacheManager`` (a host pool under the
radix tree, optionally a disk tier ``storage``), and the engine keeps the host K/V tensors
(:class:`~kvlab.compute.host_pool.HostKVPool`). The copies the manager queues (write-through,
write-back, load-back, save, fetch) run in queue order right after scheduling, before the
copy-on-write copies and the forward pass, and again at the end of the step (the write-through
of what was just cached). With ``storage`` (a directory), pages are keyed by the model's weights
digest and the KV layout: a restarted engine, or a second one on the same directory, fetches the
pages an earlier one saved, another model never does, and a storage folder that is removed,
made unwritable or corrupted costs recomputation, never a wrong token. ``report.tiers`` gives
the bytes moved, the measured copy time and the time at the stated link bandwidth (simulated). With ``host_ratio=0`` (the default) nothing of
this exists: the engine is exactly the untiered one.

Not handled here: chunked prefill, priorities, stop strings (text, found by the server's
detokenizer, which then calls ``abort``, as vLLM's output processor does), preemption by
swapping (tiers keep cached prefixes, not running sequences).

Example:
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> eng = Engine(model, num_blocks=64, block_size=4, check=True)
    >>> shared = "The socket module provides access to the BSD socket interface."
    >>> a = eng.submit(tok.encode(shared + " It is"), max_new_tokens=4)
    >>> b = eng.submit(tok.encode(shared + " Use"), max_new_tokens=4, arrival_step=1)
    >>> report = eng.run()
    >>> b.prefill_saved > 0, [len(o) for o in b.outputs]   # the shared sentence was in the tree
    (True, [4])
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, replace
from collections import abc

import torch

from ..memory.block_table import blocks_needed
from ..memory.events import EventLog
from ..memory.snapshot import MemorySnapshot
from ..reuse.hicache_manager import CacheConfig, make_cache_manager
from .host_pool import HostKVPool, TierCopier
from .kv_tensors import PagedKVPool
from .model_runner import ModelRunner
from .sampler import sample_next
from .scheduler import Scheduler
from .sequence import Request, RequestState, SamplingParams, Sequence, SequenceStatus

__all__ = ["StepRecord", "EngineReport", "Engine"]


@dataclass(frozen=True)
class StepRecord:
    step: int
    time: float
    blocks_in_use: int
    running: int
    waiting: int
    prefill_tokens: int
    decode_tokens: int
    cached_tokens: int


@dataclass
class EngineReport:
    """What :meth:`Engine.run` returns: the requests, the per-step timeline, the event log."""

    requests: list[RequestState]
    timeline: list[StepRecord]
    log: EventLog
    wall_s: float
    tiers: dict | None = None   # host_ratio > 0: bytes moved, measured and simulated copy seconds

    def summary(self) -> dict:
        reqs = self.requests
        ttfts = [r.ttft for r in reqs if r.ttft is not None]
        gen = sum(sum(map(len, r.outputs)) for r in reqs)
        return {
            "requests": len(reqs),
            "prefill_computed": sum(r.prefill_computed for r in reqs),
            "prefill_saved": sum(r.prefill_saved for r in reqs),
            "generated_tokens": gen,
            "mean_ttft_s": sum(ttfts) / len(ttfts) if ttfts else float("nan"),
            "tokens_per_s": gen / self.wall_s if self.wall_s else float("nan"),
            "preemptions": sum(r.preemptions for r in reqs),
            "steps": len(self.timeline),
            "peak_blocks": max((s.blocks_in_use for s in self.timeline), default=0),
            "wall_s": self.wall_s,
        }

    def table(self) -> str:
        """Per-request table (measured times)."""
        rows = [f"{'rid':<8} {'prompt':>6} {'saved':>6} {'computed':>8} {'out':>5} {'TTFT ms':>8} {'tok/s':>7} {'preempt':>7}"]
        for r in self.requests:
            rows.append(f"{r.rid:<8} {len(r.prompt_ids):>6} {r.prefill_saved:>6} {r.prefill_computed:>8} "
                        f"{sum(map(len, r.outputs)):>5} {1e3 * (r.ttft or 0):>8.1f} {r.tokens_per_s or 0:>7.1f} {r.preemptions:>7}")
        return "\n".join(rows)


class Engine:
    """Continuous batching over a paged K/V pool, optionally with a radix prefix cache.

    num_blocks, block_size: the pool (a radix page is one block).
    radix: reuse cached prefixes; False = plain paged memory. eviction_policy: the tree's.
    max_batch_size: most sequences running at once. order: the waiting queue's order
        ("fcfs", "lpm" longest cached prefix first, "dfs-weight").
    attention_backend: "torch" (references) or "triton" (kernels).
    log: the event log (a fresh one by default; NO_LOG records nothing).
    check: check every invariant after every step (``check_integrity``: tests, lessons).
    kernel_checks: the kernels re-validate every input against the device tensors (default: as
        ``check``); two names for two costs. record: keep a MemorySnapshot per step.
    host_ratio: host blocks per device block (0: no tiers). write_policy: "write_through"
        (default with tiers), "write_through_selective" or "write_back". storage: the disk tier,
        a ``kvlab.compute.storage.FileStorage`` or a directory for one (needs host_ratio > 0); its
        pages are keyed by the model's weights digest and the KV layout, so a restarted engine, or
        a second engine on the same directory, reuses them and another model never does.
    prefetch_policy, prefetch_threshold, storage_write, host_eviction_policy: the tiered
        tree's options (``kvlab.reuse.hiradix_cache``'s storage side; None: their defaults).
    host_link, disk_link: the stated links of the simulated copy times (``kvlab.reuse.offload.LINKS``).
    cache_config: all of the cache settings above (radix ... disk_link) as one
        ``kvlab.reuse.CacheConfig``, instead of the keywords; the engine keeps it as ``cache_config``
        and passes it down whole (to ``make_cache_manager`` and the tier copier).
    """

    def __init__(self, model, num_blocks: int, block_size: int = 4, *, radix: bool = True, max_batch_size: int = 16,
                 attention_backend: str = "torch", eviction_policy: str = "lru", order: str = "fcfs",
                 log: EventLog | None = None, check: bool = False, kernel_checks: bool | None = None,
                 record: bool = False, cache_config: CacheConfig | None = None, host_ratio: float = 0.0,
                 write_policy: str | None = None, storage=None, host_link: str = "pcie-gen5-x16",
                 disk_link: str = "nvme-gen4", prefetch_policy: str | None = None,
                 prefetch_threshold: int | None = None, storage_write: str | None = None,
                 host_eviction_policy: str | None = None) -> None:
        given = CacheConfig(radix=radix, eviction_policy=eviction_policy, host_ratio=host_ratio, write_policy=write_policy,
                            storage=storage, prefetch_policy=prefetch_policy, prefetch_threshold=prefetch_threshold,
                            storage_write=storage_write, host_eviction_policy=host_eviction_policy,
                            host_link=host_link, disk_link=disk_link)
        if cache_config is not None and given != CacheConfig():
            raise TypeError("give the cache settings as cache_config or as keywords, not both")
        self.kv_pool = PagedKVPool.for_model(model, num_blocks, block_size)
        self.cache_config = self._with_storage(cache_config if cache_config is not None else given, model)
        self.cache_manager = make_cache_manager(num_blocks, block_size, self.cache_config, log=log)
        self.scheduler = Scheduler(self.cache_manager, max_batch_size, order)
        self.copier: TierCopier | None = None
        if hasattr(self.cache_manager, "take_transfers"):
            host = HostKVPool.like(self.kv_pool, self.cache_manager.host_allocator.num_blocks)
            c = self.cache_config
            self.copier = TierCopier(self.kv_pool, host, c.storage, c.host_link, c.disk_link)
        kernel_checks = check if kernel_checks is None else kernel_checks
        self.runner = ModelRunner(model, self.kv_pool, attention_backend, kernel_checks=kernel_checks)
        self.model = model
        self.attention_backend = attention_backend
        self.check = check
        self.record = record
        self.requests: list[RequestState] = []
        self.pending: list[RequestState] = []           # submitted, not yet arrived
        self._by_rid: dict[str, RequestState] = {}
        self._seq_ids: set[str] = set()
        self.timeline: list[StepRecord] = []
        self.snapshots: list[MemorySnapshot] = []      # one per step when record=True
        self.step_no = 0
        self.t0: float | None = None

    def _with_storage(self, c: CacheConfig, model) -> CacheConfig:
        """``c`` with its storage as a FileStorage (a directory becomes one, keyed by the model)."""
        if c.storage is not None and not c.host_ratio and c.num_host_blocks is None:
            raise ValueError("a storage tier saves from the host pool: give host_ratio > 0 with storage")
        if isinstance(c.storage, (str, os.PathLike)):
            from .storage import FileStorage, model_digest

            return replace(c, storage=FileStorage.for_pool(self.kv_pool, c.storage, model_digest(model)))
        if c.storage is not None and not hasattr(c.storage, "write"):
            raise TypeError(f"storage must be a directory or a FileStorage, got {c.storage!r}")
        return c

    # ------------------------------------------------------------------ views
    @property
    def log(self) -> EventLog:
        return self.cache_manager.log

    @property
    def allocator(self):
        return self.cache_manager.allocator

    @property
    def cache(self):
        """The radix tree (None when radix=False)."""
        return self.cache_manager.tree

    @property
    def block_size(self) -> int:
        return self.cache_manager.block_size

    @property
    def running(self) -> list[Sequence]:
        return self.scheduler.running

    @property
    def waiting(self) -> list[Sequence]:
        return self.scheduler.waiting

    def check_integrity(self) -> None:
        """The ownership rule (``ref_count == tree + tables``), the queues, and no sample with
        more tokens than it asked for."""
        self.cache_manager.check_integrity()
        self.scheduler.check_integrity()
        for r in self.requests:
            assert all(len(o) <= r.max_new_tokens for o in r.outputs), f"{r.rid} over-generated: {r.outputs}"

    def snapshot(self, caption: str = "") -> MemorySnapshot:
        """The pool (what kvlab.viz draws): one table per running sequence, the tree's blocks as "tree"."""
        return self.cache_manager.snapshot(caption)

    # ------------------------------------------------------------------ requests
    def submit(self, prompt_ids: abc.Sequence[int], max_new_tokens: int, *, n: int = 1, temperature: float = 0.0,
               seed: int = 0, arrival_step: int = 0, rid: str | None = None, top_p: float = 1.0,
               stop_token_ids: abc.Sequence[int] = ()) -> RequestState:
        """Queue a request. Everything is checked first (token ids ints in [0, vocab), counts,
        temperature, top_p, stop ids, arrival step, the pool big enough); a bad call raises and
        changes nothing. A sample ends at ``max_new_tokens`` or at its first ``stop_token_ids``."""
        params = SamplingParams(max_new_tokens, n, temperature, seed, top_p, stop_token_ids)
        if rid is None:
            i = len(self.requests) + 1
            while f"R{i}" in self._by_rid:
                i += 1
            rid = f"R{i}"
        req = Request(rid, prompt_ids, params, arrival_step)
        req.check_model(self.model.config)
        if rid in self._by_rid:
            raise ValueError(f"request id {rid!r} already used")
        state = RequestState.new(req)
        clash = [s.seq_id for s in state.seqs if s.seq_id in self._seq_ids]
        if clash:
            raise ValueError(f"request {rid}: sequence id(s) {clash} already used by another request")
        bs, nb = self.block_size, self.cache_manager.num_blocks
        need = blocks_needed(len(req.prompt_ids), bs) + n * (blocks_needed(max_new_tokens, bs) + 1)
        if need > nb:
            raise ValueError(f"request {rid} needs {need} blocks, more than the pool's {nb}")
        self.requests.append(state)
        self.pending.append(state)
        self._by_rid[rid] = state
        self._seq_ids.update(s.seq_id for s in state.seqs)
        return state

    def abort(self, rid: str) -> bool:
        """End request ``rid`` now (call between steps): not yet arrived, it never runs; waiting,
        it leaves the queue; running, its computed tokens are cached and its blocks freed, as at a
        finish. Its samples keep the tokens they have, ``finish_reason`` "abort". False when it
        had already finished. An unknown ``rid`` raises KeyError naming it."""
        state = self._request(rid)
        if state.done:
            return False
        if state in self.pending:
            self.pending.remove(state)
        self.scheduler.abort(state.seqs)
        for s in state.seqs:
            s.status, s.finish_reason = SequenceStatus.FINISHED, s.finish_reason or "abort"
        self._event("abort", rid, tuple(len(o) for o in state.outputs))
        self._finish(state, time.perf_counter())
        return True

    def forget(self, rid: str) -> None:
        """Drop finished request ``rid`` from ``requests`` (a server forgets what it answered; its
        cached tokens stay in the tree). Raises KeyError for an unknown rid, ValueError for one
        that has not finished."""
        state = self._request(rid)
        if not state.done:
            raise ValueError(f"request {rid!r} has not finished; abort it first")
        self.requests.remove(state)
        del self._by_rid[rid]
        self._seq_ids.difference_update(s.seq_id for s in state.seqs)

    def _request(self, rid: str) -> RequestState:
        try:
            return self._by_rid[rid]
        except (KeyError, TypeError):
            raise KeyError(f"no request {rid!r} in this engine") from None

    # ------------------------------------------------------------------ the step
    @torch.no_grad()
    def step(self) -> StepRecord:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
        self._arrive(now)
        seqs, is_prefill = self.scheduler.schedule()
        for group in self.scheduler.preempted:
            state = self._by_rid[group[0].request.rid]
            state.metrics.preemptions += 1
            self._event("preempt", state.rid, tuple(len(o) for o in state.outputs))
        self._run_transfers()                                                     # tiers: before any KV is read
        prefill_tokens = decode_tokens = 0
        if seqs:
            if is_prefill:
                batch = self.runner.prepare_prefill(seqs)
                self._count_prefill(seqs)
                prefill_tokens = batch.num_tokens
            else:
                if self.scheduler.blocks_to_copy:                                 # copy-on-write, when a fork wrote
                    self.kv_pool.copy_blocks(self.scheduler.blocks_to_copy, self.attention_backend)
                batch = self.runner.prepare_decode(seqs)
                decode_tokens = batch.num_tokens
            logits = self.runner.run(batch)                                       # (len(seqs), V)
            if is_prefill:
                seqs, rows = self.scheduler.after_prefill(seqs)                   # n > 1: forks share a row
                logits = logits[rows]                                             # (len(seqs), V)
            token_ids = sample_next(logits, [s.temperature for s in seqs], [s.generator for s in seqs],
                                    [s.top_p for s in seqs])
            finished = self.scheduler.postprocess(seqs, token_ids)
            self._count_tokens(seqs, finished)
            self._run_transfers()                                                 # tiers: write-through of new pages
        if self.check:
            self.check_integrity()
        if self.record:
            kind = f"prefill of {len(seqs)}" if is_prefill else f"{decode_tokens} decoded"
            self.snapshots.append(self.snapshot(f"engine step {self.step_no}: {kind}, {len(self.running)} running"))
        a, tree = self.cache_manager.allocator, self.cache_manager.tree  # the counts they keep, read
        rec = StepRecord(self.step_no, time.perf_counter() - self.t0, a.num_blocks - a.num_free_blocks,
                         len(self.running), len(self.waiting), prefill_tokens, decode_tokens,
                         tree.total_size() if tree is not None else 0)
        self.timeline.append(rec)
        self.step_no += 1
        return rec

    def run(self, max_steps: int = 100000) -> EngineReport:
        """Step until every submitted request is done (or ``max_steps``); returns the report."""
        t = time.perf_counter()
        while (self.pending or not self.scheduler.is_finished()) and self.step_no < max_steps:
            self.step()
        tiers = None
        if self.copier is not None:
            tiers = {**self.copier.stats.summary(), "tier_stats": self.cache_manager.tier_stats,
                     "host_link": self.copier.links["host->device"].name, "disk_link": self.copier.links["disk->device"].name}
        return EngineReport(list(self.requests), list(self.timeline), self.log, time.perf_counter() - t, tiers)

    # ------------------------------------------------------------------ bookkeeping
    def _run_transfers(self) -> None:
        """Perform the copies the tiered cache manager queued, in order (nothing without tiers)."""
        if self.copier is not None:
            self.copier.apply(self.cache_manager.take_transfers())

    def _event(self, kind: str, seq_id: str, *values) -> None:
        """One engine event: its detail is the step, then ``values`` in the order of ``FIELDS[kind]``."""
        self.log.add((kind, seq_id, (), (self.step_no, *values)))

    def _arrive(self, now: float) -> None:
        arrived = [r for r in self.pending if r.request.arrival_step <= self.step_no]
        for state in arrived:
            self.pending.remove(state)
            state.metrics.arrival_time = now
            self._event("arrive", state.rid, len(state.prompt_ids), state.n)
            if state.max_new_tokens == 0:                                         # nothing to compute
                self._finish(state, now)
            else:
                self.scheduler.add(state.seqs)

    def _count_prefill(self, seqs: list[Sequence]) -> None:
        for s in seqs:
            m = self._by_rid[s.request.rid].metrics
            m.prefill_saved += s.num_computed_tokens
            m.prefill_computed += s.num_tokens - s.num_computed_tokens
            if m.admitted_step is None:
                m.admitted_step = self.step_no

    def _count_tokens(self, seqs: list[Sequence], finished: list[Sequence]) -> None:
        now = time.perf_counter()
        for s in seqs:
            m = self._by_rid[s.request.rid].metrics
            if m.first_token_time is None:
                m.first_token_time = now
        for s in finished:
            state = self._by_rid[s.request.rid]
            if state.metrics.finish_time is None and all(x.status is SequenceStatus.FINISHED for x in state.seqs):
                self._finish(state, now)

    def _finish(self, state: RequestState, now: float) -> None:
        if state.metrics.first_token_time is None:
            state.metrics.first_token_time = now
        state.metrics.finish_time, state.metrics.finished_step = now, self.step_no
        self._event("finish", state.rid, tuple(len(o) for o in state.outputs))
