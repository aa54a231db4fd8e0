"""``python -m kvlab simulate``: run a workload through one policy, or all side by side.

    python -m kvlab simulate --model opt-13b --gpu a100-40gb --workload sharegpt --policy paged
    python -m kvlab simulate --workload sharegpt --policy all --num-requests 2000
    python -m kvlab simulate --workload few_shot --policy radix --order both --tokens 20000

Prints one row per run (every figure **simulated**): mean requests in the batch, the
memory breakdown of the vLLM paper's Figure 2 (averaged over iterations where requests
were waiting, i.e. memory was the limit), prefix hit rate, preemptions, and the cost
model's throughput and median time to first token.

Mirrors vLLM's ``benchmarks/benchmark_serving.py`` options where they exist (``--num-prompts``
is ``--num-requests``, ``--request-rate`` is ``--rate``, ``--block-size``); the rest are kvlab's.
"""
from __future__ import annotations

import argparse
import math

from ..memory.kvspec import GPUS, MODELS, get_model
from .cost import Budget, CostModel
from .metrics import format_table
from .policies import POLICY_NAMES, make_policy
from .simulation import ORDERS, simulate
from .workloads import WORKLOADS

__all__ = ["add_arguments", "run", "DEFAULT_RATES"]

DEFAULT_RATES = {"sharegpt": 2.0, "alpaca": 30.0, "long_documents": 0.5, "multi_turn": 1.0, "shared_prefix": 4.0,
                 "few_shot": 8.0}
ALL_BASIC = ("max", "pow2", "pow2-oracle", "exact", "paged")
COLUMNS = ["policy", "order", "mean_batch", "token_states", "reservation", "internal_frag", "external_frag", "cached",
           "free", "hit_rate", "preemptions", "throughput_tok_s", "ttft_p50_s"]
PERCENT = ("token_states", "reservation", "internal_frag", "external_frag", "cached", "free", "hit_rate")


def _rate(text: str) -> float:
    v = float(text)
    if math.isnan(v) or v <= 0:
        raise argparse.ArgumentTypeError(f"rate must be > 0 requests/s (or inf), got {text}")
    return v


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="opt-13b", help=f"one of: {', '.join(MODELS)} (default opt-13b)")
    p.add_argument("--gpu", default="a100-40gb", help=f"one of: {', '.join(GPUS)} (default a100-40gb)")
    p.add_argument("--workload", default="sharegpt", choices=sorted(WORKLOADS), help="trace to generate")
    p.add_argument("--policy", default="all",
                   help=f"one of: {', '.join(POLICY_NAMES)}, or 'all' ({', '.join(ALL_BASIC)}, plus radix and block-hash "
                        "for workloads with shared prefixes)")
    p.add_argument("--num-requests", type=int, default=1000, help="requests (sessions for multi_turn)")
    p.add_argument("--rate", type=_rate, default=None, help="arrivals per second (default: per workload; inf = all at once)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--order", default="fcfs", choices=list(ORDERS) + ["both"])
    p.add_argument("--kv-gb", type=float, default=None, help="KV budget in GB (default: the GPU's memory left after weights)")
    p.add_argument("--utilization", type=float, default=0.9, help="fraction of GPU memory the server may use (default 0.9)")
    p.add_argument("--tokens", type=int, default=None, help="KV budget in token slots (overrides --kv-gb)")
    p.add_argument("--all-iterations", action="store_true", help="average the breakdown over every iteration, not only loaded ones")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(a: argparse.Namespace) -> None:
    if a.num_requests < 1:
        raise ValueError(f"--num-requests must be >= 1, got {a.num_requests}")
    if a.tokens is not None:
        if a.tokens < 1:
            raise ValueError(f"--tokens must be >= 1, got {a.tokens}")
        budget = Budget(a.tokens, get_model(a.model).bytes_per_token, f"{a.tokens:,} token slots given")
    else:
        kv = a.kv_gb * 1e9 if a.kv_gb is not None else None
        budget = Budget.from_model(a.model, a.gpu, a.utilization, kv)
    rate = a.rate if a.rate is not None else DEFAULT_RATES[a.workload]
    trace = WORKLOADS[a.workload](a.num_requests, rate=rate, seed=a.seed)
    if a.policy == "all":
        policies = list(ALL_BASIC) + (["radix", "block-hash"] if trace.has_tokens else [])
    elif a.policy in POLICY_NAMES:
        policies = [a.policy]
    else:
        raise ValueError(f"unknown policy {a.policy!r}; choose one of: {', '.join(POLICY_NAMES)}, all")
    orders = list(ORDERS) if a.order == "both" else [a.order]
    cost = CostModel.for_model(a.model, a.gpu)
    max_len = max(2048, trace.max_total_len)
    print(f"{trace.summary()}, rate {rate}/s, seed {a.seed}")
    print(f"KV budget: {budget.tokens:,} token slots ({budget.source}); block size {a.block_size}; max_len {max_len}")
    rows = []
    for name in policies:
        for order in orders:
            if order == "cache-aware" and name not in ("radix", "block-hash"):
                continue
            pol = make_policy(name, budget.tokens, a.block_size, max_len=max_len, bytes_per_token=budget.bytes_per_token)
            r = simulate(trace, pol, order=order, cost=cost, seed=a.seed, progress=None if not a.no_progress else False)
            rows.append(r.summary(loaded=not a.all_iterations))
    print(format_table(rows, COLUMNS, PERCENT))
    print("all figures simulated; breakdown = share of the KV budget, averaged over "
          + ("all iterations" if a.all_iterations else "iterations with requests waiting") + "; throughput and TTFT from the cost model")
