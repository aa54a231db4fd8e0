"""Serving at scale, simulated: the papers' figures beside the simulator's, the notes' claims, the speed.

    .venv/bin/python bench/bench_sim.py              # every reproduction at 3x the lesson's size
    .venv/bin/python bench/bench_sim.py --scale 1    # the lesson's sizes (about 10 s)
    .venv/bin/python bench/bench_sim.py --speed-only

Every number printed beside "simulated" comes from kvlab.sim; "published" numbers are the
papers' (see kvlab/sim/reproductions.py for the sources). The speed figure is the wall
time of 10,000 ShareGPT-like requests through each policy on this machine (target: < 10 s).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from kvlab.sim import format_table  # noqa: E402
from kvlab.sim.policies import POLICY_NAMES  # noqa: E402
from kvlab.sim.reproductions import all_reproductions, notes_claims, scenario_table, speed  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scale", type=float, default=3.0, help="reproduction sizes, in multiples of the lesson's (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--speed-requests", type=int, default=10_000)
    ap.add_argument("--speed-only", action="store_true")
    a = ap.parse_args()
    t0 = time.perf_counter()
    if not a.speed_only:
        for rep in all_reproductions(a.scale, a.seed):
            print(rep)
            print()
        rows = scenario_table(max(100, int(300 * a.scale)), a.seed)
        print("== The notes' scenario table (simulated: requests served at once when all arrive at t=0) ==")
        print(format_table(rows, ["scenario", "mean_in", "mean_out", "max", "exact", "paged", "radix", "paged_vs_max",
                                  "paged_vs_exact", "radix_hit"], percent=("radix_hit",)))
        print("(paged batches are capped at max_batch=256 sequences, vLLM's max_num_seqs)\n")
        print("== The notes' claims, checked (simulated) ==")
        for c in notes_claims(max(200, int(400 * a.scale)), a.seed, scenarios=rows):
            print(f"- \"{c.claim}\": {c.verdict.upper()}\n  {c.evidence}")
        print()
    print(f"== Speed: {a.speed_requests:,} ShareGPT-like requests (2/s) through one policy, wall time here ==")
    for p in POLICY_NAMES:
        s = speed(a.speed_requests, p, a.seed)
        print(f"  {p:12s} {s['simulate_s']:6.2f} s  ({s['iterations']:,} iterations, {s['simulated_s']:,.0f} simulated s)",
              flush=True)
    print(f"\ntotal bench time {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
