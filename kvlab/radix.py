"""RadixAttention's logical layer: a radix tree (前缀树) of cached token prefixes on the paged pool.

PagedAttention (``kvlab.paged``) decides *where* KV lives; this tree decides *which* cached
KV a new request can reuse. Every cached token sequence is a path from the root; an edge
(a :class:`TreeNode`) holds a run of token ids and the KV blocks that hold their keys and
values. A new request walks the tree with its prompt (longest prefix match, 最长前缀匹配),
reuses the KV of the matched prefix and prefills only the rest.

Public API (names as in SGLang's ``radix_cache.py`` so a student can open it afterwards)::

    cache = RadixCache(allocator, page_size=1, eviction_policy="lru", check_kv=True)  # block_size == page_size
    m  = cache.match_prefix(tokens, rid=None)     -> MatchResult(prefix_len, kv, last_node)
    m  = cache.match_for_prefill(tokens, rid=None)  # same, but leaves >= 1 token to compute
    d  = cache.inc_lock_ref(node, rid=None)       -> int  (change of evictable_size, <= 0)
    d  = cache.dec_lock_ref(node, rid=None)       -> int  (change of evictable_size, >= 0)
    r  = cache.insert(tokens, kv, rid=None)       -> InsertResult(prefix_len, kv, freed, last_node)
    e  = cache.evict(num_tokens)                  -> EvictResult(requested, num_tokens, block_ids, node_ids)
    cache.evictable_size(), cache.protected_size(), cache.total_size()   # tokens
    cache.stats                                   -> RadixStats (hit_tokens, missed_tokens, hit_rate, ...)
    cache.check_integrity(holders=None)           # AssertionError when broken
    cache.snapshot() -> RadixSnapshot; cache.pretty(detokenize=None) -> str
    cache.peek_prefix_len(tokens) -> int          # read-only: no split, no LRU refresh, no stats
    cache.peek_prefix(tokens) -> (int, list[int]) # read-only, with the blocks
    serve_request(cache, prompt, output=(), rid=None) -> ServeRecord   # the whole request cycle
    four_request_example(tokenize=None, detokenize=None) -> list[RequestRecord]  # the notes' example
    multi_turn_example(turns=None, tokenize=None) -> list[RequestRecord]
    EVICTION_POLICIES: "lru", "fewest_tokens", "lfu";  cache.set_eviction_policy(name)
    cache.node_blocks() -> list[list[int]];  cache.reset();  char_tokenize / char_detokenize
    kvlab.schedule.order_by_shared_prefix(requests, cache=None, policy="dfs-weight")  # cache-aware order
    kvlab.prefix_cache.PrefixCache                # vLLM's block-hash prefix cache, for comparison

A fully cached prompt: ``match_for_prefill`` caps the match at ``len(tokens) - 1`` (then cut to
whole pages), because the caller must compute at least the last prompt token to get the
logits that sample the first output token. ``serve_request`` and the engine use it;
``match_prefix`` itself never caps (lookups, scheduling, tests).

Ownership protocol (who holds which reference on a block; SGLang's, on a ref-counting pool):
    * the tree holds exactly one allocator reference on every block of every node;
    * ``match_prefix`` returns the tree's blocks *without* adding references: the caller
      protects them by ``inc_lock_ref(m.last_node)`` (locked nodes are never evicted) and
      drops the lock with ``dec_lock_ref`` when done;
    * the caller allocates blocks for the uncached suffix itself (``allocator.allocate``);
      they are its own until ``insert(tokens, kv)`` (``kv`` covers *all* of ``tokens``:
      the matched blocks followed by the new ones). ``insert`` takes over the caller's
      reference on the blocks of the new suffix, and hands back to the allocator any
      block the caller passes for tokens that were already cached by someone else
      (duplicate KV: two requests with one new prefix in one step). The caller must then
      use ``InsertResult.kv``, the canonical blocks, and never the ones in ``freed``;
    * so ``allocator.check_integrity(holders)`` holds with holders = every node's blocks +
      each running request's own not-yet-inserted blocks; ``cache.check_integrity(holders=
      [those request blocks])`` runs exactly that check.

With ``page_size > 1`` a node's key length is a multiple of ``page_size``, children are keyed by
their first page (a tuple), a match is cut down to whole pages, ``kv`` holds one block per page
and ``insert`` caches whole pages only (``len(kv) == len(tokens) // page_size``; the caller frees
the block of a trailing partial page). With ``page_size == 1`` a block is one token slot.

Costs: ``match_prefix`` and ``insert`` on an n-token sequence do O(n) token comparisons, as
list-slice equality (C loops), plus O(depth) Python steps; children are found by a dict
lookup on the first token. ``evict`` pops a lazily maintained heap (no tree walk per call).
Time is a logical clock (one tick per match or insert), so runs are deterministic.

Not handled here: the K/V tensors (the tree only hands out block ids; ``kvlab.kvstore`` and
the engine hold the data), host-memory tiers (SGLang's HiCache), per-request extra keys
(LoRA, images), and thread safety.

Example (page_size 1, one slot per token):
    >>> from kvlab.paged import BlockAllocator
    >>> cache = RadixCache(BlockAllocator(num_blocks=16, block_size=1))
    >>> r = serve_request(cache, [1, 2, 3, 4], output=[5])
    >>> (r.matched_len, r.prefill_len)
    (0, 4)
    >>> r = serve_request(cache, [1, 2, 3, 9])
    >>> (r.matched_len, r.prefill_len)
    (3, 1)
    >>> print(cache.pretty())
    root
    └── [1 2 3] kv=[0-2]
        ├── [4 5] kv=[3-4]
        └── [9] kv=[5]
    >>> cache.check_integrity()
"""
from __future__ import annotations

import heapq
from array import array
from operator import itemgetter
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from .events import Event, EventLog
from .paged import BlockAllocator, DoubleFree, KVCacheError

__all__ = [
    "TreeNode",
    "MatchResult",
    "InsertResult",
    "EvictResult",
    "HitStats",
    "RadixStats",
    "EvictionPolicy",
    "EVICTION_POLICIES",
    "RadixCache",
    "NodeView",
    "RadixSnapshot",
    "ServeRecord",
    "serve_request",
    "Segment",
    "RequestRecord",
    "FOUR_REQUEST_TEXTS",
    "four_request_example",
    "multi_turn_example",
    "char_tokenize",
    "char_detokenize",
]


