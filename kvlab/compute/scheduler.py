"""Which sequences run next: a waiting and a running queue over the cache manager.

    sched = Scheduler(cache_manager, max_batch_size=16, order="fcfs")
    sched.add(seqs)                          # one request's samples
    seqs, is_prefill = sched.schedule()      # a prefill batch when anything can be admitted, else decode
    ...                                      # the model runs on seqs (copy sched.blocks_to_copy first)
    seqs, rows = sched.after_prefill(seqs)   # prefill only: cache the prompts, fork n > 1 samples
    finished = sched.postprocess(seqs, token_ids)

``schedule()``:

1. **prefill**: the waiting queue is put in order (``kvlab.reuse.schedule.order_by_shared_prefix``:
   "fcfs", or "lpm" = longest cached prefix first, or "dfs-weight"; read-only lookups in the
   cache manager's tree), then sequences are admitted from its head while the batch has room:
   ``CacheManager.admit`` matches the longest cached prefix, locks it, adopts its blocks and
   allocates the rest, evicting unlocked leaves when short. The first one that does not fit
   stops admission (no one overtakes it). Anything admitted: ``(admitted, True)``.
2. **decode**: every running sequence, oldest first, reserves the slot of the token it feeds
   (``CacheManager.append``; copy-on-write pairs are collected in ``blocks_to_copy``). When the
   pool cannot supply it even after eviction, the newest request is **preempted**
   (recomputation): its computed tokens are cached (``cache_finished_req``), its blocks go back,
   and its samples return to the head of the waiting queue. A sequence that already has its
   slot this step is never preempted, and when the newest request is the sequence's own, only
   its newest sample (perhaps itself) is, so the oldest sequence always progresses.

``postprocess``: a sequence's tokens are all computed now, and it takes its new token. One that
has its ``max_new_tokens``, or whose new token is one of its ``stop_token_ids``, finishes at once
(its tokens are cached and its blocks freed; ``finish_reason`` "length" or "stop"), so it is
never preempted or run again.

``abort(seqs)``: sequences leave wherever they are (running: their computed tokens cached and
their blocks freed, as at a finish; waiting; or still to be forked), ``finish_reason`` "abort".

``n > 1``: only the first sample is queued. When its prompt has been prefilled,
``after_prefill`` forks the others from it (``CacheManager.fork``: they share every block and
lock the same node) and each samples its first token from the prompt's logits row.

Mirrors nano-vllm ``nanovllm/engine/scheduler.py`` (``waiting``/``running``, ``schedule``,
``preempt``, ``postprocess``) and SGLang ``schedule_policy.py`` (the waiting order). Differences:
admission goes through the cache manager (radix prefix reuse) where nano-vllm calls
``BlockManager.allocate``; preemption takes whole requests; ``n > 1`` samples fork after their
prompt's prefill (vLLM v0's ``fork_seq``); there is no token budget per step (no chunked prefill).

Example (block size 1, a pool of 6 blocks; B is preempted when A needs another block):
    >>> from kvlab.reuse.cache_manager import CacheManager
    >>> from kvlab.compute.sequence import Request, SamplingParams, sequences_for
    >>> sched = Scheduler(CacheManager(num_blocks=6, block_size=1), max_batch_size=4)
    >>> a, = sequences_for(Request("A", [1, 2], SamplingParams(3)))
    >>> b, = sequences_for(Request("B", [3, 4], SamplingParams(3)))
    >>> sched.add([a]); sched.add([b])
    >>> seqs, is_prefill = sched.schedule(); [s.seq_id for s in seqs], is_prefill
    (['A', 'B'], True)
    >>> sched.postprocess(seqs, [7, 8])                       # each gets its first token
    []
    >>> seqs, _ = sched.schedule(); [s.seq_id for s in seqs]  # both decode: 6 blocks in use
    ['A', 'B']
    >>> _ = sched.postprocess(seqs, [7, 8])
    >>> seqs, _ = sched.schedule(); [s.seq_id for s in seqs], [s.seq_id for s in sched.waiting]
    (['A'], ['B'])
    >>> [s.seq_id for s in sched.postprocess(seqs, [9])]      # A has its 3 tokens
    ['A']
    >>> sched.cache_manager.check_integrity(); sched.check_integrity()
"""
from __future__ import annotations

from collections import abc

