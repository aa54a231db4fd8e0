"""``python -m kvlab simulate``: run a workload through one policy, or all side by side.

    python -m kvlab simulate --model opt-13b --gpu a100-40gb --workload sharegpt --policy all --rate 2
    python -m kvlab simulate --workload sharegpt --policy vllm --seeds 3
    python -m kvlab simulate --workload few_shot --policy radix --order both --tokens 20000
    python -m kvlab simulate --policy vllm --kv-dtype int8         # the same GPU memory, int8 KV

``--kv-dtype int8`` (one byte a value plus an fp32 scale per token and head) or ``fp8`` re-divides
the same KV memory into smaller slots (``Budget.with_bytes_per_token``) and makes each decode step
read fewer bytes (the cost model); ``--bytes-per-token N`` does the same for any layout (MLA, ...).

Prints one row per run (every figure **simulated**): mean requests in the batch (with a 95%
interval over ``--seeds`` seeds), the vLLM paper's Fig. 13 bar where the setting is the paper's,
the memory breakdown of its Fig. 2 (averaged over every iteration of the run, as the paper
measured "during the experiment"; ``--loaded-only``: only iterations with requests waiting),
prefix hit rate, preemptions, and the cost model's throughput and median time to first token.
``--policy all`` lists the paper's four systems first (``orca-max``, ``orca-pow2``,
``orca-oracle``, ``vllm``), then the first-fit ablation and kvlab's own policies.

Every argument is checked before anything is printed; a bad one gives one line naming the flag
and exit code 2. The default budget for ``--model opt-13b --gpu a100-40gb`` is the paper's Table 1
(12 GiB, 15,728 slots); budgets are limited to 2**26 token slots (a block policy keeps Python
objects per block: a budget of 10**12 slots would need hundreds of GB of memory).

Mirrors vLLM's ``benchmarks/benchmark_serving.py`` options where they exist (``--num-prompts``
is ``--num-requests``, ``--request-rate`` is ``--rate``, ``--block-size``); the rest are kvlab's.
"""
from __future__ import annotations

import argparse
import dataclasses
import math
import statistics

from ..memory.kvspec import GPUS, KV_DTYPES, MODELS, get_gpu, get_model
from .cost import COST_PRESETS, Budget, CostModel
from .metrics import format_table
from .policies import MAX_CAPACITY, PAPER_POLICIES, POLICY_NAMES, BudgetTooSmall, canonical_name, make_policy
from .reproductions import interval
from .simulation import ORDERS, Simulation
from .workloads import WORKLOADS

__all__ = ["add_arguments", "run", "DEFAULT_RATES", "ALL_BASIC"]

DEFAULT_RATES = {"sharegpt": 2.0, "alpaca": 30.0, "long_documents": 0.5, "multi_turn": 1.0, "shared_prefix": 4.0,
                 "few_shot": 8.0}
ALL_BASIC = (*PAPER_POLICIES, "firstfit-max", "firstfit-pow2", "firstfit-oracle", "pow2", "paged")
PAPER_BARS = {"sharegpt": {"orca-max": 7.00, "orca-pow2": 9.81, "orca-oracle": 13.62, "vllm": 30.42},
              "alpaca": {"orca-max": 7.00, "orca-pow2": 43.24, "orca-oracle": 72.75, "vllm": 132.44}}
MAX_REQUESTS = 1_000_000
PERCENT = ("token_states", "reservation", "internal_frag", "rounding", "ext_others", "cached", "hit_rate")