# ------------------------------------------------------------------------------ nodes
class TreeNode:
    """One edge of the radix tree: a run of tokens (``key``) and the blocks of their KV (``value``).

    ``children`` is keyed by the first token of the child's key (its first page, as a tuple,
    when ``page_size > 1``). ``lock_ref`` counts the running requests whose matched path
    goes through this node (locked nodes are never evicted). ``last_access_time`` is the
    logical clock of the last match or insert that touched it; ``hit_count`` the number of
    matches through it. ``parent is None`` for the root and for evicted (detached) nodes.
    """

    __slots__ = ("id", "key", "value", "children", "parent", "lock_ref", "last_access_time", "hit_count")

    def __init__(self, node_id: int, key: list, value: list[int], parent: "TreeNode | None", time: int) -> None:
        self.id = node_id
        self.key = key
        self.value = value
        self.children: dict = {}
        self.parent = parent
        self.lock_ref = 0
        self.last_access_time = time
        self.hit_count = 0

    def __len__(self) -> int:
        return len(self.key)

    @property
    def is_leaf(self) -> bool:
        return not self.children

    def __repr__(self) -> str:
        k = self.key if len(self.key) <= 8 else self.key[:6] + ["...", self.key[-1]]
        return (f"TreeNode(id={self.id}, key={k}, len={len(self.key)}, lock_ref={self.lock_ref}, "
                f"children={len(self.children)}, last_access_time={self.last_access_time})")


# ---------------------------------------------------------------------------- results
@dataclass(frozen=True, slots=True)
class MatchResult:
    """Longest cached prefix: ``prefix_len`` tokens, their blocks ``kv``, the node where it ends.

    ``last_node`` is the root for an empty match. Lock it (``inc_lock_ref``) before using ``kv``.
    """

    prefix_len: int
    kv: list[int]
    last_node: TreeNode


@dataclass(frozen=True, slots=True)
class InsertResult:
    """What ``insert`` did: ``prefix_len`` tokens were already cached; ``kv`` is the canonical
    block list for the inserted (page-aligned) tokens (use it from now on); ``freed`` are the
    caller's duplicate blocks handed back to the allocator; ``last_node`` ends the sequence."""

    prefix_len: int
    kv: list[int]
    freed: list[int]
    last_node: TreeNode


@dataclass(frozen=True, slots=True)
class EvictResult:
    """``num_tokens`` freed out of ``requested`` (less when too little was evictable: no error)."""

    requested: int
    num_tokens: int
    block_ids: list[int]
    node_ids: list[int]

    @property
    def satisfied(self) -> bool:
        return self.num_tokens >= self.requested

    @property
    def short_by(self) -> int:
        return max(0, self.requested - self.num_tokens)


@dataclass(slots=True)
class HitStats:
    """Lookups counted by ``match_prefix`` (calls with ``record_stats=True``), shared by the
    radix tree and the block-hash cache.

    hit_tokens: prompt tokens found in the cache (their prefill is skipped);
    missed_tokens: prompt tokens not found (they must be prefilled).
    """

    num_matches: int = 0
    hit_tokens: int = 0
    missed_tokens: int = 0

    @property
    def prefill_tokens_saved(self) -> int:
        return self.hit_tokens

    @property
    def hit_rate(self) -> float:
        total = self.hit_tokens + self.missed_tokens
        return self.hit_tokens / total if total else 0.0


@dataclass(slots=True)
class RadixStats(HitStats):
    """The radix tree's counters: lookups (:class:`HitStats`), inserts, splits, evictions."""

    num_inserts: int = 0
    inserted_tokens: int = 0
    duplicate_tokens: int = 0
    num_splits: int = 0
    evicted_tokens: int = 0
    evicted_nodes: int = 0


# --------------------------------------------------------------------------- policies
@dataclass(frozen=True)
class EvictionPolicy:
    """Which unlocked leaf goes first: the one with the smallest ``priority(node)``."""

    name: str
    priority: Callable[[TreeNode], object]
    description: str


EVICTION_POLICIES: dict[str, EvictionPolicy] = {
    "lru": EvictionPolicy("lru", lambda n: (n.last_access_time, n.id),
                          "least recently used leaf first (SGLang's default)"),
    "fewest_tokens": EvictionPolicy("fewest_tokens", lambda n: (len(n.key), n.last_access_time, n.id),
                                    "shortest leaf first (frees the fewest tokens per victim; ties: LRU)"),
    "lfu": EvictionPolicy("lfu", lambda n: (n.hit_count, n.last_access_time, n.id),
                          "least frequently matched leaf first (ties: LRU)"),
}


