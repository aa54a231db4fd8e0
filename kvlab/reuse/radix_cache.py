"""RadixAttention's logical layer: a radix tree (前缀树) of cached token prefixes on the paged pool.

PagedAttention (``kvlab.memory``) decides *where* KV lives; this tree decides *which* cached KV
a new request can reuse. Every cached token sequence is a path from the root; an edge (a
:class:`TreeNode`) holds a run of token ids and the KV blocks that hold their keys and values.
A new request walks the tree with its prompt (longest prefix match, 最长前缀匹配), reuses the
KV of the matched prefix and prefills only the rest.

Mirrors SGLang ``python/sglang/srt/mem_cache/radix_cache.py`` (0.4.6.post5 and 0.5.23, the versions
``bench/bench_peers.py`` runs beside this tree) and mini-sglang ``python/minisgl/kvcache/radix_cache.py``
(formerly ``radix_manager.py``): ``match_prefix``, ``insert``, ``evict(num_tokens)``,
``inc_lock_ref`` / ``dec_lock_ref`` up the path, ``evictable_size`` / ``protected_size``, a node
split on a partial match, children keyed by the first token (first page), a root that is never
evicted, only unlocked leaves evicted. Where kvlab differs: blocks are reference counted (the
tree holds one reference per block; running block tables hold their own, see
``kvlab.reuse.cache_manager``), time is a logical clock, and a split refreshes only the part
of the node the request used (SGLang's split also marks the lower remainder as just used; here
it keeps its own age, so LRU sees that nobody used it).

The request cycle that uses this tree (match, lock, allocate with eviction, insert, free the
duplicates and the tail, unlock) is written once, in :class:`kvlab.reuse.cache_manager.CacheManager`.

With ``page_size > 1`` a node's key length is a multiple of ``page_size``, children are keyed by
their first page (a tuple), a match is cut down to whole pages, a node holds one block per page
and ``insert`` caches whole pages only (``len(kv) == len(tokens) // page_size``). With
``page_size == 1`` a block is one token slot.

Costs: ``match_prefix`` and ``insert`` on an n-token sequence do O(n) token comparisons, as
list-slice equality (C loops), plus O(depth) Python steps; ``evict`` pops a lazily maintained
heap (no tree walk per call).

Not handled here: the K/V tensors (the tree only hands out block ids), per-request extra keys
(LoRA, images), thread safety.

The whole tree is in this one file, read top to bottom as SGLang's ``radix_cache.py`` is: its
plain data (``RadixKey``, the tokens checked once; ``TreeNode``; the match, insert and evict
results), the eviction order (one priority function per policy: SGLang's ``evict_policy.py``),
then the class in sections: helpers, sizes, split, match, insert (walk down, split where the walk
ends inside a node, hand back duplicates, hang the rest as one new leaf: SGLang's ``insert`` /
``_insert_helper``), lock, eviction (a lazily maintained heap of unlocked leaves ordered by the
policy: stale entries are skipped when popped), integrity, pictures. It was three modules; one
file keeps a request's walk through the tree in one place (``scripts/trace_request.py``). It is
longer than 800 lines for that reason: one class whole, with its key type (``RadixKey.extended``
checks only the tokens a request added) and the invariants its tests call after every step.

Example (page_size 1, one slot per token):
    >>> from kvlab.memory.block_pool import BlockAllocator
    >>> a = BlockAllocator(num_blocks=16, block_size=1)
    >>> tree = RadixCache(a)
    >>> tree.insert([1, 2, 3, 4, 5], a.allocate(5)).prefix_len
    0
    >>> m = tree.match_prefix([1, 2, 3, 9])
    >>> (m.prefix_len, m.kv)
    (3, [0, 1, 2])
    >>> print(tree.pretty())
    root
    └── [1 2 3] kv=[0-2]
        └── [4 5] kv=[3-4]
    >>> tree.check_integrity()
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Callable, Iterable, Sequence

from ..memory.block_pool import BlockAllocator, DoubleFree, HeldBlocks, KVCacheError, UnknownBlock
from ..memory.block_table import BlockTable
from ..memory.events import EventLog
from ..memory.ids import as_ids, check_int
from .radix_snapshot import NodeView, RadixSnapshot
from .stats import HitStats

__all__ = ["RadixCache", "RadixKey", "TreeNode", "MatchResult", "InsertResult", "EvictResult", "RadixStats",
           "common_prefix_len", "EvictionPolicy", "EVICTION_POLICIES", "get_eviction_policy"]


# --------------------------------------------------------------------------- the key, the node and the results (plain data)
class RadixKey(list):
    """Token ids checked once (kvlab's id rule), which the tree takes without checking again
    (SGLang 0.5's ``RadixKey``). ``RadixKey(tokens)`` validates (TypeError / ValueError naming
    the bad element) and copies: it is a list of ints, never the caller's list (read it, do not
    change it). ``prefix(n)``, ``extended(tokens)`` (which checks only the tokens past this key's)
    and ``plus(new_tokens)`` (this key followed by ``new_tokens``, only those checked: a prompt's
    key plus the answer) are keys too; a plain slice is a plain list.

    Example:
        >>> k = RadixKey([1, 2, 3])
        >>> len(k), k.prefix(2), k.extended([1, 2, 3, 4]), k.extended([1, 9]), k.plus([4, 5])
        (3, RadixKey([1, 2]), RadixKey([1, 2, 3, 4]), None, RadixKey([1, 2, 3, 4, 5]))
    """

    __slots__ = ()

    def __init__(self, tokens: Iterable[int] = (), what: str = "tokens") -> None:
        super().__init__(as_ids(tokens, what))

    @property
    def token_ids(self) -> list[int]:
        """The ids (this key itself: SGLang's ``RadixKey.token_ids``)."""
        return self

    def _checked(self, ids: list[int]) -> "RadixKey":
        k = list.__new__(RadixKey)  # no __init__: ``ids`` are checked already
        list.extend(k, ids)
        return k

    def prefix(self, n: int) -> "RadixKey":
        """The first ``n`` tokens, as a key."""
        return self._checked(self[:n])

    def extended(self, tokens: Iterable[int]) -> "RadixKey | None":
        """``tokens`` as a new key when they start with this key's tokens: the known head is
        compared, not checked again, and only the rest goes through the id rule (an error names
        the element by its position in the whole list); None when ``tokens`` are shorter or
        differ at a known position.

        Example: ``RadixKey([1, 2]).extended([1, 2, 3])`` -> ``RadixKey([1, 2, 3])``;
        ``.extended([1, 9])`` -> None; ``.extended([1, 2, 3.5])`` raises TypeError naming ``tokens[2]``."""
        n = len(self)
        values = tokens if type(tokens) is list else as_ids(tokens)
        head = values[:n]
        if len(head) < n or head != self:
            return None
        if list(map(type, head)).count(int) != n:  # equal to ints yet not ints: True, 1.0 raise; numpy ints pass
            as_ids(head)
        k = self._checked(self)
        if len(values) > n:
            list.extend(k, as_ids(values[n:], start=n))
        return k

    def plus(self, new_tokens: Iterable[int]) -> "RadixKey":
        """This key followed by ``new_tokens`` (only those are checked: TypeError / ValueError
        naming the bad element by its position in the whole key)."""
        k = self._checked(self)
        list.extend(k, as_ids(new_tokens, start=len(self)))
        return k

    def __repr__(self) -> str:
        return f"RadixKey({list.__repr__(self) if len(self) <= 8 else list.__repr__(self[:6])[:-1] + ', ...]'})"


class TreeNode:
    """One edge of the radix tree: a run of tokens (``key``) and the blocks of their KV (``value``).

    ``children`` is keyed by the first token of the child's key (its first page, as a tuple,
    when ``page_size > 1``). ``lock_ref`` counts the running requests whose matched path goes
    through this node (locked nodes are never evicted). ``last_access_time`` is the logical
    clock of the last match or insert that used it; ``hit_count`` the number of matches through
    it. ``parent is None`` for the root and for evicted (detached) nodes.
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

    def path_kv(self) -> "HeldBlocks":
        """The blocks of every node from the root down to this one (the tree's reference on each:
        :class:`HeldBlocks`, which a block table adopts without checking them again).

        Example: after ``insert([1, 2, 3], [4, 5, 6])`` and a match that split it at 2, the path of
        the node [3] is [4, 5, 6]."""
        parts = []
        n = self
        while n.parent is not None:
            parts.append(n.value)
            n = n.parent
        kv = HeldBlocks()
        for v in reversed(parts):
            kv += v
        return kv

    def __repr__(self) -> str:
        k = self.key if len(self.key) <= 8 else self.key[:6] + ["...", self.key[-1]]
        return (f"TreeNode(id={self.id}, key={k}, len={len(self.key)}, lock_ref={self.lock_ref}, "
                f"children={len(self.children)}, last_access_time={self.last_access_time})")


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
    caller's duplicate blocks handed back to the allocator (none with ``share=True``: the caller
    keeps them); ``last_node`` ends the sequence; ``duplicates``: the caller's blocks for tokens
    that were already cached in other blocks (computed twice)."""

    prefix_len: int
    kv: HeldBlocks
    freed: list[int]
    last_node: TreeNode
    duplicates: list[int] = ()  # type: ignore[assignment]


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
class RadixStats(HitStats):
    """The radix tree's counters: lookups (:class:`HitStats`), inserts, splits, evictions."""

    num_inserts: int = 0
    inserted_tokens: int = 0
    duplicate_tokens: int = 0
    num_splits: int = 0
    evicted_tokens: int = 0
    evicted_nodes: int = 0


def common_prefix_len(a: list, b: list, start: int = 0) -> int:
    """Length of the common prefix of ``a`` and ``b[start:]``: O(n) comparisons, 32 at a time.

    Example: ``common_prefix_len([1, 2, 3], [9, 1, 2, 7], start=1) -> 2``.
    """
    n = min(len(a), len(b) - start)
    i = 0
    while i + 32 <= n and a[i:i + 32] == b[start + i:start + i + 32]:
        i += 32
    while i < n and a[i] == b[start + i]:
        i += 1
    return i


# --------------------------------------------------------------------------- eviction order: one priority function per policy
@dataclass(frozen=True)
class EvictionPolicy:
    """Which unlocked leaf goes first: the one with the smallest ``priority(node)``."""

    name: str
    priority: Callable[[object], object]
    description: str


EVICTION_POLICIES: dict[str, EvictionPolicy] = {
    "lru": EvictionPolicy("lru", lambda n: (n.last_access_time, n.id),
                          "least recently used leaf first (SGLang's default)"),
    "fewest_tokens": EvictionPolicy("fewest_tokens", lambda n: (len(n.key), n.last_access_time, n.id),
                                    "shortest leaf first (frees the fewest tokens per victim; ties: LRU)"),
    "lfu": EvictionPolicy("lfu", lambda n: (n.hit_count, n.last_access_time, n.id),
                          "least frequently matched leaf first (ties: LRU)"),
}


def get_eviction_policy(name: str) -> EvictionPolicy:
    """The policy called ``name`` (ValueError listing the choices otherwise)."""
    if name not in EVICTION_POLICIES:
        raise ValueError(f"unknown eviction_policy {name!r}; choose one of {sorted(EVICTION_POLICIES)}")
    return EVICTION_POLICIES[name]


# --------------------------------------------------------------------------- the tree


class RadixCache:
    """A radix tree over token ids whose nodes own KV blocks of ``allocator``.

    ``allocator.block_size`` must equal ``page_size`` (one block = one page; with
    ``page_size=1`` one block is one token slot). Events go to ``allocator.log``.
    ``check_kv``: the public ``insert`` also verifies that each new block is in use and not
    already in the tree (a set of the tree's blocks).

    Example (page_size 2: matches are cut to whole pages):
        >>> from kvlab.memory.block_pool import BlockAllocator
        >>> a = BlockAllocator(8, block_size=2)
        >>> tree = RadixCache(a, page_size=2)
        >>> kv = a.allocate(3, owner="R1")               # 6 tokens, 3 pages
        >>> tree.insert([1, 2, 3, 4, 5, 6], kv).prefix_len
        0
        >>> m = tree.match_prefix([1, 2, 3, 9, 9])       # 3 tokens match, cut to 1 page
        >>> (m.prefix_len, m.kv)
        (2, [0])
        >>> tree.evictable_size(), tree.protected_size()
        (6, 0)
        >>> tree.inc_lock_ref(m.last_node)
        -2
        >>> tree.evict(100).num_tokens                  # the locked page survives
        4
        >>> tree.dec_lock_ref(m.last_node)
        2
        >>> tree.check_integrity()
    """

    def __init__(self, allocator: BlockAllocator, page_size: int = 1, eviction_policy: str = "lru",
                 check_kv: bool = True) -> None:
        page_size = check_int("page_size", page_size, 1)
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
        self.num_nodes = 0  # non-root nodes (read it; the tree keeps it)
        self.check_kv = check_kv
        # the tree's blocks as a set, for the public ``insert``'s ownership check: built on its first
        # use (the cache manager's cycle never needs it, so it costs that cycle nothing), kept after
        self._tree_blocks: set[int] | None = None
        self._lock_targets: dict[int, int] = {}  # node id -> locks taken on exactly that node
        self._heap: list = []
        self.policy = get_eviction_policy(eviction_policy)

    # ------------------------------------------------------------------ small helpers
    def _child_key(self, key: list, pos: int = 0):
        return key[pos] if self.page_size == 1 else tuple(key[pos:pos + self.page_size])

    def _tick(self) -> int:
        self._clock += 1
        return self._clock

    def iter_nodes(self) -> Iterable[TreeNode]:
        """Every non-root node, depth first (children in insertion order). Read them; change the
        tree through its methods."""
        stack = list(reversed(self.root.children.values()))
        while stack:
            n = stack.pop()
            yield n
            stack.extend(reversed(n.children.values()))

    def _check_node(self, node: TreeNode, what: str) -> None:
        self._path_up(node, what)

    def _path_up(self, node: TreeNode, what: str) -> list[TreeNode]:
        """``node`` and its ancestors below the root, bottom up (empty for the root); TypeError for
        a non-node, KVCacheError for a node that is not in this tree (evicted or from another cache)."""
        if type(node) is not TreeNode and not isinstance(node, TreeNode):
            raise TypeError(f"{what}: expected a TreeNode, got {node!r}")
        path = []
        n = node
        while n.parent is not None:
            path.append(n)
            n = n.parent
        if n is not self.root:
            raise KVCacheError(f"{what}: node {node.id} is not in this tree (evicted or from another cache)")
        return path

    # ------------------------------------------------------------------ sizes
    def evictable_size(self) -> int:
        """Tokens in unlocked nodes (each node counted once, shared or not)."""
        return self._evictable_size

    def protected_size(self) -> int:
        """Tokens in locked nodes (on the path of some running request)."""
        return self._protected_size

    def total_size(self) -> int:
        return self._evictable_size + self._protected_size

    # ------------------------------------------------------------------ split
    def _split(self, child: TreeNode, m: int) -> TreeNode:
        """Cut ``child`` after its first ``m`` tokens; returns the new parent holding them.

        The new node inherits the lock count, access time and hit count (a locked path stays
        locked). The lower part keeps its age (see the module docstring).
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
        self.num_nodes += 1
        self.stats.num_splits += 1
        if old_prio is not None and self.policy.priority(child) != old_prio:
            self._push(child)
        self.log.add(("split", None, tuple(new.value), (child.id, new.id, m, parent.id)))
        return new

    # ------------------------------------------------------------------ match
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
            m = common_prefix_len(ck, key[:limit], pos)
            if ps > 1:
                m -= m % ps
            return node, pos, (child if m else None), m
        return node, pos, None, 0

    def match_prefix(self, tokens: RadixKey | Sequence[int], rid: str | None = None, *,
                     limit: int | None = None, record_stats: bool = True) -> MatchResult:
        """The longest cached prefix of ``tokens`` (cut to whole pages), at most ``limit`` tokens
        (default: all of them). ``tokens``: a :class:`RadixKey` (checked once already, taken as it
        is) or any token sequence (checked here).

        Splits a node when the match ends inside it (so ``last_node`` ends exactly at the
        prefix), refreshes the access time and hit count of every node on the path, and counts
        hits and misses in ``stats``. Does not lock: call ``inc_lock_ref(last_node)``.

        Example: cache holds [1, 2, 3]; ``match_prefix([1, 2, 7])`` -> prefix_len 2 and the
        node [1, 2, 3] is split into [1, 2] -> [3].
        """
        key = tokens if type(tokens) is RadixKey else as_ids(tokens)
        if limit is None:
            limit = len(key)
        else:
            limit = min(limit if type(limit) is int and limit >= 0 else check_int("limit", limit, 0), len(key))
        return self._match(key, limit, rid, record_stats)

    def _match(self, key: list, limit: int, rid: str | None, record_stats: bool) -> MatchResult:
        """The match itself, on a checked key: split, refresh, count, record."""
        node, pos, child, m = self._walk(key, limit)
        if child is not None:
            node, pos = self._split(child, m), pos + m
        t = self._tick()
        n = node
        while n is not self.root:
            n.last_access_time = t
            n.hit_count += 1
            n = n.parent
        kv = node.path_kv()
        if node is not self.root and not node.children and node.lock_ref == 0:
            self._push(node)  # its priority changed while it is an evictable leaf
        if record_stats:
            s = self.stats
            s.num_matches += 1
            s.hit_tokens += pos
            s.missed_tokens += len(key) - pos
        self.log.add(("match", rid, (), (pos, len(key), node.id)))  # kv: see the node's path
        return MatchResult(pos, kv, node)

    def init_load_back(self, m: MatchResult, key: list, limit: int, rid: str | None = None) -> MatchResult:
        """The match a request adopts, once the cache manager has made room for it: here ``m``
        itself, since every page this tree matches is on the device. The one point where tiers
        plug into the cycle: :class:`~kvlab.reuse.hiradix_cache.HiRadixCache` loads the host and
        disk pages of its match back into fresh device blocks here (SGLang's ``init_load_back``)."""
        return m

    def peek_prefix_len(self, tokens: RadixKey | Sequence[int]) -> int:
        """Length of the cached prefix, changing nothing (no split, no LRU refresh, no stats, no event)."""
        key = tokens if type(tokens) is RadixKey else as_ids(tokens)
        _node, pos, _child, m = self._walk(key, len(key))
        return pos + m

    # ------------------------------------------------------------------ insert
    def insert(self, tokens: RadixKey | Sequence[int], kv: BlockTable | Sequence[int], rid: str | None = None, *,
               share: bool = False) -> InsertResult:
        """Cache ``tokens`` whose KV is in blocks ``kv``; returns how much was already cached.

        ``kv`` covers all of ``tokens`` (one block per token when page_size is 1, one per full
        page otherwise: ``len(kv) == len(tokens) // page_size``; a trailing partial page is not
        cached). Blocks passed for tokens that were already cached, and that differ from the
        tree's, are duplicates; use ``result.kv`` from now on.

        ``share=False`` (SGLang's ``insert``): the tree takes over the caller's reference on the
        blocks of the new suffix, and hands the duplicates back to the allocator (``freed``).
        ``share=True`` (a running block table keeps its blocks, see ``CacheManager``): the tree
        takes a reference of its own on the new blocks and leaves the duplicates to the caller.

        Raises (changing nothing): TypeError for a non-int token or block id, ValueError for a
        kv of the wrong length, KVCacheError for an unknown block id and (with ``check_kv``,
        the default) for a new block that is free or already owned by the tree.

        The request cycle's call (``CacheManager.cache_req``) passes what carries its checks: a
        :class:`RadixKey` of whole pages and the sequence's :class:`BlockTable` (whose blocks the
        block manager keeps valid and in use): then the table's first ``len(tokens) // page_size``
        blocks are cached without checking them again.
        """
        ps = self.page_size
        if type(tokens) is RadixKey and type(kv) is BlockTable:
            key, nb = tokens, len(tokens) // ps
            if len(key) % ps or len(kv.block_ids) < nb:
                raise ValueError(f"insert: {len(key)} token(s) are not whole pages of {ps} held by the "
                                 f"{len(kv.block_ids)} block(s) of {kv.seq_id}'s table")
            ids = kv.block_ids  # _insert only reads it (the leaf gets a slice): no copy when all of it is cached
            return self._insert(key, ids if len(ids) == nb else ids[:nb], rid, share)
        key = as_ids(tokens)
        kv = as_ids(kv.block_ids if type(kv) is BlockTable else kv, "kv")
        if len(kv) != len(key) // ps:
            raise ValueError(f"kv has {len(kv)} block id(s) but {len(key)} token(s) with page_size {ps} "
                             f"need {len(key) // ps}")
        key = key[:len(kv) * ps] if ps > 1 else key
        node, pos, child, m = self._walk(key, len(key))
        end = pos + m
        tree_kv = node.path_kv()
        if child is not None:
            tree_kv += child.value[:m // ps]
        nb = end // ps
        dups = [b for b, t in zip(kv[:nb], tree_kv) if b != t] if kv[:nb] != tree_kv else []
        self._validate_insert(kv[nb:], dups, share)
        return self._insert(key, kv, rid, share, (node, pos, child, m))

    def _validate_insert(self, new_blocks: list[int], dups: list[int], share: bool) -> None:
        if self.check_kv and self._tree_blocks is None:
            self._tree_blocks = set(self.tree_block_ids())
        nblocks, rc, tree_blocks = self.allocator.num_blocks, self.allocator.ref_count, self._tree_blocks
        for b in new_blocks + dups:
            if b >= nblocks:
                raise UnknownBlock(f"insert: unknown block id {b} (valid ids are 0..{nblocks - 1})")
        if len(set(new_blocks)) != len(new_blocks):
            raise KVCacheError(f"insert: a block id appears twice in kv's new part {new_blocks}")
        for b in new_blocks:
            if rc[b] == 0:
                raise KVCacheError(f"insert: block {b} is free; allocate it before inserting it")
        if tree_blocks is not None and not tree_blocks.isdisjoint(new_blocks):
            b = next(b for b in new_blocks if b in tree_blocks)
            raise KVCacheError(f"insert: block {b} is already owned by the tree (it would be kept twice)")
        if dups and not share:
            counts: dict[int, int] = {}
            for b in dups:
                counts[b] = counts.get(b, 0) + 1
            for b, c in counts.items():
                if tree_blocks is not None and b in tree_blocks:
                    raise KVCacheError(f"insert: duplicate block {b} passed for cached tokens is owned by the "
                                       "tree at another position; freeing it would corrupt the cache")
                if rc[b] < c:
                    raise DoubleFree(f"insert: duplicate block {b} is listed {c} time(s) but has ref_count {rc[b]}")
            if not set(dups).isdisjoint(new_blocks):
                raise KVCacheError("insert: a block is passed both as a duplicate and as new KV")

    def _insert(self, key: list, kv: list[int], rid: str | None, share: bool, walk: tuple | None = None) -> InsertResult:
        """The insert itself, on a checked ``key`` of whole pages and ``kv`` one valid block per
        page. ``walk``: the result of ``_walk(key)`` when the caller has it already."""
        ps = self.page_size
        node, pos, child, m = walk if walk is not None else self._walk(key, len(key))
        end = pos + m
        if child is not None:
            node = self._split(child, m)
        tree_kv = node.path_kv()
        nb = end // ps
        freed: list[int] = []
        d: list[int] = []
        new_blocks = kv[nb:]
        canonical = tree_kv  # the result's blocks, held by the tree: equal to kv unless some are duplicates
        canonical += new_blocks
        if canonical != kv:  # (compared whole: no copy of kv's cached part)
            d = [b for b, t in zip(kv, canonical) if b != t]
            if not share:
                self.allocator.free_blocks(d, rid, record=False)  # the insert event lists them as freed
                freed = d
        t = self._tick()
        n = node
        while n is not self.root:
            n.last_access_time = t
            n = n.parent
        if end < len(key):
            if share:
                self.allocator.touch(new_blocks, rid, record=False)  # the insert event says it
            leaf = TreeNode(self._next_id, key[end:], new_blocks, node, t)
            self._next_id += 1
            node.children[self._child_key(leaf.key)] = leaf  # node's heap entry, if any, goes stale
            self.num_nodes += 1
            self._evictable_size += len(leaf.key)  # a new leaf is unlocked
            if self._tree_blocks is not None:
                self._tree_blocks.update(new_blocks)
            self._push(leaf)
            node = leaf
        elif node is not self.root and not node.children and node.lock_ref == 0:
            self._push(node)  # access time changed
        s = self.stats
        s.num_inserts += 1
        s.inserted_tokens += len(key) - end
        s.duplicate_tokens += len(d) * ps
        self.log.add(("insert", rid, tuple(new_blocks), (end, len(key), node.id, tuple(freed))))
        return InsertResult(end, canonical, freed, node, d)

    # ------------------------------------------------------------------ lock
    def inc_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Lock ``node`` and every ancestor up to the root; returns the change of evictable_size."""
        delta = 0
        for n in self._path_up(node, "inc_lock_ref"):
            if n.lock_ref == 0:
                delta -= len(n.key)
            n.lock_ref += 1
        self._evictable_size += delta
        self._protected_size -= delta
        if node is not self.root:
            self._lock_targets[node.id] = self._lock_targets.get(node.id, 0) + 1
        self.log.add(("lock", rid, (), (node.id, delta)))
        return delta

    def dec_lock_ref(self, node: TreeNode, rid: str | None = None) -> int:
        """Undo one ``inc_lock_ref(node)``; returns the change of evictable_size.

        Raises KVCacheError (changing nothing) when ``node`` holds no lock of its own
        (unlocking more than was locked; SGLang once let the count go negative).
        """
        path = self._path_up(node, "dec_lock_ref")
        if node is self.root:
            self.log.add(("unlock", rid, (), (0, 0)))
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
        for n in path:
            n.lock_ref -= 1
            if n.lock_ref == 0:
                delta += len(n.key)
                if not n.children:
                    self._push(n)
        self._evictable_size += delta
        self._protected_size -= delta
        self.log.add(("unlock", rid, (), (node.id, delta)))
        return delta

    # ------------------------------------------------------------------ eviction
    def set_eviction_policy(self, name: str) -> None:
        """Switch the policy (rebuilds the eviction heap)."""
        self.policy = get_eviction_policy(name)
        self._rebuild_heap()

    def _push(self, node: TreeNode) -> None:
        """Record an evictable leaf in the heap (stale entries are skipped when popped)."""
        heapq.heappush(self._heap, (self.policy.priority(node), node.id, node))
        if len(self._heap) > 2 * self.num_nodes + 64:
            self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        prio = self.policy.priority
        self._heap = [(prio(n), n.id, n) for n in self.iter_nodes() if not n.children and n.lock_ref == 0]
        heapq.heapify(self._heap)

    def evict(self, num_tokens: int, rid: str | None = None) -> EvictResult:
        """Free at least ``num_tokens`` tokens from unlocked leaves, in policy order.

        A parent whose last child goes becomes a leaf and may go next. When less is evictable,
        frees what it can and says so (``result.satisfied`` is False); never raises for that.
        The blocks go back to the allocator in one step.
        """
        num_tokens = check_int("num_tokens", num_tokens, 0)
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
            self.num_nodes -= 1
            if parent is not root and not parent.children and parent.lock_ref == 0:
                heapq.heappush(heap, (prio(parent), parent.id, parent))
        if blocks:
            if self._tree_blocks is not None:
                self._tree_blocks.difference_update(blocks)
            self.allocator.free_blocks(blocks, rid, record=False)  # the tree's own references; the evict event says it
            s = self.stats
            s.evicted_tokens += freed_tokens
            s.evicted_nodes += len(node_ids)
        self.log.add(("evict", rid, tuple(blocks), (num_tokens, freed_tokens, tuple(node_ids), self.policy.name)))
        return EvictResult(num_tokens, freed_tokens, blocks, node_ids)

    # ------------------------------------------------------------------ integrity
    def tree_block_ids(self) -> list[int]:
        """Every block the tree holds, depth first."""
        return [b for n in self.iter_nodes() for b in n.value]

    def _checked_nodes(self) -> Iterable[TreeNode]:
        """Every non-root node, parents first, each yielded after the checks every radix tree must
        pass there: a sound root; the parent pointer; a non-empty key of whole pages, filed under its
        first token (page); ``lock_ref`` equal to the node's own locks plus its children's."""
        ps = self.page_size
        assert self.root.parent is None and not self.root.key and self.root.lock_ref == 1, "broken root"
        stack = [self.root]
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
            assert len(node.key) % ps == 0, f"node {node.id}: {len(node.key)} tokens is not whole pages of {ps}"
            own = self._lock_targets.get(node.id, 0)
            assert node.lock_ref == own + child_locks, (
                f"node {node.id}: lock_ref {node.lock_ref} != own locks {own} + children's {child_locks}")
            yield node

    def check_integrity(self, holders: Iterable[Sequence[int]] = (), locks: Iterable[TreeNode] | None = None) -> None:
        """Raise AssertionError unless the tree is consistent.

        Checks: no empty non-root node; keys page-aligned with one block per page; children
        keyed by their first token/page and pointing back to their parent; every block an int
        in exactly one node; evictable and protected sizes add up; each node's lock_ref equals
        its own locks plus its children's; every evictable leaf is in the eviction heap. Then
        every block's ref count must equal tree + ``holders`` exactly (``holders``: the running
        block tables; none by default), so a block that nobody holds is caught. ``locks``: the
        nodes the running sequences lock, one entry per ``inc_lock_ref`` (the cache manager's):
        they must be exactly the locks the tree holds.
        """
        ps = self.page_size
        seen: set[int] = set()
        evictable = protected = count = 0
        live_ids: set[int] = set()
        heap_ok = {(n.id, p) for p, _, n in self._heap if n.parent is not None}
        for node in self._checked_nodes():
            count += 1
            live_ids.add(node.id)
            assert len(node.value) == len(node.key) // ps, (
                f"node {node.id}: {len(node.value)} block(s) for {len(node.key)} token(s), page_size {ps}")
            for b in node.value:
                assert type(b) is int and 0 <= b < self.allocator.num_blocks, f"node {node.id}: block id {b!r} is not a block"
                assert b not in seen, f"block {b} is held by two nodes (or twice by node {node.id})"
                seen.add(b)
            if node.lock_ref == 0:
                evictable += len(node.key)
                if not node.children:
                    assert (node.id, self.policy.priority(node)) in heap_ok, f"evictable leaf {node.id} missing from the heap"
            else:
                protected += len(node.key)
        assert self._tree_blocks is None or seen == self._tree_blocks, "the tree's block set is out of date"
        assert count == self.num_nodes, f"num_nodes {self.num_nodes} != {count}"
        assert evictable == self._evictable_size, f"evictable_size {self._evictable_size} != {evictable}"
        assert protected == self._protected_size, f"protected_size {self._protected_size} != {protected}"
        assert set(self._lock_targets) <= live_ids, "a lock is held on a node that is not in the tree"
        self._check_locks(locks)
        self.allocator.check_integrity([n.value for n in self.iter_nodes()] + [list(h) for h in holders])

    def _check_locks(self, locks: Iterable[TreeNode] | None) -> None:
        """The tree's own locks, node by node, equal ``locks`` (when given)."""
        if locks is None:
            return
        want: dict[int, int] = {}
        for node in locks:
            want[node.id] = want.get(node.id, 0) + 1
        assert want == self._lock_targets, "tree locks != the running sequences' locks"

    # ------------------------------------------------------------------ for pictures
    def snapshot(self) -> RadixSnapshot:
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
