"""vLLM-style automatic prefix caching: a hash chained over full blocks, beside the radix tree.

vLLM v1 (``vllm/v1/core/block_pool.py``, ``kv_cache_utils.py``) and nano-vllm
(``block_manager.py``) find shared prefixes without a tree: every *full* block of
``block_size`` tokens gets a hash of its tokens chained with the hash of the block before it,
so equal hashes mean equal prefixes up to and including that block. A map ``hash -> block``
finds cached blocks. A block whose ``ref_cnt`` drops to zero keeps its hash and waits in the
free-block queue; the queue is also the eviction order (LRU: the front is reused first, and
reusing a block drops its hash). A hit on a free cached block takes it out of the queue again.

Compared with :class:`kvlab.reuse.radix_cache.RadixCache`: sharing is per full block (a prefix
of 37 tokens with block_size 16 shares 32), the last partial block is never shared, but there
is no tree to walk or split and eviction is free (it happens when a block is reused). This
cache is its own block pool, as vLLM's is (it does not sit on ``kvlab.memory``'s allocator).

Public API (vLLM's names; kvlab's ``match_prefix`` is vLLM's ``get_computed_blocks``)::

    pc = BlockHashCache(num_blocks, block_size, log=None)
    hash_block_tokens(parent_hash, tokens) -> int;  pc.compute_block_hashes(tokens) -> list[int]
    m  = pc.match_prefix(tokens, rid=None)        -> PrefixMatch(prefix_len, block_ids, block_hashes)
    m  = pc.match_for_prefill(tokens, rid=None)   # leaves >= 1 token to compute
    pc.get_cached_block(block_hash) -> block id or None
    ids = pc.allocate(num_tokens, m, rid=None)    -> the request's block table (touch hits + new blocks)
    pc.touch(block_ids)                           # a hit: ref_cnt + 1, out of the free queue
    n  = pc.cache_full_blocks(tokens, block_ids, rid=None, block_hashes=None) -> blocks newly cached
    pc.free_blocks(block_ids, rid=None) -> blocks whose ref_cnt reached 0
    pc.evict(num_tokens) -> PrefixEvictResult;  pc.evictable_size(), pc.protected_size()
    pc.stats -> PrefixCacheStats;  pc.check_integrity(holders=None);  pc.num_free_blocks

Request cycle: ``m = match_for_prefill(prompt)`` -> ``table = allocate(len(seq), m)`` (all or
nothing) -> compute -> ``cache_full_blocks(seq, table)`` -> ``free_blocks(table)`` when finished.
The request holds one ``ref_cnt`` on every block of its table (hits included), so
``check_integrity(holders=[every running table])`` checks ref counts exactly.

Not handled here: hash collisions beyond what a per-block token comparison catches (as
vLLM with Python's built-in hash: a 64-bit collision of the *parent* chain is assumed not
to happen), extra keys (LoRA, multimodal), sliding windows.

Example:
    >>> pc = BlockHashCache(num_blocks=8, block_size=4)
    >>> seq = list(range(10))                 # 2 full blocks + 2 tokens
    >>> m = pc.match_for_prefill(seq)
    >>> table = pc.allocate(len(seq), m, rid="R1")
    >>> table, pc.cache_full_blocks(seq, table)
    ([0, 1, 2], 2)
    >>> pc.free_blocks(table)
    [2, 1, 0]
    >>> m = pc.match_for_prefill(seq[:8] + [99])   # the two full blocks hit
    >>> m.prefix_len, m.block_ids
    (8, [0, 1])
    >>> pc.check_integrity()
"""
from __future__ import annotations

from dataclasses import dataclass
from operator import attrgetter
from typing import Iterable, Sequence

from ..memory.block_pool import DoubleFree, KVCacheError, OutOfBlocks, check_block_ids
from ..memory.events import EventLog
from ..memory.ids import as_ids, check_int
from .radix_cache import RadixKey
from .stats import HitStats

__all__ = [
    "ROOT_HASH",
    "hash_block_tokens",
    "Block",
    "BlockHashes",
    "FreeBlockQueue",
    "PrefixMatch",
    "PrefixEvictResult",
    "PrefixCacheStats",
    "BlockHashCache",
]