def _float(flag: str, lo: float, hi: float = math.inf, allow_inf: bool = False):
    """An argparse type: a float in (lo, hi] that names ``flag`` when it is not one."""
    def parse(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be a number, got {text!r}") from None
        if math.isnan(v) or (math.isinf(v) and not allow_inf) or not lo < v <= hi:
            rng = f"> {lo:g}" + (f" and <= {hi:g}" if hi != math.inf else " (or inf)" if allow_inf else " and finite")
            raise argparse.ArgumentTypeError(f"{flag} must be {rng}, got {text}")
        return v
    return parse


def _int(flag: str, lo: int, hi: int):
    def parse(text: str) -> int:
        try:
            v = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} must be an integer, got {text!r}") from None
        if not lo <= v <= hi:
            raise argparse.ArgumentTypeError(f"{flag} must be in [{lo:,}, {hi:,}], got {v:,}")
        return v
    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default="opt-13b", help=f"one of: {', '.join(MODELS)} (default opt-13b)")
    p.add_argument("--gpu", default="a100-40gb", help=f"one of: {', '.join(GPUS)} (default a100-40gb)")
    p.add_argument("--workload", default="sharegpt", choices=sorted(WORKLOADS), help="trace to generate")
    p.add_argument("--policy", default="all",
                   help=f"one of: {', '.join(POLICY_NAMES)}, or 'all' ({', '.join(ALL_BASIC)}, plus radix and "
                        "block-hash for workloads with shared prefixes)")
    p.add_argument("--num-requests", type=_int("--num-requests", 1, MAX_REQUESTS), default=None,
                   help="requests (sessions for multi_turn); default: one hour of arrivals, at most 7,200 requests")
    p.add_argument("--rate", type=_float("--rate", 0.0, allow_inf=True), default=None,
                   help="arrivals per second (default: per workload; inf = all at once)")
    p.add_argument("--seed", type=_int("--seed", 0, 2**32 - 1), default=0, help="first seed (>= 0)")
    p.add_argument("--seeds", type=_int("--seeds", 1, 20), default=1,
                   help="runs with seeds seed, seed+1, ...; mean_batch gets a 95%% interval (default 1)")
    p.add_argument("--block-size", type=_int("--block-size", 1, 2048), default=16)
    p.add_argument("--order", default="fcfs", choices=list(ORDERS) + ["both"])
    p.add_argument("--kv-gb", type=_float("--kv-gb", 0.0), default=None,
                   help="KV budget in GB (10**9 bytes; default: the paper's 12 GiB for opt-13b on a100-40gb, else "
                        "the GPU's memory at --utilization minus the weights)")
    p.add_argument("--utilization", type=_float("--utilization", 0.0, 1.0), default=None,
                   help="fraction of GPU memory the server may use (default 0.9; giving it overrides the paper's budget)")
    p.add_argument("--tokens", type=_int("--tokens", 1, MAX_CAPACITY), default=None,
                   help=f"KV budget in token slots (overrides --kv-gb; at most {MAX_CAPACITY:,})")
    p.add_argument("--kv-dtype", default="fp16", choices=list(KV_DTYPES),
                   help="KV cache dtype (default fp16); int8 counts its per-token-per-head scales")
    p.add_argument("--bytes-per-token", type=_int("--bytes-per-token", 1, 2**40), default=None,
                   help="KV bytes per token, for any other layout (overrides the model's; not with --kv-dtype)")
    p.add_argument("--cost", default="vllm-2023", choices=list(COST_PRESETS), help="cost model preset")
    p.add_argument("--loaded-only", action="store_true", help="average the breakdown only over iterations with "
                                                              "requests waiting (default: every iteration)")
    p.add_argument("--all-iterations", action="store_true", help=argparse.SUPPRESS)  # the default now; kept
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _bytes_per_token(a: argparse.Namespace) -> tuple[int, str]:
    """The KV bytes per token of this run, and what they are (from --kv-dtype or --bytes-per-token)."""
    spec = get_model(a.model)  # ValueError naming the model
    if a.bytes_per_token is not None:
        if a.kv_dtype != "fp16":
            raise ValueError(f"give --kv-dtype or --bytes-per-token, not both (got {a.kv_dtype} and {a.bytes_per_token})")
        return a.bytes_per_token, "--bytes-per-token"
    q = spec.with_dtype(a.kv_dtype)
    return q.bytes_per_token, f"{a.kv_dtype} KV: {q.per_token_formula()}"


def _budget(a: argparse.Namespace) -> Budget:
    """The run's KV budget: --tokens slots as given, else the model's memory on the GPU (or --kv-gb)
    divided into slots of this run's bytes per token."""
    bpt, what = _bytes_per_token(a)
    get_gpu(a.gpu)
    if a.tokens is not None:
        return Budget(a.tokens, bpt, f"{a.tokens:,} token slots given")
    try:
        b = Budget.from_model(a.model, a.gpu, a.utilization, a.kv_gb * 1e9 if a.kv_gb is not None else None)
    except ValueError as e:
        raise ValueError(f"--kv-gb/--utilization: {e}") from None
    b = b.with_bytes_per_token(bpt, what)
    flag = "--kv-gb" if a.kv_gb is not None else "--utilization" if a.utilization is not None else "--gpu"
    if b.tokens > MAX_CAPACITY:
        raise ValueError(f"{flag}: a budget of {b.tokens:,} token slots is more than the simulator's limit of "
                         f"{MAX_CAPACITY:,} (2**26); give a smaller --kv-gb or --tokens")
    if b.tokens < 1:
        raise ValueError(f"{flag}: the budget holds no token slot ({b.source})")
    return b


