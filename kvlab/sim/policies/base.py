"""What every memory policy shares: the protocol, the simulator's request and sequence state, Usage.

A policy owns one KV budget (``capacity`` token slots) and answers the simulation's questions:
can this request start (``admit``), can this sequence grow (``grow``), give a request's memory
back (``release``, on finish and on preemption), and where is the memory now (``usage``). Each
policy is a thin adapter over the structure the lessons animate, and talks to it only through
that structure's own API (``kvlab.memory``'s BlockManager and ContiguousArena, ``kvlab.reuse``'s
CacheManager and BlockHashCache); no policy writes a block table.

The simulator's state for one request (:class:`SimRequest`: its sequences, what it generated
before a preemption, its times) and for one running sequence (:class:`SimSequence`) are here
too. A sequence's length is lazy: ``len_at(it) = base_len + it - base_it`` grows by one per
iteration without any call; the simulation calls ``grow`` only when the length would pass
``seq.cap`` (the slots it can fill without a new allocation), and ``sync`` (every step when
``check=True``) brings the structure's own length counters up to date.

Mirrors vLLM v0 ``vllm/sequence.py`` (``SequenceGroup`` = :class:`SimRequest`, ``Sequence`` =
:class:`SimSequence`) and the scheduler's questions to ``BlockSpaceManager`` (``can_allocate``
= ``admit``, ``can_append_slots`` = ``grow``, ``free``); SGLang's ``Req``. Names differ: the
simulator's sequences hold no token ids of their own, only lengths.

Example:
    >>> from kvlab.sim.workloads import TraceRequest
    >>> r = SimRequest(TraceRequest(7, 0.0, prompt_len=3, output_len=2, prompt=(1, 2, 3), output=(4, 5)))
    >>> r.gid, r.prompt_now, r.tokens_now()
    ('r7', 3, (1, 2, 3))
    >>> r.generated = 1                     # preempted after one token: it re-prefills 4
    >>> r.prompt_now, r.tokens_now(), r.tokens_upto(5)
    (4, (1, 2, 3, 4), (1, 2, 3, 4, 5))
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ...memory.block_table import blocks_needed
from ...memory.ids import check_int
from ..workloads import TraceRequest

__all__ = ["BudgetTooSmall", "SimSequence", "SimRequest", "Usage", "MemoryPolicy"]


class BudgetTooSmall(ValueError):
    """The KV budget cannot hold even one request of the trace on its own."""


@dataclass(eq=False, slots=True)
class SimSequence:
    """One sequence being decoded: ``len_at(it) = base_len + it - base_it`` KV slots.

    ``table``: the policy's handle, read-only here (a BlockTable for paged and radix, the
    arena's id for contiguous, the block list for block-hash); ``cap``: slots it can fill
    without allocating.
    """

    sid: str
    request: "SimRequest"
    base_len: int = 0
    base_it: int = 0
    cap: int = 0
    table: Any = None

    def len_at(self, it: int) -> int:
        return self.base_len + it - self.base_it


@dataclass(eq=False)
class SimRequest:
    """A request in the simulation: its sequences (n samples, beams) and its progress."""

    req: TraceRequest
    seqs: list = field(default_factory=list)
    generated: int = 0  # tokens produced before the current admission (preemption keeps them)
    hit: int = 0  # prompt tokens found cached at the current admission
    first_hit: int = 0  # ... at its first admission
    admit_it: int = -1
    admit_order: int = -1
    version: int = 0  # bumped when it leaves the running set (stale events are skipped)
    arrival: float = 0.0
    first_token_time: float | None = None
    finish_time: float | None = None
    preemptions: int = 0
    gid: str = ""

    def __post_init__(self) -> None:
        self.gid = f"r{self.req.req_id}"

    @property
    def prompt_now(self) -> int:
        """Tokens to prefill at (re-)admission: the prompt plus what was generated before a preemption."""
        return self.req.prompt_len + self.generated

    def tokens_now(self) -> tuple[int, ...] | None:
        """The ids of the ``prompt_now`` tokens (None when the trace has no ids)."""
        r = self.req
        if r.prompt is None:
            return None
        return r.prompt + (r.output or ())[: self.generated] if self.generated else r.prompt

    def tokens_upto(self, n: int) -> tuple[int, ...] | None:
        """The ids of the first ``n`` tokens of prompt + output, as far as the trace knows them."""
        r = self.req
        if r.prompt is None:
            return None
        return r.prompt + (r.output or ())[: n - r.prompt_len] if n > r.prompt_len else r.prompt[:n]


@dataclass(slots=True)  # not frozen: built once an iteration, and a frozen dataclass is slow to build
class Usage:
    """Where the budget is, apart from the running sequences' tokens (known to the simulation).

    held_slots: slots held for running sequences (reserved ranges or blocks);
    will_use_slots: of those, slots their tokens will fill before they finish (contiguous:
    ``sum(min(reserved, final_len))``; None for paged: a block is filled as it is taken);
    cached_slots: slots holding cached prefixes no running request uses (evictable);
    external_fragmentation: free slots outside the largest free range (contiguous only);
    dup_slots: logical token slots served by a slot another sequence also uses (sharing);
    logical_blocks / physical_blocks: blocks without / with sharing (block policies);
    requested_slots: what the reservations asked for before the allocator rounded them up
    (the buddy allocator; None: no rounding, the same as ``held_slots``).
    """

    held_slots: int
    will_use_slots: int | None
    cached_slots: int = 0
    external_fragmentation: int = 0
    dup_slots: int = 0
    logical_blocks: int = 0
    physical_blocks: int = 0
    requested_slots: int | None = None


class MemoryPolicy:
    """Base class: see the module docstring for the protocol.

    ``prefix_cache``: an object with ``peek_prefix_len(tokens)`` (the radix tree) that the
    cache-aware order reads, or None. ``logical_blocks``: blocks the running sequences' tables
    list (a shared block once per table), kept by the block policies. ``server``: the scheduler
    settings of the system the policy stands for (:class:`~kvlab.sim.simulation.Simulation`
    arguments it fills in when they are not given: ``separate_prefill``, ``max_prefill_tokens``).
    """

    name = "base"
    uses_tokens = False  # needs token ids (prefix caching)
    shares_forks = False  # beams fork and reorder (copy-on-write)
    capacity: int
    block_size: int = 1
    prefix_cache: Any = None
    logical_blocks: int = 0
    watermark_blocks: int = 0
    server: dict = {}

    def validate(self, req: TraceRequest) -> None:
        """Raise BudgetTooSmall unless ``req`` fits an empty budget."""
        need = self.min_slots(req)
        if need > self.capacity:
            raise BudgetTooSmall(
                f"KV budget of {self.capacity:,} token slots is smaller than one request: request {req.req_id} "
                f"needs {need:,} ({req.prompt_len} in + {req.output_len} out x {req.num_seqs} sequence(s), "
                f"policy {self.name!r})")

    def min_slots(self, req: TraceRequest) -> int:
        """Slots ``req`` needs alone (default: whole blocks for every sequence, no sharing)."""
        return blocks_needed(req.total_len, self.block_size) * self.block_size * req.num_seqs

    def _blocks(self, name: str, capacity: int, block_size: int) -> int:
        """Set name, block_size and capacity (whole blocks); returns the number of blocks."""
        block_size = check_int("block_size", block_size, 1)
        num_blocks = capacity // block_size
        if num_blocks < 1:
            raise BudgetTooSmall(f"KV budget of {capacity} slots holds no block of {block_size}")
        self.name, self.block_size, self.capacity = name, block_size, num_blocks * block_size
        self.logical_blocks = 0
        self.watermark_blocks = 0
        return num_blocks

    def _watermark(self) -> int:
        """Blocks admission must leave free (vLLM's watermark), none while nothing runs."""
        return self.watermark_blocks if self.logical_blocks else 0

    def admit(self, r: SimRequest) -> bool:
        """Give ``r`` its sequences (``r.seqs``) and their first ``prompt_now + 1`` slots; False,
        with nothing changed, when it does not fit."""
        raise NotImplementedError

    def grow(self, s: SimSequence, need: int) -> bool:
        """Make room for ``need`` tokens in ``s``; False (nothing changed) when it cannot."""
        raise NotImplementedError

    def release(self, r: SimRequest, cur_len: int, finished: bool) -> None:
        """Give back everything ``r`` holds; its sequences are ``cur_len`` tokens long."""
        raise NotImplementedError

    def usage(self) -> Usage:
        raise NotImplementedError

    def sync(self, s: SimSequence, cur_len: int) -> None:
        pass

    def busy(self) -> bool:
        """True while some sequence holds memory (a policy serves one simulation at a time)."""
        return self.logical_blocks != 0

    def check(self, requests: Iterable[SimRequest]) -> None:
        """Assert the structure's invariants and that it agrees with the running ``requests``."""

    def cached_prefix_len(self, r: SimRequest) -> int:
        """Prompt tokens of ``r`` its cache holds now (read-only; 0 without a prefix cache or ids)."""
        toks = r.tokens_now()
        return self.prefix_cache.peek_prefix_len(toks) if toks is not None and self.prefix_cache is not None else 0

    @property
    def bytes_copied(self) -> int:
        """Bytes moved to grow a request (contiguous policies only)."""
        return 0

    def beam_reorder(self, r: SimRequest, cur_len: int, rng: np.random.Generator, decay: float) -> None:
        pass
