"""kvlab.sim: serving at scale, simulated, on the same allocator and tree code the lessons animate.

A laptop cannot serve OPT-13B, but it can simulate the memory of a server that does:

- :mod:`kvlab.sim.workloads`: seeded request traces (ShareGPT- and Alpaca-like lengths,
  long documents, multi-turn chats, shared prefixes, few-shot, parallel sampling, beam search);
- :mod:`kvlab.sim.policies`: one memory policy a file over one KV budget: the vLLM paper's four
  systems (``orca-max``, ``orca-pow2``, ``orca-oracle`` on a buddy allocator, ``vllm``), the
  first-fit ablation (``firstfit-*``), kvlab's ``pow2``, paged, paged with sharing, radix tree
  (through ``kvlab.reuse.CacheManager``), block-hash prefix cache;
- :mod:`kvlab.sim.simulation`: :class:`Simulation` (continuous batching in named steps:
  arrive, admit, grow, preempt, finish, advance) and :func:`simulate`, FCFS or cache-aware
  order (``kvlab.reuse.schedule``);
- :mod:`kvlab.sim.cost`: the documented cost model (:class:`CostModel`, presets ``kvlab`` and
  ``vllm-2023``) and :class:`Budget` (``Budget.table1()``: the vLLM paper's 15,728 slots);
- :mod:`kvlab.sim.metrics`: the memory breakdown over time, batch sizes, sharing, hit rates;
- :mod:`kvlab.sim.reproductions`: the vLLM paper's figures, published beside simulated, with 95%
  intervals over seeds; :mod:`kvlab.sim.claims`: the source notes' claims re-judged, the notes'
  scenario table, SGLang's hit rates; :mod:`kvlab.sim.report`: all of them as one text (the bench);
  :mod:`kvlab.sim.plots`: plotly figures of them (lazy).

Every number it produces is **simulated**. ``python -m kvlab simulate`` is its command line
(:mod:`kvlab.sim.cli`, imported only when that command runs; this package knows nothing of
the command line).

Mirrors no single file: the memory and scheduling halves of vLLM's and SGLang's servers, with
the model replaced by a cost model (each module names what it mirrors).

Example:
    >>> from kvlab import sim
    >>> t = sim.sharegpt(200, rate=4.0, seed=0)
    >>> r = sim.simulate(t, "vllm", capacity=sim.Budget.table1().tokens)
    >>> r.num_requests
    200
"""
from __future__ import annotations

from .cost import COST_PRESETS, PEAK_FP16_FLOPS, Budget, CostModel
from .metrics import CATEGORIES, RequestRecord, RunMetrics, SimResult, format_table
from .policies import (PAPER_POLICIES, POLICY_NAMES, BudgetTooSmall, MemoryPolicy, SimRequest, SimSequence, Usage,
                       make_policy)
from .simulation import ORDERS, Simulation, simulate
from .workloads import (
    WORKLOADS,
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
    synthetic,
)

__all__ = [
    "TraceRequest", "Trace", "sharegpt", "alpaca", "long_documents", "multi_turn", "shared_prefix", "few_shot",
    "scenario", "parallel_sampling", "beam_search", "optimal_hit_rate", "WORKLOADS", "synthetic",
    "MemoryPolicy", "make_policy", "POLICY_NAMES", "PAPER_POLICIES", "BudgetTooSmall", "SimRequest",
    "SimSequence", "Usage", "Simulation", "simulate", "CostModel", "Budget", "ORDERS", "PEAK_FP16_FLOPS", "COST_PRESETS",
    "SimResult", "RunMetrics", "RequestRecord", "format_table", "CATEGORIES",
]