def run(a: argparse.Namespace) -> None:
    # ---- check everything first: nothing is printed until every run is set up
    budget = _budget(a)
    if a.policy == "all":
        names = None
    else:
        names = [canonical_name(a.policy)]  # ValueError naming the choices
    rate = a.rate if a.rate is not None else DEFAULT_RATES[a.workload]
    n = a.num_requests if a.num_requests is not None else \
        max(1, min(7200, int(rate * 3600)) // (4 if a.workload == "multi_turn" else 1))
    seeds = list(range(a.seed, a.seed + a.seeds))
    traces = [WORKLOADS[a.workload](n, rate=rate, seed=s) for s in seeds]
    if names is None:
        names = list(ALL_BASIC) + (["radix", "block-hash"] if traces[0].has_tokens else [])
    orders = list(ORDERS) if a.order == "both" else [a.order]
    cost = dataclasses.replace(CostModel.for_model(a.model, a.gpu, preset=a.cost), bytes_per_token=budget.bytes_per_token)
    max_len = max(2048, max(t.max_total_len for t in traces))

    def policy(name: str):
        return make_policy(name, budget.tokens, a.block_size, max_len=max_len, bytes_per_token=budget.bytes_per_token)

    runs, skipped = [], []
    for name in names:  # one policy at a time: each Simulation checks every request against it
        pol = policy(name)
        try:
            for t in traces:
                Simulation(t, pol, cost=cost)
        except BudgetTooSmall as e:
            if a.policy != "all":
                raise
            skipped.append(f"{name} ({e})")
            continue
        runs += [(name, order) for order in orders if order == "fcfs" or name in ("radix", "block-hash")]
    # ---- then run and print
    paper = (a.model, a.gpu, budget.tokens, a.block_size) == ("opt-13b", "a100-40gb", Budget.table1().tokens, 16) \
        and rate == DEFAULT_RATES.get(a.workload) and a.workload in PAPER_BARS
    print(f"{traces[0].summary()}, rate {rate}/s, seeds {seeds[0]}..{seeds[-1]}")
    print(f"KV budget: {budget.tokens:,} token slots ({budget.source}); block size {a.block_size}; max_len {max_len}; "
          f"cost model {a.cost}")
    rows = []
    for name, order in runs:
        res = [Simulation(t, policy(name), order=order, cost=cost, seed=sd,
                          progress=None if not a.no_progress else False).run() for t, sd in zip(traces, seeds)]
        row = res[0].summary(loaded=a.loaded_only)
        if len(res) > 1:
            iv = interval([r.mean_batch for r in res])
            keys = [k for k, v in row.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
            row.update({k: statistics.fmean(r.summary(loaded=a.loaded_only)[k] for r in res) for k in keys})
            row["mean_batch_95"] = f"[{iv.lo:.2f}, {iv.hi:.2f}]"
        row["published"] = PAPER_BARS[a.workload].get(name, "-") if paper else "-"
        rows.append(row)
    columns = ["policy"] + (["order"] if orders != ["fcfs"] else []) + ["mean_batch"] + \
        (["mean_batch_95"] if len(seeds) > 1 else []) + \
        ["published", "token_states", "reservation", "internal_frag", "rounding", "ext_others"] + \
        (["cached", "hit_rate"] if traces[0].has_tokens else []) + ["preemptions", "throughput_tok_s", "ttft_p50_s"]
    print(format_table(rows, columns, PERCENT))
    for line in skipped:
        print(f"skipped: {line}")
    print("all figures simulated; published = the vLLM paper's Fig. 13 bar (p. 10) where the setting is its own; "
          "breakdown = share of the KV budget averaged over "
          + ("iterations with requests waiting" if a.loaded_only else "every iteration") +
          "; ext_others = rounding + external fragmentation + free (the paper's 'external fragmentation & others'); "
          "throughput and TTFT from the cost model")
