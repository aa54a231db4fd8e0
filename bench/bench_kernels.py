"""Benchmark the kvlab Triton kernels: paged decode, split-K, extend (prefix) attention, KV store.

One command::

    python bench/bench_kernels.py             # on a CUDA GPU: the full table (a few minutes)
    python bench/bench_kernels.py --dry-run   # anywhere: tiny sizes, checks the plumbing only

Decode is measured for batch 1, 8 and 64 and contexts 1k, 4k, 16k and 32k (32 query heads,
8 KV heads, head_dim 128, block size 16, fp16 and bf16), side by side in the same run with
torch ``scaled_dot_product_attention`` on contiguous K/V of the same lengths and with the
torch gather reference. Bandwidth = bytes of K and V read / time; percent of peak uses the
GPU's HBM bandwidth looked up from its name (H200 4.8 TB/s, H100 SXM 3.35 TB/s, A100 80GB
2.0 TB/s; anything else is reported as unknown unless ``--peak-tbps`` is given).

Timing: ``triton.testing.do_bench`` (median, L2 flushed between runs) on a GPU. In the Triton
interpreter (no GPU) the script times with ``time.perf_counter`` and labels every figure
"interpreter, plumbing only": those numbers say nothing about kernel speed.

The kernels are launched through their unchecked ``launch_*`` helpers; the decode rows also
time the public wrapper on its hot path (``context_lens_cpu`` given, ``check=False``: no
device->host copy), so its host-side cost shows if it matters. Split-K: "auto" is the plan
``kvlab.kernels.plan_decode`` chooses at run time for this GPU's SM count.

Writes JSON to bench/out/ (git-ignored) and prints a table. Never asserted in tests.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from kvlab.kernels import DEVICE, KERNEL_MODE, kernel_mode_report, paged_decode_attention, plan_decode  # noqa: E402
from kvlab.kernels.extend import launch_extend_attention  # noqa: E402
from kvlab.kernels.kv_store import launch_store_kvcache  # noqa: E402
from kvlab.kernels.paged_decode import launch_paged_decode  # noqa: E402
from kvlab.kernels.reference import extend_attention_ref, paged_decode_attention_ref  # noqa: E402

OUT_DIR = Path(__file__).resolve().parent / "out"
INTERP_LABEL = "interpreter, plumbing only"

FULL = dict(batches=[1, 8, 64], contexts=[1024, 4096, 16384, 32768], dtypes=["float16", "bfloat16"],
            heads=32, kv_heads=8, head_dim=128, block_size=16, split_k=(1, 32768), split_choices=[1, 8, 16, 32, 64],
            extend=dict(prefix=[4096, 1024, 0, 8192], extend=[512, 512, 1024, 256]), store_tokens=[64, 8192])
DRY = dict(batches=[1, 2], contexts=[16, 48], dtypes=["float16", "bfloat16"],
           heads=4, kv_heads=2, head_dim=32, block_size=16, split_k=(1, 48), split_choices=[1, 2],
           extend=dict(prefix=[16, 0], extend=[8, 5]), store_tokens=[4, 32])


def peak_bandwidth(device_name: str) -> float | None:
    """HBM bandwidth in bytes/s from the device name, or None. Example: 'NVIDIA H200' -> 4.8e12."""
    name = device_name.upper()
    if "H200" in name:
        return 4.8e12
    if "H100" in name and ("SXM" in name or "HBM3" in name):
        return 3.35e12
    if "A100" in name and "80GB" in name:
        return 2.0e12
    return None


def make_timer(native: bool):
    """fn -> milliseconds. do_bench on a GPU; a median of 3 perf_counter runs in the interpreter."""
    if native:
        import triton.testing

        return lambda fn: float(triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median"))

    def cpu_time(fn):
        fn()  # warm-up (first call also traces the kernel)
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            fn()
            runs.append((time.perf_counter() - start) * 1e3)
        return statistics.median(runs)

    return cpu_time


def decode_plan(cfg: dict, batch: int, context: int, dtype: torch.dtype, num_sms: int | None, num_splits=None):
    """The decode plan for `batch` sequences of `context` tokens: chosen for num_sms SMs, or forced."""
    return plan_decode(batch, cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["block_size"], dtype,
                       context_lens=[context] * batch, num_sms=num_sms, num_splits=num_splits)


def paged_cache(num_tokens: int, cfg: dict, dtype: torch.dtype, seed: int = 0):
    """Random K/V cache with room for num_tokens tokens: (num_blocks, block_size, kv_heads, head_dim) each."""
    torch.manual_seed(seed)
    num_blocks = math.ceil(num_tokens / cfg["block_size"])
    shape = (num_blocks, cfg["block_size"], cfg["kv_heads"], cfg["head_dim"])
    return torch.randn(shape, dtype=dtype, device=DEVICE), torch.randn(shape, dtype=dtype, device=DEVICE)


def shuffled_tables(batch: int, context: int, num_blocks: int, block_size: int) -> torch.Tensor:
    """Each sequence gets ceil(context / block_size) distinct random physical blocks: (batch, blocks) int32."""
    per_seq = math.ceil(context / block_size)
    perm = torch.randperm(num_blocks, device=DEVICE)[: batch * per_seq]
    return perm.reshape(batch, per_seq).to(torch.int32)


def contiguous_kv(cache: torch.Tensor, tables: torch.Tensor, context: int) -> torch.Tensor:
    """The same K (or V) laid out contiguously for SDPA: (batch, kv_heads, context, head_dim)."""
    batch, kv_heads, head_dim = tables.shape[0], cache.shape[2], cache.shape[3]
    return cache[tables.long()].reshape(batch, -1, kv_heads, head_dim)[:, :context].transpose(1, 2).contiguous()


def sdpa_decode(q, k, v):
    """torch SDPA for one query token per sequence on contiguous K/V (batch, kv_heads, ctx, head_dim)."""
    q4 = q.unsqueeze(2)                                                    # (batch, heads, 1, head_dim)
    try:
        return torch.nn.functional.scaled_dot_product_attention(q4, k, v, enable_gqa=True).squeeze(2)
    except TypeError:  # torch < 2.5: no enable_gqa
        group = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
        return torch.nn.functional.scaled_dot_product_attention(q4, k, v).squeeze(2)


def bench_decode(cfg, timer, peak, num_sms, skip_ref, log):
    rows, split_rows = [], []
    heads, kv_heads, head_dim, bs = cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["block_size"]
    scale = head_dim**-0.5
    for dtype_name in cfg["dtypes"]:
        dtype = getattr(torch, dtype_name)
        if KERNEL_MODE == "interpreter" and dtype == torch.bfloat16:
            log(f"decode {dtype_name}: skipped (bf16 is computed wrongly by the Triton interpreter)")
            continue
        k_cache, v_cache = paged_cache(max(cfg["batches"]) * max(cfg["contexts"]) + bs * max(cfg["batches"]), cfg, dtype)
        for batch in cfg["batches"]:
            for ctx in cfg["contexts"]:
                tables = shuffled_tables(batch, ctx, k_cache.shape[0], bs)  # (batch, ctx / bs)
                lens = torch.full((batch,), ctx, dtype=torch.int32, device=DEVICE)
                q = torch.randn((batch, heads, head_dim), dtype=dtype, device=DEVICE)
                out = torch.empty_like(q)
                kv_bytes = 2 * batch * ctx * kv_heads * head_dim * k_cache.element_size()

                one_split = decode_plan(cfg, batch, ctx, dtype, num_sms, num_splits=1)

                def triton_fn(plan=one_split):
                    return launch_paged_decode(q, k_cache, v_cache, tables, lens, out, scale, plan)

                k_contig, v_contig = contiguous_kv(k_cache, tables, ctx), contiguous_kv(v_cache, tables, ctx)
                row = dict(dtype=dtype_name, batch=batch, context=ctx, kv_bytes=kv_bytes)
                row["triton_ms"] = timer(triton_fn)
                expected = sdpa_decode(q, k_contig, v_contig)
                row["max_abs_diff_vs_sdpa"] = float((triton_fn().float() - expected.float()).abs().max())
                auto = decode_plan(cfg, batch, ctx, dtype, num_sms)
                row["auto_splits"] = auto.num_splits
                row["triton_auto_ms"] = timer(lambda: triton_fn(auto)) if auto.num_splits > 1 else row["triton_ms"]
                host_lens = [ctx] * batch
                row["wrapper_ms"] = timer(lambda: paged_decode_attention(q, k_cache, v_cache, tables, lens, scale,
                                                                         context_lens_cpu=host_lens, check=False))
                row["sdpa_ms"] = timer(lambda: sdpa_decode(q, k_contig, v_contig))
                if not skip_ref:
                    row["ref_ms"] = timer(lambda: paged_decode_attention_ref(q, k_cache, v_cache, tables, lens, scale))
                for key in ("triton", "triton_auto", "sdpa"):
                    gbps = kv_bytes / (row[f"{key}_ms"] * 1e-3) / 1e9
                    row[f"{key}_GBps"] = gbps
                    row[f"{key}_pct_peak"] = None if peak is None else 100 * gbps * 1e9 / peak
                rows.append(row)
                log(format_decode_row(row))
                if (batch, ctx) == tuple(cfg["split_k"]):
                    for s in cfg["split_choices"]:
                        forced = decode_plan(cfg, batch, ctx, dtype, num_sms, num_splits=s)
                        ms = timer(lambda: triton_fn(forced))
                        gbps = kv_bytes / (ms * 1e-3) / 1e9
                        split_rows.append(dict(dtype=dtype_name, batch=batch, context=ctx, num_splits=s, ms=ms, GBps=gbps,
                                               pct_peak=None if peak is None else 100 * gbps * 1e9 / peak))
                k_contig = v_contig = None                              # free memory before the next size
    return rows, split_rows


def bench_extend(cfg, timer, skip_ref, log):
    rows = []
    heads, head_dim, bs = cfg["heads"], cfg["head_dim"], cfg["block_size"]
    prefix, extend = cfg["extend"]["prefix"], cfg["extend"]["extend"]
    for dtype_name in cfg["dtypes"]:
        dtype = getattr(torch, dtype_name)
        if KERNEL_MODE == "interpreter" and dtype == torch.bfloat16:
            continue
        seq = [p + e for p, e in zip(prefix, extend)]
        k_cache, v_cache = paged_cache(sum(seq) + bs * len(seq), cfg, dtype, seed=1)
        per_seq = max(math.ceil(n / bs) for n in seq)
        perm = torch.randperm(k_cache.shape[0], device=DEVICE).to(torch.int32)
        tables = torch.zeros((len(seq), per_seq), dtype=torch.int32, device=DEVICE)
        used = 0
        for r, n in enumerate(seq):
            tables[r, : math.ceil(n / bs)] = perm[used : used + math.ceil(n / bs)]
            used += math.ceil(n / bs)
        q = torch.randn((sum(extend), heads, head_dim), dtype=dtype, device=DEVICE)
        out = torch.empty_like(q)
        as_dev = lambda xs: torch.tensor(xs, dtype=torch.int32, device=DEVICE)  # noqa: E731
        starts = as_dev([sum(extend[:r]) for r in range(len(extend))])

        def fn():
            return launch_extend_attention(q, k_cache, v_cache, tables, starts, as_dev(prefix), as_dev(extend),
                                           max(extend), out, head_dim**-0.5)

        # 2 matmuls x 2 flops per multiply-add, over the (causal) keys each new token sees.
        flops = 4 * heads * head_dim * sum(sum(p + i + 1 for i in range(e)) for p, e in zip(prefix, extend))
        row = dict(dtype=dtype_name, prefix_lens=prefix, extend_lens=extend, triton_ms=timer(fn))
        row["max_abs_diff_vs_ref"] = float((fn().float() - extend_attention_ref(q, k_cache, v_cache, tables, prefix,
                                                                                 extend).float()).abs().max())
        if not skip_ref:
            row["ref_ms"] = timer(lambda: extend_attention_ref(q, k_cache, v_cache, tables, prefix, extend))
        row["new_tokens_per_s"] = sum(extend) / (row["triton_ms"] * 1e-3)
        row["TFLOPs"] = flops / (row["triton_ms"] * 1e-3) / 1e12
        rows.append(row)
        log(f"extend {dtype_name} prefix {prefix} extend {extend}: {row['triton_ms']:.3f} ms, "
            f"{row['new_tokens_per_s']:.0f} new tokens/s, {row['TFLOPs']:.1f} TFLOP/s")
    return rows


def bench_store(cfg, timer, peak, log):
    rows = []
    kv_heads, head_dim, bs = cfg["kv_heads"], cfg["head_dim"], cfg["block_size"]
    for dtype_name in cfg["dtypes"]:
        dtype = getattr(torch, dtype_name)
        for n in cfg["store_tokens"]:
            k_cache, v_cache = paged_cache(2 * n, cfg, dtype, seed=2)
            key = torch.randn((n, kv_heads, head_dim), dtype=dtype, device=DEVICE)
            value = torch.randn_like(key)
            slots = torch.randperm(k_cache.shape[0] * bs, device=DEVICE)[:n]   # int64, scattered
            ms = timer(lambda: launch_store_kvcache(key, value, k_cache, v_cache, slots))
            moved = 4 * key.numel() * key.element_size()                       # read K, V; write K, V
            gbps = moved / (ms * 1e-3) / 1e9
            row = dict(dtype=dtype_name, tokens=n, ms=ms, GBps=gbps, pct_peak=None if peak is None else 100 * gbps * 1e9 / peak)
            rows.append(row)
            log(f"store {dtype_name} {n} tokens: {ms:.3f} ms, {gbps:.1f} GB/s")
    return rows


def fmt(x, spec=".2f"):
    return "-" if x is None else format(x, spec)


def format_decode_row(r):
    return (f"decode {r['dtype']:>8} B{r['batch']:<3} ctx {r['context']:>6}: triton {r['triton_ms']:.3f} ms "
            f"({r['triton_GBps']:.0f} GB/s, {fmt(r['triton_pct_peak'], '.0f')}% peak), split-K x{r['auto_splits']} "
            f"{r['triton_auto_ms']:.3f} ms, wrapper {r['wrapper_ms']:.3f} ms, sdpa {r['sdpa_ms']:.3f} ms, "
            f"ref {fmt(r.get('ref_ms'), '.3f')} ms")


def table(rows, columns):
    """Plain-text table: columns are (header, key, format)."""
    cells = [[h for h, _, _ in columns]] + [[fmt(r.get(k), f) if not isinstance(r.get(k), (str, list)) else str(r.get(k))
                                             for _, k, f in columns] for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(columns))]
    lines = ["  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def check_targets(decode, split, native, dry):
    """The issue's targets; only meaningful on a GPU at full size."""
    if not native or dry:
        return [dict(target="all", status="n/a", note="needs a GPU run at full size")]
    out = []
    for r in decode:
        if (r["batch"], r["context"]) == (64, 4096):
            pct, ratio = r["triton_pct_peak"], r["triton_ms"] / r["sdpa_ms"]
            out.append(dict(target=f"decode B64 4k {r['dtype']}: >= 70% of peak", value=pct,
                            status="n/a" if pct is None else ("PASS" if pct >= 70 else "FAIL")))
            out.append(dict(target=f"decode B64 4k {r['dtype']}: <= 1.1x SDPA time", value=ratio,
                            status="PASS" if ratio <= 1.1 else "FAIL"))
    for dtype in sorted({r["dtype"] for r in split}):
        best = max((r for r in split if r["dtype"] == dtype), key=lambda r: r["GBps"])
        out.append(dict(target=f"split-K B1 32k {dtype}: >= 50% of peak (best x{best['num_splits']})",
                        value=best["pct_peak"], status="n/a" if best["pct_peak"] is None else
                        ("PASS" if best["pct_peak"] >= 50 else "FAIL")))
    return out


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes: check the plumbing (works without a GPU)")
    parser.add_argument("--skip-ref", action="store_true", help="do not time the torch gather references")
    parser.add_argument("--peak-tbps", type=float, default=None, help="peak HBM bandwidth in TB/s (overrides the lookup)")
    parser.add_argument("--out", type=Path, default=OUT_DIR, help="folder for the JSON result")
    args = parser.parse_args(argv)

    native = KERNEL_MODE == "native"
    cfg = DRY if args.dry_run else FULL
    if not native and not args.dry_run:
        print("No GPU: the full benchmark needs native mode. Running --dry-run sizes instead.")
        cfg, args.dry_run = DRY, True
    if not native:
        torch.set_num_threads(1)
    device_name = torch.cuda.get_device_name(0) if native else "CPU (Triton interpreter)"
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if native else 4  # dry run: a pretend GPU
    peak = args.peak_tbps * 1e12 if args.peak_tbps else (peak_bandwidth(device_name) if native else None)
    timing = "triton.testing.do_bench, median ms" if native else f"time.perf_counter, median of 3 ({INTERP_LABEL})"
    started = time.perf_counter()
    print(kernel_mode_report())
    print(f"timing: {timing}; peak bandwidth: {fmt(peak and peak / 1e12)} TB/s"
          + ("" if peak or not native else " (unknown GPU: pass --peak-tbps)"))

    log = lambda line: print("  " + line, flush=True)  # noqa: E731
    decode, split = bench_decode(cfg, make_timer(native), peak, num_sms, args.skip_ref, log)
    extend = bench_extend(cfg, make_timer(native), args.skip_ref, log)
    store = bench_store(cfg, make_timer(native), peak, log)
    targets = check_targets(decode, split, native, args.dry_run)
    elapsed = time.perf_counter() - started

    label = "" if native else f"   [{INTERP_LABEL}]"
    print(f"\nDecode: {cfg['heads']} q heads / {cfg['kv_heads']} kv heads, head_dim {cfg['head_dim']}, "
          f"block size {cfg['block_size']}; bandwidth = K+V bytes / time{label}")
    print(table(decode, [("dtype", "dtype", ""), ("batch", "batch", "d"), ("context", "context", "d"),
                         ("triton ms", "triton_ms", ".3f"), ("GB/s", "triton_GBps", ".0f"), ("% peak", "triton_pct_peak", ".0f"),
                         ("splits", "auto_splits", "d"), ("split-K ms", "triton_auto_ms", ".3f"),
                         ("split %", "triton_auto_pct_peak", ".0f"), ("wrapper ms", "wrapper_ms", ".3f"),
                         ("sdpa ms", "sdpa_ms", ".3f"),
                         ("sdpa %", "sdpa_pct_peak", ".0f"), ("ref ms", "ref_ms", ".3f"),
                         ("|diff|", "max_abs_diff_vs_sdpa", ".1e")]))
    print(f"\nSplit-K at batch {cfg['split_k'][0]}, context {cfg['split_k'][1]}{label}")
    print(table(split, [("dtype", "dtype", ""), ("splits", "num_splits", "d"), ("ms", "ms", ".3f"),
                        ("GB/s", "GBps", ".0f"), ("% peak", "pct_peak", ".0f")]))
    print(f"\nExtend (prefix) attention{label}")
    print(table(extend, [("dtype", "dtype", ""), ("prefix", "prefix_lens", ""), ("extend", "extend_lens", ""),
                         ("triton ms", "triton_ms", ".3f"), ("new tok/s", "new_tokens_per_s", ".0f"),
                         ("TFLOP/s", "TFLOPs", ".2f"), ("ref ms", "ref_ms", ".3f"), ("|diff|", "max_abs_diff_vs_ref", ".1e")]))
    print(f"\nKV store (read K,V + write K,V){label}")
    print(table(store, [("dtype", "dtype", ""), ("tokens", "tokens", "d"), ("ms", "ms", ".3f"),
                        ("GB/s", "GBps", ".1f"), ("% peak", "pct_peak", ".0f")]))
    print("\nTargets")
    print(table(targets, [("target", "target", ""), ("value", "value", ".2f"), ("status", "status", "")]))

    args.out.mkdir(parents=True, exist_ok=True)
    stamp = dt.datetime.now(dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    path = args.out / f"bench_kernels_{'dry' if args.dry_run else 'full'}_{stamp}.json"
    result = dict(meta=dict(report=kernel_mode_report(), mode=KERNEL_MODE, device=device_name, dry_run=args.dry_run,
                            timing=timing, peak_bytes_per_s=peak, seconds=elapsed, config=cfg,
                            note=None if native else INTERP_LABEL),
                  decode=decode, split_k=split, extend=extend, store=store, targets=targets)
    path.write_text(json.dumps(result, indent=1))
    print(f"\nwrote {path} in {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
