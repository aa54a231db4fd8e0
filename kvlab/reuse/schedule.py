"""Cache-aware scheduling: order waiting requests so that shared prefixes are reused.

A server that admits requests first-come-first-served lets unrelated requests evict each
other's prefixes. SGLang instead orders the waiting queue by the radix tree: requests
with the longest cached prefix first ("lpm", longest prefix match), or a depth-first walk
of the tree that keeps requests of one subtree together, heavier subtrees first
("dfs-weight"). Both are here, with "fcfs" as the baseline.

    order_by_shared_prefix(requests, tree=None, policy="dfs-weight", tokens_of=None) -> list
    shared_prefix_lengths(requests, tree, tokens_of=None) -> list[int]
    SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight")

``requests`` are token lists, or any objects with ``tokens_of(request) -> list[int]``
(default: the object itself, or its ``.tokens`` / ``.prompt`` attribute). With ``tree=None``
the requests are ordered by the prefixes they share *with each other* (a temporary tree of
the queue), which is what matters before anything is cached. Lookups never change the
cache (no split, no LRU refresh, no stats).

Mirrors SGLang ``python/sglang/srt/managers/schedule_policy.py`` (``lpm``, ``dfs-weight``,
``fcfs``); kvlab's version is a pure function of the queue and the tree.

Not handled here: fairness and starvation (SGLang bounds how long a request may wait),
memory admission (see ``kvlab.sim``).

Example:
    >>> from kvlab.reuse.cache_manager import CacheManager, serve_request
    >>> cm = CacheManager(num_blocks=64, block_size=1)
    >>> _ = serve_request(cm, [1, 2, 3, 4, 5])
    >>> tree = cm.tree
    >>> queue = [[9, 9], [1, 2, 7], [1, 2, 3, 4, 8], [9, 9, 1]]
    >>> order_by_shared_prefix(queue, tree, policy="lpm")
    [[1, 2, 3, 4, 8], [1, 2, 7], [9, 9], [9, 9, 1]]
    >>> order_by_shared_prefix(queue, tree)     # dfs-weight: one subtree at a time
    [[1, 2, 3, 4, 8], [1, 2, 7], [9, 9], [9, 9, 1]]
    >>> queue = [[9, 9], [1, 2, 7], [1, 2, 3, 4, 8], [5], [1, 2, 3, 4, 6]]
    >>> order_by_shared_prefix(queue)           # nothing cached: what the queue shares with itself
    [[1, 2, 3, 4, 8], [1, 2, 3, 4, 6], [1, 2, 7], [9, 9], [5]]
"""
from __future__ import annotations

from typing import Any, Callable, Sequence

from ..memory.events import NO_LOG
from .cache_manager import CacheManager, serve_request
from .radix_cache import RadixCache
from .radix_cache import TreeNode

__all__ = ["SCHEDULE_POLICIES", "order_by_shared_prefix", "shared_prefix_lengths"]

SCHEDULE_POLICIES = ("fcfs", "lpm", "dfs-weight")


def _default_tokens_of(r: Any) -> Sequence[int]:
    for attr in ("tokens", "prompt", "prompt_tokens", "token_ids"):
        if hasattr(r, attr):
            return getattr(r, attr)
    return r


def shared_prefix_lengths(requests: Sequence[Any], tree: RadixCache,
                          tokens_of: Callable[[Any], Sequence[int]] | None = None) -> list[int]:
    """The cached prefix length of each request (read-only lookups)."""
    tok = tokens_of or _default_tokens_of
    return [tree.peek_prefix_len(tok(r)) for r in requests]


def _queue_tree(token_lists: list[Sequence[int]]) -> RadixCache:
    """A throw-away tree holding every waiting request (page_size 1)."""
    cm = CacheManager(max(1, sum(len(t) for t in token_lists)), 1, log=NO_LOG)
    for i, t in enumerate(token_lists):
        if t:
            serve_request(cm, t, rid=f"q{i}")
    return cm.tree


def order_by_shared_prefix(requests: Sequence[Any], tree: RadixCache | None = None, policy: str = "dfs-weight",
                           tokens_of: Callable[[Any], Sequence[int]] | None = None) -> list[Any]:
    """``requests`` reordered, longest shared prefix first (stable: ties keep arrival order).

    policy "lpm": by cached prefix length, longest first.
    policy "dfs-weight" (SGLang's): each request hangs at the node where its match ends;
    a node weighs the number of requests in its subtree; a depth-first walk visits heavier
    children first and emits a node's requests after its subtree's, so requests that share
    the most run back to back. "fcfs": arrival order. With ``tree=None`` the tree is built
    from the queue itself.
    """
    if policy not in SCHEDULE_POLICIES:
        raise ValueError(f"unknown policy {policy!r}; choose one of {SCHEDULE_POLICIES}")
    reqs = list(requests)
    if policy == "fcfs" or len(reqs) < 2:
        return reqs
    tok = tokens_of or _default_tokens_of
    token_lists = [list(tok(r)) for r in reqs]
    if tree is None:  # in the queue's own tree every request matches itself in full: use what it shares
        tree = _queue_tree(token_lists)
        lens = [_shared_with_others(tree, t) for t in token_lists]
    else:
        lens = [tree.peek_prefix_len(t) for t in token_lists]
    if policy == "lpm":
        order = sorted(range(len(reqs)), key=lambda i: -lens[i])
        return [reqs[i] for i in order]
    # dfs-weight
    at: dict[int, list[int]] = {}
    for i, t in enumerate(token_lists):
        node = _node_at(tree, t, lens[i])
        at.setdefault(node.id, []).append(i)
    weight: dict[int, int] = {}
    post: list[TreeNode] = []
    todo = [tree.root]
    while todo:  # parents before children; summed in reverse, children before parents
        node = todo.pop()
        post.append(node)
        todo.extend(node.children.values())
    for node in reversed(post):
        weight[node.id] = len(at.get(node.id, ())) + sum(weight[c.id] for c in node.children.values())
    out: list[int] = []
    stack: list[tuple[TreeNode, bool]] = [(tree.root, False)]
    while stack:  # iterative DFS: children (heaviest first), then the node's own requests
        node, done = stack.pop()
        if done:
            out.extend(sorted(at.get(node.id, ()), key=lambda i: -lens[i]))  # deeper matches first
            continue
        stack.append((node, True))
        kids = sorted((c for c in node.children.values() if weight[c.id]), key=lambda c: -weight[c.id])
        stack.extend((c, False) for c in reversed(kids))  # the heaviest (first on ties) is popped first
    return [reqs[i] for i in out]


def _shared_with_others(tree: RadixCache, tokens: Sequence[int]) -> int:
    """In the queue's own tree: how far ``tokens`` runs before its path stops being shared."""
    node, pos = tree.root, 0
    while pos < len(tokens):
        child = node.children.get(tokens[pos])
        if child is None or len(child.key) > len(tokens) - pos:
            break
        if not child.children and pos + len(child.key) == len(tokens):
            break  # its own leaf: not shared with anyone
        node, pos = child, pos + len(child.key)
    return pos


def _node_at(tree: RadixCache, tokens: Sequence[int], length: int) -> TreeNode:
    """The node whose span holds the end of the first ``length`` tokens (root for 0)."""
    node, pos, ps = tree.root, 0, tree.page_size
    while pos < length:
        key = tokens[pos] if ps == 1 else tuple(tokens[pos:pos + ps])
        child = node.children.get(key)
        if child is None:
            break
        node, pos = child, pos + len(child.key)
    return node
