"""Memory policies for the simulator: who gets which KV slots, on the real allocator code.

One policy a file, each a thin adapter over the structure the lessons animate (the protocol,
:class:`Usage` and the simulator's request state are in ``base.py``). The vLLM paper's four
systems come first (Kwon et al., SOSP 2023, Sec. 6.1), then the ablation and kvlab's own:

=====================  ======================  ==============================================
policy                 file                    structure and rule
=====================  ======================  ==============================================
``orca-max``           ``orca.py``             BuddyAllocator: one power-of-two run per
                                               sequence holding ``max_len`` (Orca (Max))
``orca-pow2``          ``orca.py``             ... holding ``prompt + next_pow2(output)``
                                               (Orca (Pow2))
``orca-oracle``        ``orca.py``             ... holding ``prompt + output`` (Orca (Oracle))
``vllm``               ``paged.py``            BlockManager, blocks on demand, with vLLM
                                               2023's scheduler (prompt steps on their own)
``firstfit-max``,      ``contiguous.py``       the ablation: the Orca estimates on a first-fit
``firstfit-pow2``,                             arena of token slots, no rounding
``firstfit-oracle``
``pow2``               ``contiguous.py``       reserve the next power of two of the current
                                               length, grow by doubling (kvlab's own policy,
                                               not the paper's Orca (Pow2))
``paged``              ``paged.py``            BlockManager: blocks on demand; n samples or
                                               beams are independent sequences (no sharing)
``paged-share``        ``paged.py``            the same plus ``fork`` and copy-on-write:
                                               samples share the prompt, beams their history
``radix``              ``radix.py``            CacheManager (SGLang's RadixAttention): what a
                                               request computed stays cached in the tree
``block-hash``         ``block_hash.py``       BlockHashCache: vLLM's automatic prefix caching
=====================  ======================  ==============================================

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

from ...memory.ids import check_int
from .base import BudgetTooSmall, MemoryPolicy, SimRequest, SimSequence, Usage
from .block_hash import BlockHashPolicy
from .contiguous import CONTIGUOUS_MODES, ContiguousPolicy
from .orca import ORCA_MODES, OrcaPolicy
from .paged import PagedPolicy
from .radix import RadixPolicy

__all__ = ["SimSequence", "SimRequest", "Usage", "MemoryPolicy", "ContiguousPolicy", "OrcaPolicy", "PagedPolicy",
           "RadixPolicy", "BlockHashPolicy", "make_policy", "canonical_name", "POLICY_NAMES", "PAPER_POLICIES",
           "MAX_CAPACITY", "BudgetTooSmall"]

PAPER_POLICIES = (*ORCA_MODES, "vllm")  # the vLLM paper's four systems, in its order
POLICY_NAMES = (*PAPER_POLICIES, *CONTIGUOUS_MODES, "paged", "paged-share", "radix", "block-hash")
# The most token slots a policy takes: block policies keep a few Python objects per block, so a
# budget of 10**12 slots would need hundreds of GB of RAM (2**26 slots = 64 Mi = 4 Mi blocks of 16).
MAX_CAPACITY = 2**26


def canonical_name(name: str) -> str:
    """``name`` if it is one of :data:`POLICY_NAMES`; a ValueError naming the choices otherwise."""
    if name not in POLICY_NAMES:
        raise ValueError(f"unknown policy {name!r}; choose one of: {', '.join(POLICY_NAMES)}")
    return name


def make_policy(name: str, capacity: int, block_size: int = 16, max_len: int = 2048, bytes_per_token: int = 1,
                eviction_policy: str = "lru", watermark: float = 0.01) -> MemoryPolicy:
    """A policy by name (one of :data:`POLICY_NAMES`) over ``capacity`` token slots.

    ``max_len``: the context limit (contiguous and Orca policies reserve up to it); ``watermark``:
    block policies admit a request only if this fraction of the blocks stays free (vLLM's
    default 0.01, to leave running sequences room to grow); ``eviction_policy``: the radix
    tree's ("lru", "lfu", "fewest_tokens"). ``capacity`` is at most :data:`MAX_CAPACITY`.
    """
    if not 0 <= watermark < 1:
        raise ValueError(f"watermark must be in [0, 1), got {watermark}")
    capacity = check_int("capacity", capacity, 1)  # token slots
    if capacity > MAX_CAPACITY:
        raise ValueError(f"capacity of {capacity:,} token slots is more than the simulator's limit of "
                         f"{MAX_CAPACITY:,} (2**26; a block policy keeps Python objects per block)")
    name = canonical_name(name)
    if name in CONTIGUOUS_MODES:
        return ContiguousPolicy(capacity, name, max_len, bytes_per_token)
    if name in ORCA_MODES:
        return OrcaPolicy(capacity, name, block_size, max_len)
    if name in ("paged", "paged-share", "vllm"):
        pol: MemoryPolicy = PagedPolicy(capacity, block_size, share=name == "paged-share", name=name)
    elif name == "radix":
        pol = RadixPolicy(capacity, block_size, eviction_policy)
    else:
        pol = BlockHashPolicy(capacity, block_size)
    pol.watermark_blocks = int(watermark * (pol.capacity // pol.block_size))
    return pol
