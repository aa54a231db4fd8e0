"""Memory policies for the simulator: who gets which KV slots, on the real allocator code.

A policy owns one KV budget (``capacity`` token slots) and answers the scheduler's
four questions: can this request start (``admit``), can this sequence grow (``grow``),
give everything back (``release``), and where is the memory now (``usage``). Each one
is a thin adapter over the structure the lessons animate:

==================  =====================================================================
policy              structure and rule
==================  =====================================================================
``max``             :class:`~kvlab.contiguous.ContiguousArena` ``"max"``: reserve ``max_len``
                    slots per request (Orca (Max) in the vLLM paper)
``pow2``            arena ``"pow2"``: reserve the next power of two of the current length,
                    grow by doubling (moving and copying when the next range is taken)
``pow2-oracle``     arena ``"exact"`` told ``prompt + next_pow2(output)``: over-reserves at
                    most 2x of the output, as the vLLM paper's Orca (Pow2) baseline
``exact``           arena ``"exact"`` told the true final length (Orca (Oracle))
``paged``           :class:`~kvlab.paged.BlockManager`: blocks on demand; n samples or beams
                    are independent sequences (no sharing)
``paged-share``     the same plus ``fork`` and copy-on-write: parallel samples share the
                    prompt's blocks, beams share their common history (vLLM)
``radix``           :class:`~kvlab.radix.RadixCache` over the block pool: finished requests
                    stay cached; a new prompt reuses its longest cached prefix (SGLang)
``block-hash``      :class:`~kvlab.prefix_cache.PrefixCache`: full blocks cached by chained hash,
                    freed cached blocks reused in LRU order (vLLM's automatic prefix caching)
==================  =====================================================================

Bookkeeping is exact but lazy: a sequence's length grows by one per iteration without
any call; the scheduler calls ``grow`` only when it would pass ``seq.cap`` (the slots it
can fill without a new allocation). ``sync`` brings the structure's own length counters
up to date (the scheduler calls it every step when ``check=True``).

Not handled: swapping to CPU memory, chunked prefill, sliding windows.

Example (a budget of 64 slots in blocks of 16; one 20-token request):
    >>> from kvlab.sim.workloads import Request
    >>> p = make_policy("paged", capacity=64, block_size=16)
    >>> g = Group(Request(0, 0.0, 20, 5))
    >>> p.admit(g), g.seqs[0].cap         # 21 slots needed: 2 blocks
    (True, 32)
    >>> p.usage().held_slots
    32
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..contiguous import ContiguousArena, OutOfContiguousSpace, next_pow2
from ..events import Event, EventLog
from ..paged import BlockAllocator, BlockManager, BlockTable, OutOfBlocks, blocks_needed
from ..prefix_cache import PrefixCache, PrefixMatch
from ..radix import RadixCache
from .workloads import Request

__all__ = ["Seq", "Group", "Usage", "MemoryPolicy", "ContiguousPolicy", "PagedPolicy", "RadixPolicy", "BlockHashPolicy",
           "make_policy", "POLICY_NAMES", "NullLog", "BudgetTooSmall"]

POLICY_NAMES = ("max", "pow2", "pow2-oracle", "exact", "paged", "paged-share", "radix", "block-hash")


class BudgetTooSmall(ValueError):
    """The KV budget cannot hold even one request of the trace on its own."""


class NullLog(EventLog):
    """An event log that keeps nothing (long runs emit millions of events)."""

    def emit(self, event: Event) -> Event:
        return event


@dataclass(eq=False, slots=True)
class Seq:
    """One sequence being decoded: ``len_at(it) = base_len + it - base_it`` KV slots."""

    sid: str
    group: "Group"
    base_len: int = 0
    base_it: int = 0
    cap: int = 0  # slots it can fill without allocating
    table: object = None  # policy's handle: BlockTable, arena id, own block list
    own: list = field(default_factory=list)  # radix: blocks not (yet) in the tree
    path: int = 0  # radix: tokens of the locked tree path it uses

    def len_at(self, it: int) -> int:
        return self.base_len + it - self.base_it


@dataclass(eq=False)
class Group:
    """A request in the scheduler: its sequences (n samples, beams) and its progress."""

    req: Request
    seqs: list = field(default_factory=list)
    generated: int = 0  # tokens produced before the current admission (preemption keeps them)
    hit: int = 0  # prompt tokens found cached at the current admission
    first_hit: int = 0  # ... at its first admission
    admit_it: int = -1
    admit_order: int = -1
    version: int = 0
    arrival: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    preemptions: int = 0
    node: object = None  # radix: the locked last node
    gid: str = ""

    def __post_init__(self) -> None:
        self.gid = f"r{self.req.req_id}"

    @property
    def prompt_now(self) -> int:
        """Tokens to prefill at (re-)admission: the prompt plus what was generated before a preemption."""
        return self.req.prompt_len + self.generated

    def tokens_now(self) -> tuple[int, ...] | None:
        r = self.req
        if r.prompt is None:
            return None
        return r.prompt + (r.output or ())[: self.generated] if self.generated else r.prompt


@dataclass(frozen=True, slots=True)
class Usage:
    """Where the budget is, apart from the running sequences' tokens (known to the scheduler).

    held_slots: slots held for running sequences (reserved ranges or blocks);
    will_use_slots: of those, slots their tokens will fill before they finish (contiguous:
    ``sum(min(reserved, final_len))``; None for paged: a block is filled as it is taken);
    cached_slots: slots holding cached prefixes no running request uses (evictable);
    external_fragmentation: free slots outside the largest free range (contiguous only);
    dup_slots: logical token slots served by a slot another sequence also uses (sharing);
    logical_blocks / physical_blocks: blocks without / with sharing (paged policies).
    """

    held_slots: int
    will_use_slots: int | None
    cached_slots: int = 0
    external_fragmentation: int = 0
    dup_slots: int = 0
    logical_blocks: int = 0
    physical_blocks: int = 0


class MemoryPolicy:
    """Base class: see the module docstring for the protocol."""

    name = "base"
    uses_tokens = False  # needs token ids (prefix caching)
    shares_forks = False  # fork / copy-on-write for n samples and beams
    capacity: int
    block_size: int = 1

    def validate(self, req: Request) -> None:
        """Raise BudgetTooSmall unless ``req`` fits an empty budget."""
        need = self.min_slots(req)
        if need > self.capacity:
            raise BudgetTooSmall(
                f"KV budget of {self.capacity:,} token slots is smaller than one request: request {req.req_id} "
                f"needs {need:,} ({req.prompt_len} in + {req.output_len} out x {req.num_seqs} sequence(s), "
                f"policy {self.name!r})")

    def min_slots(self, req: Request) -> int:
        """Slots ``req`` needs alone (default: whole blocks for every sequence, no sharing)."""
        return blocks_needed(req.total_len, self.block_size) * self.block_size * req.num_seqs

    def _blocks(self, name: str, capacity: int, block_size: int) -> int:
        """Set name, block_size and capacity (whole blocks); returns the number of blocks."""
        if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        num_blocks = capacity // block_size
        if num_blocks < 1:
            raise BudgetTooSmall(f"KV budget of {capacity} slots holds no block of {block_size}")
        self.name, self.block_size, self.capacity = name, block_size, num_blocks * block_size
        self.logical_blocks = 0
        self.watermark_blocks = 0
        return num_blocks

    def _watermark(self) -> int:
        """Blocks admission must leave free (vLLM's watermark), none while nothing runs."""
        return self.watermark_blocks if self.logical_blocks else 0

    def admit(self, g: Group) -> bool:
        raise NotImplementedError

    def grow(self, s: Seq, need: int) -> bool:
        raise NotImplementedError

    def release(self, g: Group, cur_len: int, finished: bool) -> None:
        raise NotImplementedError

    def usage(self) -> Usage:
        raise NotImplementedError

    def sync(self, s: Seq, cur_len: int) -> None:
        pass

    def busy(self) -> bool:
        """True while some sequence holds memory (a policy serves one simulation at a time)."""
        return getattr(self, "logical_blocks", 0) != 0

    def check(self, groups) -> None:
        pass

    def cached_prefix_len(self, g: Group) -> int:
        return 0

    def beam_reorder(self, g: Group, cur_len: int, rng: np.random.Generator, decay: float) -> None:
        pass


# ----------------------------------------------------------------------------- contiguous
class ContiguousPolicy(MemoryPolicy):
    """One contiguous range per sequence in a :class:`ContiguousArena` (first fit)."""

    def __init__(self, capacity: int, mode: str = "max", max_len: int = 2048, bytes_per_token: int = 1) -> None:
        arena_mode = {"max": "max", "pow2": "pow2", "exact": "exact", "pow2-oracle": "exact"}.get(mode)
        if arena_mode is None:
            raise ValueError(f"unknown contiguous mode {mode!r}; choose max, pow2, pow2-oracle, exact")
        self.name, self.mode, self.max_len = mode, mode, max_len
        self.capacity = capacity
        self.arena = ContiguousArena(capacity, arena_mode, max_len, bytes_per_token, log=NullLog())
        self.will_use = 0
        self._final: dict[str, int] = {}
        self._free = capacity  # slots not reserved (the arena recomputes it by a scan; we keep count)
        self._usage: Usage | None = None  # cached until the arena changes

    def _final_len(self, req: Request) -> int | None:
        if self.mode == "exact":
            return req.total_len
        if self.mode == "pow2-oracle":
            return min(self.max_len, req.prompt_len + next_pow2(req.output_len))
        return None

    def min_slots(self, req: Request) -> int:
        if req.total_len > self.max_len:
            raise BudgetTooSmall(f"request {req.req_id} has {req.total_len} tokens, more than max_len {self.max_len}")
        per = {"max": self.max_len, "exact": req.total_len, "pow2-oracle": self._final_len(req),
               "pow2": next_pow2(req.total_len)}[self.mode]
        return min(per, self.max_len) * req.num_seqs

    def admit(self, g: Group) -> bool:
        L = g.prompt_now + 1
        fin = self._final_len(g.req)
        if self.arena.reservation_for(L, fin) * g.req.num_seqs > self._free:
            return False  # not enough free slots at all: skip the arena's first-fit scan
        done: list[str] = []
        try:
            for i in range(g.req.num_seqs):
                sid = f"{g.gid}.{i}"
                r = self.arena.admit(sid, L, final_len=fin)
                done.append(sid)
                g.seqs.append(Seq(sid, g, L - 1, 0, r.reserved, sid))
        except OutOfContiguousSpace:
            for sid in done:
                self.arena.finish(sid)
            g.seqs.clear()
            return False
        for s in g.seqs:
            w = min(s.cap, g.req.total_len)
            self._final[s.sid] = w
            self.will_use += w
            self._free -= s.cap
        self._usage = None
        return True

    def grow(self, s: Seq, need: int) -> bool:
        r = self.arena.requests[s.sid]
        before = r.reserved
        target = self.arena.reservation_for(need, r.final_len) if self.arena.policy == "pow2" else need
        if need > r.reserved and target > self._free + r.reserved:
            return False  # no range could hold it even after moving: skip the scan
        try:
            self.arena.grow(s.sid, need - r.length)
        except OutOfContiguousSpace:
            return False
        if r.reserved != before:
            self._free -= r.reserved - before
            self._usage = None
        s.cap = r.reserved
        w = min(s.cap, s.group.req.total_len)
        self.will_use += w - self._final[s.sid]
        self._final[s.sid] = w
        return True

    def sync(self, s: Seq, cur_len: int) -> None:
        r = self.arena.requests[s.sid]
        if cur_len > r.length:
            self.arena.grow(s.sid, cur_len - r.length)  # within the reservation: never moves

    def release(self, g: Group, cur_len: int, finished: bool) -> None:
        for s in g.seqs:
            self._free += self.arena.requests[s.sid].reserved
            self.arena.finish(s.sid)
            self.will_use -= self._final.pop(s.sid)
        g.seqs = []
        self._usage = None

    def busy(self) -> bool:
        return bool(self.arena.requests)

    def usage(self) -> Usage:
        if self._usage is None:
            self._usage = Usage(self.capacity - self._free, self.will_use, 0, self._free - self.arena.largest_free_range)
        return self._usage

    def check(self, groups) -> None:
        self.arena.check_integrity()
        assert self._free == self.arena.free_tokens, f"free count {self._free} != arena's {self.arena.free_tokens}"
        live = {s.sid for g in groups for s in g.seqs}
        assert live == set(self.arena.requests), "arena and scheduler disagree on who is running"


# ----------------------------------------------------------------------------- paged
class PagedPolicy(MemoryPolicy):
    """Blocks on demand from a :class:`BlockManager`; ``share=True`` forks samples and beams."""

    def __init__(self, capacity: int, block_size: int = 16, share: bool = False) -> None:
        num_blocks = self._blocks("paged-share" if share else "paged", capacity, block_size)
        self.shares_forks = share
        self._forks = 0
        self.mgr = BlockManager(num_blocks, block_size, log=NullLog())
        self.alloc = self.mgr.allocator

    def min_slots(self, req: Request) -> int:
        bs = self.block_size
        if self.shares_forks and req.num_seqs > 1:
            return (blocks_needed(req.prompt_len, bs) + req.num_seqs * blocks_needed(req.output_len + 1, bs)) * bs
        return blocks_needed(req.total_len, bs) * bs * req.num_seqs

    def _cap(self, t: BlockTable) -> int:
        if t.last_block_shared_and_partial():
            return t.num_tokens
        return len(t.block_ids) * self.block_size

    def admit(self, g: Group) -> bool:
        p, n, bs = g.prompt_now, g.req.num_seqs, self.block_size
        if self.shares_forks and n > 1:
            need = blocks_needed(p, bs) + (n if p % bs == 0 else n - 1)
        else:
            need = blocks_needed(p + 1, bs) * n
        if need > self.alloc.num_free_blocks - self._watermark():
            return False
        if self.shares_forks and n > 1:
            parent = self.mgr.add_sequence(f"{g.gid}.0", p)
            tables = [parent] + [self.mgr.fork(parent.seq_id, f"{g.gid}.{i}") for i in range(1, n)]
            for t in tables:
                t.append_tokens(1)
        else:
            tables = [self.mgr.add_sequence(f"{g.gid}.{i}", p + 1) for i in range(n)]
        for t in tables:
            g.seqs.append(Seq(t.seq_id, g, p, 0, self._cap(t), t))
            self.logical_blocks += len(t.block_ids)
        return True

    def grow(self, s: Seq, need: int) -> bool:
        t: BlockTable = s.table
        before = len(t.block_ids)
        try:
            t.append_tokens(need - t.num_tokens)
        except OutOfBlocks:
            return False
        self.logical_blocks += len(t.block_ids) - before
        s.cap = self._cap(t)
        return True

    def sync(self, s: Seq, cur_len: int) -> None:
        t: BlockTable = s.table
        if cur_len > t.num_tokens:
            assert not t.append_tokens(cur_len - t.num_tokens) and blocks_needed(cur_len, self.block_size) == len(t.block_ids)

    def beam_reorder(self, g: Group, cur_len: int, rng: np.random.Generator, decay: float) -> None:
        """One beam-search step's bookkeeping: the k new beams pick parents among the k
        current beams (beam i with weight ``decay**i``: the best beams get most children).
        A parent with one child continues as it is; each extra child is a ``fork`` (shares
        every block); a parent with no child is freed. The append that follows copies a
        shared partial last block (copy-on-write)."""
        k = len(g.seqs)
        w = decay ** np.arange(k)
        children = np.bincount(rng.choice(k, size=k, p=w / w.sum()), minlength=k)
        old, new = g.seqs, []
        for s, c in zip(old, children):
            if c:
                self.sync(s, cur_len)
                s.base_len, s.base_it = cur_len, 0
                new.append(s)
                for _ in range(1, c):
                    self._forks += 1
                    t = self.mgr.fork(s.sid, f"{g.gid}.f{self._forks}")
                    new.append(Seq(t.seq_id, g, cur_len, 0, self._cap(t), t))
                    self.logical_blocks += len(t.block_ids)
        for s, c in zip(old, children):
            if not c:
                self.logical_blocks -= len(s.table.block_ids)
                self.mgr.free(s.sid)
        for s in new:
            s.cap = self._cap(s.table)
        g.seqs = new

    def release(self, g: Group, cur_len: int, finished: bool) -> None:
        for s in g.seqs:
            self.logical_blocks -= len(s.table.block_ids)
            self.mgr.free(s.sid)
        g.seqs = []

    def usage(self) -> Usage:
        used = self.alloc.num_used_blocks
        saved = self.logical_blocks - used
        return Usage(used * self.block_size, None, 0, 0, saved * self.block_size, self.logical_blocks, used)

    def check(self, groups) -> None:
        self.mgr.check_integrity()
        live = {s.sid for g in groups for s in g.seqs}
        assert live == set(self.mgr.tables), "block manager and scheduler disagree on who is running"
        assert self.logical_blocks == sum(len(t.block_ids) for t in self.mgr.tables.values())


# ----------------------------------------------------------------------------- radix
class RadixPolicy(MemoryPolicy):
    """SGLang's RadixAttention over the paged pool (``page_size == block_size``).

    Admission: ``match_for_prefill`` the prompt, lock the matched path, allocate the
    rest (evicting unlocked cached leaves when the pool is short). Finish: insert
    prompt + output (whole pages) so later requests can hit it, free the trailing
    partial page, unlock. Preemption frees the request's own blocks and unlocks.
    Requests without token ids use the pool like ``paged`` and are never cached.
    """

    uses_tokens = True

    def __init__(self, capacity: int, block_size: int = 16, eviction_policy: str = "lru") -> None:
        num_blocks = self._blocks("radix", capacity, block_size)
        self.alloc = BlockAllocator(num_blocks, block_size, log=NullLog())
        self.cache = RadixCache(self.alloc, page_size=block_size, eviction_policy=eviction_policy)
        self.own_blocks = 0
        self.matched_running = 0  # sum of matched prefix tokens of running requests

    def _take(self, n: int, rid: str, keep_free: int = 0) -> list[int] | None:
        """``n`` blocks, evicting cached leaves when short; None (nothing taken) if impossible."""
        free = self.alloc.num_free_blocks
        if n + keep_free > free:
            self.cache.evict((n + keep_free - free) * self.block_size, rid)
            if n + keep_free > self.alloc.num_free_blocks:
                return None
        return self.alloc.allocate(n, owner=rid)

    def cached_prefix_len(self, g: Group) -> int:
        toks = g.tokens_now()
        return self.cache.peek_prefix_len(toks) if toks is not None else 0

    def admit(self, g: Group) -> bool:
        p, n, bs = g.prompt_now, g.req.num_seqs, self.block_size
        toks = g.tokens_now()
        if toks is not None:
            m = self.cache.match_for_prefill(toks, g.gid)
            self.cache.inc_lock_ref(m.last_node, g.gid)
            node, matched, kv = m.last_node, m.prefix_len, m.kv
        else:
            node, matched, kv = None, 0, []
        per = blocks_needed(p + 1, bs) - len(kv)
        new = self._take(per * n, g.gid, self._watermark())
        if new is None:
            if node is not None:
                self.cache.dec_lock_ref(node, g.gid)
            return False
        g.hit = matched
        for i in range(n):
            table, own, path = list(kv), new[i * per:(i + 1) * per], matched
            if i == 0 and toks is not None:
                # SGLang's cache_unfinished_req: the prompt's full pages enter the tree right
                # after prefill, so requests running at the same time can share them.
                allkv = table + own
                full = len(toks) // bs  # (== p // bs unless output ids are missing)
                res = self.cache.insert(toks[:full * bs], allkv[:full], g.gid)
                self.cache.inc_lock_ref(res.last_node, g.gid)
                self.cache.dec_lock_ref(node, g.gid)
                node, table, own, path = res.last_node, list(res.kv), allkv[full:], full * bs
            s = Seq(f"{g.gid}.{i}", g, p, 0, (len(table) + len(own)) * bs, table, own)
            s.path = path
            g.seqs.append(s)
            self.logical_blocks += len(table) + len(own)
            self.own_blocks += len(own)
            self.matched_running += path
        g.node = node
        return True

    def grow(self, s: Seq, need: int) -> bool:
        k = blocks_needed(need, self.block_size) - len(s.table) - len(s.own)
        new = self._take(k, s.sid)
        if new is None:
            return False
        s.own += new
        s.cap += k * self.block_size
        self.logical_blocks += k
        self.own_blocks += k
        return True

    def release(self, g: Group, cur_len: int, finished: bool) -> None:
        req, bs = g.req, self.block_size
        for i, s in enumerate(g.seqs):
            self.logical_blocks -= len(s.table) + len(s.own)
            self.own_blocks -= len(s.own)
            self.matched_running -= s.path
            own = s.own
            if finished and i == 0 and req.prompt is not None:
                seq = req.prompt + (req.output or ())[:cur_len - req.prompt_len]
                full = min(len(seq), cur_len) // bs
                kv = s.table + own
                self.cache.insert(seq[:full * bs], kv[:full], g.gid)  # the tree takes the new full pages
                own = kv[max(full, len(s.table)):]  # the trailing partial page is not cached
            if own:
                self.alloc.free(own, seq_id=s.sid)
        if g.node is not None:
            self.cache.dec_lock_ref(g.node, g.gid)
        g.node, g.seqs = None, []

    def usage(self) -> Usage:
        bs = self.block_size
        prot, evict = self.cache.protected_size(), self.cache.evictable_size()
        held = self.own_blocks * bs + prot
        return Usage(held, None, evict, 0, self.matched_running - prot, self.logical_blocks,
                     self.own_blocks + prot // bs)

    def check(self, groups) -> None:
        own = [s.own for g in groups for s in g.seqs]
        self.cache.check_integrity(holders=own)
        assert self.own_blocks == sum(len(o) for o in own)


# ----------------------------------------------------------------------------- block hash
class BlockHashPolicy(MemoryPolicy):
    """vLLM's automatic prefix caching: :class:`kvlab.prefix_cache.PrefixCache` is the pool.

    Admission: ``match_for_prefill`` (whole cached blocks), ``allocate`` the table (hits
    shared by ref count), then ``cache_blocks`` the prompt's full blocks right away (so
    concurrent requests share them, as vLLM does after each step). Finish: cache the full
    blocks of prompt + output and ``free`` the table; freed cached blocks wait in the LRU
    free queue until reused. Requests without token ids never hit.
    """

    uses_tokens = True

    def __init__(self, capacity: int, block_size: int = 16) -> None:
        num_blocks = self._blocks("block-hash", capacity, block_size)
        self.pc = PrefixCache(num_blocks, block_size, log=NullLog())
        self._empty = PrefixMatch(0, [], [])

    def cached_prefix_len(self, g: Group) -> int:
        toks = g.tokens_now()
        return self.pc.match_prefix(toks, record_stats=False).prefix_len if toks is not None else 0

    def admit(self, g: Group) -> bool:
        p, n = g.prompt_now, g.req.num_seqs
        toks = g.tokens_now()
        m = self.pc.match_for_prefill(toks, g.gid) if toks is not None else self._empty
        need = n * (blocks_needed(p + 1, self.block_size) - len(m.block_ids))
        hits_free = sum(1 for b in m.block_ids if self.pc.blocks[b].ref_cnt == 0)
        if need + self._watermark() > self.pc.num_free_blocks - hits_free:
            return False
        tables: list[list[int]] = []
        try:
            for _ in range(n):
                tables.append(self.pc.allocate(p + 1, m, g.gid))
        except OutOfBlocks:
            for t in tables:
                self.pc.free(t, g.gid)
            return False
        if toks is not None:
            self.pc.cache_blocks(toks, tables[0], g.gid, block_hashes=m.block_hashes)
        g.hit = m.prefix_len
        for i, t in enumerate(tables):
            g.seqs.append(Seq(f"{g.gid}.{i}", g, p, 0, len(t) * self.block_size, t))
            self.logical_blocks += len(t)
        return True

    def grow(self, s: Seq, need: int) -> bool:
        k = blocks_needed(need, self.block_size) - len(s.table)
        try:
            new = self.pc.allocate(k * self.block_size, self._empty, s.sid)
        except OutOfBlocks:
            return False
        s.table += new
        s.cap = len(s.table) * self.block_size
        self.logical_blocks += k
        return True

    def release(self, g: Group, cur_len: int, finished: bool) -> None:
        req = g.req
        for i, s in enumerate(g.seqs):
            if finished and i == 0 and req.prompt is not None:
                seq = req.prompt + (req.output or ())[:cur_len - req.prompt_len]
                self.pc.cache_blocks(seq[:cur_len], s.table, g.gid)
            self.pc.free(s.table, s.sid)
            self.logical_blocks -= len(s.table)
        g.seqs = []

    def usage(self) -> Usage:
        bs = self.block_size
        used = self.pc.num_blocks - self.pc.num_free_blocks
        return Usage(used * bs, None, self.pc.evictable_size(), 0, (self.logical_blocks - used) * bs,
                     self.logical_blocks, used)

    def check(self, groups) -> None:
        tables = [s.table for g in groups for s in g.seqs]
        self.pc.check_integrity(holders=tables)
        assert self.logical_blocks == sum(len(t) for t in tables)


# ----------------------------------------------------------------------------- factory
def make_policy(name: str, capacity: int, block_size: int = 16, max_len: int = 2048, bytes_per_token: int = 1,
                eviction_policy: str = "lru", watermark: float = 0.01) -> MemoryPolicy:
    """A policy by name (one of :data:`POLICY_NAMES`) over ``capacity`` token slots.

    ``max_len``: the context limit (contiguous policies reserve up to it); ``watermark``:
    block policies admit a request only if this fraction of the blocks stays free (vLLM's
    default 0.01, to leave running sequences room to grow); ``eviction_policy``: the radix
    tree's ("lru", "lfu", "fewest_tokens").
    """
    if not 0 <= watermark < 1:
        raise ValueError(f"watermark must be in [0, 1), got {watermark}")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive number of token slots, got {capacity!r}")
    capacity = int(capacity)
    if name in ("max", "pow2", "pow2-oracle", "exact"):
        return ContiguousPolicy(capacity, name, max_len, bytes_per_token)
    if name in ("paged", "paged-share"):
        pol: MemoryPolicy = PagedPolicy(capacity, block_size, share=name == "paged-share")
    elif name == "radix":
        pol = RadixPolicy(capacity, block_size, eviction_policy)
    elif name == "block-hash":
        pol = BlockHashPolicy(capacity, block_size)
    else:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
    pol.watermark_blocks = int(watermark * (pol.capacity // pol.block_size))
    return pol