# ------------------------------------------------------------------------ validation
def _as_tokens(tokens: Sequence[int], what: str = "tokens") -> list:
    """A list copy of ``tokens``; raises TypeError naming the first token that is not a
    non-negative int. (One C-level pass through ``array('Q')``; the slow search only on error.)"""
    if isinstance(tokens, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of int token ids, got a {type(tokens).__name__} {tokens!r:.40}")
    key = tokens if type(tokens) is list else list(tokens)
    try:
        array("Q", key)
    except (TypeError, OverflowError):
        for i, t in enumerate(key):
            if isinstance(t, bool) or not hasattr(t, "__index__"):
                raise TypeError(f"{what}[{i}] = {t!r} is not an int ({type(t).__name__})") from None
            if t < 0:
                raise ValueError(f"{what}[{i}] = {t!r} is negative; ids must be >= 0") from None
        raise TypeError(f"{what} holds a value that is not a non-negative int") from None
    return key


def _common_prefix_len(a: list, b: list, start: int) -> int:
    """Length of the common prefix of ``a`` and ``b[start:]``: O(n) comparisons, 32 at a time."""
    n = min(len(a), len(b) - start)
    i = 0
    while i + 32 <= n and a[i:i + 32] == b[start + i:start + i + 32]:
        i += 32
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


# ------------------------------------------------------------------------------ cache
class RadixCache:
    """A radix tree over token ids whose nodes own KV blocks of ``allocator``.

    ``allocator.block_size`` must equal ``page_size`` (one block = one page; with
    ``page_size=1`` one block is one token slot). Events go to ``allocator.log``.

    Example (page_size 2: matches are cut to whole pages):
        >>> from kvlab.paged import BlockAllocator
        >>> a = BlockAllocator(8, block_size=2)
        >>> cache = RadixCache(a, page_size=2)
        >>> kv = a.allocate(3, owner="R1")               # 6 tokens, 3 pages
        >>> cache.insert([1, 2, 3, 4, 5, 6], kv).prefix_len
        0
        >>> m = cache.match_prefix([1, 2, 3, 9, 9])       # 3 tokens match, cut to 1 page
        >>> (m.prefix_len, m.kv)
        (2, [0])
        >>> cache.evictable_size(), cache.protected_size()
        (6, 0)
        >>> cache.inc_lock_ref(m.last_node)
        -2
        >>> cache.evict(100).num_tokens                  # the locked page survives
        4
        >>> cache.dec_lock_ref(m.last_node)
        2
        >>> cache.check_integrity()
    """

    def __init__(self, allocator: BlockAllocator, page_size: int = 1, eviction_policy: str = "lru",
                 check_kv: bool = True) -> None:
        if isinstance(page_size, bool) or not isinstance(page_size, int) or page_size < 1:
            raise ValueError(f"page_size must be an int >= 1, got {page_size!r}")
        if allocator.block_size != page_size:
            raise ValueError(f"allocator.block_size {allocator.block_size} != page_size {page_size}: "
                             "one block must hold exactly one page")
        self.allocator = allocator
        self.page_size = page_size
        self.log: EventLog = allocator.log
        self.stats = RadixStats()
        self._clock = 0
        self._next_id = 1
        self.root = TreeNode(0, [], [], None, 0)
        self.root.lock_ref = 1  # the root is never evicted (as in SGLang)
        self._evictable_size = 0
        self._protected_size = 0
        self._num_nodes = 0  # non-root
        # check_kv: insert verifies that each new block is in use and not already in the tree
        # (a set of the tree's blocks; about a third of insert's time at page_size 1).
        self.check_kv = check_kv
        self._tree_blocks: set[int] | None = set() if check_kv else None
        self._lock_targets: dict[int, int] = {}  # node id -> locks taken on exactly that node
        self._heap: list = []
        self.policy = self._get_policy(eviction_policy)

    # ------------------------------------------------------------------ small helpers
    @staticmethod
    def _get_policy(name: str) -> EvictionPolicy:
        if name not in EVICTION_POLICIES:
            raise ValueError(f"unknown eviction_policy {name!r}; choose one of {sorted(EVICTION_POLICIES)}")
        return EVICTION_POLICIES[name]

    def set_eviction_policy(self, name: str) -> None:
        """Switch the policy (rebuilds the eviction heap)."""
        self.policy = self._get_policy(name)
        self._rebuild_heap()

    def _child_key(self, key: list, pos: int = 0):
        return key[pos] if self.page_size == 1 else tuple(key[pos:pos + self.page_size])

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def _push(self, node: TreeNode) -> None:
        """Record an evictable leaf in the heap (stale entries are skipped when popped)."""
        heapq.heappush(self._heap, (self.policy.priority(node), node.id, node))
        if len(self._heap) > 2 * self._num_nodes + 64:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        prio = self.policy.priority
        self._heap = [(prio(n), n.id, n) for n in self._iter_nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(self._heap)

    def _iter_nodes(self) -> Iterable[TreeNode]:
        """Every non-root node, depth first (children in insertion order)."""
        stack = list(reversed(self.root.children.values()))
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children.values()))

    def _check_node(self, node: TreeNode, what: str) -> None:
        if not isinstance(node, TreeNode):
            raise TypeError(f"{what}: expected a TreeNode, got {node!r}")
        if node is not self.root:
            n = node
            while n.parent is not None:
                n = n.parent
            if n is not self.root:
                raise KVCacheError(f"{what}: node {node.id} is not in this tree (evicted or from another cache)")

    # --------------------------------------------------------------------------- sizes
    def evictable_size(self) -> int:
        """Tokens in unlocked nodes (each node counted once, shared or not)."""
        return self._evictable_size

    def protected_size(self) -> int:
        """Tokens in locked nodes (on the path of some running request)."""
        return self._protected_size

    def total_size(self) -> int:
        return self._evictable_size + self._protected_size

    @property
    def num_nodes(self) -> int:
        return self._num_nodes

    # --------------------------------------------------------------------------- split
    def _split(self, child: TreeNode, m: int) -> TreeNode:
        """Cut ``child`` after its first ``m`` tokens; returns the new parent holding them.

        The new node inherits the lock count, access time and hit count (a locked path
        stays locked; SGLang once lost the lock here).
        """
        ps = self.page_size
        parent = child.parent
        new = TreeNode(self._next_id, child.key[:m], child.value[:m // ps], parent, child.last_access_time)
        self._next_id += 1
        new.lock_ref = child.lock_ref
        new.hit_count = child.hit_count
        old_prio = self.policy.priority(child) if not child.children and child.lock_ref == 0 else None
        child.key = child.key[m:]
        child.value = child.value[m // ps:]
        child.parent = new
        new.children[self._child_key(child.key)] = child
        parent.children[self._child_key(new.key)] = new
        self._num_nodes += 1
        self.stats.num_splits += 1
        if old_prio is not None and self.policy.priority(child) != old_prio:
            self._push(child)
        self.log.emit(Event("split", None, tuple(new.value),
                            {"node": child.id, "new_node": new.id, "at": m, "parent": parent.id}))
        return new

    # --------------------------------------------------------------------------- match
    def _walk(self, key: list, limit: int) -> tuple[TreeNode, int, TreeNode | None, int]:
        """Read-only descent: (last fully matched node, its end, partly matched child, tokens of it)."""
        node, pos, ps = self.root, 0, self.page_size
        while pos < limit:
            if ps == 1:
                child = node.children.get(key[pos])
            else:
                if pos + ps > limit:
                    break
                child = node.children.get(tuple(key[pos:pos + ps]))
            if child is None:
                break
            ck = child.key
            n = len(ck)
            if pos + n <= limit and key[pos:pos + n] == ck:
                node, pos = child, pos + n
                continue
            m = _common_prefix_len(ck, key[:limit], pos)
            if ps > 1:
                m -= m % ps
            return node, pos, (child if m else None), m
        return node, pos, None, 0

    def match_prefix(self, tokens: Sequence[int], rid: str | None = None, *,
                     record_stats: bool = True) -> MatchResult:
        """The longest cached prefix of ``tokens`` (cut to whole pages).

        Splits a node when the match ends inside it (so ``last_node`` ends exactly at the
        prefix), refreshes the access time and hit count of every node on the path, and
        counts hits and misses in ``stats``. Does not lock: call ``inc_lock_ref(last_node)``.

        Example: cache holds [1, 2, 3]; ``match_prefix([1, 2, 7])`` -> prefix_len 2 and the
        node [1, 2, 3] is split into [1, 2] -> [3].
        """
        key = _as_tokens(tokens)
        return self._match(key, len(key), rid, record_stats)

    def _match(self, key: list, limit: int, rid: str | None, record_stats: bool) -> MatchResult:
        node, pos, child, m = self._walk(key, limit)
        if child is not None:
            node, pos = self._split(child, m), pos + m
        t = self._tick()
        kv: list[int] = []
        n = node
        path = []
        while n is not self.root:
            n.last_access_time = t
            n.hit_count += 1
            path.append(n.value)
            n = n.parent
        for v in reversed(path):
            kv += v
        if node is not self.root and not node.children and node.lock_ref == 0:
            self._push(node)  # its priority changed while it is an evictable leaf
        if record_stats:
            s = self.stats
            s.num_matches += 1
            s.hit_tokens += pos
            s.missed_tokens += len(key) - pos
        self.log.emit(Event("match", rid, tuple(kv), {"prefix_len": pos, "num_tokens": len(key), "node": node.id}))
        return MatchResult(pos, kv, node)

    def match_for_prefill(self, tokens: Sequence[int], rid: str | None = None) -> MatchResult:
        """``match_prefix`` capped at ``len(tokens) - 1`` tokens: a fully cached prompt still
        leaves its last token to compute, because the caller needs that token's logits to
        sample the first output token (SGLang and vLLM cap the same way). Example: cache
        holds [1, 2, 3]; ``match_for_prefill([1, 2, 3])`` -> prefix_len 2."""
        key = _as_tokens(tokens)
        return self._match(key, max(0, len(key) - 1), rid, True)

    def peek_prefix_len(self, tokens: Sequence[int]) -> int:
        """Length of the cached prefix, changing nothing (no split, no LRU refresh, no stats, no event)."""
        key = _as_tokens(tokens)
        _node, pos, _child, m = self._walk(key, len(key))
        return pos + m

    def peek_prefix(self, tokens: Sequence[int]) -> tuple[int, list[int]]:
        """``(prefix_len, kv)`` of the cached prefix, changing nothing (see ``peek_prefix_len``)."""
        key = _as_tokens(tokens)
        node, pos, child, m = self._walk(key, len(key))
        parts = []
        n = node
        while n is not self.root:
            parts.append(n.value)
            n = n.parent
        kv = [b for v in reversed(parts) for b in v]
        if child is not None:
            kv += child.value[:m // self.page_size]
        return pos + m, kv

    # ---------------------------------------------------------------------------- lock
    def inc_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Lock ``node`` and every ancestor up to the root; returns the change of evictable_size."""
        self._check_node(node, "inc_lock_ref")
        delta = 0
        n = node
        while n is not self.root:
            if n.lock_ref == 0:
                delta -= len(n.key)
            n.lock_ref += 1
            n = n.parent
        self._evictable_size += delta
        self._protected_size -= delta
        if node is not self.root:
            self._lock_targets[node.id] = self._lock_targets.get(node.id, 0) + 1
        self.log.emit(Event("lock", rid, (), {"node": node.id, "delta": delta}))
        return delta

    def dec_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Undo one ``inc_lock_ref(node)``; returns the change of evictable_size.

        Raises KVCacheError (changing nothing) when ``node`` holds no lock of its own
        (unlocking more than was locked; SGLang once let the count go negative).
        """
        self._check_node(node, "dec_lock_ref")
        if node is self.root:
            self.log.emit(Event("unlock", rid, (), {"node": 0, "delta": 0}))
            return 0
        own = self._lock_targets.get(node.id, 0)
        if own <= 0:
            raise KVCacheError(f"dec_lock_ref: node {node.id} is not locked (lock_ref {node.lock_ref}, "
                               f"no inc_lock_ref on it to undo)")
        if own == 1:
            del self._lock_targets[node.id]
        else:
            self._lock_targets[node.id] = own - 1
        delta = 0
        n = node
        while n is not self.root:
            n.lock_ref -= 1
            if n.lock_ref == 0:
                delta += len(n.key)
                if not n.children:
                    self._push(n)
            n = n.parent
        self._evictable_size += delta
        self._protected_size -= delta
        self.log.emit(Event("unlock", rid, (), {"node": node.id, "delta": delta}))
        return delta

    # -------------------------------------------------------------------------- insert
    def insert(self, tokens: Sequence[int], kv: Sequence[int], rid: str | None = None) -> InsertResult:
        """Cache ``tokens`` whose KV is in blocks ``kv``; returns how much was already cached.

        ``kv`` covers all of ``tokens`` (one block per token when page_size is 1, one per
        full page otherwise: ``len(kv) == len(tokens) // page_size``; a trailing partial page
        is not cached). The tree takes over the caller's reference on the blocks of the
        new suffix. Blocks passed for tokens that were already cached, and that differ from
        the tree's, are freed (handed back) and listed in ``freed``; use ``result.kv``.

        Raises (changing nothing): TypeError for a non-int token or block id, ValueError
        for a kv of the wrong length, KVCacheError for an unknown block id and (with
        ``check_kv``, the default) for a new block that is free or already owned by the tree.
        """
        key = _as_tokens(tokens)
        ps = self.page_size
        kv = _as_tokens(kv, "kv")
        if len(kv) != len(key) // ps:
            raise ValueError(f"kv has {len(kv)} block id(s) but {len(key)} token(s) with page_size {ps} "
                             f"need {len(key) // ps}")
        if ps > 1:
            key = key[:len(kv) * ps]
        node, pos, child, m = self._walk(key, len(key))
        end = pos + m
        # blocks the caller passed for already cached tokens: the tree's own, or duplicates
        cached = []
        n = node
        while n is not self.root:
            cached.append(n.value)
            n = n.parent
        tree_kv: list[int] = []
        for v in reversed(cached):
            tree_kv += v
        if child is not None:
            tree_kv += child.value[:m // ps]
        nb = end // ps
        dups: list[int] = []
        if kv[:nb] != tree_kv:
            dups = [b for b, t in zip(kv[:nb], tree_kv) if b != t]
        new_blocks = kv[nb:]
        # validate everything before changing anything
        nblocks = self.allocator.num_blocks
        rc = self.allocator.ref_count
        tree_blocks = self._tree_blocks
        if new_blocks:
            if max(new_blocks) >= nblocks:
                raise KVCacheError(f"insert: unknown block id {max(new_blocks)} (valid ids are 0..{nblocks - 1})")
        if new_blocks and tree_blocks is not None:
            if not tree_blocks.isdisjoint(new_blocks):
                b = next(b for b in new_blocks if b in tree_blocks)
                raise KVCacheError(f"insert: block {b} is already owned by the tree (it would be kept twice)")
            if len(set(new_blocks)) != len(new_blocks):
                raise KVCacheError(f"insert: a block id appears twice in kv's new part {new_blocks}")
            if 0 in (itemgetter(*new_blocks)(rc) if len(new_blocks) > 1 else (rc[new_blocks[0]],)):
                b = next(b for b in new_blocks if rc[b] == 0)
                raise KVCacheError(f"insert: block {b} is free; allocate it before inserting it")
        if dups:
            counts: dict[int, int] = {}
            for b in dups:
                counts[b] = counts.get(b, 0) + 1
            for b, c in counts.items():
                if b >= nblocks:
                    raise KVCacheError(f"insert: unknown block id {b} (valid ids are 0..{nblocks - 1})")
                if tree_blocks is not None and b in tree_blocks:
                    raise KVCacheError(f"insert: duplicate block {b} passed for cached tokens is owned by the "
                                       "tree at another position; freeing it would corrupt the cache")
                if rc[b] < c:
                    raise DoubleFree(f"insert: duplicate block {b} is listed {c} time(s) but has ref_count {rc[b]}")
            if not set(dups).isdisjoint(new_blocks):
                raise KVCacheError("insert: a block is passed both as a duplicate and as new KV")
        # --- state changes from here on (none of them can fail)
        freed: list[int] = []
        if dups:
            self.allocator.free(dups, seq_id=rid)
            freed = dups
        if child is not None:
            node = self._split(child, m)
        t = self._tick()
        n = node
        while n is not self.root:
            n.last_access_time = t
            n = n.parent
        if end < len(key):
            leaf = TreeNode(self._next_id, key[end:], new_blocks, node, t)
            self._next_id += 1
            node.children[self._child_key(leaf.key)] = leaf  # node's heap entry, if any, goes stale
            self._num_nodes += 1
            self._evictable_size += len(leaf.key)  # a new leaf is unlocked
            if tree_blocks is not None:
                tree_blocks.update(new_blocks)
            self._push(leaf)
            node = leaf
        elif node is not self.root and not node.children and node.lock_ref == 0:
            self._push(node)  # access time changed
        s = self.stats
        s.num_inserts += 1
        s.inserted_tokens += len(key) - end
        s.duplicate_tokens += len(dups) * ps
        self.log.emit(Event("insert", rid, tuple(new_blocks),
                            {"prefix_len": end, "num_tokens": len(key), "node": node.id, "freed": freed}))
        return InsertResult(end, tree_kv + new_blocks, freed, node)

    # --------------------------------------------------------------------------- evict
    def evict(self, num_tokens: int, rid: str | None = None) -> EvictResult:
        """Free at least ``num_tokens`` tokens from unlocked leaves, in policy order.

        A parent whose last child goes becomes a leaf and may go next. When less is
        evictable, frees what it can and says so (``result.satisfied`` is False); never
        raises for that. The blocks go back to the allocator (one ``free`` call).
        """
        if isinstance(num_tokens, bool) or not isinstance(num_tokens, int):
            raise TypeError(f"num_tokens must be an int, got {num_tokens!r}")
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        heap, prio, root = self._heap, self.policy.priority, self.root
        freed_tokens = 0
        blocks: list[int] = []
        node_ids: list[int] = []
        while freed_tokens < num_tokens and heap:
            p, _, node = heapq.heappop(heap)
            if node.parent is None or node.children or node.lock_ref or prio(node) != p:
                continue  # stale entry
            parent = node.parent
            del parent.children[self._child_key(node.key)]
            node.parent = None
            ln = len(node.key)
            freed_tokens += ln
            blocks += node.value
            node_ids.append(node.id)
            self._evictable_size -= ln
            self._num_nodes -= 1
            if parent is not root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (prio(parent), parent.id, parent))
        if blocks:
            if self._tree_blocks is not None:
                self._tree_blocks.difference_update(blocks)
            self.allocator.free(blocks, seq_id=rid)
            s = self.stats
            s.evicted_tokens += freed_tokens
            s.evicted_nodes += len(node_ids)
        self.log.emit(Event("evict", rid, tuple(blocks),
                            {"requested": num_tokens, "num_tokens": freed_tokens, "nodes": node_ids,
                             "policy": self.policy.name}))
        return EvictResult(num_tokens, freed_tokens, blocks, node_ids)

    def reset(self) -> None:
        """Evict everything (raises if a node is still locked)."""
        if self._protected_size:
            raise KVCacheError(f"reset: {self._protected_size} token(s) are still locked")
        self.evict(self._evictable_size)

    # ----------------------------------------------------------------------- integrity
    def node_blocks(self) -> list[list[int]]:
        """Every node's block list (holders for ``allocator.check_integrity``)."""
        return [n.value for n in self._iter_nodes()]

    def check_integrity(self, holders: Iterable[Sequence[int]] | None = None) -> None:
        """Raise AssertionError unless the tree is consistent.

        Checks: no empty non-root node; keys page-aligned with one block per page;
        children keyed by their first token/page and pointing back to their parent;
        every block in exactly one node and used by the allocator; evictable and protected
        sizes add up; each node's lock_ref equals its own locks plus its children's;
        every evictable leaf is in the eviction heap. With ``holders`` (the running
        requests' own, not yet inserted blocks), also that every block's ref count equals
        tree + holders exactly (``allocator.check_integrity``).
        """
        ps, rc = self.page_size, self.allocator.ref_count
        assert self.root.parent is None and not self.root.key and self.root.lock_ref == 1, "broken root"
        seen: set[int] = set()
        evictable = protected = count = 0
        live_ids: set[int] = set()
        stack = [self.root]
        heap_ok = {(n.id, p) for p, _, n in self._heap if n.parent is not None}
        while stack:
            node = stack.pop()
            child_locks = 0
            for k, c in node.children.items():
                assert c.parent is node, f"node {c.id}: parent pointer is not node {node.id}"
                assert c.key, f"node {c.id} is an empty non-root node"
                assert k == self._child_key(c.key), f"node {c.id} filed under {k!r}, first token/page {self._child_key(c.key)!r}"
                child_locks += c.lock_ref
                stack.append(c)
            if node is self.root:
                continue
            count += 1
            live_ids.add(node.id)
            assert len(node.key) % ps == 0, f"node {node.id}: {len(node.key)} tokens is not whole pages of {ps}"
            assert len(node.value) == len(node.key) // ps, (
                f"node {node.id}: {len(node.value)} block(s) for {len(node.key)} token(s), page_size {ps}")
            for b in node.value:
                assert 0 <= b < self.allocator.num_blocks, f"node {node.id}: block id {b} out of range"
                assert b not in seen, f"block {b} is held by two nodes (or twice by node {node.id})"
                seen.add(b)
                assert rc[b] >= 1, f"node {node.id} holds block {b}, which the allocator has as free"
            own = self._lock_targets.get(node.id, 0)
            assert node.lock_ref == own + child_locks, (
                f"node {node.id}: lock_ref {node.lock_ref} != own locks {own} + children's {child_locks}")
            if node.lock_ref == 0:
                evictable += len(node.key)
                if not node.children:
                    assert (node.id, self.policy.priority(node)) in heap_ok, f"evictable leaf {node.id} missing from the heap"
            else:
                protected += len(node.key)
        assert self._tree_blocks is None or seen == self._tree_blocks, "the tree's block set is out of date"
        assert count == self._num_nodes, f"num_nodes {self._num_nodes} != {count}"
        assert evictable == self._evictable_size, f"evictable_size {self._evictable_size} != {evictable}"
        assert protected == self._protected_size, f"protected_size {self._protected_size} != {protected}"
        assert set(self._lock_targets) <= live_ids, "a lock is held on a node that is not in the tree"
        if holders is not None:
            self.allocator.check_integrity([n.value for n in self._iter_nodes()] + [list(h) for h in holders])
        else:
            self.allocator.check_integrity()

    # --------------------------------------------------------------------- for pictures
    def snapshot(self) -> "RadixSnapshot":
        """The tree as plain data (depth-first order, parents before children)."""
        views: list[NodeView] = []
        stack: list[tuple[TreeNode, int, int, int]] = [(c, 0, 1, 0) for c in reversed(self.root.children.values())]
        while stack:
            n, parent_id, depth, start = stack.pop()
            views.append(NodeView(n.id, parent_id, depth, start, tuple(n.key), tuple(n.value), n.lock_ref,
                                  n.last_access_time, n.hit_count, not n.children, n.lock_ref == 0))
            for c in reversed(n.children.values()):
                stack.append((c, n.id, depth + 1, start + len(n.key)))
        return RadixSnapshot(self.page_size, tuple(views), self._evictable_size, self._protected_size,
                             self.policy.name)

    def pretty(self, detokenize: Callable[[Sequence[int]], str] | None = None, max_tokens: int = 12) -> str:
        """The tree as text, one node a line (tokens, blocks, lock count when locked)."""
        return self.snapshot().pretty(detokenize, max_tokens)


# -------------------------------------------------------------------- snapshot types
@dataclass(frozen=True)
class NodeView:
    """One node as plain data. ``start``: position of its first token in the sequences below it."""

    id: int
    parent_id: int
    depth: int
    start: int
    tokens: tuple[int, ...]
    kv: tuple[int, ...]
    lock_ref: int
    last_access_time: int
    hit_count: int
    is_leaf: bool
    evictable: bool


@dataclass(frozen=True)
class RadixSnapshot:
    """The tree at one moment (root id 0 is implicit). ``children(0)`` are the root's children."""

    page_size: int
    nodes: tuple[NodeView, ...]
    evictable_size: int
    protected_size: int
    policy: str = "lru"

    def children(self, node_id: int) -> list[NodeView]:
        return [n for n in self.nodes if n.parent_id == node_id]

    def sequences(self) -> list[tuple[int, ...]]:
        """The token sequence of every root-to-leaf path."""
        by_id = {n.id: n for n in self.nodes}
        out = []
        for n in self.nodes:
            if n.is_leaf:
                parts, m = [], n
                while m is not None:
                    parts.append(m.tokens)
                    m = by_id.get(m.parent_id)
                out.append(tuple(t for p in reversed(parts) for t in p))
        return out

    def pretty(self, detokenize: Callable[[Sequence[int]], str] | None = None, max_tokens: int = 12) -> str:
        def show(seq: tuple[int, ...]) -> str:
            if detokenize is not None:
                return repr(detokenize(list(seq)))
            s = " ".join(map(str, seq[:max_tokens]))
            return "[" + s + (f" ... +{len(seq) - max_tokens}" if len(seq) > max_tokens else "") + "]"

        def show_kv(ids: tuple[int, ...]) -> str:  # runs of consecutive ids as a-b
            runs: list[list[int]] = []
            for b in ids:
                if runs and b == runs[-1][1] + 1:
                    runs[-1][1] = b
                else:
                    runs.append([b, b])
            return "[" + " ".join(f"{x}" if x == y else f"{x}-{y}" for x, y in runs) + "]"

        lines = ["root"]

        def walk(parent_id: int, prefix: str) -> None:
            kids = self.children(parent_id)
            for i, n in enumerate(kids):
                last = i == len(kids) - 1
                lock = f" lock={n.lock_ref}" if n.lock_ref else ""
                lines.append(f"{prefix}{'└── ' if last else '├── '}{show(n.tokens)} kv={show_kv(n.kv)}{lock}")
                walk(n.id, prefix + ("    " if last else "│   "))

        walk(0, "")
        return "\n".join(lines)


# --------------------------------------------------------------------- request cycle
@dataclass(frozen=True)
class ServeRecord:
    """One request through the cache: matched, prefilled (missed) and cached afterwards."""

    rid: str | None
    prompt_len: int
    output_len: int
    matched_len: int
    prefill_len: int
    matched_kv: tuple[int, ...]
    new_kv: tuple[int, ...]
    evicted_tokens: int
    insert: InsertResult


def serve_request(cache: RadixCache, prompt: Sequence[int], output: Sequence[int] = (),
                  rid: str | None = None) -> ServeRecord:
    """Run one request's whole cycle: match (leaving >= 1 token to compute), lock, allocate
    the uncached suffix (evicting when the pool is short), insert prompt + output, unlock.

    The prefill of the missed suffix and the decode of ``output`` are not computed here
    (no model): only the memory bookkeeping happens. Raises OutOfBlocks, with everything
    released, when even eviction cannot make room.
    """
    ps, alloc = cache.page_size, cache.allocator
    prompt = _as_tokens(prompt, "prompt")
    seq = prompt + _as_tokens(output, "output")
    m = cache.match_for_prefill(prompt, rid)
    cache.inc_lock_ref(m.last_node, rid)
    try:
        need = -(-len(seq) // ps) - len(m.kv)
        evicted = 0
        if need > alloc.num_free_blocks:
            evicted = cache.evict((need - alloc.num_free_blocks) * ps, rid).num_tokens
        new = alloc.allocate(need, owner=rid)  # raises OutOfBlocks, changing nothing
    except BaseException:
        cache.dec_lock_ref(m.last_node, rid)
        raise
    kv = m.kv + new
    full = len(seq) // ps
    tail = kv[full:]  # the block of a trailing partial page is not cached
    res = cache.insert(seq, kv[:full], rid)
    if tail:
        alloc.free(tail, seq_id=rid)
    cache.dec_lock_ref(m.last_node, rid)
    return ServeRecord(rid, len(prompt), len(seq) - len(prompt), m.prefix_len, len(prompt) - m.prefix_len,
                       tuple(m.kv), tuple(new), evicted, res)


# --------------------------------------------------------------- the notes' example
def char_tokenize(text: str) -> list[int]:
    """One token per character: ``ord(c)``. Example: ``char_tokenize('ab') -> [97, 98]``."""
    return [ord(c) for c in text]


def char_detokenize(tokens: Sequence[int]) -> str:
    """Inverse of :func:`char_tokenize`. Example: ``char_detokenize([97, 98]) -> 'ab'``."""
    return "".join(map(chr, tokens))


# Segment texts of the notes' example. "C" is R1's turn: its question and, once R1 has
# answered, its answer (R4, the follow-up of R1, carries both in its history).
FOUR_REQUEST_TEXTS: dict[str, str] = {
    "A": "你是一个电商客服助手，请礼貌、简洁地回答用户的问题。",  # system prompt
    "B": "示例：问：怎么修改收货地址？答：在订单详情页点击“修改地址”。",  # few-shot examples
    "R1": "怎么申请退款",
    "R1 answer": "在订单详情页点击“申请退款”，选择原因后提交即可。",
    "R2": "订单什么时候发货",
    "R2 answer": "一般在付款后48小时内发货。",
    "R3": "发票怎么开",
    "R3 answer": "在订单详情页点击“申请发票”，填写抬头即可。",
    "R4": "人工呢",
    "R4 answer": "正在为您转接人工客服，请稍候。",
}


@dataclass(frozen=True)
class Segment:
    """A labelled piece of a prompt, ``tokens[start:end]``, found in the cache (hit) or not (miss)."""

    label: str
    text: str
    start: int
    end: int
    hit: bool

    @property
    def num_tokens(self) -> int:
        return self.end - self.start


@dataclass(frozen=True)
class RequestRecord:
    """One request of an example, after it ran (the visualizer colours hits green, misses blue).

    ``segments`` cut the prompt at its labelled parts and at ``matched_len``;
    ``tree`` is the cache after the request (prompt and answer inserted); ``node_labels``
    maps each node id of that tree to the segment labels it holds ("A", "B", "C", ...).
    """

    name: str
    text: str
    prompt_tokens: tuple[int, ...]
    matched_len: int
    prefill_len: int
    segments: tuple[Segment, ...]
    answer_text: str
    tree: RadixSnapshot
    node_labels: dict[int, str]
    tree_text: str

    @property
    def hit_segments(self) -> list[str]:
        return [s.label for s in self.segments if s.hit]

    @property
    def missed_segments(self) -> list[str]:
        return [s.label for s in self.segments if not s.hit]

    @property
    def missed_len(self) -> int:
        return self.prefill_len


Part = tuple[str, Sequence[str]]  # (label, texts): each text is tokenized on its own


def _run_script(script: list[tuple[str, list[Part], Part | None]], tokenize: Callable[[str], list[int]],
                detokenize: Callable[[Sequence[int]], str] | None, num_blocks: int,
                page_size: int) -> list[RequestRecord]:
    """Run requests given as (name, prompt parts, answer part or None); one record each."""
    cache = RadixCache(BlockAllocator(num_blocks, page_size), page_size=page_size)
    spans: list[tuple[tuple[int, ...], str]] = []  # (a sequence up to a part's end, the part's label)
    records = []
    for name, parts, answer_part in script:
        prompt: list[int] = []
        segs = []
        for label, texts in parts:
            start = len(prompt)
            for t in texts:
                prompt += tokenize(t)
            segs.append((label, "".join(texts), start, len(prompt)))
        answer: list[int] = []
        if answer_part is not None:
            for t in answer_part[1]:
                answer += tokenize(t)
        rec = serve_request(cache, prompt, answer, rid=name)
        mlen = rec.matched_len
        out = []
        for label, text, s, e in segs:
            if s < mlen < e:  # the hit/miss boundary falls inside this part: cut it in two
                hit_text = detokenize(prompt[s:mlen]) if detokenize else ""
                miss_text = detokenize(prompt[mlen:e]) if detokenize else ""
                out += [Segment(label, hit_text, s, mlen, True), Segment(label, miss_text, mlen, e, False)]
            else:
                out.append(Segment(label, text, s, e, e <= mlen))
        full = prompt + answer
        for label, _text, _s, e in segs:
            spans.append((tuple(full[:e]), label))
        if answer:
            spans.append((tuple(full), answer_part[0]))
        snap = cache.snapshot()
        records.append(RequestRecord(name, "".join(seg[1] for seg in segs), tuple(prompt), mlen, rec.prefill_len,
                                     tuple(out), "".join(answer_part[1]) if answer_part else "", snap,
                                     _label_nodes(snap, spans), snap.pretty(detokenize)))
        cache.check_integrity()
    return records


def _label_nodes(snap: RadixSnapshot, spans: list[tuple[tuple[int, ...], str]]) -> dict[int, str]:
    """Name each node by the labels of the parts that end inside it, e.g. "B+C" or "C"."""
    paths: dict[int, tuple[int, ...]] = {}
    for n in snap.nodes:  # parents come first
        paths[n.id] = paths.get(n.parent_id, ()) + n.tokens
    labels: dict[int, str] = {}
    for n in snap.nodes:
        full, end = paths[n.id], n.start + len(n.tokens)
        names: list[str] = []
        for seq, label in spans:
            if n.start < len(seq) <= end and full[:len(seq)] == seq and label not in names:
                names.append(label)
        labels[n.id] = "+".join(names) if names else "?"
    return labels


def four_request_example(tokenize: Callable[[str], list[int]] | None = None,
                         detokenize: Callable[[Sequence[int]], str] | None = None,
                         warm_system_prompt: bool = True, page_size: int = 1,
                         num_blocks: int = 4096) -> list[RequestRecord]:
    """The source notes' four customer-service requests, run on a real RadixCache.

    Step "warm-up" (when ``warm_system_prompt``) caches the system prompt [A] alone, as a
    server that prefills a fixed system prompt at start-up. Then:
      R1 = A + B + "怎么申请退款": hits A, misses B and its question (prefilled); its
           answer is generated and inserted too, so the tree holds A -> [B + C] where
           C = R1's turn (its question and its answer);
      R2 = A + B + "订单什么时候发货": hits A and B (the node [B + C] is split at the end
           of B), misses only its question;
      R3 = A + B + "发票怎么开": likewise, only its own suffix is missed and prefilled;
      R4 = A + B + C + "人工呢" (R1's follow-up, with R1's question and answer as history):
           its longest prefix match covers root -> A -> B -> C in full; only "人工呢" is
           prefilled.
    Every request's answer is inserted after it (SGLang caches finished requests with
    their output), so the final tree is root -> A -> B -> {C -> R4, R2, R3}.
    Without the warm-up, A and B share one node "A+B": compressed edges only split where
    cached sequences diverge, and no request here separates A from B.

    ``tokenize`` defaults to one token per character (:func:`char_tokenize`, with
    :func:`char_detokenize` for the texts); pass the bundled model's tokenizer
    (``str -> list[int]``, and its decoder) to run it on real tokens. Each text is
    tokenized on its own, so part boundaries are token boundaries.

    Example:
        >>> recs = four_request_example()
        >>> [(r.name, r.matched_len, r.prefill_len) for r in recs]
        [('warm-up', 0, 26), ('R1', 26, 37), ('R2', 57, 8), ('R3', 57, 5), ('R4', 88, 3)]
        >>> recs[-1].hit_segments, recs[-1].missed_segments
        (['A', 'B', 'C'], ['R4'])
        >>> sorted(recs[-1].node_labels.values())
        ['A', 'B', 'C', 'R2', 'R3', 'R4']
    """
    if tokenize is None:
        tokenize, detokenize = char_tokenize, detokenize or char_detokenize
    T = FOUR_REQUEST_TEXTS
    A, B = ("A", [T["A"]]), ("B", [T["B"]])
    script: list[tuple[str, list[Part], Part | None]] = []
    if warm_system_prompt:
        script.append(("warm-up", [A], None))
    script += [
        ("R1", [A, B, ("C", [T["R1"]])], ("C", [T["R1 answer"]])),
        ("R2", [A, B, ("R2", [T["R2"]])], ("R2", [T["R2 answer"]])),
        ("R3", [A, B, ("R3", [T["R3"]])], ("R3", [T["R3 answer"]])),
        ("R4", [A, B, ("C", [T["R1"], T["R1 answer"]]), ("R4", [T["R4"]])], ("R4", [T["R4 answer"]])),
    ]
    return _run_script(script, tokenize, detokenize, num_blocks, page_size)


MULTI_TURN_TURNS: list[tuple[str, str]] = [
    ("我的快递三天没更新了。", "抱歉，我帮您查一下物流信息。"),
    ("单号是SF123456。", "查到了，包裹在中转站，预计明天派送。"),
    ("能加急吗？", "已为您提交加急申请。"),
]


def multi_turn_example(turns: Sequence[tuple[str, str]] | None = None,
                       tokenize: Callable[[str], list[int]] | None = None,
                       system: str | None = None, page_size: int = 1,
                       num_blocks: int = 4096) -> list[RequestRecord]:
    """A chat whose turn k prompt is the whole history (system, every earlier question and
    answer) plus question k. Each turn matches all of the previous turn, prompt and answer,
    so history is never prefilled twice: turn k prefills only its own question.

    Example:
        >>> recs = multi_turn_example()
        >>> [(r.matched_len, r.prefill_len) for r in recs]
        [(0, 37), (51, 12), (81, 5)]
    """
    if tokenize is None:
        tokenize, detokenize = char_tokenize, char_detokenize
    else:
        detokenize = None
    turns = list(turns if turns is not None else MULTI_TURN_TURNS)
    system = FOUR_REQUEST_TEXTS["A"] if system is None else system
    script: list[tuple[str, list[Part], Part | None]] = []
    history: list[Part] = [("system", [system])] if system else []
    for i, (q, a) in enumerate(turns, 1):
        parts = history + [(f"Q{i}", [q])]
        script.append((f"turn {i}", parts, (f"A{i}", [a])))
        history = parts + [(f"A{i}", [a])]
    return _run_script(script, tokenize, detokenize, num_blocks, page_size)
