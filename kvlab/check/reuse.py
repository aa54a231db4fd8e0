"""Moved to one checker module per lesson (``kvlab.check.l01_why_kv_cache``, ``l05_paged_kernel``,
``l06_sharing``, ``l07_radix``, ``l08_eviction``, ``l09_at_scale``); this module re-exports them,
and the measured references the lessons print (``measured_sampling_blocks``...), for one release
(kvlab 0.2). Use ``kvlab.check.<name>``, or the lesson's module for a reference."""
from __future__ import annotations

from .l01_why_kv_cache import attend_with_cache, count_flops, generate_step_flops
from .l05_paged_kernel import paged_decode_torch, paged_gather_kernel
from .l06_sharing import cow_append, measured_sampling_blocks, sampling_blocks
from .l07_radix import match_prefix, prefill_tokens, served_prefill_tokens
from .l08_eviction import inc_lock_ref, lru_evict
from .l09_at_scale import fit_requests, measured_fit, optimal_hit_rate, optimal_prompt_hit_rate

__all__ = ["count_flops", "attend_with_cache", "fit_requests", "optimal_hit_rate", "lru_evict", "inc_lock_ref",
           "match_prefix", "prefill_tokens", "cow_append", "sampling_blocks", "paged_gather_kernel",
           "paged_decode_torch", "generate_step_flops", "measured_sampling_blocks", "served_prefill_tokens",
           "measured_fit", "optimal_prompt_hit_rate"]
