"""Checkers for lesson 00 (start here): the two warm-ups.

    block_and_offset    a token position -> (logical block, offset in it)
    common_prefix_len   how many leading tokens two token-id lists share

Each ``check.<name>(fn)`` runs the learner's ``fn`` beside kvlab's own implementation on
several sizes, seeds and edge cases, prints expected beside actual, and returns a
:class:`~kvlab.check.harness.CheckResult`. Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> block_and_offset(lambda pos, bs: divmod(pos, bs), verbose=False).passed   # no ValueError
    False
"""
from __future__ import annotations

import random
from typing import Callable

from ..memory.block_table import translate as _translate
from .diagnose import mistake_runner, more_or_less, should_have_raised, swapped
from .harness import Checker, CheckResult

__all__ = ["block_and_offset", "common_prefix_len"]


def _block_and_offset_ref(pos: int, block_size: int) -> tuple[int, int]:
    t = _translate(list(range(max(pos, 0) // max(block_size, 1) + 1)), pos, block_size)
    return (t.logical_block, t.offset)


def block_and_offset(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(pos, block_size) -> (logical_block, offset)``; ValueError for pos < 0 or block_size < 1."""
    c = Checker("block_and_offset", fn, _block_and_offset_ref, verbose=verbose,
                diagnose=[lambda e, a: swapped(e, a, ("logical block", "offset")), should_have_raised])
    run = mistake_runner(c, {
        "counted tokens from 1: positions start at 0, so with block_size 4 the last position of block 0 is 3, "
        "not 4 (try pos = block_size - 1 by hand)":
            lambda pos, bs: ((pos + 1) // bs, pos % bs),
        "the offset counts from 1: the first slot of a block is offset 0": lambda pos, bs: (pos // bs, pos % bs + 1),
        "rounded the block up: position 1 with block_size 4 is still in block 0 (work it out by hand)":
            lambda pos, bs: (-(-pos // bs), pos % bs),
    })
    for pos, bs in [(9, 4), (0, 4), (3, 4), (4, 4), (15, 16), (16, 16), (1000, 16), (7, 1)]:
        run(f"pos={pos}, block_size={bs}", pos, bs)
    rng = random.Random(0)
    for _ in range(3):
        pos, bs = rng.randrange(0, 500), rng.choice([2, 4, 8, 16, 32])
        run(f"pos={pos}, block_size={bs} (random)", pos, bs)
    c.run("pos=-1 (must raise ValueError)", -1, 4)
    c.run("block_size=0 (must raise ValueError)", 5, 0)
    return c.done()


def _common_prefix_len_ref(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def common_prefix_len(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(a, b) -> int``: how many leading tokens two token-id lists share (0 if none)."""
    c = Checker("common_prefix_len", fn, _common_prefix_len_ref, verbose=verbose, diagnose=[more_or_less(
        "more than the shared prefix: stop counting at the first token that differs (later matches do not count)",
        "fewer than the shared prefix: count every leading token the two lists have in common",
    )])
    cases = [
        ("shared system prompt", [1, 2, 3, 4, 9], [1, 2, 3, 4, 7, 7]),
        ("identical", [5, 6, 7], [5, 6, 7]),
        ("one is a prefix of the other", [5, 6], [5, 6, 7, 8]),
        ("other way round", [5, 6, 7, 8], [5, 6]),
        ("differ at the first token", [1, 2], [2, 2]),
        ("empty list", [], [1, 2]),
        ("both empty", [], []),
        ("same tokens later, not at the start", [0, 1, 2, 3], [9, 1, 2, 3]),
    ]
    for label, a, b in cases:
        c.run(f"{label}: {a} vs {b}", a, b)
    rng = random.Random(1)
    for seed in range(3):
        k = rng.randrange(0, 12)
        common = [rng.randrange(50) for _ in range(k)]
        a = common + [100 + rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        b = common + [200 + rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        c.run(f"random seed {seed} ({len(a)} vs {len(b)} tokens)", a, b)
    return c.done()
