"""kvlab.sim: serving at scale, simulated, on the same allocator and tree code the lessons animate.

A laptop cannot serve OPT-13B, but it can simulate the memory of a server that does:

- :mod:`kvlab.sim.workloads`: seeded request traces (ShareGPT- and Alpaca-like lengths,
  long documents, multi-turn chats, shared prefixes, few-shot, parallel sampling, beam search);
- :mod:`kvlab.sim.policies`: one memory policy a file over one KV budget: contiguous (max,
  pow2, pow2-oracle, exact), paged, paged with sharing, radix tree (through
  ``kvlab.reuse.CacheManager``), block-hash prefix cache;
- :mod:`kvlab.sim.simulation`: :class:`Simulation` (continuous batching in named steps:
  arrive, admit, grow, preempt, finish, advance) and :func:`simulate`, FCFS or cache-aware
  order (``kvlab.reuse.schedule``);
- :mod:`kvlab.sim.cost`: the documented cost model (:class:`CostModel`) and :class:`Budget`;
- :mod:`kvlab.sim.metrics`: the memory breakdown over time, batch sizes, sharing, hit rates;
- :mod:`kvlab.sim.reproductions`: the vLLM and SGLang papers' figures, published beside
  simulated, and the source notes' claims checked.

Every number it produces is **simulated**. ``python -m kvlab simulate`` is its command line
(:mod:`kvlab.sim.cli`, imported only when that command runs; this package knows nothing of
the command line).

Mirrors no single file: the memory and scheduling halves of vLLM's and SGLang's servers, with
the model replaced by a cost model (each module names what it mirrors).

Example:
    >>> from kvlab import sim
    >>> t = sim.sharegpt(200, rate=4.0, seed=0)
    >>> r = sim.simulate(t, "paged", capacity=16384)
    >>> r.num_requests
    200
"""
from __future__ import annotations

from .cost import PEAK_FP16_FLOPS, Budget, CostModel
from .metrics import CATEGORIES, RequestRecord, RunMetrics, SimResult, format_table
from .policies import (POLICY_NAMES, BudgetTooSmall, Group, MemoryPolicy, Seq, SimRequest, SimSequence, Usage,
                       make_policy)
from .simulation import ORDERS, Simulation, simulate
from .workloads import (
    WORKLOADS,
    Request,
    Trace,
    TraceRequest,
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

# Old names (Request, Seq, Group) stay importable for one release (kvlab 0.2): TraceRequest,
# SimSequence, SimRequest are the new ones.
__all__ = [
    "TraceRequest", "Trace", "sharegpt", "alpaca", "long_documents", "multi_turn", "shared_prefix", "few_shot",
    "scenario", "parallel_sampling", "beam_search", "optimal_hit_rate", "WORKLOADS",
    "MemoryPolicy", "make_policy", "POLICY_NAMES", "BudgetTooSmall", "SimRequest", "SimSequence", "Usage",
    "Simulation", "simulate", "CostModel", "Budget", "ORDERS", "PEAK_FP16_FLOPS",
    "SimResult", "RunMetrics", "RequestRecord", "format_table", "CATEGORIES",
    "Request", "Seq", "Group",
]
