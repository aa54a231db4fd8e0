"""Instructions of one bench_peers cycle, counted by callgrind (load-independent, unlike CPU time).

    .venv/bin/python bench/callgrind_cycle.py radix 1           # kvlab CacheManager cycle, page 1
    .venv/bin/python bench/callgrind_cycle.py radix 16          # ... page 16
    .venv/bin/python bench/callgrind_cycle.py hash 16           # kvlab BlockHashCache, block 16
    .venv/bin/python bench/callgrind_cycle.py sglang 1          # SGLang 0.4.6.post5's RadixCache
    .venv/bin/python bench/callgrind_cycle.py vllm 16           # vLLM 0.33's BlockPool
    .venv/bin/python bench/callgrind_cycle.py radix 1 --top 25  # + where they go, per C/Python function

Needs ``valgrind`` on PATH (not a kvlab dependency: this script is never run by the tests) and,
for ``sglang`` and ``vllm``, the wheels ``bench/bench_peers.py`` downloads into ``bench/out/peers``
(run it once first). Each figure takes about a minute at 500 requests.

How: the same process is run twice under ``valgrind --tool=callgrind``, once with the trace
(``--requests`` requests of ``bench_radix.make_trace``, the cycle of ``bench_peers.run_*``) and
once without running it (the same trace built, imports and set-up only); the difference is the
cycle's instructions.
The machine is shared, so CPU seconds move with the load; instruction counts do not (compare a
change by instructions first, then confirm with CPU time, old and new alternated). ``--top N``
prints the N functions whose self cost differs most between the two runs (``callgrind_annotate``;
Python functions appear as the interpreter's C functions: ``_PyEval_EvalFrameDefault`` is the
bytecode, ``list_dealloc``, ``gc_collect_main`` etc. are what they say). ``--keep DIR`` keeps the
two callgrind files there.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def child(impl: str, page: int, requests: int, loop: bool) -> None:
    """The measured process: the trace and the set-up, then (``loop``) one cycle over the trace.
    Both runs build the same trace (its random numbers cost more than the cycle), so it cancels."""
    import gc
    sys.path[:0] = [str(ROOT), str(HERE)]
    import bench_peers as bp
    from bench_radix import make_trace
    trace = make_trace(requests, 0) if loop else make_trace(requests, 0)[:0]
    gc.collect()
    gc.freeze()
    if impl == "radix":
        bp.run_kvlab_radix(trace, 8 << 20, page)
    elif impl == "hash":
        bp.run_kvlab_hash(trace, 8 << 20, page)
    else:
        cache = ROOT / "bench" / "out" / "peers"
        wheels = {name: next(cache.glob(f"{spec.split('==')[0].replace('-', '_')}-"
                                        f"{spec.split('==')[1] if '==' in spec else ''}*.whl"))
                  for name, spec in bp.WHEELS.items()}
        if impl == "vllm":
            sys.path.insert(0, str(cache / "xxhash-site"))
            bp.run_vllm(bp.load("vllm-0.33", wheels), trace, 8 << 20, page)
        else:
            bp.run_sglang(bp.load("sglang-0.4.6", wheels), "0.4.6", trace, 8 << 20, page)


def count(impl: str, page: int, requests: int, loop: bool, out: Path) -> int:
    """Instructions of one run under callgrind (its profile written to ``out``)."""
    env = {**os.environ, "PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", sys.executable, __file__,
           "--child", impl, str(page), "--requests", str(requests)] + ([] if loop else ["--setup-only"])
    err = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT).stderr
    found = re.search(r"Collected : (\d+)", err)
    if not found:
        raise SystemExit(f"callgrind failed:\n{err[-2000:]}")
    return int(found.group(1))


def self_costs(profile: Path) -> dict[str, int]:
    """Instructions per function (self cost), from ``callgrind_annotate``."""
    text = subprocess.run(["callgrind_annotate", "--inclusive=no", "--threshold=100", str(profile)],
                          capture_output=True, text=True).stdout
    costs: dict[str, int] = {}
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+) \([^)]*\)\s+(\S+)", line)
        if m and "PROGRAM" not in line:
            name = m.group(2).split("/")[-1]
            costs[name] = costs.get(name, 0) + int(m.group(1).replace(",", ""))
    return costs


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("impl", choices=["radix", "hash", "sglang", "vllm"])
    p.add_argument("page", type=int, help="page size (radix, sglang) or block size (hash, vllm)")
    p.add_argument("--requests", type=int, default=500)
    p.add_argument("--top", type=int, default=0, help="also print the N functions that cost the most")
    p.add_argument("--keep", type=Path, help="keep the two callgrind files in this folder")
    p.add_argument("--json", action="store_true", help="print one JSON line instead of text")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--setup-only", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:
        return child(a.impl, a.page, a.requests, not a.setup_only)
    folder = a.keep or Path(tempfile.mkdtemp(prefix="callgrind_cycle_"))
    folder.mkdir(parents=True, exist_ok=True)
    runs = {loop: folder / f"cg.{a.impl}.{a.page}.{'cycle' if loop else 'setup'}" for loop in (True, False)}
    total, setup = (count(a.impl, a.page, a.requests, loop, f) for loop, f in runs.items())
    loop = total - setup
    if a.json:
        print(json.dumps({"impl": a.impl, "page": a.page, "requests": a.requests, "loop": loop, "setup": setup}))
    else:
        print(f"{a.impl} page {a.page}, {a.requests} requests: {loop / 1e6:.1f} M instructions in the cycle "
              f"({loop / a.requests / 1e3:.0f} k a request; set-up {setup / 1e6:.0f} M, subtracted)")
    if a.top:
        with_loop, without = (self_costs(f) for f in runs.values())
        diff = {k: with_loop.get(k, 0) - without.get(k, 0) for k in set(with_loop) | set(without)}
        for name, v in sorted(diff.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"{v / 1e6:9.1f} M {100 * v / loop:5.1f}%  {name}")
    if a.keep is None:
        for f in runs.values():
            f.unlink(missing_ok=True)
        folder.rmdir()


if __name__ == "__main__":
    main()
