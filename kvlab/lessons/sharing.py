"""Lesson 06's runs: blocks held by parallel sampling and by beam search, with and without sharing.

Both count blocks on the real allocator (:class:`kvlab.memory.block_manager.BlockManager`:
fork, append with copy-on-write, free); nothing is a formula. Beam search's scores are seeded
random numbers (simulated), its blocks real. Not handled here: the K/V tensors (lesson 06
runs the kernels) and drawing (:mod:`kvlab.viz.sharing_view`).

Example:
    >>> measured_sampling_blocks(prompt_len=10, num_samples=4, gen_len=5, block_size=4)
    (16, 10)
    >>> sampling_run(prompt_len=10, num_samples=4, gen_len=5, block_size=4)
    SamplingRun(alone=16, shared=10, copies=3, shared_prompt_blocks=2)
    >>> sampling_run(prompt_len=8, num_samples=4, gen_len=5, block_size=4).copies   # ends on a block boundary
    0
    >>> shared, alone = beam_search_blocks(prompt_len=8, width=2, steps=3, block_size=4)
    >>> alone, shared
    ([6, 6, 6], [4, 4, 4])
"""
from __future__ import annotations

import random
from typing import NamedTuple

from ..memory.block_manager import BlockManager
from ..memory.block_table import blocks_needed

__all__ = ["measured_sampling_blocks", "sampling_run", "SamplingRun", "beam_search_blocks"]


def _positive(**values: int) -> None:
    for name, v in values.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < (0 if name in ("gen_len", "steps") else 1):
            raise ValueError(f"{name} must be a {'non-negative' if name in ('gen_len', 'steps') else 'positive'} "
                             f"int, got {v!r}")


class SamplingRun(NamedTuple):
    """One parallel-sampling run counted on the allocator (:func:`sampling_run`)."""

    alone: int  # blocks in use at the end without sharing (every sample its own prompt)
    shared: int  # ... with sharing (forks of one prefilled prompt, copy-on-write)
    copies: int  # block copies copy-on-write did (the shared partial last block, once per writer but the last)
    shared_prompt_blocks: int  # blocks every sample still holds at the end (ref count n; 0 when n = 1)


def sampling_run(prompt_len: int, num_samples: int, gen_len: int, block_size: int) -> SamplingRun:
    """Parallel sampling run twice on the real allocator: without sharing every sample stores its
    own prompt; with sharing the samples are forks of one prefilled prompt and copy a block only
    when they write into a shared one. Counts at the end (:class:`SamplingRun`)."""
    _positive(prompt_len=prompt_len, num_samples=num_samples, gen_len=gen_len, block_size=block_size)
    total = num_samples * blocks_needed(prompt_len + gen_len, block_size) + 4
    alone = BlockManager(num_blocks=total, block_size=block_size)
    for s in range(num_samples):
        alone.add_sequence(f"S{s}", prompt_len)
    shared = BlockManager(num_blocks=total, block_size=block_size)
    shared.add_sequence("S0", prompt_len)
    for s in range(1, num_samples):
        shared.fork("S0", f"S{s}")
    copies = 0
    for _ in range(gen_len):  # decode: every sample appends one token per step
        for s in range(num_samples):
            alone.append(f"S{s}", 1)
            copies += len(shared.append(f"S{s}", 1))
    alone.check_integrity()
    shared.check_integrity()
    held = sum(1 for c in shared.allocator.ref_count if c == num_samples) if num_samples > 1 else 0
    return SamplingRun(alone.allocator.num_used_blocks, shared.allocator.num_used_blocks, copies, held)


def measured_sampling_blocks(prompt_len: int, num_samples: int, gen_len: int, block_size: int) -> tuple[int, int]:
    """Blocks held at the end of parallel sampling, (without sharing, with sharing), measured
    by running the real allocator (:func:`sampling_run`)."""
    run = sampling_run(prompt_len, num_samples, gen_len, block_size)
    return run.alone, run.shared


def beam_search_blocks(prompt_len: int, width: int, steps: int, block_size: int = 16,
                       seed: int = 0) -> tuple[list[int], list[int]]:
    """Blocks in use after each step of a beam search, (with sharing, without sharing).

    Each step: the ``width`` best of ``width x width`` candidates (seeded random scores) each
    fork their parent beam, the old beams are freed, each new beam appends one token
    (copy-on-write where needed). Without sharing each beam holds its own copy of everything.
    """
    _positive(prompt_len=prompt_len, width=width, steps=steps, block_size=block_size)
    rng = random.Random(seed)
    bm = BlockManager(num_blocks=4 * width * blocks_needed(prompt_len + steps, block_size), block_size=block_size)
    bm.add_sequence("b0", prompt_len)
    beams, shared_used, alone_used, uid = ["b0"], [], [], 0
    for step in range(steps):
        scored = sorted(((rng.random(), b) for b in beams for _ in range(width)), reverse=True)[:width]
        new = []
        for _, parent in scored:                      # each kept candidate forks its parent
            uid += 1
            bm.fork(parent, f"b{uid}")
            new.append(f"b{uid}")
        for b in beams:                                # the previous beams are done
            bm.free(b)
        for b in new:                                  # each new beam writes its token
            bm.append(b, 1)
        beams = new
        shared_used.append(bm.allocator.num_used_blocks)
        alone_used.append(width * blocks_needed(prompt_len + step + 1, block_size))
    bm.check_integrity()  # once, at the end: every step's check took 90% of a slider move (prompt 1000, blocks of 4)
    return shared_used, alone_used