ROOT_HASH = 0  # the "parent hash" of a sequence's first block (vLLM's NONE_HASH)
_ref_cnt = attrgetter("ref_cnt")


def hash_block_tokens(parent_hash: int, tokens: Sequence[int]) -> int:
    """The hash of one full block chained with its parent's: ``hash((parent_hash, tuple(tokens)))``.

    Python's hash of a tuple of ints is the same in every run (no hash randomization).
    Example: two sequences that differ only in block 0 differ in every later hash too.
    """
    return hash((parent_hash, tuple(tokens)))


@dataclass(slots=True)
class Block:
    """One physical block: ``ref_cnt`` running requests use it; ``block_hash`` is set while it is
    cached (with its ``token_ids`` and ``parent_hash`` to confirm a hash hit)."""

    block_id: int
    ref_cnt: int = 0
    block_hash: int | None = None
    parent_hash: int | None = None
    token_ids: tuple[int, ...] = ()


class BlockHashes(list):
    """The chained hashes of a token list's full blocks (a list of ints), carrying what they were
    computed from: ``tokens`` (validated: the id rule) and ``block_tokens`` (each block's token
    tuple). ``match_prefix`` returns one in ``PrefixMatch.block_hashes``; given back to
    ``cache_full_blocks``, it saves validating and hashing those tokens again (only the tokens
    past them are checked). Read it; do not change it.

    Example: ``pc.match_prefix([1, 2, 3, 4, 5]).block_hashes.tokens`` -> [1, 2, 3, 4, 5]."""

    __slots__ = ("tokens", "block_tokens")


@dataclass(frozen=True, slots=True)
class PrefixMatch:
    """``prefix_len`` cached tokens in ``block_ids`` (whole blocks); ``block_hashes``: the hash of
    every full block of the tokens looked up (cached or not), reused by ``cache_full_blocks``."""

    prefix_len: int
    block_ids: list[int]
    block_hashes: list[int]

    @property
    def tokens(self) -> RadixKey:
        """The tokens looked up, checked (a :class:`~kvlab.reuse.radix_cache.RadixKey`):
        ``tokens.plus(answer)`` is what ``cache_full_blocks`` takes with only the answer checked."""
        return self.block_hashes.tokens


@dataclass(frozen=True, slots=True)
class PrefixEvictResult:
    requested: int
    num_tokens: int
    block_ids: list[int]

    @property
    def satisfied(self) -> bool:
        return self.num_tokens >= self.requested


@dataclass(slots=True)
class PrefixCacheStats(HitStats):
    """Lookups as in the radix tree (:class:`kvlab.reuse.stats.HitStats`), plus blocks cached,
    duplicates not cached (computed twice at once) and cached blocks evicted by reuse."""

    cached_blocks: int = 0
    duplicate_blocks: int = 0
    evicted_blocks: int = 0


class FreeBlockQueue:
    """The free blocks in order, front first, as a doubly linked list over block ids (vLLM's
    ``FreeKVCacheBlockQueue``): append at the back, pop from the front and remove from the middle
    (a hit on a free cached block) are each O(1) and allocate nothing. ``prev``/``next`` hold each
    block's neighbours; ids ``n`` and ``n + 1`` are the front and back sentinels.

    Example:
        >>> q = FreeBlockQueue(3)
        >>> q.remove(1); q.append(1); list(q), q.popleft(), len(q)
        ([0, 2, 1], 0, 2)
    """

    def __init__(self, num_blocks: int) -> None:
        n = num_blocks  # at least 1; it starts as 0, 1, ..., n - 1
        self.head, self.tail = n, n + 1
        self.next = list(range(1, n + 1)) + [0, -1]       # block i -> i + 1, head -> 0
        self.next[n - 1] = self.tail
        self.prev = [n] + list(range(n - 1)) + [-1, n - 1]  # block i -> i - 1, 0 -> head, tail -> n - 1
        self._len = n

    def __len__(self) -> int:
        return self._len

    def __iter__(self):
        b, nxt, tail = self.next[self.head], self.next, self.tail
        while b != tail:
            yield b
            b = nxt[b]

    def append(self, b: int) -> None:
        prev, nxt, t = self.prev, self.next, self.tail
        p = prev[t]
        nxt[p] = b
        prev[b] = p
        nxt[b] = t
        prev[t] = b
        self._len += 1

    def remove(self, b: int) -> None:
        prev, nxt = self.prev, self.next
        p, n = prev[b], nxt[b]
        nxt[p] = n
        prev[n] = p
        self._len -= 1

    def popleft(self) -> int:
        b = self.next[self.head]
        self.remove(b)
        return b


