"""The figures of the GPU check (issue 14) and its one summary file; called by bench/gpu_check.sh.

    python bench/gpu_summary.py measure --out WORK/measure.json [--dry-run]
    python bench/gpu_summary.py assemble --dir WORK --out summary.json [--dry-run]   # also printed

``measure`` times, on the GPU, the shapes the targets are set on, those of real models: paged
decode at batch 64 x 4k context (fp16 and bf16; Llama-3 8B's 32 query / 8 KV heads, GQA group 4,
head_dim 128, block size 16; then fp16 with SmolLM2-135M's 9 query / 3 KV heads x 64, the model
the CPU lessons run, whose 98 MB file stays home: only its shape travels) and
split-K at batch 1 x 32k (the run-time plan, and a sweep of forced split counts), each beside
torch SDPA on contiguous copies of the same K/V. Bandwidth = K+V bytes / time, as a share of
the device's HBM peak (looked up from its name, as bench_kernels.py does). ``assemble`` joins
those figures with the steps' exit codes and the kernel tests' result into ``summary.json``,
every field always present (``None`` / "n/a" where a step did not run), targets beside values:
decode >= 70% of peak, split-K >= 50%, paged <= 1.1x contiguous SDPA.

``--dry-run``: tiny shapes in the Triton interpreter, seconds on a CPU; the figures say nothing
about speed (labelled so), the plumbing is the same. Imports no visualizer package.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_kernels as bk  # noqa: E402

from kvlab.kernels import DEVICE, KERNEL_MODE, kernel_mode_report, paged_decode_attention, plan_decode  # noqa: E402
from kvlab.kernels.paged_decode import launch_paged_decode  # noqa: E402

# Kernel shapes of real models (query heads, KV heads, head_dim); the dry run checks the same
# head layouts (a GQA group of 3, head_dim 64) at tiny batch and context.
SMOLLM2 = dict(model="smollm2-135m", heads=9, kv_heads=3, head_dim=64)
FULL = dict(model="llama-3-8b", heads=32, kv_heads=8, head_dim=128, block_size=16, decode=(64, 4096),
            split_k=(1, 32768), dtypes=["float16", "bfloat16"], split_dtype="float16", sweep=[1, 8, 16, 32, 64],
            models=[SMOLLM2])
DRY = dict(model="tiny", heads=4, kv_heads=2, head_dim=32, block_size=16, decode=(2, 48), split_k=(1, 200),
           dtypes=["float16", "bfloat16"], split_dtype="float16", sweep=[1, 2, 4], models=[SMOLLM2])
TARGETS = dict(decode_pct_peak=70.0, split_k_pct_peak=50.0, paged_over_sdpa=1.1)
# Every field summary.json has, so a missing one is a bug (tests/test_kernels_gpu_check.py checks).
FIELDS = {
    "meta": ["dry_run", "mode", "device", "report", "peak_bytes_per_s", "shapes", "targets", "written_utc"],
    "steps": ["name", "status", "required", "rc", "seconds", "timeout_s", "log", "last_line"],
    "kernel_tests": ["status", "passed", "failed", "skipped", "errors", "seconds"],
    "decode": ["model", "dtype", "batch", "context", "heads", "kv_heads", "head_dim", "plan", "paged_ms", "wrapper_ms",
               "GBps", "pct_peak", "sdpa_ms", "paged_over_sdpa", "max_abs_diff", "status"],
    "split_k": ["model", "dtype", "batch", "context", "plan", "auto_splits", "paged_ms", "GBps", "pct_peak", "sdpa_ms",
                "paged_over_sdpa", "sweep", "best_splits", "best_pct_peak", "max_abs_diff", "status"],
    "targets": ["name", "value", "target", "status"],
}


def measure_shape(cfg, batch, context, dtype_name, timer, peak, num_sms, sweep=()):
    """One shape: the planned paged decode, its hot-path wrapper, SDPA on contiguous K/V, a split sweep."""
    row = dict(model=cfg["model"], dtype=dtype_name, batch=batch, context=context, heads=cfg["heads"], kv_heads=cfg["kv_heads"],
               head_dim=cfg["head_dim"], plan=None, auto_splits=None, paged_ms=None, wrapper_ms=None, GBps=None,
               pct_peak=None, sdpa_ms=None, paged_over_sdpa=None, max_abs_diff=None, sweep=[], best_splits=None,
               best_pct_peak=None, status="ok")
    dtype = getattr(torch, dtype_name)
    if KERNEL_MODE == "interpreter" and dtype == torch.bfloat16:
        row["status"] = "skipped: bf16 is computed wrongly by the Triton interpreter"
        return row
    bcfg = dict(cfg, batches=[batch], contexts=[context])
    k_cache, v_cache = bk.paged_cache(batch * context + cfg["block_size"] * batch, bcfg, dtype)
    tables = bk.shuffled_tables(batch, context, k_cache.shape[0], cfg["block_size"])
    lens = torch.full((batch,), context, dtype=torch.int32, device=DEVICE)
    q = torch.randn((batch, cfg["heads"], cfg["head_dim"]), dtype=dtype, device=DEVICE)
    out = torch.empty_like(q)
    scale = cfg["head_dim"] ** -0.5
    kv_bytes = 2 * batch * context * cfg["kv_heads"] * cfg["head_dim"] * k_cache.element_size()
    host_lens = [context] * batch

    def plan(num_splits=None):
        return plan_decode(batch, cfg["heads"], cfg["kv_heads"], cfg["head_dim"], cfg["block_size"], dtype,
                           context_lens=host_lens, num_sms=num_sms, num_splits=num_splits)

    def share(ms):
        gbps = kv_bytes / (ms * 1e-3) / 1e9
        return gbps, None if peak is None else 100 * gbps * 1e9 / peak

    auto = plan()
    row.update(plan=auto.explain(), auto_splits=auto.num_splits)
    row["paged_ms"] = timer(lambda: launch_paged_decode(q, k_cache, v_cache, tables, lens, out, scale, auto))
    row["wrapper_ms"] = timer(lambda: paged_decode_attention(q, k_cache, v_cache, tables, lens, scale,
                                                             context_lens_cpu=host_lens, check=False))
    row["GBps"], row["pct_peak"] = share(row["paged_ms"])
    k_contig, v_contig = bk.contiguous_kv(k_cache, tables, context), bk.contiguous_kv(v_cache, tables, context)
    expected = bk.sdpa_decode(q, k_contig, v_contig)
    got = launch_paged_decode(q, k_cache, v_cache, tables, lens, out, scale, auto)
    row["max_abs_diff"] = float((got.float() - expected.float()).abs().max())
    row["sdpa_ms"] = timer(lambda: bk.sdpa_decode(q, k_contig, v_contig))
    row["paged_over_sdpa"] = row["paged_ms"] / row["sdpa_ms"]
    for s in sweep:
        forced = plan(s)
        ms = timer(lambda: launch_paged_decode(q, k_cache, v_cache, tables, lens, out, scale, forced))
        gbps, pct = share(ms)
        row["sweep"].append(dict(num_splits=s, ms=ms, GBps=gbps, pct_peak=pct))
    if row["sweep"]:
        best = min(row["sweep"], key=lambda r: r["ms"])
        row["best_splits"], row["best_pct_peak"] = best["num_splits"], best["pct_peak"]
    if row["max_abs_diff"] > 2e-2:
        row["status"] = f"WRONG: differs from SDPA by {row['max_abs_diff']:.3g}"
    return row


def measure(args) -> int:
    native = KERNEL_MODE == "native"
    cfg = DRY if args.dry_run or not native else FULL
    if not native:
        torch.set_num_threads(1)
    device = torch.cuda.get_device_name(0) if native else "CPU (Triton interpreter)"
    num_sms = torch.cuda.get_device_properties(0).multi_processor_count if native else None
    peak = bk.peak_bandwidth(device) if native else None
    timer = bk.make_timer(native)
    started = time.perf_counter()
    decode = [measure_shape(cfg, *cfg["decode"], d, timer, peak, num_sms) for d in cfg["dtypes"]]
    decode += [measure_shape(dict(cfg, **m), *cfg["decode"], cfg["dtypes"][0], timer, peak, num_sms)
               for m in cfg["models"]]
    split = measure_shape(cfg, *cfg["split_k"], cfg["split_dtype"], timer, peak, num_sms, cfg["sweep"])
    result = dict(meta=dict(dry_run=bool(args.dry_run or not native), mode=KERNEL_MODE, device=device,
                            report=kernel_mode_report(), peak_bytes_per_s=peak, num_sms=num_sms, shapes=cfg,
                            seconds=time.perf_counter() - started),
                  decode=decode, split_k=split)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"measured in {result['meta']['seconds']:.1f} s -> {args.out}")
    return 0 if all(r["status"] == "ok" or r["status"].startswith("skipped") for r in decode + [split]) else 1


REQUIRED = ("measure", "kernel_tests")  # the others report only (bench_decode/engine: another module's)


def read_steps(folder: Path) -> list[dict]:
    """steps.tsv lines: name, rc (or 'skipped'), seconds, timeout_s; a failed step's last log line."""
    steps = []
    path = folder / "steps.tsv"
    for line in path.read_text().splitlines() if path.exists() else []:
        name, rc, seconds, limit = line.split("\t")
        code = None if rc == "skipped" else int(rc)
        status = ("skipped (time budget spent)" if code is None else "ok" if code == 0 else
                  "timeout" if code in (124, 137) else f"failed (exit {code})")
        log = folder / "logs" / f"{name}.log"
        lines = [x for x in log.read_text(errors="replace").splitlines() if x.strip()] if log.exists() else []
        steps.append(dict(name=name, status=status, required=name in REQUIRED, rc=code, seconds=int(seconds),
                          timeout_s=int(limit), log=str(log), last_line=lines[-1][-300:] if code and lines else None))
    return steps


