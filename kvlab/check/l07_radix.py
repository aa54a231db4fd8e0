"""Checkers for lesson 07 (RadixAttention): the longest prefix match, and what a radix cache saves.

    match_prefix     longest prefix match (最长前缀匹配) on a small radix tree
    prefill_tokens   tokens each request must prefill with a radix cache

The trees are built, and the expected numbers measured, by serving requests through the real
request cycle (:class:`kvlab.reuse.cache_manager.CacheManager`, :func:`serve_request`).
Mirrors no vLLM or SGLang file (exercises); the tree is SGLang's ``RadixCache``.

Example:
    >>> prefill_tokens(lambda prompts: [len(p) for p in prompts], verbose=False).passed   # no reuse
    False
"""
from __future__ import annotations

import random
from typing import Callable

from ..lessons.four_requests import FOUR_REQUEST_TEXTS as T
from ..lessons.four_requests import char_tokenize
from ..reuse.cache_manager import CacheManager, serve_request
from ..reuse.radix_cache import RadixCache
from .harness import Checker, CheckResult, call_in_place, same_outcome

__all__ = ["match_prefix", "prefill_tokens"]


def _random_tree(rng: random.Random, num_seqs: int, alphabet: int, max_len: int) -> tuple[RadixCache, list[list[int]]]:
    """A radix tree (page_size 1) holding ``num_seqs`` random sequences over a small alphabet,
    each served through the request cycle (:class:`CacheManager`)."""
    cm = CacheManager(num_seqs * max_len + 8, block_size=1)
    seqs = []
    for _ in range(num_seqs):
        base = rng.choice(seqs) if seqs and rng.random() < 0.7 else []
        cut = rng.randint(0, len(base))
        s = base[:cut] + [rng.randrange(alphabet) for _ in range(rng.randint(1, max_len - cut) if cut < max_len else 0)]
        if s:
            serve_request(cm, s)
            seqs.append(s)
    return cm.tree, seqs


def match_prefix(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(root, tokens) -> int``: the longest prefix match (最长前缀匹配) on a radix tree.

    ``root`` is a :class:`kvlab.reuse.radix_cache.TreeNode` (page_size 1): ``node.children`` maps the first
    token of a child's key to the child, ``node.key`` is the list of tokens on the edge into
    the node (empty for the root). Return how many leading tokens of ``tokens`` the tree holds,
    a match may end inside an edge. Do not change the tree. Expected:
    ``RadixCache.peek_prefix_len(tokens)``; the tree must be unchanged afterwards.
    """
    c = Checker("match_prefix", fn, verbose=verbose)
    trees: list[tuple[str, RadixCache, list[list[int]]]] = []
    cm = CacheManager(32, block_size=1)
    for s in ([1, 2, 3, 4, 5], [1, 2, 3, 9], [7, 7]):
        serve_request(cm, s)
    trees.append(("tree [1 2 3]->{[4 5], [9]}, [7 7]", cm.tree, [
        [1, 2, 3, 4, 5], [1, 2, 3, 4], [1, 2], [1, 2, 3, 9, 9], [1, 2, 3, 8], [7, 7, 7], [7], [8], [], [1, 2, 4]]))
    trees.append(("empty tree", CacheManager(4, block_size=1).tree, [[1, 2], []]))
    rng = random.Random(77)
    for seed in range(4):
        cache, seqs = _random_tree(rng, num_seqs=6, alphabet=3, max_len=10)
        queries = []
        for _ in range(6):
            s = rng.choice(seqs)
            cut = rng.randint(0, len(s))
            queries.append(s[:cut] + [rng.randrange(4) for _ in range(rng.randint(0, 4))])
        trees.append((f"random tree {seed} ({cache.num_nodes} nodes)", cache, queries))
    for name, cache, queries in trees:
        for q in queries:
            label = f"{name}: tokens {q}"
            expected = cache.peek_prefix_len(q)
            before = cache.snapshot()
            if c.unusable(label, expected):
                continue
            got = call_in_place(fn, cache.root, list(q))
            changed = cache.snapshot() != before
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note="...but it changed the tree" if changed else "")
            if changed:  # rebuild nothing: later cases on this tree would be unfair, so stop here
                break
    return c.done()


def served_prefill_tokens(prompts: list[list[int]]) -> list[int]:
    """Tokens each prompt must prefill when served in order through the real request cycle
    (:func:`serve_request` on a :class:`CacheManager`: match, leaving at least one token to
    compute; then insert).

    Example:
        >>> served_prefill_tokens([[1, 2, 3], [1, 2, 4], [1, 2, 3]])
        [3, 1, 1]
    """
    cm = CacheManager(sum(len(p) for p in prompts) + 1, block_size=1)
    out = [serve_request(cm, p).prefill_len for p in prompts]
    cm.check_integrity()
    return out


def prefill_tokens(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(prompts) -> list[int]``: with a radix cache that keeps every served prompt,
    how many tokens each prompt (served in order) must prefill. At least one token of each
    prompt is always computed (its logits give the first output token). Expected:
    :func:`served_prefill_tokens` on the real tree.
    """
    sys_, shots = char_tokenize(T["A"]), char_tokenize(T["B"])
    cases = [
        ("one prompt", [[1, 2, 3]]),
        ("same prompt twice (the last token is recomputed)", [[1, 2, 3], [1, 2, 3]]),
        ("prefix of an earlier prompt", [[1, 2, 3, 4], [1, 2]]),
        ("extends an earlier prompt", [[1, 2], [1, 2, 3, 4]]),
        ("shares only with an older prompt", [[5, 6, 7], [1, 2], [5, 6, 8]]),
        ("a common token that is not a prefix", [[1, 2, 3], [9, 2, 3]]),
        ("the notes' R1, R2, R3 (chars)", [sys_ + shots + char_tokenize(T[r]) for r in ("R1", "R2", "R3")]),
        ("empty list", []),
    ]
    rng = random.Random(7)
    for i in range(4):
        ps: list[list[int]] = []
        for _ in range(6):
            base = rng.choice(ps) if ps and rng.random() < 0.7 else []
            cut = rng.randint(0, len(base))
            ps.append(base[:cut] + [rng.randrange(3) for _ in range(rng.randint(1, 6))])
        cases.append((f"random prompts {i}", ps))
    c = Checker("prefill_tokens", fn, reference=served_prefill_tokens, verbose=verbose,
                compare=lambda e, a: isinstance(a, (list, tuple)) and list(a) == e)
    for label, ps in cases:
        c.run(f"{label}: lengths {[len(p) for p in ps]}", ps)
    return c.done()
