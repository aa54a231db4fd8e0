"""Memory policies for the simulator: who gets which KV slots, on the real allocator code.

One policy a file, each a thin adapter over the structure the lessons animate (the protocol,
:class:`Usage` and the simulator's request state are in ``base.py``):

==================  ===========================  =============================================
policy              file                         structure and rule
==================  ===========================  =============================================
``max``             ``contiguous.py``            ContiguousArena: reserve ``max_len`` slots per
                                                 request (Orca (Max) in the vLLM paper)
``pow2``            ``contiguous.py``            reserve the next power of two of the current
                                                 length, grow by doubling (kvlab's own policy)
``pow2-oracle``     ``contiguous.py``            reserve ``prompt + next_pow2(output)``: the
                                                 paper's Orca (Pow2) rule, on first fit
``exact``           ``contiguous.py``            reserve the true final length (Orca (Oracle))
``paged``           ``paged.py``                 BlockManager: blocks on demand; n samples or
                                                 beams are independent sequences (no sharing)
``paged-share``     ``paged.py``                 the same plus ``fork`` and copy-on-write:
                                                 samples share the prompt, beams their history
``radix``           ``radix.py``                 CacheManager (SGLang's RadixAttention): what a
                                                 request computed stays cached in the tree
``block-hash``      ``block_hash.py``            BlockHashCache: vLLM's automatic prefix caching
==================  ===========================  =============================================

Not handled: swapping to CPU memory, chunked prefill, sliding windows.

Mirrors the memory side of vLLM's scheduler (``vllm/core/block_manager.py``,
``vllm/v1/core/kv_cache_manager.py``) and SGLang's (``mem_cache/radix_cache.py``).

Example (a budget of 64 slots in blocks of 16; one 20-token request):
    >>> from kvlab.sim.workloads import TraceRequest
    >>> p = make_policy("paged", capacity=64, block_size=16)
    >>> r = SimRequest(TraceRequest(0, 0.0, 20, 5))
    >>> p.admit(r), r.seqs[0].cap         # 21 slots needed: 2 blocks
    (True, 32)
    >>> p.usage().held_slots
    32
"""
from __future__ import annotations

import numpy as np

from ...memory.events import NullLog
from .base import BudgetTooSmall, MemoryPolicy, SimRequest, SimSequence, Usage
from .block_hash import BlockHashPolicy
from .contiguous import CONTIGUOUS_MODES, ContiguousPolicy
from .paged import PagedPolicy
from .radix import RadixPolicy

__all__ = ["SimSequence", "SimRequest", "Usage", "MemoryPolicy", "ContiguousPolicy", "PagedPolicy", "RadixPolicy",
           "BlockHashPolicy", "make_policy", "POLICY_NAMES", "BudgetTooSmall",
           "Seq", "Group", "NullLog"]

POLICY_NAMES = (*CONTIGUOUS_MODES, "paged", "paged-share", "radix", "block-hash")

# Old names, kept importable for one release (kvlab 0.2): Seq -> SimSequence, Group -> SimRequest;
# NullLog lives in kvlab.memory.events.
Seq = SimSequence
Group = SimRequest


def make_policy(name: str, capacity: int, block_size: int = 16, max_len: int = 2048, bytes_per_token: int = 1,
                eviction_policy: str = "lru", watermark: float = 0.01) -> MemoryPolicy:
    """A policy by name (one of :data:`POLICY_NAMES`) over ``capacity`` token slots.

    ``max_len``: the context limit (contiguous policies reserve up to it); ``watermark``:
    block policies admit a request only if this fraction of the blocks stays free (vLLM's
    default 0.01, to leave running sequences room to grow); ``eviction_policy``: the radix
    tree's ("lru", "lfu", "fewest_tokens").
    """
    if not 0 <= watermark < 1:
        raise ValueError(f"watermark must be in [0, 1), got {watermark}")
    if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) or capacity < 1:
        raise ValueError(f"capacity must be a positive number of token slots, got {capacity!r}")
    capacity = int(capacity)
    if name in CONTIGUOUS_MODES:
        return ContiguousPolicy(capacity, name, max_len, bytes_per_token)
    if name in ("paged", "paged-share"):
        pol: MemoryPolicy = PagedPolicy(capacity, block_size, share=name == "paged-share")
    elif name == "radix":
        pol = RadixPolicy(capacity, block_size, eviction_policy)
    elif name == "block-hash":
        pol = BlockHashPolicy(capacity, block_size)
    else:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
    pol.watermark_blocks = int(watermark * (pol.capacity // pol.block_size))
    return pol