def read_junit(path: Path, steps: list[dict]) -> dict:
    out = dict(status="not run", passed=None, failed=None, skipped=None, errors=None, seconds=None)
    step = next((s for s in steps if s["name"] == "kernel_tests"), None)
    if step is not None and step["rc"] is not None and step["rc"] != 0:
        out["status"] = step["status"]
    if not path.exists():
        return out
    suite = ET.parse(path).getroot()
    suite = suite.find("testsuite") if suite.tag == "testsuites" else suite
    total, failed, errors, skipped = (int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped"))
    out.update(passed=total - failed - errors - skipped, failed=failed, errors=errors, skipped=skipped,
               seconds=float(suite.get("time", 0)))
    out["status"] = "PASS" if failed == 0 and errors == 0 and total > 0 else "FAIL"
    return out


def verdict(value, target, at_least: bool, dry: bool) -> str:
    if dry:
        return "n/a (dry run: interpreter, tiny shapes)"
    if value is None:
        return "n/a"
    return "PASS" if (value >= target if at_least else value <= target) else "FAIL"


def targets(decode: list[dict], split: dict, dry: bool) -> list[dict]:
    rows = []
    for r in decode + [split]:
        what = f"{r['model']} {r['dtype']} B{r['batch']} x {r['context']}"
        if r is not split:
            rows.append(dict(name=f"decode {what}: % of HBM peak", value=r["pct_peak"],
                             target=f">= {TARGETS['decode_pct_peak']:.0f}",
                             status=verdict(r["pct_peak"], TARGETS["decode_pct_peak"], True, dry)))
        else:
            rows.append(dict(name=f"split-K {what} (plan: {r['auto_splits']} splits): % of HBM peak",
                             value=r["pct_peak"], target=f">= {TARGETS['split_k_pct_peak']:.0f}",
                             status=verdict(r["pct_peak"], TARGETS["split_k_pct_peak"], True, dry)))
        rows.append(dict(name=f"paged / contiguous SDPA time, {what}", value=r["paged_over_sdpa"],
                         target=f"<= {TARGETS['paged_over_sdpa']}",
                         status=verdict(r["paged_over_sdpa"], TARGETS["paged_over_sdpa"], False, dry)))
    return rows


def assemble(args) -> int:
    folder = args.dir
    steps = read_steps(folder)
    measured_path = folder / "measure.json"
    measured = json.loads(measured_path.read_text()) if measured_path.exists() else {}
    cfg = DRY if args.dry_run else FULL
    empty = lambda dtype, shape, shape_of=cfg: dict(  # noqa: E731
        {k: None for k in FIELDS["split_k"] + FIELDS["decode"]}, dtype=dtype, batch=shape[0], context=shape[1],
        model=shape_of["model"], heads=shape_of["heads"], kv_heads=shape_of["kv_heads"], head_dim=shape_of["head_dim"],
        sweep=[], status="not measured")
    decode = measured.get("decode") or ([empty(d, cfg["decode"]) for d in cfg["dtypes"]]
                                        + [empty(cfg["dtypes"][0], cfg["decode"], m) for m in cfg["models"]])
    split = measured.get("split_k") or empty(cfg["split_dtype"], cfg["split_k"])
    meta = measured.get("meta", {})
    dry = bool(args.dry_run or meta.get("dry_run"))
    bench_json = sorted(folder.glob("bench_kernels_*.json"))
    summary = dict(
        meta=dict(dry_run=dry, mode=meta.get("mode", KERNEL_MODE), device=meta.get("device"),
                  report=meta.get("report", kernel_mode_report()), peak_bytes_per_s=meta.get("peak_bytes_per_s"),
                  num_sms=meta.get("num_sms"), shapes=meta.get("shapes", cfg), targets=TARGETS,
                  written_utc=dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  total_seconds=sum(s["seconds"] for s in steps),
                  note="dry run: Triton interpreter, tiny shapes; timings say nothing about speed" if dry else None),
        steps=steps,
        kernel_tests=read_junit(folder / "kernel_tests.xml", steps),
        decode=decode,
        split_k=split,
        targets=targets(decode, split, dry),
        bench_kernels_json=str(bench_json[-1]) if bench_json else None,
    )
    path = args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(summary, indent=1))
    print(render(summary))
    print(f"\nwrote {path}")
    return 0


