"""kvlab.sim: serving at scale, simulated, on the same allocator and tree code the lessons animate.

A laptop cannot serve OPT-13B, but it can simulate the memory of a server that does:

- :mod:`kvlab.sim.workloads`: seeded request traces (ShareGPT- and Alpaca-like lengths,
  long documents, multi-turn chats, shared prefixes, few-shot, parallel sampling, beam search);
- :mod:`kvlab.sim.policies`: contiguous (max, pow2, pow2-oracle, exact), paged, paged with
  sharing, radix tree, block-hash prefix cache, over one KV budget;
- :mod:`kvlab.sim.scheduler`: continuous batching, admission, preemption by recomputation,
  FCFS or cache-aware order, a documented cost model (:class:`CostModel`), :class:`Budget`;
- :mod:`kvlab.sim.metrics`: the memory breakdown over time, batch sizes, sharing, hit rates;
- :mod:`kvlab.sim.reproductions`: the vLLM and SGLang papers' figures, published beside
  simulated, and the source notes' claims checked.

Every number it produces is **simulated**. ``python -m kvlab simulate`` is its command line.

Example:
    >>> from kvlab import sim
    >>> t = sim.sharegpt(200, rate=4.0, seed=0)
    >>> r = sim.simulate(t, "paged", capacity=16384)
    >>> r.num_requests
    200
"""
from __future__ import annotations

from .metrics import CATEGORIES, RequestRecord, RunMetrics, SimResult, format_table
from .policies import POLICY_NAMES, BudgetTooSmall, Group, MemoryPolicy, Seq, Usage, make_policy
from .scheduler import ORDERS, PEAK_FP16_FLOPS, Budget, CostModel, simulate
from .workloads import (
    WORKLOADS,
    Request,
    Trace,
    alpaca,
    beam_search,
    few_shot,
    long_documents,
    multi_turn,
    optimal_hit_rate,
    parallel_sampling,
    scenario,
    shared_prefix,
    sharegpt,
)

__all__ = [
    "Request", "Trace", "sharegpt", "alpaca", "long_documents", "multi_turn", "shared_prefix", "few_shot",
    "scenario", "parallel_sampling", "beam_search", "optimal_hit_rate", "WORKLOADS",
    "MemoryPolicy", "make_policy", "POLICY_NAMES", "BudgetTooSmall", "Group", "Seq", "Usage",
    "simulate", "CostModel", "Budget", "ORDERS", "PEAK_FP16_FLOPS",
    "SimResult", "RunMetrics", "RequestRecord", "format_table", "CATEGORIES",
]

