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
4. **Measured, restart** (``--restart``, or with ``--measured``): "restart the server": an
   engine with a disk tier serves a request with a long system prompt; a fresh engine (a restart)
   on the same directory, and one on an empty directory (cold store), serve the next request with
   the same system prompt: prefill tokens computed, pages fetched from disk, time to first token
   (median of a few runs), and whether the tokens equal an engine without tiers.
   ``--model smollm2`` runs it on SmolLM2-135M when ``load_pretrained("smollm2")`` exists.
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
    ap.add_argument("--restart", action="store_true", help="only the restart case (measured)")
    ap.add_argument("--model", default="bundled", help="bundled (default) or smollm2 for the restart case")
    args = ap.parse_args(argv)
    if args.restart:
        return restart_case(args.model, args.quick)
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
        restart_case(args.model, args.quick)
    print(f"\n({time.perf_counter() - t0:.1f} s)")
    return 0


def _load(name: str):
    from kvlab.compute import loader

    if name == "bundled":
        return loader.load_bundled()
    try:
        return loader.load_pretrained(name)
    except Exception as e:  # the SmolLM2 loader may not be in this checkout
        raise SystemExit(f"--model {name}: load_pretrained({name!r}) failed here ({type(e).__name__}: {e})")


def restart_case(model_name: str = "bundled", quick: bool = False) -> int:
    """Section 4: a cold store against a warm one after a restart (measured on this machine)."""
    import statistics
    import tempfile

    import torch

    from kvlab.compute.engine import Engine

    torch.set_num_threads(1)
    model, tok = _load(model_name)
    system = ("You are a customer-service assistant for an online shop. Answer politely and briefly. "
              "Refunds take five to seven working days. Orders ship within two days. Invoices are sent by "
              "email after shipping. Never share another customer's data. ") * (1 if quick else 3)
    questions = ["How do I get a refund?", "When will my order ship?"]
    prompts = [tok.encode(system + q) for q in questions]
    bs, new = 16, 8
    nb = 2 * (len(prompts[0]) // bs + 4) + 8
    repeats = 1 if quick else 3

    def serve(prompt, **kw):
        eng = Engine(model, num_blocks=nb, block_size=bs, **kw)
        st = eng.submit(prompt, new)
        eng.run()
        return eng, st

    shared = next(i for i, (a, b) in enumerate(zip(*prompts)) if a != b)
    plains = [serve(prompts[1])[1] for _ in range(repeats)]
    plain = plains[-1]
    rows = []
    for label in ("cold store", "warm store (restart)"):
        ttfts, computed, fetched, same = [], 0, 0, True
        for _ in range(repeats):
            with tempfile.TemporaryDirectory() as d:
                if label.startswith("warm"):  # an earlier server wrote the system prompt's pages
                    serve(prompts[0], host_ratio=1, storage=d, storage_write="write_through")
                eng, st = serve(prompts[1], host_ratio=1, storage=d)
            ttfts.append(st.ttft)
            computed, fetched = st.prefill_computed, eng.cache_manager.tier_stats.fetched_tokens
            same = same and st.outputs == plain.outputs
        rows.append((label, computed, fetched, statistics.median(ttfts), same))
    print(f"\n4. restart the server (measured, {model_name} model, this machine): a {len(prompts[1])}-token prompt "
          f"whose first {shared} tokens (the system prompt) an earlier engine saved; block size {bs}, median of {repeats}")
    print(f"   {'store':<22} {'prefill computed':>16} {'fetched from disk':>17} {'TTFT ms':>8} {'same tokens':>11}")
    for label, computed, fetched, ttft, same in rows:
        print(f"   {label:<22} {computed:>16} {fetched:>17} {1e3 * ttft:>8.1f} {str(same):>11}")
    print(f"   no tiers: prefill computed {plain.prefill_computed}, "
          f"TTFT {1e3 * statistics.median(p.ttft for p in plains):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