from ..memory.block_pool import KVCacheError
from ..memory.ids import check_int
from ..reuse.cache_manager import CacheManager
from ..reuse.schedule import SCHEDULE_POLICIES, order_by_shared_prefix
from .sequence import Sequence, SequenceStatus

__all__ = ["Scheduler"]

WAITING, RUNNING, FINISHED = SequenceStatus.WAITING, SequenceStatus.RUNNING, SequenceStatus.FINISHED


class Scheduler:
    """Waiting and running sequences over ``cache_manager``; at most ``max_batch_size`` run at
    once (a fresh request wider than that runs alone). ``order``: one of SCHEDULE_POLICIES.

    After each ``schedule()``: ``blocks_to_copy`` holds the copy-on-write ``(src, dst)`` pairs
    to perform before the forward pass, ``preempted`` the groups of sequences preempted (one
    group per request).
    """

    def __init__(self, cache_manager: CacheManager, max_batch_size: int = 16, order: str = "fcfs") -> None:
        self.max_batch_size = check_int("max_batch_size", max_batch_size, 1)
        if order not in SCHEDULE_POLICIES:
            raise ValueError(f"order={order!r} is not one of {SCHEDULE_POLICIES}")
        self.cache_manager = cache_manager
        self.order = order
        self.waiting: list[Sequence] = []
        self.running: list[Sequence] = []                  # admission order, a request's samples together
        self.forks: dict[str, list[Sequence]] = {}         # first sample's seq_id -> the samples forked after its prefill
        self.blocks_to_copy: list[tuple[int, int]] = []
        self.preempted: list[list[Sequence]] = []

    def add(self, seqs: abc.Sequence[Sequence]) -> None:
        """Queue one request's samples: the first waits; the others are forked from it after its prefill."""
        first, rest = seqs[0], list(seqs[1:])
        if any(s.status is not WAITING or s.is_finished or s.output_ids for s in seqs):
            raise ValueError("only fresh sequences can be added (waiting, nothing generated)")
        self.waiting.append(first)
        if rest:
            self.forks[first.seq_id] = rest

    def is_finished(self) -> bool:
        return not self.waiting and not self.running

    # ------------------------------------------------------------------ schedule
    def schedule(self) -> tuple[list[Sequence], bool]:
        """The next batch: ``(admitted, True)`` when anything can be admitted, else
        ``(running, False)`` with a slot reserved for each (preempting when short); ``([], False)``
        when nothing waits or runs. Raises KVCacheError when nothing runs and the head of the
        waiting queue cannot fit even in an empty pool."""
        self.blocks_to_copy, self.preempted = [], []
        admitted = self._admit()
        if admitted:
            return admitted, True
        if not self.running:
            if self.waiting:
                s, cm = self.waiting[0], self.cache_manager
                raise KVCacheError(f"sequence {s.seq_id} ({s.num_tokens} tokens) cannot be admitted: "
                                   f"{cm.available_blocks()} of {cm.num_blocks} blocks free after eviction")
            return [], False
        return self._reserve_decode_slots(), False

    def _admit(self) -> list[Sequence]:
        if self.order != "fcfs" and len(self.waiting) > 1:
            self.waiting = order_by_shared_prefix(self.waiting, self.cache_manager.tree, self.order,
                                                  tokens_of=lambda s: s.token_ids)
        admitted = []
        while self.waiting:
            s = self.waiting[0]
            width = 1 + len(self.forks.get(s.seq_id, ()))
            if self.running and len(self.running) + width > self.max_batch_size:
                break
            # the prompt as checked at submit (a RadixKey); after a preemption, prompt + outputs
            a = self.cache_manager.admit(s.seq_id, s.request.prompt_ids if not s.output_ids else s.token_ids)
            if a is None:
                break
            self.waiting.pop(0)
            s.status, s.block_table, s.num_computed_tokens = RUNNING, a.table, a.prefix_len
            self.running.append(s)
            admitted.append(s)
        return admitted

    def _reserve_decode_slots(self) -> list[Sequence]:
        ready: list[Sequence] = []
        for s in list(self.running):                       # oldest first
            if s.status is not RUNNING:                    # preempted for an older one
                continue
            while (copies := self.cache_manager.append(s.seq_id, 1)) is None:
                newest = self.running[-1]
                victims = [newest] if newest.request is s.request else \
                    [v for v in self.running if v.request is newest.request and v not in ready]
                self.preempt(victims)
                if s in victims:
                    break
            else:
                self.blocks_to_copy += copies
                ready.append(s)
        return ready

    def preempt(self, seqs: abc.Sequence[Sequence]) -> None:
        """Back to the head of the waiting queue (in order), to be recomputed: cache what they
        computed, free their blocks."""
        for s in seqs:
            self.cache_manager.cache_finished_req(s.seq_id, s.token_ids[:s.num_computed_tokens])
            self.running.remove(s)
            s.status, s.block_table, s.num_computed_tokens = WAITING, None, 0
        self.waiting[:0] = seqs
        self.preempted.append(list(seqs))

    # ------------------------------------------------------------------ after the forward pass
    def after_prefill(self, seqs: abc.Sequence[Sequence]) -> tuple[list[Sequence], list[int]]:
        """Cache each prefilled sequence's computed tokens (``cache_unfinished_req``: requests
        admitted later reuse them at once), then fork the other samples of a fresh ``n > 1``
        request from it. Returns the sequences that sample now and, for each, the row of the
        batch's logits it samples from (forks share their prompt's row)."""
        out, rows = [], []
        for row, s in enumerate(seqs):
            self.cache_manager.cache_unfinished_req(s.seq_id, s.token_ids)
            out.append(s)
            rows.append(row)
            for k, child in enumerate(self.forks.pop(s.seq_id, ()), start=1):
                child.block_table = self.cache_manager.fork(s.seq_id, child.seq_id)
                child.status, child.num_computed_tokens = RUNNING, s.num_computed_tokens
                self.running.insert(self.running.index(s) + k, child)
                out.append(child)
                rows.append(row)
        return out, rows

    def postprocess(self, seqs: abc.Sequence[Sequence], token_ids: abc.Sequence[int]) -> list[Sequence]:
        """Every token of ``seqs`` is computed now; each takes its new token. Those that have
        ``max_new_tokens`` finish (cached, freed, out of the running queue); returns them."""
        if len(seqs) != len(token_ids):
            raise ValueError(f"{len(token_ids)} tokens for {len(seqs)} sequences")
        finished = []
        for s, tok in zip(seqs, token_ids):
            s.num_computed_tokens = s.num_tokens
            s.append_token(tok)
            if s.is_finished:
                self._finish(s, s.stop_reason())
                finished.append(s)
        return finished

    def _finish(self, s: Sequence, reason: str) -> None:
        """Out of the running queue: its computed tokens cached in the tree, its blocks freed."""
        self.cache_manager.cache_finished_req(s.seq_id, s.token_ids[:s.num_computed_tokens])
        self.running.remove(s)
        s.status, s.block_table, s.finish_reason = FINISHED, None, reason

    def abort(self, seqs: abc.Sequence[Sequence]) -> None:
        """End ``seqs`` now, between steps (one request's samples): a running one is finished as
        at its last token (cached, freed), a waiting one leaves the queue, a fork not yet made is
        dropped; each is FINISHED with ``finish_reason`` "abort". Finished ones are left alone."""
        for s in seqs:
            if s.status is RUNNING:
                self._finish(s, "abort")
                continue
            if s.status is FINISHED:
                continue
            if s in self.waiting:
                self.waiting.remove(s)
            self.forks.pop(s.seq_id, None)
            s.status, s.finish_reason = FINISHED, "abort"

    # ------------------------------------------------------------------ invariants
    def check_integrity(self) -> None:
        """Queues and statuses agree with the cache manager's tables; between steps a running
        sequence has computed all but its newest token, and its table holds exactly those."""
        tables = self.cache_manager.tables
        assert {s.seq_id for s in self.running} == set(tables), "running sequences != the cache manager's tables"
        assert len({id(s) for s in self.running + self.waiting}) == len(self.running) + len(self.waiting), \
            "a sequence is queued twice"
        for s in self.running:
            assert s.status is RUNNING and s.block_table is tables[s.seq_id], f"{s.seq_id}: not running or stale table"
            assert s.num_computed_tokens == s.num_tokens - 1 == s.block_table.num_tokens, \
                f"{s.seq_id}: {s.num_computed_tokens} computed, {s.num_tokens} tokens, {s.block_table.num_tokens} slots"
            assert not s.is_finished, f"{s.seq_id}: finished but still running"
        for s in self.waiting + [c for cs in self.forks.values() for c in cs]:
            assert s.status is WAITING and s.block_table is None and not s.is_finished, f"{s.seq_id}: not waiting"