def render(summary: dict) -> str:
    """The summary as text: steps, kernel tests, figures with targets beside them."""
    m = summary["meta"]
    f = lambda x, spec=".2f": "-" if x is None else format(x, spec)  # noqa: E731
    lines = [f"GPU check summary ({'DRY RUN, ' if m['dry_run'] else ''}{m['mode']}, {m['device']}), "
             f"peak {f(m['peak_bytes_per_s'] and m['peak_bytes_per_s'] / 1e12)} TB/s, steps {m['total_seconds']} s"]
    lines += [f"  step {s['name']:<13} {s['status']:<28} {s['seconds']:>4} s (timeout {s['timeout_s']} s)"
              + ("" if s["required"] else ", reports only") + (f"\n      {s['last_line']}" if s["last_line"] else "")
              for s in summary["steps"]]
    t = summary["kernel_tests"]
    lines.append(f"  kernel tests: {t['status']} (passed {t['passed']}, failed {t['failed']}, errors {t['errors']}, "
                 f"skipped {t['skipped']})")
    for r in summary["decode"] + [summary["split_k"]]:
        lines.append(f"  {r['model']} ({r['heads']}/{r['kv_heads']} heads x {r['head_dim']}) {r['dtype']:>8} "
                     f"B{r['batch']} x {r['context']}: paged {f(r['paged_ms'], '.4f')} ms "
                     f"({f(r['GBps'], '.0f')} GB/s, {f(r['pct_peak'], '.1f')}% peak, splits {r['auto_splits']}), "
                     f"wrapper {f(r['wrapper_ms'], '.4f')} ms, SDPA {f(r['sdpa_ms'], '.4f')} ms, "
                     f"ratio {f(r['paged_over_sdpa'])} [{r['status']}]")
    lines.append("  targets:")
    lines += [f"    {x['name']}: {f(x['value'])} (target {x['target']}) {x['status']}" for x in summary["targets"]]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="time the target shapes; write JSON")
    m.add_argument("--out", type=Path, required=True)
    m.add_argument("--dry-run", action="store_true")
    a = sub.add_parser("assemble", help="join the steps' results (in --dir) into one summary file (--out)")
    a.add_argument("--dir", type=Path, required=True)
    a.add_argument("--out", type=Path, required=True)
    a.add_argument("--dry-run", action="store_true")
    args = parser.parse_args(argv)
    return measure(args) if args.command == "measure" else assemble(args)


if __name__ == "__main__":
    sys.exit(main())
