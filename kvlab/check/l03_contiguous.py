"""Checkers for lesson 03 (contiguous allocation, the pre-vLLM baseline).

    reservation             slots a request reserves up front under a policy (max, pow2, exact)
    first_fit               the lowest-address free range that is long enough
    external_fragmentation  free slots outside the largest free range

The expected answers come from :class:`kvlab.memory.contiguous.ContiguousArena`.
Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> external_fragmentation(lambda ranges: sum(n for _, n in ranges), verbose=False).passed
    False
"""
from __future__ import annotations

import random
from typing import Callable

from ..memory.contiguous import ContiguousArena
from .harness import Checker, CheckResult, call

__all__ = ["reservation", "first_fit", "external_fragmentation"]


def _reservation_ref(policy: str, length: int, max_len: int, final_len: int | None = None) -> int:
    if not 1 <= length <= max_len:
        raise ValueError(f"length {length} must be in [1, max_len {max_len}]")
    arena = ContiguousArena(capacity=max_len, policy=policy, max_len=max_len)  # ValueError for a bad policy
    return arena.reservation_for(length, final_len)


def reservation(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(policy, length, max_len, final_len=None) -> int`` slots reserved up front.

    policy "max": max_len; "pow2": the next power of two >= length, capped at max_len;
    "exact": final_len (ValueError when final_len is None). ValueError for another
    policy or a length outside [1, max_len].
    """
    c = Checker("reservation", fn, _reservation_ref, verbose=verbose)
    for policy, length, max_len, final in [
        ("max", 10, 2048, None), ("max", 2048, 2048, None),
        ("pow2", 5, 2048, None), ("pow2", 8, 2048, None), ("pow2", 9, 2048, None), ("pow2", 1, 2048, None),
        ("pow2", 1500, 2048, None), ("pow2", 1500, 1600, None),
        ("exact", 10, 2048, 300), ("exact", 10, 2048, 10),
    ]:
        c.run(f"policy={policy!r}, length={length}, max_len={max_len}" + (f", final_len={final}" if final else ""),
              policy, length, max_len, final)
    c.run("policy 'exact' without final_len (must raise ValueError)", "exact", 10, 2048, None)
    c.run("unknown policy 'best' (must raise ValueError)", "best", 10, 2048, None)
    c.run("length=0 (must raise ValueError)", "max", 0, 2048, None)
    return c.done()


def _first_fit_ref(free_ranges: list[tuple[int, int]], n: int) -> int | None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for start, length in sorted(free_ranges):
        if length >= n:
            return start
    return None


def _random_free_ranges(rng: random.Random) -> list[tuple[int, int]]:
    out, cursor = [], 0
    for _ in range(rng.randrange(0, 6)):
        cursor += rng.randrange(1, 300)  # a used range before each hole
        length = rng.randrange(1, 300)
        out.append((cursor, length))
        cursor += length
    return out


def first_fit(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(free_ranges, n) -> start | None``: the lowest-address free range of length >= n.

    ``free_ranges``: ``(start, length)`` pairs in address order. None when no range is
    long enough. ValueError for n < 1.
    """
    c = Checker("first_fit", fn, _first_fit_ref, verbose=verbose)
    notes = [(0, 4096), (10240, 2048)]  # the notes' arena after A finished: holes of 4096 and 2048
    c.run("the notes' holes, D needs 8192", notes, 8192)
    c.run("the notes' holes, 6144 (all free space, but split)", notes, 6144)
    c.run("the notes' holes, 4096 fits exactly in the first", notes, 4096)
    c.run("the notes' holes, 3000", notes, 3000)
    c.run("first hole too small, second fits", [(0, 10), (50, 100)], 20)
    c.run("exact fit in a later hole", [(0, 10), (50, 20), (90, 40)], 20)
    c.run("no free space", [], 1)
    rng = random.Random(4)
    for seed in range(4):
        ranges = _random_free_ranges(rng)
        n = rng.randrange(1, 320)
        c.run(f"random seed {seed}: {len(ranges)} holes, n={n}", ranges, n)
    c.run("n=0 (must raise ValueError)", notes, 0)
    return c.done()


def _external_fragmentation_ref(free_ranges: list[tuple[int, int]]) -> int:
    return sum(n for _, n in free_ranges) - max((n for _, n in free_ranges), default=0)


def external_fragmentation(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(free_ranges) -> int``: free slots outside the largest free range (0 when <= 1 range)."""
    c = Checker("external_fragmentation", fn, _external_fragmentation_ref, verbose=verbose)
    arena = ContiguousArena(capacity=12288, policy="exact", max_len=12288)
    for rid, n in [("A", 4096), ("B", 2048), ("C", 4096)]:
        arena.admit(rid, n, final_len=n)
    arena.finish("A")
    c.record("the notes' arena after A finished (kvlab's ContiguousArena)", arena.stats().external_fragmentation,
             call(fn, arena.free_ranges()))
    c.run("one hole", [(0, 100)])
    c.run("no free space", [])
    c.run("three equal holes", [(0, 10), (20, 10), (40, 10)])
    c.run("largest hole last", [(0, 5), (10, 7), (20, 50)])
    rng = random.Random(5)
    for seed in range(3):
        ranges = _random_free_ranges(rng)
        c.run(f"random seed {seed}: {len(ranges)} holes", ranges)
    return c.done()
