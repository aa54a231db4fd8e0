"""Checkers for lesson 08 (eviction and scheduling): LRU eviction and lock references.

    lru_evict      the nodes LRU eviction removes, in order (unlocked leaves only)
    inc_lock_ref   lock a path of the tree (lock references), returning the evictable change

The expected answers are :meth:`RadixCache.evict` and :meth:`RadixCache.inc_lock_ref` on a
copy of the same tree. Mirrors no vLLM or SGLang file (exercises); the rules are SGLang's
``RadixCache.evict`` / ``inc_lock_ref``.

Example:
    >>> lru_evict(lambda root, num_tokens: [], verbose=False).passed   # evicts nothing
    False
"""
from __future__ import annotations

import copy
import random
from typing import Callable

from ..reuse.cache_manager import CacheManager, serve_request
from ..reuse.radix_cache import RadixCache, TreeNode
from .harness import Checker, CheckResult, Raised, call_in_place, same_outcome

__all__ = ["lru_evict", "inc_lock_ref"]


def _pressure_tree(seed: int) -> tuple[RadixCache, list[TreeNode]]:
    """A small tree with varied access times and some locked paths (returns the tree, locked nodes).

    The requests go through the request cycle (:func:`serve_request` on a :class:`CacheManager`);
    then some prefixes are matched again (LRU order changes) and some paths locked directly on
    the tree, as lesson 08 does by hand."""
    rng = random.Random(seed)
    cm = CacheManager(256, block_size=1)
    cache = cm.tree
    seqs: list[list[int]] = []
    for _ in range(rng.randint(4, 8)):
        base = rng.choice(seqs) if seqs and rng.random() < 0.75 else []
        cut = rng.randint(0, len(base))
        s = base[:cut] + [rng.randrange(4) for _ in range(rng.randint(1, 6))]
        serve_request(cm, s, output=[rng.randrange(4) for _ in range(rng.randint(0, 3))])
        seqs.append(s)
    for s in rng.sample(seqs, k=min(len(seqs), rng.randint(2, 5))):  # touch some again (LRU order changes)
        cache.match_prefix(s[: rng.randint(1, len(s))])
    locked = []
    for s in rng.sample(seqs, k=rng.randint(0, 2)):
        m = cache.match_prefix(s[: rng.randint(1, len(s))])
        cache.inc_lock_ref(m.last_node)
        locked.append(m.last_node)
    cache.check_integrity()
    return cache, locked


def _find(cache: RadixCache, node_id: int) -> TreeNode:
    if node_id == 0:
        return cache.root
    return next(n for n in cache._iter_nodes() if n.id == node_id)


def _tree_state(cache: RadixCache) -> dict:
    return {n.id: (tuple(n.key), n.lock_ref, n.last_access_time, len(n.children)) for n in [cache.root, *cache._iter_nodes()]}


def lru_evict(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(root, num_tokens) -> list of node ids``: the nodes LRU eviction removes, in order.

    Rules (SGLang's, as ``RadixCache.evict`` with policy ``"lru"``): only leaves with
    ``lock_ref == 0`` can go, never the root; the one with the smallest
    ``(last_access_time, id)`` goes first; when a node's last child goes, it becomes a leaf and
    may go next; stop as soon as at least ``num_tokens`` tokens (``len(node.key)`` each) are
    freed, or when nothing is evictable. Do not change the tree. Expected: what
    ``RadixCache.evict(num_tokens)`` removes on a copy of the same tree.
    """
    c = Checker("lru_evict", fn, verbose=verbose)
    for seed in range(8):
        cache, _locked = _pressure_tree(seed)
        total = cache.evictable_size()
        for want in sorted({1, max(1, total // 3), total, total + 5}):
            ref = copy.deepcopy(cache)
            expected = ref.evict(want).node_ids
            label = f"tree {seed} ({cache.num_nodes} nodes, {total} evictable tokens, {cache.protected_size()} locked): evict {want}"
            if c.unusable(label, expected):
                continue
            before = _tree_state(cache)
            got = call_in_place(fn, cache.root, want)
            changed = _tree_state(cache) != before
            if isinstance(got, (list, tuple)):
                got = list(got)
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note="...but it changed the tree" if changed else "")
            if changed:
                break
    return c.done()


def inc_lock_ref(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(node) -> int``: lock ``node`` and every ancestor below the root.

    Each node from ``node`` up to (not including) the root gets ``lock_ref += 1``; return the
    change of the evictable size: minus the tokens of every node that was unlocked
    (``lock_ref == 0``) before. The root (``parent is None``) is never touched. Expected:
    ``RadixCache.inc_lock_ref`` on a copy of the same tree; every node's ``lock_ref`` is compared.
    """
    c = Checker("inc_lock_ref", fn, verbose=verbose)
    for seed in range(8):
        cache, _locked = _pressure_tree(100 + seed)
        rng = random.Random(seed)
        ids = [n.id for n in cache._iter_nodes()]
        for node_id in rng.sample(ids, k=min(3, len(ids))) + ([0] if seed == 0 else []):
            ref, mine = copy.deepcopy(cache), copy.deepcopy(cache)
            delta = ref.inc_lock_ref(_find(ref, node_id))
            expected = {"returned": delta, "lock_ref": {n: s[1] for n, s in _tree_state(ref).items()}}
            label = f"tree {seed} ({cache.num_nodes} nodes), lock node {node_id}" + (" (the root)" if node_id == 0 else "")
            if c.unusable(label, expected):
                continue
            got = call_in_place(fn, _find(mine, node_id))
            if isinstance(got, Raised):
                c.record(label, expected, got)
                continue
            c.record(label, expected, {"returned": got, "lock_ref": {n: s[1] for n, s in _tree_state(mine).items()}})
    return c.done()
