"""Lesson 08's workload: popular system prompts mixed with one-off documents, and the hit rate
a radix cache of a given size and eviction policy gets on it.

Every request is served through the real request cycle (:func:`kvlab.reuse.serve_request` on a
:class:`kvlab.reuse.CacheManager`, block size 1), which evicts when the pool is short; the
hit rate is the share of prompt tokens found in the tree (``tree.stats.hit_rate``). The
stream is simulated (seeded), the tree real. Not handled here: drawing
(:mod:`kvlab.viz.eviction_view`).

Example:
    >>> reqs = popular_prefix_stream(50, seed=0)
    >>> len(reqs), len(reqs[0][1])
    (50, 5)
    >>> round(served_hit_rate(reqs, pool_size=400, policy="lru"), 3) > round(served_hit_rate(reqs, 80, "lru"), 3)
    True
"""
from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass

from ..reuse.cache_manager import CacheManager, serve_request
from ..reuse.radix_cache import get_eviction_policy

__all__ = ["popular_prefix_stream", "served_hit_rate", "cache_census", "Census", "POLICY_NAMES"]

# What a student reads in a menu, for each policy id of kvlab.reuse.EVICTION_POLICIES, in its order (the
# lesson's tables and the control's legend list the policies in one order).
POLICY_NAMES = {
    "lru": "least recently used (LRU)",
    "fewest_tokens": "fewest tokens first",
    "lfu": "least frequently used (LFU)",
}


def popular_prefix_stream(n: int = 200, seed: int = 0, popular_share: float = 0.6) -> list[tuple[list[int], list[int]]]:
    """(prompt, output) pairs: a share ``popular_share`` start with one of four 30-token system
    prompts (the most popular used 4 times as often as the least) and add a 3-8 token question;
    the rest are one-off documents of 20 to 60 tokens nobody asks about again. Outputs: 5 tokens."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be a non-negative int, got {n!r}")
    if not 0.0 <= popular_share <= 1.0:
        raise ValueError(f"popular_share must be in [0, 1], got {popular_share!r}")
    rng, next_id = random.Random(seed), iter(range(1000, 10**9))

    def fresh(k: int) -> list[int]:
        return [next(next_id) for _ in range(k)]        # new, never repeated token ids

    popular = [fresh(30) for _ in range(4)]
    reqs = []
    for _ in range(n):
        if rng.random() < popular_share:
            prefix = rng.choices(popular, weights=[4, 3, 2, 1])[0]
            reqs.append((prefix + fresh(rng.randint(3, 8)), fresh(5)))
        else:
            reqs.append((fresh(rng.randint(20, 60)), fresh(5)))
    return reqs


def served_hit_rate(requests: list[tuple[list[int], list[int]]], pool_size: int, policy: str = "lru") -> float:
    """The prompt-token hit rate of a radix cache of ``pool_size`` token slots with eviction
    ``policy`` serving ``requests`` one after another (each cached with its output)."""
    _check_pool(requests, pool_size, policy)
    cm = CacheManager(num_blocks=pool_size, block_size=1, eviction_policy=policy)
    for prompt, output in requests:
        serve_request(cm, prompt, output)
    cm.check_integrity()
    return cm.tree.stats.hit_rate


@dataclass(frozen=True)
class Census:
    """What the tree held while serving a stream (see :func:`cache_census`)."""

    hit_rate: float
    shared_requests: int     # requests whose prompt starts like another request's (a popular system prompt)
    found: int               # of those, how many found some of their prompt in the tree
    one_off_slots: float     # mean slots held by one-off prompts (a first token no other request has) at their arrival
    prefixes_held: float     # mean number of shared prefixes in the tree at their arrival


def cache_census(requests: list[tuple[list[int], list[int]]], pool_size: int, policy: str = "lru") -> Census:
    """Serve ``requests`` as :func:`served_hit_rate` does and count, at the arrival of every request
    that shares its first token with another one, what the tree holds: why a policy hits or misses.

    Example: ``cache_census(popular_prefix_stream(200), 120, "fewest_tokens").one_off_slots -> 75.4``
    (slots out of 120 held by documents nobody asks about again).
    """
    _check_pool(requests, pool_size, policy)
    starts = Counter(p[0] for p, _o in requests if p)
    cm = CacheManager(num_blocks=pool_size, block_size=1, eviction_policy=policy)
    shared = found = 0
    one_off, held = [], []
    for prompt, output in requests:
        if prompt and starts[prompt[0]] > 1:
            tops = list(cm.tree.root.children.values())
            one_off.append(sum(_subtree_tokens(n) for n in tops if starts[n.key[0]] == 1))
            held.append(sum(starts[n.key[0]] > 1 for n in tops))
            before = cm.tree.stats.hit_tokens
            serve_request(cm, prompt, output)
            shared, found = shared + 1, found + (cm.tree.stats.hit_tokens > before)
        else:
            serve_request(cm, prompt, output)
    mean = (lambda xs: sum(xs) / len(xs) if xs else 0.0)
    return Census(cm.tree.stats.hit_rate, shared, found, mean(one_off), mean(held))


def _subtree_tokens(node) -> int:
    """Tokens held by ``node`` and every node below it."""
    return len(node.key) + sum(_subtree_tokens(c) for c in node.children.values())


def _check_pool(requests: list[tuple[list[int], list[int]]], pool_size: int, policy: str) -> None:
    """A ValueError naming an unknown policy, or a pool smaller than the longest request."""
    get_eviction_policy(policy)
    longest = max((len(p) + len(o) for p, o in requests), default=0)
    if isinstance(pool_size, bool) or not isinstance(pool_size, int) or pool_size < longest:
        raise ValueError(f"pool_size must be an int of at least {longest} (the longest request), got {pool_size!r}")
