"""The whole simulated report: every reproduction of a published figure, the sweeps and the notes'
claims re-judged, as text (``bench/bench_sim.py`` prints it).

It sits above :mod:`kvlab.sim.reproductions` (the vLLM paper's figures) and :mod:`kvlab.sim.claims`
(the notes' claims and SGLang's hit rates, built on the reproductions), so neither imports the other
back.

Example: ``print(report(scale=0.05, seeds=(0,)))`` (a few seconds; the bench runs ``scale=1``).
"""
from __future__ import annotations

from .claims import notes_claims, paging_advantage, scenario_table, sglang_hit_rates
from .metrics import format_table
from .reproductions import (HOUR, SEEDS, Reproduction, batch_vs_rate, memory_bound_from, sensitivity, setting,
                            vllm_batched_requests, vllm_memory_breakdown, vllm_sharing_savings)

__all__ = ["all_reproductions", "report"]


def all_reproductions(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS) -> list[Reproduction]:
    """Every vLLM figure, ShareGPT traces of ``scale`` hours (the bench: 1; tests: less)."""
    n = max(100, int(2.0 * HOUR * scale))
    return [
        vllm_batched_requests("sharegpt", n, seeds),
        vllm_memory_breakdown(n, seeds),
        vllm_batched_requests("alpaca", max(1000, int(30.0 * HOUR * scale)), seeds),
        vllm_sharing_savings({"alpaca": max(20, int(48 * scale)), "sharegpt": max(6, int(12 * scale))}, seeds=seeds),
        sglang_hit_rates(max(100, int(300 * min(scale, 1.0))), max(10, int(40 * min(scale, 1.0))), seeds=seeds),
    ]


def report(scale: float = 1.0, seeds: tuple[int, ...] = SEEDS) -> str:
    """Everything as text: each reproduction, the sweeps and the notes' claims (all simulated)."""
    parts = [f"Setting: {setting()[0].source}; seeds {list(seeds)}"]
    parts += [str(rep) for rep in all_reproductions(scale, seeds)]
    n = max(100, int(2.0 * HOUR * scale))
    sweep = batch_vs_rate(duration_s=HOUR * scale)
    parts.append("== Mean batch against request rate (ShareGPT; simulated) ==\n" +
                 format_table(sweep, ["rate", "policy", "mean_batch", "memory_bound", "throughput_req_s"],
                              percent=("memory_bound",)) +
                 f"\nmemory-bound (over half the iterations) from: {memory_bound_from(sweep)}")
    parts.append("== Sensitivity of Fig. 13 (simulated, mean of seeds) ==\n" +
                 format_table(sensitivity(n, seeds), percent=("vllm_token_states",)))
    rows = scenario_table(max(60, int(300 * min(scale, 1.0))))
    parts.append("== The notes' scenario table (simulated: requests served at once, all arriving at t=0) ==\n" +
                 format_table(rows, ["scenario", "mean_in", "mean_out", "orca-max", "orca-oracle", "paged", "radix",
                                     "paged_vs_max", "paged_vs_oracle", "radix_hit"], percent=("radix_hit",)))
    adv = paging_advantage(num_requests=max(100, int(400 * min(scale, 1.0))))
    parts.append("== Where paging's advantage is large (simulated) ==\n" + format_table(adv))
    claims = notes_claims(n, seeds, scenarios=rows, advantage=adv)
    parts.append("== The notes' claims, re-judged (simulated) ==\n" +
                 "\n".join(f"- \"{c.claim}\": {c.verdict.upper()}\n  {c.evidence}" for c in claims))
    return "\n\n".join(parts)
