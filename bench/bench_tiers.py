"""Benchmark: what a host tier under the radix tree buys, and when loading KV beats recomputing it.

    .venv/bin/python bench/bench_tiers.py            # the figures of the closing note (a few seconds)
    .venv/bin/python bench/bench_tiers.py --quick    # a smaller trace (for tests)
    .venv/bin/python bench/bench_tiers.py --measured # also time the bundled model (recompute vs copy)

1. **Simulated**: a multi-turn chat (40 sessions of 6 turns, a 200-token system prompt,
   60-token questions, 150-token answers; each turn's prompt is the whole conversation so far)
   served by the simulator's radix policy with a device pool of 8,192 token slots (Llama-3 8B
   on an H100, blocks of 16): too small for the sessions' history. Host tiers of 0x, 1x, 2x and
   4x the device pool, under write_through and write_back: hit rate (prompt tokens found
   cached on any tier), prefill tokens computed and saved, tokens loaded back, bytes moved, and
   time to first token under the cost model plus each request's load time over PCIe 5.0 x16.
2. **Stated**: the break-even prefix length (``kvlab.reuse.offload.break_even_tokens``) for
   Llama-3 8B (and two more presets) on an H100 (989 TFLOP/s dense bf16 at 50% MFU) over PCIe
   5.0 x16 (64 GB/s, 10 us per copy) and from NVMe SSDs (7 and 14 GB/s, 100 us per read).
3. **Measured** (``--measured``): on the bundled model and this machine, a prefill of the prefix
   against a copy of its KV between two pools (``kvlab.compute.host_pool.measure_offload``).
"""
from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from kvlab.reuse.offload import LINKS, break_even_tokens, offload_costs  # noqa: E402
from kvlab.sim.tiers import format_tier_rows, judge, multi_turn_chat, run_tiers, shared_documents  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a smaller trace (seconds)")
    ap.add_argument("--measured", action="store_true", help="also time the bundled model (needs torch)")
    args = ap.parse_args(argv)
    sessions, capacity = (12, 2048) if args.quick else (40, 8192)
    t0 = time.perf_counter()
    chat = multi_turn_chat(num_sessions=sessions, turns=6, seed=0)
    print(f"1. multi-turn chat, {len(chat)} requests ({sessions} sessions x 6 turns), device pool {capacity:,} "
          f"token slots (simulated; Llama-3 8B on an H100, TTFT includes loads over PCIe 5.0 x16)")
    rows = {}
    for wp in ("write_through", "write_back"):
        rows[wp] = run_tiers(chat, capacity, (0, 1, 2, 4), write_policy=wp)
        print(f"\n   {wp}")
        print("   " + format_tier_rows(rows[wp]).replace("\n", "\n   "))
    doc_capacity = max(capacity, 4096)  # a 2,000-token document plus its question and answer must fit
    docs = run_tiers(shared_documents(num_requests=60 if args.quick else 200, seed=0), doc_capacity, (0, 1, 2, 4))
    print(f"\n   shared documents (8 documents of 2,000 tokens, Zipf-popular), device pool {doc_capacity:,}, write_through")
    print("   " + format_tier_rows(docs).replace("\n", "\n   "))
    print("\n   against SGLang's HiCache docs and blog, and the notes:")
    for line in judge(rows["write_back"], docs):
        print("   " + line)

    print("\n2. break-even prefix length: loading the KV is faster than recomputing it from this many tokens on "
          "(stated numbers: H100 989 TFLOP/s at 50% MFU)")
    links = ("pcie-gen5-x16", "nvme-gen4", "nvme-gen5")
    print(f"   {'model':<12} {'KiB/token':>9} " + " ".join(f"{name:>14}" for name in links))
    for model in ("llama-3-8b", "llama-2-7b", "llama-2-70b"):
        bpt = offload_costs(model, 1).kv_bytes
        print(f"   {model:<12} {bpt / 1024:>9.0f} " + " ".join(f"{break_even_tokens(model, 'h100-80gb', name):>14,}"
                                                            for name in links))
    c = offload_costs("llama-3-8b", 4096, "h100-80gb", "pcie-gen5-x16")
    print(f"   Llama-3 8B, a 4,096-token prefix: recompute {1e3 * c.recompute_s:.1f} ms, load over "
          f"{LINKS['pcie-gen5-x16'].name} {1e3 * c.load_s:.2f} ms ({c.speedup:.0f}x faster)")

    if args.measured:
        import torch

        from kvlab.compute.host_pool import measure_offload
        from kvlab.compute.loader import load_bundled

        torch.set_num_threads(1)
        model, _ = load_bundled()
        print("\n3. measured on the bundled model, this machine (both pools in host memory: a copy is a memcpy)")
        for r in measure_offload(model, [64, 256, 1024] if not args.quick else [64, 256]):
            print(f"   prefix {r['prefix_len']:>5}: recompute {1e3 * r['recompute_s']:8.2f} ms, copy back "
                  f"{1e3 * r['load_s']:6.3f} ms ({r['recompute_s'] / r['load_s']:.0f}x), {r['kv_bytes'] / 1e6:.2f} MB")
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