class BlockHashCache:
    """A block pool with hash-based prefix caching (vLLM v1's ``BlockPool`` + ``KVCacheManager``).

    The free-block queue is a :class:`FreeBlockQueue` (O(1) removal of a hit block from the
    middle, as vLLM's doubly linked ``FreeKVCacheBlockQueue``). It starts as ``0..num_blocks-1``.
    """

    def __init__(self, num_blocks: int, block_size: int, log: EventLog | None = None) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        self.log = log if log is not None else EventLog()
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_queue = FreeBlockQueue(num_blocks)
        self.cached_block_hash_to_block: dict[int, int] = {}
        self.stats = PrefixCacheStats()
        self._num_cached_in_use = 0  # cached blocks with ref_cnt > 0

    # ------------------------------------------------------------------------ queries
    @property
    def num_free_blocks(self) -> int:
        """Blocks with ref_cnt 0 (cached or not): all can be handed out."""
        return len(self.free_block_queue)

    def evictable_size(self) -> int:
        """Tokens in cached blocks nobody uses (they go when their block is reused)."""
        return (len(self.cached_block_hash_to_block) - self._num_cached_in_use) * self.block_size

    def protected_size(self) -> int:
        """Tokens in cached blocks some running request uses."""
        return self._num_cached_in_use * self.block_size

    def compute_block_hashes(self, tokens: Sequence[int]) -> list[int]:
        """Chained hashes of every full block. Example: 10 tokens, block_size 4 -> 2 hashes."""
        key = as_ids(tokens)
        return self._hashes(key, len(key) // self.block_size)

    def _hashes(self, key: list, n: int, out: list[int] | None = None,
                tuples: list[tuple[int, ...]] | None = None) -> list[int]:
        """Hashes of blocks 0..n-1, continuing the chain after the ones already in ``out``
        (and collecting each block's token tuple into ``tuples`` when given)."""
        bs = self.block_size
        out = [] if out is None else out
        h = out[-1] if out else ROOT_HASH
        start = len(out)
        chunks = list(zip(*[iter(key[start * bs:n * bs])] * bs))  # the blocks' token tuples, cut in C
        for t in chunks:
            h = hash((h, t))
            out.append(h)
        if tuples is not None:
            tuples += chunks
        return out

    # ------------------------------------------------------------------------- lookup
    def match_prefix(self, tokens: Sequence[int], rid: str | None = None, *, record_stats: bool = True) -> PrefixMatch:
        """The longest run of cached full blocks at the start of ``tokens`` (vLLM's
        ``get_computed_blocks``). Changes no ref count; ``allocate`` takes the hits."""
        key = RadixKey(tokens)  # checked once; kept in the match's block_hashes: never the caller's list
        return self._match(key, len(key), rid, record_stats)

    def _match(self, key: list, limit: int, rid: str | None, record_stats: bool) -> PrefixMatch:
        bs = self.block_size
        toks: list[tuple[int, ...]] = []
        hashes = BlockHashes()
        hashes.tokens, hashes.block_tokens = key, toks
        self._hashes(key, len(key) // bs, hashes, toks)
        blocks, get, ids = self.blocks, self.cached_block_hash_to_block.get, []
        parent = ROOT_HASH
        for h, t in zip(hashes[:limit // bs], toks):
            b = get(h)
            if b is None:
                break
            blk = blocks[b]
            if blk.parent_hash != parent or blk.token_ids != t:
                break  # a hash collision: not the same tokens
            ids.append(b)
            parent = h
        n = len(ids) * bs
        if record_stats:
            s = self.stats
            s.num_matches += 1
            s.hit_tokens += n
            s.missed_tokens += len(key) - n
        self.log.add(("match", rid, tuple(ids), {"prefix_len": n, "num_tokens": len(key)}))  # a row as record() keeps it
        return PrefixMatch(n, ids, hashes)

    def match_for_prefill(self, tokens: Sequence[int], rid: str | None = None) -> PrefixMatch:
        """``match_prefix`` capped at ``len(tokens) - 1`` tokens (cut to whole blocks), so a
        fully cached prompt still computes its last token (vLLM's ``max_cache_hit_length``).
        Example: 8 cached tokens, block_size 4, prompt of those 8 -> prefix_len 4."""
        key = RadixKey(tokens)
        return self._match(key, max(0, len(key) - 1), rid, True)

    # -------------------------------------------------------------------- allocation
    def allocate(self, num_tokens: int, match: PrefixMatch, rid: str | None = None) -> list[int]:
        """The block table of a request of ``num_tokens`` tokens whose prefix ``match`` hit:
        the hit blocks (ref_cnt + 1, taken out of the free queue when they were free) and new
        blocks from the front of the free queue (dropping their old hash: eviction).

        All or nothing: raises OutOfBlocks, changing nothing, when too few blocks are free
        (hit blocks that sit in the free queue do not count as free for the new ones).
        """
        num_tokens = check_int("num_tokens", num_tokens, 0)
        if num_tokens < match.prefix_len:
            raise ValueError(f"num_tokens must be >= the match's {match.prefix_len} tokens, got {num_tokens}")
        blocks, queue = self.blocks, self.free_block_queue
        hits = match.block_ids
        hits_free = 0
        if len(match.block_hashes) < len(hits):
            raise KVCacheError(f"allocate: the match has {len(hits)} block(s) but {len(match.block_hashes)} hash(es)")
        for b, h in zip(hits, match.block_hashes):
            blk = blocks[b]
            if blk.block_hash is None or blk.block_hash != h:
                raise KVCacheError(f"allocate: matched block {b} no longer caches those tokens (the match is "
                                   "stale: the block was reused since); match again")
            hits_free += blk.ref_cnt == 0
        need = -(-num_tokens // self.block_size) - len(hits)
        if need > len(queue) - hits_free:
            raise OutOfBlocks(need, len(queue) - hits_free, f"request {rid}" if rid else "")
        self.touch(hits)
        new: list[int] = []
        evicted: list[int] = []
        cmap = self.cached_block_hash_to_block
        prev, nxt, head = queue.prev, queue.next, queue.head
        for _ in range(need):
            b = nxt[head]  # the front of the free queue: FreeBlockQueue.popleft, written out
            n = nxt[b]
            nxt[head] = n
            prev[n] = head
            blk = blocks[b]
            if blk.block_hash is not None:  # reuse drops the stale hash entry
                if cmap.get(blk.block_hash) == b:
                    del cmap[blk.block_hash]
                blk.block_hash = blk.parent_hash = None
                blk.token_ids = ()
                evicted.append(b)
            blk.ref_cnt = 1
            new.append(b)
        queue._len -= need
        if evicted:
            self.stats.evicted_blocks += len(evicted)
            self.log.record("evict", rid, evicted, reused=True)
        self.log.add(("allocate", rid, tuple(new), {"hits": tuple(hits)}))
        return hits + new

    def touch(self, block_ids: Sequence[int]) -> None:
        """A prefix hit on cached blocks: ref_cnt + 1 each, and out of the free queue when it was
        free (vLLM's ``BlockPool.touch``). The blocks must be ones ``match_prefix`` returned."""
        blocks, queue = self.blocks, self.free_block_queue
        prev, nxt = queue.prev, queue.next
        taken = 0
        for b in block_ids:
            blk = blocks[b]
            if blk.ref_cnt == 0:  # out of the free queue: FreeBlockQueue.remove, written out
                p, n = prev[b], nxt[b]
                nxt[p] = n
                prev[n] = p
                taken += 1
            blk.ref_cnt += 1
        queue._len -= taken
        self._num_cached_in_use += taken

    def get_cached_block(self, block_hash: int) -> int | None:
        """The block that caches ``block_hash``, or None (vLLM's ``BlockPool.get_cached_block``)."""
        return self.cached_block_hash_to_block.get(block_hash)

    def cache_full_blocks(self, tokens: Sequence[int], block_ids: Sequence[int], rid: str | None = None,
                     block_hashes: Sequence[int] | None = None) -> int:
        """Register the hashes of the full blocks of ``tokens`` (held in ``block_ids``, the
        request's table) once their KV is computed. A block whose hash is already cached in
        another block stays uncached (two requests computed it at once; vLLM keeps the first).
        Returns how many blocks were newly cached. ``block_hashes``: the match's (a
        :class:`BlockHashes`: then ``tokens`` must start with the tokens matched, ValueError
        otherwise, and only the tokens past them are validated and hashed; ``tokens`` as a
        :class:`RadixKey`, ``match.tokens.plus(answer)``, is only compared with the matched ones)."""
        known = block_hashes if type(block_hashes) is BlockHashes else None
        if known is None:
            key = as_ids(tokens)
        elif type(tokens) is RadixKey:  # checked when it was made
            key = tokens if tokens[:len(known.tokens)] == known.tokens else None
        else:
            key = known.tokens.extended(tokens)  # only the tokens past the matched ones are checked
        if key is None:
            raise ValueError("cache_full_blocks: tokens do not start with the tokens the block_hashes were "
                             f"computed from ({len(known.tokens)} token(s)): pass that request's own match")
        bs = self.block_size
        n_full = len(key) // bs
        ids = list(block_ids)
        if len(ids) < n_full:
            raise ValueError(f"block_ids has {len(ids)} block(s) but {len(key)} tokens fill {n_full} full block(s)")
        ids = check_block_ids(ids[:n_full], self.num_blocks, "cache_full_blocks")
        blocks = self.blocks
        if min(map(_ref_cnt, map(blocks.__getitem__, ids)), default=1) == 0:  # one C pass; the loop names it
            b = next(b for b in ids if blocks[b].ref_cnt == 0)
            raise KVCacheError(f"cache_full_blocks: block {b} is free; it must belong to the request")
        # the hashes the match computed (of the prompt's full blocks), continued over the rest
        toks = list(known.block_tokens[:n_full]) if known is not None else None
        hashes = self._hashes(key, n_full, list(block_hashes[:n_full]) if block_hashes is not None else None, toks)
        cmap, blocks = self.cached_block_hash_to_block, self.blocks
        added, dups = [], 0
        parent = ROOT_HASH
        for i in range(n_full):
            h, b = hashes[i], ids[i]
            blk = blocks[b]
            if blk.block_hash is None:
                if h in cmap:
                    dups += 1  # same content cached in another block
                else:
                    cmap[h] = b
                    blk.block_hash, blk.parent_hash = h, parent
                    blk.token_ids = toks[i] if toks is not None else tuple(key[i * bs:(i + 1) * bs])
                    self._num_cached_in_use += 1
                    added.append(b)
            parent = h
        self.stats.cached_blocks += len(added)
        self.stats.duplicate_blocks += dups
        if added:
            self.log.add(("insert", rid, tuple(added), {"num_tokens": len(key)}))
        return len(added)

    def free_blocks(self, block_ids: Sequence[int], rid: str | None = None) -> list[int]:
        """Drop the request's reference on each block (vLLM's ``KVCacheManager.free`` ->
        ``BlockPool.free_blocks``). Blocks reaching ref_cnt 0 join the back
        of the free queue in reverse table order (a sequence's tail is evicted before its
        head, as in vLLM). Raises (changing nothing) for an unknown id or a double free,
        including the same block twice in one call."""
        ids = check_block_ids(block_ids, self.num_blocks, "free")
        blocks, queue = self.blocks, self.free_block_queue
        if len(set(ids)) != len(ids) or min(map(_ref_cnt, map(blocks.__getitem__, ids)), default=1) < 1:
            want: dict[int, int] = {}
            for b in ids:
                want[b] = want.get(b, 0) + 1
            for b, k in want.items():
                if k > blocks[b].ref_cnt:
                    raise DoubleFree(f"free: block {b} listed {k} time(s) but has ref_cnt {blocks[b].ref_cnt} "
                                     "(double free)")
        released = []
        prev, nxt, tail = queue.prev, queue.next, queue.tail
        cached = 0
        for b in reversed(ids):
            blk = blocks[b]
            blk.ref_cnt -= 1
            if blk.ref_cnt == 0:  # to the back of the free queue: FreeBlockQueue.append, written out
                p = prev[tail]
                nxt[p] = b
                prev[b] = p
                nxt[b] = tail
                prev[tail] = b
                released.append(b)
                cached += blk.block_hash is not None
        queue._len += len(released)
        self._num_cached_in_use -= cached
        if ids:
            self.log.add(("free", rid, tuple(ids), {"released": tuple(released)}))
        return released

    def evict(self, num_tokens: int, rid: str | None = None) -> PrefixEvictResult:
        """Drop the hashes of free cached blocks from the front of the queue (LRU) until
        ``num_tokens`` tokens are uncached; frees what it can without raising. (vLLM never
        needs this: reusing a block evicts it. It is here to compare with the radix tree.)"""
        num_tokens = check_int("num_tokens", num_tokens, 0)
        out, cmap = [], self.cached_block_hash_to_block
        for b in self.free_block_queue:
            if len(out) * self.block_size >= num_tokens:
                break
            blk = self.blocks[b]
            if blk.block_hash is not None:
                if cmap.get(blk.block_hash) == b:
                    del cmap[blk.block_hash]
                blk.block_hash = blk.parent_hash = None
                blk.token_ids = ()
                out.append(b)
        self.stats.evicted_blocks += len(out)
        self.log.record("evict", rid, out, requested=num_tokens)
        return PrefixEvictResult(num_tokens, len(out) * self.block_size, out)

    # --------------------------------------------------------------------- integrity
    def check_integrity(self, holders: Iterable[Sequence[int]] | None = None) -> None:
        """Raise AssertionError unless: free queue = blocks with ref_cnt 0, no duplicates;
        every hash entry points at a block carrying that hash and vice versa; the in-use
        count of cached blocks is right; with ``holders`` (every running block table),
        each block's ref_cnt equals the number of tables holding it."""
        q = list(self.free_block_queue)
        assert len(q) == len(set(q)), "duplicate ids in the free queue"
        qs = set(q)
        in_use = 0
        for blk in self.blocks:
            assert blk.ref_cnt >= 0, f"block {blk.block_id}: negative ref_cnt {blk.ref_cnt}"
            assert (blk.ref_cnt == 0) == (blk.block_id in qs), (
                f"block {blk.block_id}: ref_cnt {blk.ref_cnt} but in free queue={blk.block_id in qs}")
            if blk.block_hash is not None:
                assert self.cached_block_hash_to_block.get(blk.block_hash) == blk.block_id, (
                    f"block {blk.block_id} carries hash {blk.block_hash} the map does not point at it")
                assert len(blk.token_ids) == self.block_size, f"block {blk.block_id}: cached but not full"
                assert hash((blk.parent_hash, blk.token_ids)) == blk.block_hash, f"block {blk.block_id}: wrong hash"
                in_use += blk.ref_cnt > 0
        for h, b in self.cached_block_hash_to_block.items():
            assert self.blocks[b].block_hash == h, f"stale hash entry {h} -> block {b} (block reused)"
        assert in_use == self._num_cached_in_use, f"cached blocks in use {self._num_cached_in_use} != {in_use}"
        if holders is not None:
            counts = [0] * self.num_blocks
            for held in holders:
                for b in held:
                    counts[b] += 1
            bad = [(b.block_id, b.ref_cnt, counts[b.block_id]) for b in self.blocks if b.ref_cnt != counts[b.block_id]]
            assert not bad, "ref_cnt != holders for (block, ref_cnt, holders): " + str(bad[:8])

    def state(self) -> tuple:
        """Everything that defines the cache, for 'nothing changed' checks in tests."""
        return (tuple((b.ref_cnt, b.block_hash, b.token_ids) for b in self.blocks), tuple(self.free_block_queue),
                tuple(sorted(self.cached_block_hash_to_block.items())))
