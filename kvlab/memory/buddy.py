"""A buddy allocator over KV blocks: the memory manager of the vLLM paper's Orca baselines.

Before paging, a request's KV cache had to be one contiguous range. The vLLM paper's Orca
baselines (Kwon et al., SOSP 2023, Sec. 6.1: "we assume Orca uses the buddy allocation algorithm
to determine the memory address to store KV cache") place each range with a **buddy
allocator**, the classic scheme of operating-system page allocators:

- memory is cut into **runs** of ``2**k`` blocks (1 <= ``2**k`` <= ``max_run`` blocks; the
  largest run is ``max_run_tokens`` = 2,048 token slots, OPT's context), each run aligned to its
  size (``start % size == 0``);
- ``allocate(n)`` rounds ``n`` blocks **up to a power of two** (the rounding is waste: kvlab calls
  it ``rounding``), takes the smallest free run that is large enough and **splits** it in halves
  until it has the size asked for; the halves not used stay free;
- ``free(start)`` gives a run back and **coalesces** it with its *buddy* (the run at
  ``start ^ size``, the other half of the run it was split from) while that buddy is free and of
  the same size, so big runs come back when their pieces are free.

The pool is carved at the start into the largest aligned runs that fit (as many runs of
``max_run`` as fit, then one of each smaller size for the remainder), so a pool that is not a
multiple of ``max_run`` keeps small runs at its end that can never join a big one.

Mirrors vLLM's pre-release code, ``cacheflow/master/block_manager.py`` (``BuddyAllocator``,
used by ``BuddyBlockSpaceManager``, in a pre-release version of github.com/vllm-project/vllm;
commit 38ed06a's version of the file no longer has it), the code the
paper's Orca baselines ran on: the same carving, the same rounding (``_resize``), split and
coalesce (``free``: ``buddy = start ^ size``), and the same order (a free list per size, the
most recently freed run reused first). Names differ: cacheflow's ``size_to_free_blocks`` is
``free_runs_of``, ``addr_to_size`` is ``run_size``; its ``can_allocate`` deep-copies the free
lists, kvlab's counts runs per size (the same answer, without copying); cacheflow raises
ValueError when out of memory, kvlab raises :class:`~kvlab.memory.block_pool.OutOfBlocks`.

Every public operation either succeeds completely or raises naming the bad value and leaves the
allocator exactly as it was. Ids and counts follow :func:`kvlab.memory.ids.check_int`. Pure Python.

Not handled: the K/V tensors (this is bookkeeping in block units, like ``BlockAllocator``),
growing a run in place (Orca reserves a request's whole length up front), swapping.

Example (12 blocks of 16 slots, the largest run 8 blocks = 128 slots):
    >>> b = BuddyAllocator(12, block_size=16, max_run_tokens=128, log=NO_LOG)
    >>> b.free_runs()                     # carved: one run of 8 and one of 4
    [(0, 8), (8, 4)]
    >>> a = b.allocate(3, owner="A")      # 3 blocks round up to 4: the run of 4 at 8
    >>> a, b.stats().rounding_blocks
    (8, 1)
    >>> c = b.allocate(2, owner="C")      # splits the run of 8: [0, 2) taken, [2, 4) and [4, 8) free
    >>> c, b.free_runs()
    (0, [(2, 2), (4, 4)])
    >>> b.free(c); b.free_runs()          # [0, 2) coalesces with [2, 4), then with [4, 8)
    [(0, 8)]
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from .block_pool import DoubleFree, OutOfBlocks, UnknownBlock
from .events import NO_LOG, EventLog
from .ids import check_int

__all__ = ["BuddyAllocator", "BuddyStats", "next_pow2_blocks"]


def next_pow2_blocks(n: int) -> int:
    """The run size (blocks) that holds ``n`` blocks: the smallest power of two >= n (n >= 1).

    Example: 1 -> 1, 3 -> 4, 8 -> 8, 9 -> 16.
    """
    n = check_int("n", n, 1)
    return 1 << (n - 1).bit_length()


@dataclass(frozen=True)
class BuddyStats:
    """Where the allocator's blocks are (all in blocks).

    used_blocks: in allocated runs; requested_blocks: what the callers asked for (before the
    rounding); rounding_blocks = used - requested (the power-of-two rounding); free_blocks;
    largest_free_run; external_fragmentation = free - largest free run (free blocks that a
    request as large as the largest free run cannot use).
    """

    num_blocks: int
    used_blocks: int
    requested_blocks: int
    rounding_blocks: int
    free_blocks: int
    largest_free_run: int
    external_fragmentation: int
    runs: int


class BuddyAllocator:
    """Power-of-two runs of KV blocks with split and coalesce (see the module docstring).

    ``run_size[start]``: the size of every run, free or allocated (cacheflow's ``addr_to_size``);
    ``free_runs_of[size]``: the free runs of that size, the next to be used last;
    ``allocated[start] = (size, requested, owner)``. ``max_run`` = ``max_run_tokens // block_size``
    blocks, a power of two.
    """

    def __init__(self, num_blocks: int, block_size: int = 16, max_run_tokens: int = 2048,
                 log: EventLog | None = None) -> None:
        self.num_blocks = check_int("num_blocks", num_blocks, 1)
        self.block_size = check_int("block_size", block_size, 1)
        max_run_tokens = check_int("max_run_tokens", max_run_tokens, 1)
        max_run = max_run_tokens // block_size
        if max_run < 1 or max_run & (max_run - 1) or max_run * block_size != max_run_tokens:
            raise ValueError(f"max_run_tokens {max_run_tokens} must be block_size {block_size} times a power of two")
        self.max_run = max_run
        self.log = log if log is not None else EventLog()
        self.sizes = [1 << k for k in range(max_run.bit_length())]  # 1, 2, 4, ..., max_run
        self.free_runs_of: dict[int, list[int]] = {s: [] for s in self.sizes}
        self.run_size: dict[int, int] = {}
        self._free: set[int] = set()  # starts of the free runs
        self.allocated: dict[int, tuple[int, int, str | None]] = {}
        self.num_free_blocks = 0
        self.requested_blocks = 0
        start = 0
        for size in reversed(self.sizes):  # cacheflow's carving: largest runs first, in address order
            while start + size <= num_blocks:
                self._push(start, size)
                start += size

    # ------------------------------------------------------------------ queries
    @property
    def num_used_blocks(self) -> int:
        return self.num_blocks - self.num_free_blocks

    @property
    def largest_free_run(self) -> int:
        """Blocks in the largest free run (0 when nothing is free)."""
        for s in reversed(self.sizes):
            if self.free_runs_of[s]:
                return s
        return 0

    def run_blocks(self, n: int) -> int:
        """The run ``allocate(n)`` would take: ``n`` rounded up to a power of two. ValueError
        (naming ``n``) when that is more than ``max_run``."""
        size = next_pow2_blocks(n)
        if size > self.max_run:
            raise ValueError(f"n = {n} blocks is more than the largest run, {self.max_run} blocks "
                             f"({self.max_run * self.block_size} token slots)")
        return size

    def can_allocate(self, sizes: Iterable[int]) -> bool:
        """Whether ``allocate`` would succeed for every block count in ``sizes``, in order
        (a request with several sequences asks for several runs). Changes nothing."""
        counts = {s: len(v) for s, v in self.free_runs_of.items()}
        for n in sizes:
            size = self.run_blocks(n)
            i = size
            while i <= self.max_run and not counts[i]:
                i *= 2
            if i > self.max_run:
                return False
            counts[i] -= 1
            while i > size:  # the split leaves one free run of each size between
                i //= 2
                counts[i] += 1
        return True

    def free_runs(self) -> list[tuple[int, int]]:
        """Free ``(start, size)`` runs in address order."""
        return sorted((s, self.run_size[s]) for s in self._free)

    def layout(self) -> list[tuple[int, int, str | None, int]]:
        """Every run in address order as ``(start, size, owner, requested)``: ``owner`` None and
        ``requested`` 0 for a free run (for pictures)."""
        out = []
        for start in sorted(self.run_size):
            size = self.run_size[start]
            if start in self._free:
                out.append((start, size, None, 0))
            else:
                _, req, owner = self.allocated[start]
                out.append((start, size, owner, req))
        return out

    def stats(self) -> BuddyStats:
        used, free, largest = self.num_used_blocks, self.num_free_blocks, self.largest_free_run
        return BuddyStats(self.num_blocks, used, self.requested_blocks, used - self.requested_blocks, free, largest,
                          free - largest, len(self.run_size))

    # ------------------------------------------------------------------ state changes (all or nothing)
    def _push(self, start: int, size: int) -> None:
        self.free_runs_of[size].append(start)
        self.run_size[start] = size
        self._free.add(start)
        self.num_free_blocks += size

    def _take(self, start: int, size: int) -> None:
        self.free_runs_of[size].remove(start)
        self._free.discard(start)
        self.num_free_blocks -= size

    def allocate(self, n: int, owner: str | None = None) -> int:
        """A run of ``n`` blocks rounded up to a power of two; returns its first block.

        Raises ValueError when the rounded size is more than ``max_run``, and
        :class:`OutOfBlocks` (naming the run size, the free blocks and the largest free run)
        when no free run is large enough; nothing changes then.
        """
        n = check_int("n", n, 1)
        size = self.run_blocks(n)
        i = size
        while i <= self.max_run and not self.free_runs_of[i]:
            i *= 2
        if i > self.max_run:
            raise OutOfBlocks(size, self.num_free_blocks,
                              f"no free run of {size} blocks for {n}; largest free run {self.largest_free_run}"
                              + (f", owner {owner}" if owner else ""))
        start = self.free_runs_of[i].pop()
        self._free.discard(start)
        self.num_free_blocks -= i
        while i > size:  # split: keep the lower half, free the upper
            i //= 2
            self._push(start + i, i)
        self.run_size[start] = size
        self.allocated[start] = (size, n, owner)
        self.requested_blocks += n
        self.log.record("buddy_allocate", owner, (start,), size=size, requested=n)
        return start

    def free(self, start: int) -> None:
        """Give back the run that starts at ``start`` and coalesce it with its free buddies.

        Raises :class:`DoubleFree` for a run that is already free and :class:`UnknownBlock` for a
        block that starts no run; nothing changes then.
        """
        start = check_int("start", start, 0)
        if start not in self.allocated:
            if start in self._free:
                raise DoubleFree(f"run at block {start} ({self.run_size[start]} blocks) is already free")
            raise UnknownBlock(f"block {start} starts no allocated run (valid blocks are 0..{self.num_blocks - 1})")
        size, requested, owner = self.allocated.pop(start)
        self.requested_blocks -= requested
        del self.run_size[start]
        self.log.record("buddy_free", owner, (start,), size=size)
        while size < self.max_run:  # coalesce while the buddy is a free run of the same size
            buddy = start ^ size
            if buddy not in self._free or self.run_size[buddy] != size:
                break
            self._take(buddy, size)
            del self.run_size[buddy]
            start = min(start, buddy)
            size *= 2
        self._push(start, size)

    # ------------------------------------------------------------------ invariants
    def check_integrity(self) -> None:
        """Runs tile ``[0, num_blocks)`` without overlap, each aligned to its power-of-two size;
        the free lists hold exactly the free runs, once each; no free run below ``max_run`` has
        a free buddy of its size (coalescing is complete); the counters agree."""
        cursor = 0
        for start in sorted(self.run_size):
            size = self.run_size[start]
            assert type(start) is int and type(size) is int, f"non-int run {start!r}, {size!r}"
            assert start == cursor, f"run at {start}: expected one at {cursor} (gap or overlap)"
            assert size in self.free_runs_of and start % size == 0, f"run at {start} of {size} blocks is not aligned"
            cursor = start + size
        assert cursor == self.num_blocks, f"runs end at block {cursor}, the pool at {self.num_blocks}"
        listed = [s for v in self.free_runs_of.values() for s in v]
        assert len(listed) == len(set(listed)) and set(listed) == self._free, "free lists and free set disagree"
        for size, starts in self.free_runs_of.items():
            for s in starts:
                assert self.run_size[s] == size, f"free run {s} listed under {size}, has {self.run_size[s]}"
                if size < self.max_run:
                    b = s ^ size
                    assert not (b in self._free and self.run_size.get(b) == size), f"free buddies {s} and {b} not merged"
        assert set(self.allocated) | self._free == set(self.run_size) and not set(self.allocated) & self._free
        for s, (size, req, _owner) in self.allocated.items():
            assert self.run_size[s] == size and 1 <= req <= size, f"run {s}: requested {req} in {size}"
        assert self.num_free_blocks == sum(self.run_size[s] for s in self._free), "free count"
        assert self.requested_blocks == sum(r for _, r, _ in self.allocated.values()), "requested count"
