"""A small continuous-batching engine over the paged cache, with radix-tree prefix reuse.

Each :meth:`Engine.step`:

1. **arrive**: requests whose ``arrival_step`` has come join the waiting queue (FIFO);
2. **admit**: while the batch has room, the head of the queue is matched against the radix tree
   (``match_for_prefill``: the longest cached prefix, always leaving one token to compute), the
   matched node is locked (``inc_lock_ref``), and blocks for the unmatched suffix are allocated,
   evicting unlocked tree leaves when the pool is short. A request that still does not fit waits;
3. **prefill**: the admitted sequences' unmatched suffixes run in one packed ``extend_attention``
   pass; each gets its first token (time to first token). A request with ``n > 1`` samples
   forks its prompt's blocks (shared, ref counted; copy on write later);
4. **decode**: every other running sequence appends one token in one batched
   ``paged_decode_attention`` pass. When a block cannot be had even after eviction, the most
   recently admitted request is **preempted**: its computed tokens go into the tree, its blocks
   and locks are released, and it goes back to the front of the queue to be recomputed (its
   re-prefill mostly hits the tree);
5. **finish**: a finished sequence inserts its tokens into the tree (``insert``: the tree takes
   over its blocks, duplicates are handed back), drops its extra references and its lock.

Reference protocol (checked by :meth:`Engine.check_integrity` after every step): a running
sequence's BlockTable holds one allocator reference on each of its blocks, including the
matched ones (taken with ``incref``); the tree holds one on each node's blocks. So
ref_count == tree + tables, exactly, at all times.

Recorded: per request, time to first token, decode tokens/s, prefill tokens computed and saved,
preemptions; per step, blocks in use, running/waiting counts, tokens computed; and the event log
(allocator, tree and engine events) that the visualizer replays.

Not handled here: chunked prefill, priorities, stop strings, swapping to host memory.

Example:
    >>> from kvlab.model import load_bundled
    >>> model, tok = load_bundled()
    >>> eng = Engine(model, num_blocks=64, block_size=4)
    >>> shared = "The socket module provides access to the BSD socket interface."
    >>> a = eng.submit(tok.encode(shared + " It is"), max_new_tokens=4)
    >>> b = eng.submit(tok.encode(shared + " Use"), max_new_tokens=4, arrival_step=1)
    >>> report = eng.run()
    >>> b.prefill_saved > 0          # the shared sentence was already in the tree
    True
    >>> eng.check_integrity()
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..memory.events import Event, EventLog
from .generate import sample_next, paged_forward, validate
from .kv_tensors import PagedKVPool, kernel_ops
from ..memory import BlockAllocator, BlockTable, KVCacheError, MemorySnapshot, OutOfBlocks, blocks_needed


@dataclass
class Request:
    """One request: ``n`` samples of ``max_new_tokens`` tokens after ``prompt_ids``.

    Filled in by the engine: outputs (one list per sample), first_token_time, finish_time,
    prefill_computed / prefill_saved (prompt tokens run through the model / found in the tree,
    summed over samples and re-prefills), preemptions.
    """

    rid: str
    prompt_ids: list[int]
    max_new_tokens: int
    n: int = 1
    temperature: float = 0.0
    seed: int = 0
    arrival_step: int = 0
    outputs: list[list[int]] = field(default_factory=list)
    arrival_time: float | None = None
    first_token_time: float | None = None
    finish_time: float | None = None
    prefill_computed: int = 0
    prefill_saved: int = 0
    preemptions: int = 0
    admitted_step: int | None = None
    finished_step: int | None = None
    pending_forks: list = field(default_factory=list, repr=False)   # samples 1..n-1 until the prompt is prefilled

    @property
    def done(self) -> bool:
        return self.finish_time is not None

    @property
    def ttft(self) -> float | None:
        """Seconds from arrival to the first token."""
        if self.first_token_time is None or self.arrival_time is None:
            return None
        return self.first_token_time - self.arrival_time

    @property
    def tokens_per_s(self) -> float | None:
        """Generated tokens (all samples) per second, from arrival to finish."""
        if not self.done or self.arrival_time is None:
            return None
        return sum(map(len, self.outputs)) / max(1e-9, self.finish_time - self.arrival_time)


@dataclass
class Seq:
    """One sample of a request while it runs: its block table, lock and sampler."""

    req: Request
    index: int
    gen: torch.Generator
    table: BlockTable | None = None
    lock_node: object | None = None
    computed: int = 0                                   # tokens whose K/V are in the cache

    @property
    def sid(self) -> str:
        return f"{self.req.rid}.{self.index}" if self.req.n > 1 else self.req.rid

    @property
    def tokens(self) -> list[int]:
        return self.req.prompt_ids + self.req.outputs[self.index]

    @property
    def finished(self) -> bool:
        return len(self.req.outputs[self.index]) >= self.req.max_new_tokens


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

    requests: list[Request]
    timeline: list[StepRecord]
    log: EventLog
    wall_s: float

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
    radix: reuse cached prefixes (RadixCache over the same allocator); False = plain paged.
    max_batch_size: most sequences running at once.
    attention_backend: "torch" (references) or "triton" (kernels).
    check: run check_integrity() after every step (tests). record: keep a MemorySnapshot per step.
    """

    def __init__(self, model, num_blocks: int, block_size: int = 4, *, radix: bool = True, max_batch_size: int = 16,
                 attention_backend: str = "torch", eviction_policy: str = "lru", log: EventLog | None = None,
                 check: bool = False, record: bool = False) -> None:
        from ..reuse.radix_cache import RadixCache

        self.model = model
        self.ops = kernel_ops(attention_backend)
        self.backend = attention_backend
        self.allocator = BlockAllocator(num_blocks, block_size, log)
        self.log = self.allocator.log
        self.cache = RadixCache(self.allocator, page_size=block_size, eviction_policy=eviction_policy) if radix else None
        self.pool = PagedKVPool.for_model(model, num_blocks, block_size)
        self.block_size = block_size
        self.max_batch_size = max_batch_size
        self.check = check
        self.requests: list[Request] = []
        self.pending: list[Request] = []                 # not yet arrived
        self.waiting: list[Seq] = []                     # arrived, not running
        self.running: list[Seq] = []                     # admission order
        self.timeline: list[StepRecord] = []
        self.step_no = 0
        self.t0: float | None = None
        self.record = record
        self.snapshots: list[MemorySnapshot] = []       # one per step when record=True

    # ------------------------------------------------------------------------ requests
    def submit(self, prompt_ids: Sequence[int], max_new_tokens: int, *, n: int = 1, temperature: float = 0.0,
               seed: int = 0, arrival_step: int = 0, rid: str | None = None) -> Request:
        """Queue a request (validated like generate(); a bad one raises and changes nothing)."""
        prompt = validate(self.model, prompt_ids, max_new_tokens, "paged", self.backend, n)
        rid = rid if rid is not None else f"R{len(self.requests) + 1}"
        if any(r.rid == rid for r in self.requests):
            raise ValueError(f"request id {rid!r} already used")
        need = blocks_needed(len(prompt), self.block_size) + n * (blocks_needed(max_new_tokens, self.block_size) + 1)
        if need > self.allocator.num_blocks:
            raise ValueError(f"request {rid} needs {need} blocks, more than the pool's {self.allocator.num_blocks}")
        req = Request(rid, prompt, max_new_tokens, n, temperature, seed, arrival_step, outputs=[[] for _ in range(n)])
        self.requests.append(req)
        self.pending.append(req)
        return req

    # ------------------------------------------------------------------------ helpers
    def _emit(self, kind: str, seq_id: str | None, **detail) -> None:
        self.log.emit(Event(kind, seq_id, (), dict(detail, engine_step=self.step_no)))

    def holders(self) -> list[list[int]]:
        return [s.table.block_ids for s in self.running]

    def check_integrity(self) -> None:
        """ref_count == tree + running tables for every block; tables and tree consistent."""
        for s in self.running:
            s.table.check_integrity()
            assert s.table.num_tokens == s.computed, f"{s.sid}: table {s.table.num_tokens} != computed {s.computed}"
        if self.cache is not None:
            self.cache.check_integrity(holders=self.holders())
        else:
            self.allocator.check_integrity(self.holders())

    def snapshot(self, caption: str = "") -> MemorySnapshot:
        """The pool as a kvlab.paged.MemorySnapshot (what kvlab.viz draws): one table per running
        sequence, plus the radix tree's blocks as the table "tree"."""
        tables = {s.sid: s.table.block_ids for s in self.running}
        num_tokens = {s.sid: s.computed for s in self.running}
        if self.cache is not None:
            # the tree caches whole pages only, so its total_size fills every one of its blocks
            tables["tree"] = [b for blocks in self.cache.node_blocks() for b in blocks]
            num_tokens["tree"] = self.cache.total_size()
        return MemorySnapshot.of(self.allocator, tables, num_tokens, caption)

    def _make_room(self, need: int) -> bool:
        """Evict unlocked tree leaves until ``need`` blocks are free; True when they are."""
        free = self.allocator.num_free_blocks
        if need > free and self.cache is not None:
            self.cache.evict((need - free) * self.block_size)
        return need <= self.allocator.num_free_blocks

    # ------------------------------------------------------------------------ admission
    def _admit(self, seq: Seq) -> bool:
        """Match, lock, take blocks for the suffix. False (nothing changed) when it does not fit."""
        tokens = seq.tokens
        prefix_len, kv, node = 0, [], None
        if self.cache is not None:
            m = self.cache.match_for_prefill(tokens, seq.sid)
            prefix_len, kv, node = m.prefix_len, list(m.kv), m.last_node
            self.cache.inc_lock_ref(node, seq.sid)        # matched blocks cannot be evicted now
        need = blocks_needed(len(tokens), self.block_size) - len(kv)
        if not self._make_room(need):
            if node is not None:
                self.cache.dec_lock_ref(node, seq.sid)
            return False
        self.allocator.incref(kv, seq.sid)                # the table's own reference on matched blocks
        seq.table = BlockTable(self.allocator, seq.sid, kv, prefix_len)
        seq.table.append_tokens(len(tokens) - prefix_len)
        seq.lock_node, seq.computed = node, prefix_len
        seq.req.prefill_saved += prefix_len
        seq.req.prefill_computed += len(tokens) - prefix_len
        if seq.req.admitted_step is None:
            seq.req.admitted_step = self.step_no
        self._emit("admit", seq.sid, prefix_len=prefix_len, prefill=len(tokens) - prefix_len)
        return True

    def _release(self, seq: Seq) -> None:
        """Insert the sequence's computed tokens into the tree, then drop its references and lock."""
        table = seq.table
        kv, n = list(table.block_ids), seq.computed        # a slot reserved but not yet computed is not cached
        table.block_ids, table.num_tokens = [], 0
        if self.cache is not None:
            full = n // self.block_size
            res = self.cache.insert(seq.tokens[: full * self.block_size], kv[:full], seq.sid)
            # The tree took our reference on its new blocks and freed our duplicates; where our
            # block *is* the tree's (matched or inserted by a sibling), our own reference remains.
            already = res.prefix_len // self.block_size
            own = [b for b, t in zip(kv[:already], res.kv[:already]) if b == t]
            self.allocator.free(own + kv[full:], seq_id=seq.sid)
            self.cache.dec_lock_ref(seq.lock_node, seq.sid)
        elif kv:
            self.allocator.free(kv, seq_id=seq.sid)
        seq.table, seq.lock_node, seq.computed = None, None, 0
        self.running.remove(seq)

    def _cache_prefix(self, seq: Seq) -> None:
        """Right after prefill, put the sequence's full pages into the tree (SGLang's
        cache_unfinished_req), so requests admitted later reuse them while this one still runs.
        The table keeps its own reference: it re-takes the one the tree took over, and switches
        to the tree's blocks where another request cached the same tokens first."""
        full = seq.computed // self.block_size
        if self.cache is None or full == 0:
            return
        kv = seq.table.block_ids[:full]
        res = self.cache.insert(seq.tokens[: full * self.block_size], kv, seq.sid)
        already = res.prefix_len // self.block_size
        retake = [res.kv[i] for i in range(already) if kv[i] != res.kv[i]] + res.kv[already:full]
        self.allocator.incref(retake, seq.sid)
        seq.table.block_ids[:full] = res.kv
        self.cache.inc_lock_ref(res.last_node, seq.sid)
        self.cache.dec_lock_ref(seq.lock_node, seq.sid)
        seq.lock_node = res.last_node

    def _preempt_one(self, keep: Seq) -> bool:
        """Preempt the most recently admitted request other than ``keep``'s (recompute later)."""
        for victim in reversed(self.running):
            if victim.req is keep.req:
                continue
            req = victim.req
            seqs = [s for s in self.running if s.req is req]
            for s in seqs:
                self._release(s)
            req.preemptions += 1
            self._emit("preempt", req.rid, tokens=[len(o) for o in req.outputs])
            self.waiting[:0] = seqs                       # front of the queue, in order
            return True
        return False

    # ------------------------------------------------------------------------ the step
    @torch.no_grad()
    def step(self) -> StepRecord:
        now = time.perf_counter()
        if self.t0 is None:
            self.t0 = now
        for req in [r for r in self.pending if r.arrival_step <= self.step_no]:
            self.pending.remove(req)
            req.arrival_time = now
            self._emit("arrive", req.rid, prompt_len=len(req.prompt_ids), n=req.n)
            if req.max_new_tokens == 0:                   # nothing to compute
                req.first_token_time = req.finish_time = now
                req.finished_step = self.step_no
                continue
            gens = [torch.Generator().manual_seed(req.seed + i) for i in range(req.n)]
            self.waiting.append(Seq(req, 0, gens[0]))
            req.pending_forks = [Seq(req, i, gens[i]) for i in range(1, req.n)]

        # admit
        idle = not self.running
        admitted: list[Seq] = []
        while self.waiting:
            seq = self.waiting[0]
            width = 1 + len(seq.req.pending_forks) if seq.index == 0 else 1   # a fresh n > 1 request forks
            if len(self.running) + width > self.max_batch_size and self.running:
                break
            if not self._admit(seq):
                break
            self.waiting.pop(0)
            self.running.append(seq)
            admitted.append(seq)
        if idle and self.waiting and not admitted:        # nothing runs, nothing to evict: it never fits
            raise KVCacheError(f"sequence {self.waiting[0].sid} ({len(self.waiting[0].tokens)} tokens) cannot be "
                               f"admitted: {self.allocator.num_free_blocks} free blocks after eviction")

        # prefill (one packed extend pass)
        prefill_tokens = 0
        fresh = list(admitted)
        if admitted:
            toks, tables, pre, ext = [], [], [], []
            for s in admitted:
                t = s.tokens
                toks += t[s.computed:]
                tables.append(s.table.block_ids)
                pre.append(s.computed)
                ext.append(len(t) - s.computed)
            logits = paged_forward(self.model, self.pool, self.ops, toks, tables, pre, ext)  # (N, V)
            prefill_tokens = len(toks)
            ends = torch.tensor(ext).cumsum(0) - 1
            for s, row in zip(admitted, ends.tolist()):
                s.computed = len(s.tokens)
                self._cache_prefix(s)
                group = [s]
                forks = s.req.pending_forks
                if s.index == 0 and forks and not s.req.outputs[0]:      # fresh n > 1: share the prompt
                    s.req.pending_forks = []
                    for f in forks:
                        f.table = s.table.fork(f.sid)
                        f.lock_node, f.computed = s.lock_node, s.computed
                        if f.lock_node is not None:
                            self.cache.inc_lock_ref(f.lock_node, f.sid)
                        self.running.insert(self.running.index(s) + f.index, f)
                        group.append(f)
                        fresh.append(f)
                for g in group:
                    self._append_token(g, logits[row : row + 1])
        # decode (one batched paged pass over everyone else still running)
        decoders = [s for s in self.running if s not in fresh and not s.finished]
        decode_tokens = self._decode(decoders) if decoders else 0
        # finish
        for s in [s for s in self.running if s.finished]:
            self._release(s)
            req = s.req
            if all(len(o) >= req.max_new_tokens for o in req.outputs) and not any(
                    x.req is req for x in self.running + self.waiting):
                req.finish_time = time.perf_counter()
                req.finished_step = self.step_no
                self._emit("finish", req.rid, outputs=[len(o) for o in req.outputs])
        if self.check:
            self.check_integrity()
        if self.record:
            self.snapshots.append(self.snapshot(f"engine step {self.step_no}: {len(admitted)} admitted, "
                                                f"{decode_tokens} decoded, {len(self.running)} running"))
        rec = StepRecord(self.step_no, time.perf_counter() - self.t0, self.allocator.num_used_blocks,
                         len(self.running), len(self.waiting), prefill_tokens, decode_tokens,
                         self.cache.total_size() if self.cache is not None else 0)
        self.timeline.append(rec)
        self.step_no += 1
        return rec

    def _append_token(self, s: Seq, logits: torch.Tensor) -> None:
        tok = sample_next(logits, s.req.temperature, [s.gen])[0]            # logits (1, V)
        s.req.outputs[s.index].append(tok)
        if s.req.first_token_time is None:
            s.req.first_token_time = time.perf_counter()

    def _decode(self, seqs: list[Seq]) -> int:
        """Reserve one slot per sequence (preempting when needed), then one batched decode pass."""
        ready: list[Seq] = []
        for s in list(seqs):
            if s not in self.running:                                       # preempted meanwhile
                continue
            while True:
                need = s.table.blocks_to_append(1)
                if self._make_room(need):
                    break
                if not self._preempt_one(keep=s):
                    raise OutOfBlocks(need, self.allocator.num_free_blocks, f"decode {s.sid} (nothing to preempt)")
            copies = s.table.append_tokens(1)
            self.pool.copy_blocks(copies, self.backend)
            ready.append(s)
        ready = [s for s in ready if s in self.running]
        # a preempted sequence may have been reserved a slot before it was preempted: it is gone now
        if not ready:
            return 0
        toks = [s.tokens[-1] for s in ready]
        tables = [s.table.block_ids for s in ready]
        pre = [s.computed for s in ready]
        logits = paged_forward(self.model, self.pool, self.ops, toks, tables, pre, [1] * len(ready))  # (B, V)
        for i, s in enumerate(ready):
            s.computed += 1
            self._append_token(s, logits[i : i + 1])
        return len(ready)

    def run(self, max_steps: int = 100000) -> EngineReport:
        """Step until every submitted request is done; returns the report."""
        t = time.perf_counter()
        while (self.pending or self.waiting or self.running) and self.step_no < max_steps:
            self.step()
        return EngineReport(list(self.requests), list(self.timeline), self.log, time.perf_counter() - t)
