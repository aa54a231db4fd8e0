"""The radix tree's node and the results of its operations (plain data).

Mirrors SGLang's ``TreeNode`` and ``MatchResult`` (``python/sglang/srt/mem_cache/radix_cache.py``,
``base_prefix_cache.py``); kvlab's node keeps a ``hit_count`` for LFU and an ``id`` for pictures.

Example:
    >>> common_prefix_len([1, 2, 3], [9, 1, 2, 7], start=1)
    2
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from ..memory.block_pool import HeldBlocks
from ..memory.ids import as_ids, extend_ids
from .stats import HitStats

__all__ = ["RadixKey", "TreeNode", "MatchResult", "InsertResult", "EvictResult", "RadixStats", "common_prefix_len"]


class RadixKey(list):
    """Token ids checked once (kvlab's id rule), which the tree takes without checking again
    (SGLang 0.5's ``RadixKey``). ``RadixKey(tokens)`` validates (TypeError / ValueError naming
    the bad element) and copies: it is a list of ints, never the caller's list (read it, do not
    change it). ``prefix(n)`` and ``extended(tokens)`` (which checks only the new tokens) are keys
    too; a plain slice is a plain list.

    Example:
        >>> k = RadixKey([1, 2, 3])
        >>> len(k), k.prefix(2), k.extended([1, 2, 3, 4]), k.extended([1, 9])
        (3, RadixKey([1, 2]), RadixKey([1, 2, 3, 4]), None)
    """

    __slots__ = ()

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        super().__init__(as_ids(tokens))

    @property
    def token_ids(self) -> list[int]:
        """The ids (this key itself: SGLang's ``RadixKey.token_ids``)."""
        return self

    def _checked(self, ids: list[int]) -> "RadixKey":
        k = RadixKey()
        list.extend(k, ids)  # ids are checked already
        return k

    def prefix(self, n: int) -> "RadixKey":
        """The first ``n`` tokens, as a key."""
        return self._checked(self[:n])

    def extended(self, tokens: Iterable[int]) -> "RadixKey | None":
        """``tokens`` as a key when they start with this key's tokens (only the rest is checked);
        None when they are shorter or differ at a known position."""
        ids = extend_ids(self, tokens)
        return None if ids is None else self._checked(ids)

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
    kv: list[int]
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
