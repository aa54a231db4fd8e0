"""kvlab.check: the lessons' self-test and the exercise checkers.

Every lesson starts with :func:`self_test` (versions, native or interpreter mode, one
known-answer kernel call). Every exercise ends with a checker, ``check.<name>(fn)``, that
runs the learner's function beside kvlab's own implementation on several sizes, seeds and
edge cases, prints expected beside actual, and ends with one PASS or FAIL line.

    harness.py            Checker, CheckResult, call, same_outcome, Raised, Raises, strict mode
    environment.py        self_test: the first cell of every lesson
    diagnose.py           the common mistakes a FAIL line names (half the size: K and V?, ...)
    l00_start.py          block_and_offset, common_prefix_len, reusable_tokens
    l01_why_kv_cache.py   count_flops, attend_with_cache                       (torch, the model)
    l02_how_big.py        kv_heads_for_budget, bytes_per_token_from_config, longest_context, max_concurrent
    l03_contiguous.py     reservation, first_fit, external_fragmentation, place_first_fit
    l04_paging.py         translate, blocks_needed, blocks_to_append, block_allocator
    l05_paged_kernel.py   paged_gather_kernel, paged_decode_torch, kernel_tiles (torch, Triton)
    l06_sharing.py        cow_append, sampling_blocks
    l07_radix.py          match_prefix, prefill_tokens, block_hash_reuse
    l08_eviction.py       lru_evict, inc_lock_ref, admit_plan
    l09_at_scale.py       fit_requests, optimal_hit_rate, orca_reservation     (kvlab.sim)
    l10_tiers.py          write_back_evict, load_back_plan, next_placement, arc_victims
    l11_fewer_bytes.py    streaming_keep, quest_pick, quantize_per_token        (torch)
    l12_real_server.py    predict_cached_tokens, choose_worker, router_flags

``import kvlab.check`` is light (pure Python): the checkers marked above import torch, the
model or the simulator inside the function, when they run.

Strict mode: with ``KVLAB_CHECK_STRICT=1`` in the environment a failing check raises
``AssertionError`` (CI runs the lessons with the solutions injected this way).

Example:
    >>> from kvlab import check
    >>> r = check.blocks_needed(lambda n, bs: -(-n // bs), verbose=False)   # no ValueError for n < 0
    >>> r.passed, r.failures[0].label
    (False, 'num_tokens=-1 (must raise ValueError)')
    >>> check.blocks_needed.__module__
    'kvlab.check.l04_paging'
"""
from __future__ import annotations

from .environment import SelfTestResult, self_test
from .harness import (STRICT_ENV, CaseResult, Checker, CheckResult, Raised, Raises, call, call_in_place, is_strict,
                      same_outcome)
from .l00_start import block_and_offset, common_prefix_len, reusable_tokens
from .l01_why_kv_cache import attend_with_cache, count_flops
from .l02_how_big import bytes_per_token_from_config, kv_heads_for_budget, longest_context, max_concurrent
from .l03_contiguous import external_fragmentation, first_fit, place_first_fit, reservation
from .l04_paging import block_allocator, blocks_needed, blocks_to_append, translate
from .l05_paged_kernel import kernel_tiles, paged_decode_torch, paged_gather_kernel
from .l06_sharing import cow_append, sampling_blocks
from .l07_radix import block_hash_reuse, match_prefix, prefill_tokens
from .l08_eviction import admit_plan, inc_lock_ref, lru_evict
from .l09_at_scale import fit_requests, optimal_hit_rate, orca_reservation
from .l10_tiers import arc_victims, load_back_plan, next_placement, write_back_evict
from .l11_fewer_bytes import quantize_per_token, quest_pick, streaming_keep
from .l12_real_server import choose_worker, predict_cached_tokens, router_flags

__all__ = [
    # the harness and the self-test
    "self_test", "SelfTestResult", "is_strict", "Raised", "Raises", "call", "call_in_place", "CaseResult",
    "CheckResult", "Checker", "same_outcome", "STRICT_ENV",
    # the checkers, by lesson
    "block_and_offset", "common_prefix_len", "reusable_tokens",                                     # 00
    "count_flops", "attend_with_cache",                                                           # 01
    "kv_heads_for_budget", "longest_context", "bytes_per_token_from_config", "max_concurrent",       # 02
    "reservation", "first_fit", "external_fragmentation", "place_first_fit",                      # 03
    "translate", "blocks_needed", "blocks_to_append", "block_allocator",                          # 04
    "paged_gather_kernel", "paged_decode_torch", "kernel_tiles",                                  # 05
    "cow_append", "sampling_blocks",                                                              # 06
    "match_prefix", "prefill_tokens", "block_hash_reuse",                                         # 07
    "lru_evict", "inc_lock_ref", "admit_plan",                                                    # 08
    "fit_requests", "optimal_hit_rate", "orca_reservation",                                       # 09
    "write_back_evict", "load_back_plan", "next_placement", "arc_victims",                        # 10
    "streaming_keep", "quest_pick", "quantize_per_token",                                         # 11
    "predict_cached_tokens", "choose_worker", "router_flags",                                     # 12
]
