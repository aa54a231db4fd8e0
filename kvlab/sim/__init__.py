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


def _register_cli() -> None:
    """Add ``simulate`` to ``python -m kvlab``'s ``COMMANDS``.

    ``kvlab.__main__`` imports this package on start. Run as ``python -m kvlab`` that module
    is ``sys.modules["__main__"]``, not ``kvlab.__main__``, so both are updated.
    """
    import sys

    from . import cli

    entry = ("simulate serving a workload under memory policies (simulated)", cli.add_arguments, cli.run)
    targets = [sys.modules.get("__main__"), sys.modules.get("kvlab.__main__")]
    found = False
    for mod in targets:
        spec = getattr(mod, "__spec__", None)
        if mod is not None and getattr(spec, "name", None) == "kvlab.__main__" and isinstance(getattr(mod, "COMMANDS", None), dict):
            mod.COMMANDS.setdefault("simulate", entry)
            found = True
    if not found:
        try:
            from .. import __main__ as cli_main
        except ImportError:  # pragma: no cover
            return
        cli_main.COMMANDS.setdefault("simulate", entry)


_register_cli()
