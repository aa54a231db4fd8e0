"""How long the lessons and their controls take on this machine (measured): the targets of the guide.

    .venv/bin/python bench/bench_lessons.py            # every lesson with solutions, then the controls
    .venv/bin/python bench/bench_lessons.py 07 11      # some lessons
    .venv/bin/python bench/bench_lessons.py --controls # only the controls

Targets (the developers' guide; printed beside each figure, never asserted in the tests, where a
busy CI machine would make them flaky):
  * a lesson runs top to bottom in under 60 s on a laptop CPU, solutions injected (what a student
    who solved every exercise runs); each cell should feel instant (about 2 s; a cell that loads the
    real model is allowed more and is named);
  * a control answers in under a second: one change of the parameter the lesson is about, as the
    widget's own callback runs it in the kernel (the browser's redraw is not included).
Lessons run in a fresh kernel each (nbclient, as ``scripts/build_notebooks.py`` does), one at a time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

LESSON_TARGET_S = 60.0
CELL_TARGET_S = 2.0
CONTROL_TARGET_S = 1.0


def time_lessons(numbers: list[str]) -> list[tuple[str, float, list[tuple[int, float]]]]:
    """(lesson, seconds, slowest cells) for each lesson source, solutions injected."""
    import build_notebooks as bn

    out = []
    for src in sorted(bn.SRC.glob("[0-9][0-9]_*.py")):
        if numbers and src.stem[:2] not in numbers:
            continue
        cells = bn.parse_source(src.read_text(encoding="utf-8"), src.name)
        sol = ROOT / "solutions" / f"{src.stem}.py"
        if sol.exists():
            cells = bn.inject_solutions(cells, sol)
        nb = bn.to_notebook(cells)
        t0 = time.perf_counter()
        bn.execute(nb, env=bn.kernel_env(), timeout=300)
        seconds = time.perf_counter() - t0
        cell_times = []
        for i, c in enumerate(nb.cells):
            t = c.get("metadata", {}).get("execution", {})
            if "iopub.execute_input" in t and "shell.execute_reply" in t:
                from datetime import datetime
                a = datetime.fromisoformat(t["iopub.execute_input"].replace("Z", "+00:00"))
                b = datetime.fromisoformat(t["shell.execute_reply"].replace("Z", "+00:00"))
                cell_times.append((i, (b - a).total_seconds()))
        out.append((src.stem, seconds, sorted(cell_times, key=lambda x: -x[1])[:3]))
    return out


def _median_s(fn, repeat: int = 3) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_controls() -> list[tuple[str, float]]:
    """One change of each lesson's main control, as its callback runs it (median of 3)."""
    import kvlab.viz as viz
    from kvlab.compute.loader import load_bundled

    rows = []
    w = viz.ThesisWidget(static=False)
    flip = iter([False, True] * 4)
    rows.append(("00 thesis: the shared-prefix checkbox", _median_s(lambda: setattr(w._shared, "value", next(flip)))))
    model, _ = load_bundled()
    cw = viz.CostWidget({"bundled": viz.CostModel(model.flops_per_token, (5.0, 0.02), (3.0, 0.001))},
                        context=1024, static=False)
    ctx = iter([4096, 1024] * 4)
    rows.append(("01 cost: the context-length slider", _median_s(lambda: setattr(cw._context, "value", next(ctx)))))
    cap = viz.CapacityWidget(static=False)
    dt = iter([1, 2] * 4)
    rows.append(("02 capacity: the number format menu", _median_s(lambda: setattr(cap._controls["dtype_bytes"], "value", next(dt)))))
    pw = viz.PolicyWidget(static=False)
    pol = iter(["exact", "max"] * 4)
    rows.append(("03 policy: the reservation menu", _median_s(lambda: setattr(pw._controls["policy"], "value", next(pol)))))
    from kvlab import sim
    from kvlab.sim import plots
    from kvlab.sim.reproductions import PAPER_POLICIES

    def five_minutes(rate, policy):
        return sim.simulate(sim.sharegpt(max(100, int(rate * 300)), rate=rate, seed=0),
                            sim.make_policy(policy, 15_728), progress=False)

    rw = plots.RateWidget(five_minutes, PAPER_POLICIES, rate=2.0, static=True)
    rates = iter([(4.0, "vllm"), (4.0, "orca-oracle")] * 3)
    rows.append(("09 at scale: request rate and system", _median_s(lambda: rw.update(*next(rates)))))
    from kvlab.sim.tiers import multi_turn_chat, run_tiers
    from kvlab.viz.tier_controls import POLICY_WORDS, TierControls

    trace = multi_turn_chat(num_sessions=20, turns=6, seed=0)
    tc = TierControls(lambda r, p: run_tiers(trace, capacity=4096, host_ratios=(r,), write_policy=p)[0], host_ratio=2)
    pols = iter(list(POLICY_WORDS) * 3)
    rows.append(("10 tiers: host ratio 4, each write policy", _median_s(lambda: tc.update(4, next(pols)))))
    return rows


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    p.add_argument("--controls", action="store_true", help="only the controls")
    a = p.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    print(f"measured on this machine ({os.cpu_count()} CPUs); targets: a lesson < {LESSON_TARGET_S:.0f} s, "
          f"a cell ~{CELL_TARGET_S:.0f} s, a control < {CONTROL_TARGET_S:.0f} s\n")
    if not a.controls:
        print(f"{'lesson (solutions injected)':<28} {'seconds':>8}  {'target':<7} slowest cells (index: s)")
        for stem, s, slow in time_lessons(a.lessons):
            ok = "ok" if s < LESSON_TARGET_S else "OVER"
            print(f"{stem:<28} {s:8.1f}  {ok:<7} " + ", ".join(f"{i}: {t:.1f}" for i, t in slow))
        print()
    print(f"{'control (median of 3)':<46} {'ms':>8}  target")
    for name, s in time_controls():
        print(f"{name:<46} {s * 1e3:8.0f}  {'ok' if s < CONTROL_TARGET_S else 'OVER'}")


if __name__ == "__main__":
    main()
