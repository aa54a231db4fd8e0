"""Checkers for lesson 00 (start here): the three warm-ups.

    block_and_offset    a token position -> (logical block, offset in it)
    common_prefix_len   how many leading tokens two token-id lists share
    reusable_tokens     how many of a new request's tokens a radix cache serves from a finished one

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
from ..reuse.cache_manager import CacheManager
from .diagnose import mistake_runner, more_or_less, refused_valid, should_have_raised, swapped
from .harness import Checker, CheckResult, same_int, same_ints

__all__ = ["block_and_offset", "common_prefix_len", "reusable_tokens"]


def _name_bound(case, why: str):
    """A valid input at a bound that the learner refused: say which bound (B2, B8 in the review)."""
    if not case.passed and not case.note:
        case.note = refused_valid(case.expected, case.actual, why) or ""
    return case


_BOUNDS_00 = {(0, 4): "pos = 0 is the first token: refuse only pos < 0",
              (7, 1): "block_size = 1 is a valid block of one token: refuse only block_size < 1"}


def _block_and_offset_ref(pos: int, block_size: int) -> tuple[int, int]:
    """kvlab's translate on a table just long enough; past 2**20 blocks (the float-division case) it
    translates the offset on a one-block table and counts the blocks before it."""
    blocks = max(pos, 0) // max(block_size, 1)
    if blocks < 2**20:
        t = _translate(list(range(blocks + 1)), pos, block_size)
        return (t.logical_block, t.offset)
    return (blocks, _translate([0], pos - blocks * block_size, block_size).offset)


_FLOAT_DIVISION = ("float division: pos / block_size is a float, and a float holds every integer only up to 2**53 "
                   "(2**53 + 1 becomes 2**53): divide the integers with //")


def block_and_offset(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(pos, block_size) -> (logical_block, offset)``; ValueError for pos < 0 or block_size < 1."""
    c = Checker("block_and_offset", fn, _block_and_offset_ref, verbose=verbose, compare=same_ints,
                diagnose=[lambda e, a: swapped(e, a, ("logical block", "offset")), should_have_raised])
    run = mistake_runner(c, {
        "as if pos were one more (pos + 1 for both numbers): position pos is the (pos + 1)-th token, but positions, "
        "blocks and offsets all count from 0, so divide pos itself (pos = block_size - 1 is the last slot of block 0)":
            lambda pos, bs: ((pos + 1) // bs, (pos + 1) % bs),
        "counted tokens from 1: positions start at 0, so with block_size 4 the last position of block 0 is 3, "
        "not 4 (try pos = block_size - 1 by hand)":
            lambda pos, bs: ((pos + 1) // bs, pos % bs),
        "the offset counts from 1: the first slot of a block is offset 0": lambda pos, bs: (pos // bs, pos % bs + 1),
        "rounded the block up (a ceiling): position 1 with block_size 4 is still in block 0 (work it out by hand)":
            lambda pos, bs: (-(-pos // bs), pos % bs),
        "1-based block number: blocks count from 0, so positions 0 to block_size - 1 are block 0 (work out "
        "pos = 0 by hand)": lambda pos, bs: (pos // bs + 1, pos % bs),
        _FLOAT_DIVISION: lambda pos, bs: (int(pos / bs), pos % bs),
        _FLOAT_DIVISION + ", and the offset left over from a rounded block is wrong too": lambda pos, bs: (int(pos / bs), pos - int(pos / bs) * bs),
        "hard-coded block size 4: it is right only for blocks of 4; use the block_size argument":
            lambda pos, bs: (pos // 4, pos % 4),
    })
    for pos, bs in [(9, 4), (0, 4), (3, 4), (4, 4), (15, 16), (16, 16), (1000, 16), (7, 1), (2**53 + 1, 1), (2**55 + 5, 4)]:
        big = " (past 2**53: exact in integers, not in floats)" if pos > 2**53 else ""
        _name_bound(run(f"pos={pos}, block_size={bs}{big}", pos, bs), _BOUNDS_00.get((pos, bs), ""))
    rng = random.Random(0)
    for _ in range(3):
        pos, bs = rng.randrange(0, 500), rng.choice([2, 4, 8, 16, 32])
        run(f"pos={pos}, block_size={bs} (random)", pos, bs)
    c.run("pos=-1 (must raise ValueError)", -1, 4)
    c.run("block_size=0 (must raise ValueError)", 5, 0)
    return c.done()


def _common_prefix_len_ref(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def _common_suffix_len(a: list[int], b: list[int]) -> int:
    return _common_prefix_len_ref(a[::-1], b[::-1])


_PREFIX_MISTAKES = {   # review r3 of 00: the last three got only "fewer than the shared prefix"
    "more than the shared prefix: that counts every position where the lists agree; stop counting at the first "
    "token that differs (later matches do not count)":
        lambda a, b: sum(x == y for x, y in zip(a, b)),
    "the loop stops one position early: when one list is a prefix of the other (or they are equal) the last "
    "position is never compared; loop over every position both lists have":
        lambda a, b: min(_common_prefix_len_ref(a, b), max(min(len(a), len(b)) - 1, 0)),
    "that is the INDEX of the last shared token (length - 1): the count of shared tokens is one more":
        lambda a, b: max(_common_prefix_len_ref(a, b) - 1, 0),
    "that compares the lists from the END (a shared suffix): a prefix is shared from the FIRST token on":
        _common_suffix_len,
}


def common_prefix_len(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(a, b) -> int``: how many leading tokens two token-id lists share (0 if none)."""
    c = Checker("common_prefix_len", fn, _common_prefix_len_ref, verbose=verbose, compare=same_int, diagnose=[more_or_less(
        "more than the shared prefix: stop counting at the first token that differs (later matches do not count)",
        "fewer than the shared prefix: count every leading token the two lists have in common",
    )])
    run = mistake_runner(c, _PREFIX_MISTAKES)
    cases = [
        ("shared system prompt", [1, 2, 3, 4, 9], [1, 2, 3, 4, 7, 7]),
        ("identical", [5, 6, 7], [5, 6, 7]),
        ("one is a prefix of the other", [5, 6], [5, 6, 7, 8]),
        ("other way round", [5, 6, 7, 8], [5, 6]),
        ("differ at the first token", [1, 2], [2, 2]),
        ("empty list", [], [1, 2]),
        ("both empty", [], []),
        ("same tokens later, not at the start", [0, 1, 2, 3], [9, 1, 2, 3]),
        ("the same tokens in another order", [3, 1, 2], [1, 3, 2]),
    ]
    for label, a, b in cases:
        case = run(f"{label}: {a} vs {b}", a, b)
        if not case.passed and case.actual == _common_prefix_len_ref(sorted(a), sorted(b)) != case.expected:
            case.note = ("the order of the tokens is the sequence itself: compare the lists position by position as "
                         "given (sorted, [3, 1, 2] and [1, 3, 2] would share 3 tokens; they share none)")
    rng = random.Random(1)
    for seed in range(3):
        k = rng.randrange(0, 12)
        common = [rng.randrange(50) for _ in range(k)]
        a = common + [100 + rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        b = common + [200 + rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        run(f"random seed {seed} ({len(a)} vs {len(b)} tokens)", a, b)
    return c.done()


def _reusable_tokens_ref(finished: list[int], new: list[int], block_size: int) -> int:
    """kvlab's own CacheManager: ``finished`` runs and is cached, then ``new`` is admitted."""
    if block_size < 1:
        raise ValueError(f"block_size must be >= 1, got {block_size}")
    if not finished or not new:  # CacheManager.admit refuses it too (num_tokens must be >= 1)
        raise ValueError(f"a request has at least one token: finished has {len(finished)}, new has {len(new)}")
    blocks = (len(finished) + len(new)) // block_size + 4
    cm = CacheManager(num_blocks=blocks, block_size=block_size)
    cm.admit("finished", list(finished))
    cm.cache_finished_req("finished", list(finished))
    return cm.admit("new", list(new)).prefix_len


def reusable_tokens(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(finished, new, block_size) -> int``: how many of ``new``'s tokens the radix cache serves
    after the request ``finished`` ran and was cached (kvlab's ``CacheManager`` is the reference).

    Only whole blocks are cached, and a request always computes at least its last token.
    ValueError for block_size < 1 or an empty request (kvlab's CacheManager refuses a request of 0 tokens).
    """
    def prefix(a, b):
        return _common_prefix_len_ref(a, b)

    c = Checker("reusable_tokens", fn, _reusable_tokens_ref, verbose=verbose, compare=same_int,
                diagnose=[should_have_raised])
    run = mistake_runner(c, {
        "cap first, then round: at most len(new) - 1 tokens, THEN down to whole blocks (rounding first and "
        "capping after leaves a partial block served)":
            lambda a, b, bs: min(prefix(a, b) // bs * bs, len(b) - 1),
        "only whole blocks are cached: a block the two requests share only in part is not reused":
            lambda a, b, bs: min(prefix(a, b), len(b) - 1),
        "a request always computes at least its last token (its logits give the next token): "
        "a fully cached prompt still leaves one token to run":
            lambda a, b, bs: prefix(a, b) // bs * bs,
        "rounded up to a whole block: a block the two requests share only in part is not reused (round down)":
            lambda a, b, bs: -(-min(prefix(a, b), len(b) - 1) // bs) * bs,
        "rounded up to a whole block, then capped at len(new) - 1: a block the two requests share only in part is "
        "not reused; round DOWN (after the cap), so the answer is whole blocks":
            lambda a, b, bs: min(-(-min(prefix(a, b), len(b) - 1) // bs) * bs, len(b) - 1),
        "the token left to compute is the NEW request's last one, not the finished request's":
            lambda a, b, bs: max(min(prefix(a, b), len(a) - 1), 0) // bs * bs,
        "that is the shared prefix itself: think about what the cache keeps (blocks) and what R2 must still run":
            lambda a, b, bs: prefix(a, b),
        "that counts blocks: the answer is in tokens (whole blocks x block_size)":
            lambda a, b, bs: _reusable_tokens_ref(a, b, bs) // bs,
        "hard-coded block size 4: it is right only for blocks of 4; use the block_size argument":
            lambda a, b, bs: _reusable_tokens_ref(a, b, 4),
        "the last token is computed only when the cache holds all of new: cap the shared count at len(new) - 1, "
        "do not take 1 from every match":
            lambda a, b, bs: max(min(prefix(a, b), len(b)) - 1, 0) // bs * bs,
        "the last token is computed only when the cache holds all of new: cap the shared count at len(new) - 1, "
        "do not take 1 from every match (with nothing shared that even gives a negative count)":
            lambda a, b, bs: (min(prefix(a, b), len(b)) - 1) // bs * bs,
        "rounded to whole blocks, then took 1 token off: the cache serves whole blocks (the answer is a multiple "
        "of block_size); the last token is computed only when the whole of new is cached (cap at len(new) - 1 first)":
            lambda a, b, bs: max(prefix(a, b) // bs * bs - 1, 0),
    })
    system = list(range(100, 112))  # lesson 00's 12-token system prompt, as ids
    cases = [
        ("lesson 00's R1 and R2: a 12-token shared prompt, blocks of 4", system + [1, 2, 3, 4], system + [5, 6, 7, 8], 4),
        ("shared prefix of 6 tokens, blocks of 4", [1, 2, 3, 4, 5, 6, 7], [1, 2, 3, 4, 5, 6, 9, 9], 4),
        ("shared prefix of 3 tokens: less than one block", [1, 2, 3, 4], [1, 2, 3, 9, 9], 4),
        ("the same prompt again (8 tokens, blocks of 4)", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8], 4),
        ("the new request is the finished one plus one token", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4, 5, 6, 7, 8, 9], 4),
        ("the new request is a prefix of the finished one", [1, 2, 3, 4, 5, 6, 7, 8], [1, 2, 3, 4], 4),
        ("nothing shared", [1, 2, 3, 4], [9, 2, 3, 4], 4),
        ("block size 1: every shared token is a block", [1, 2, 3, 4, 5], [1, 2, 3, 9], 1),
        ("block size 1, nothing shared", [1, 2], [9, 2], 1),
    ]
    for label, a, b, bs in cases:
        _name_bound(run(label, a, b, bs), "block_size = 1 is valid: refuse only block_size < 1" if bs == 1 else "")
    rng = random.Random(2)
    for seed in range(3):
        bs = rng.choice([2, 4, 8])
        common = [rng.randrange(50) for _ in range(rng.randrange(0, 20))]
        a = common + [100 + rng.randrange(5) for _ in range(rng.randrange(1, 6))]
        b = common + [200 + rng.randrange(5) for _ in range(rng.randrange(1, 6))]
        run(f"random seed {seed} ({len(common)} shared tokens, blocks of {bs})", a, b, bs)
    c.run("block_size=0 (must raise ValueError)", [1, 2], [1, 2], 0)
    for label, a, b in [("an empty new request (must raise ValueError)", [1, 2, 3, 4], []),
                        ("an empty finished request (must raise ValueError)", [], [1, 2, 3, 4])]:
        case = c.run(label, a, b, 4)
        if not case.passed and type(case.actual).__name__ != "Raised":
            case.note = (f"returned {case.actual!r} for a request of 0 tokens: a request has at least one token, so "
                         "an empty list is refused with ValueError (len(new) - 1 would be -1)")
    return c.done()
