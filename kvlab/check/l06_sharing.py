"""Checkers for lesson 06 (sharing): copy-on-write, and the blocks parallel sampling saves.

    cow_append        append one token with copy-on-write and ref counts
    sampling_blocks   blocks used by parallel sampling, with and without sharing

The expected results are measured on the real :class:`kvlab.memory.block_manager.BlockManager`
(``append``, ``fork``). Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> sampling_blocks(lambda p, n, g, bs: (0, 0), verbose=False).passed
    False
"""
from __future__ import annotations

import copy
import random
from typing import Any, Callable

from ..memory.block_manager import BlockManager
from ..memory.block_pool import OutOfBlocks
from ..memory.block_table import blocks_needed
from .harness import Checker, CheckResult, Raised, Raises, call_in_place, same_outcome

__all__ = ["cow_append", "sampling_blocks"]


def _random_manager(rng: random.Random, num_blocks: int, block_size: int) -> BlockManager:
    """A pool with a few sequences, some forked (shared blocks), built with the real allocator."""
    m = BlockManager(num_blocks=num_blocks, block_size=block_size)
    m.add_sequence("R1", rng.randint(1, 3 * block_size))
    for i in range(rng.randint(1, 3)):
        parent = rng.choice(sorted(m.tables))
        if m.allocator.num_free_blocks >= 2:
            m.fork(parent, f"R1.{i + 1}")
            if rng.random() < 0.5:
                try:
                    m.append(f"R1.{i + 1}", rng.randint(1, block_size + 1))
                except OutOfBlocks:
                    pass
    return m


def _cow_state(m: BlockManager, seq: str) -> dict:
    t = m.tables[seq]
    return {
        "block_table": list(t.block_ids),
        "ref_count": list(m.allocator.ref_count),
        "free_blocks": list(m.allocator.free_block_ids),
    }


def cow_append(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(block_table, num_tokens, ref_count, free_blocks, block_size) -> copies``.

    The contract (lesson 06): make room for ONE more token of a sequence whose blocks may
    be shared. ``block_table``, ``ref_count`` and ``free_blocks`` are lists changed in place;
    the free list is used from the front. Returns the copies to do, ``[]`` or ``[(src, dst)]``.
    Raise ``kvlab.OutOfBlocks`` (changing nothing) when a block is needed and none is free.
    The expected result is what ``BlockManager.append(seq_id, 1)`` does on the same state.
    """
    rng = random.Random(6)
    scenarios: list[tuple[str, BlockManager, str]] = []
    # Hand-made edge cases first: shared partial block, shared full block, private partial block.
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    scenarios.append(("shared partial last block (6 tokens, bs 4)", m, "B"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 8)
    m.fork("A", "B")
    scenarios.append(("shared FULL last block (8 tokens, bs 4)", m, "B"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 5)
    scenarios.append(("private partial last block", m, "A"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 0)
    scenarios.append(("empty sequence", m, "A"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 3)
    m.fork("A", "B")
    m.fork("A", "C")
    scenarios.append(("block shared three ways", m, "C"))
    for seed in range(8):
        bs = rng.choice([2, 4, 8])
        m = _random_manager(rng, num_blocks=rng.randint(10, 16), block_size=bs)
        seq = rng.choice(sorted(m.tables))
        scenarios.append((f"random pool seed {seed} (bs {bs}), append to {seq}", m, seq))
    # Out of blocks: a shared partial block and an empty free list.
    m = BlockManager(num_blocks=2, block_size=4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    scenarios.append(("no free block left (must raise OutOfBlocks)", m, "B"))

    c = Checker("cow_append", fn, verbose=verbose)
    for label, m, seq in scenarios:
        before = _cow_state(m, seq)
        mine = copy.deepcopy(before)
        num_tokens, bs = m.tables[seq].num_tokens, m.block_size
        try:
            copies = m.append(seq, 1)
            expected: Any = dict(copies=copies, **_cow_state(m, seq))
        except OutOfBlocks:
            expected = Raises(OutOfBlocks)
        if c.unusable(label, expected):
            continue
        got = call_in_place(fn, mine["block_table"], num_tokens, mine["ref_count"], mine["free_blocks"], bs)
        if isinstance(got, Raised) or isinstance(expected, Raises):
            changed = mine != before
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note="...but it changed the lists first" if changed else "")
            continue
        actual = dict(copies=[tuple(x) for x in got] if isinstance(got, (list, tuple)) else got, **mine)
        c.record(label, expected, actual)
    return c.done()


# ----------------------------------------------------------------- memory saved by sharing
def measured_sampling_blocks(prompt_len: int, num_samples: int, gen_len: int, block_size: int) -> tuple[int, int]:
    """Blocks held at the end of parallel sampling, (without sharing, with sharing), measured
    by running the real :class:`kvlab.BlockManager`.

    Without sharing every sample stores its own prompt; with sharing the samples are forks of
    one prefilled prompt and copy a block only when they write into a shared one.

    Example:
        >>> measured_sampling_blocks(prompt_len=10, num_samples=4, gen_len=5, block_size=4)
        (16, 10)
    """
    total = num_samples * blocks_needed(prompt_len + gen_len, block_size) + 4
    alone = BlockManager(num_blocks=total, block_size=block_size)
    for s in range(num_samples):
        alone.add_sequence(f"S{s}", prompt_len)
    shared = BlockManager(num_blocks=total, block_size=block_size)
    shared.add_sequence("S0", prompt_len)
    for s in range(1, num_samples):
        shared.fork("S0", f"S{s}")
    for _ in range(gen_len):  # decode: every sample appends one token per step
        for s in range(num_samples):
            alone.append(f"S{s}", 1)
            shared.append(f"S{s}", 1)
    alone.check_integrity()
    shared.check_integrity()
    return alone.allocator.num_used_blocks, shared.allocator.num_used_blocks


def sampling_blocks(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(prompt_len, num_samples, gen_len, block_size) -> (without_sharing, with_sharing)``.

    The expected numbers are measured on the real allocator (:func:`measured_sampling_blocks`).
    """
    cases_in = [(10, 4, 5, 4), (8, 4, 5, 4), (10, 4, 0, 4), (1, 1, 1, 4), (16, 3, 16, 16),
                (17, 2, 15, 16), (100, 8, 37, 16), (5, 6, 3, 1)]
    rng = random.Random(66)
    for _ in range(4):
        cases_in.append((rng.randint(1, 60), rng.randint(1, 8), rng.randint(0, 40), rng.choice([2, 4, 8, 16])))
    c = Checker("sampling_blocks", fn, reference=measured_sampling_blocks, verbose=verbose,
                compare=lambda e, a: isinstance(a, (tuple, list)) and tuple(a) == tuple(e))
    for p, n, g, bs in cases_in:
        c.run(f"prompt {p}, {n} samples, {g} new tokens each, block_size {bs}", p, n, g, bs)
    return c.done()
