"""How fast the visualizer redraws (measured): stepper updates at lesson and pool sizes.

A stepper update is what one click on "next" (or one tick of play) costs in the kernel:
check_integrity on the snapshot, build the figure for the new frame, serialize it into
the Output widget (the browser's own plotly redraw is not included). Target (issue 6):
under 100 ms on a 256-block map. Also timed: 12 blocks (a lesson), a 4,096-block heatmap,
building a whole plotly animation, the translation widget's slider callback, and a radix
tree step (graphviz DOT + SVG through ``dot``).

Usage:
    .venv/bin/python bench/bench_viz.py            # prints a table (median ms over repeats)
    .venv/bin/python bench/bench_viz.py --repeat 40
"""
from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import kvlab.viz as viz  # noqa: E402
from kvlab.memory.block_manager import BlockManager  # noqa: E402


def recorded_run(num_blocks: int, block_size: int = 16, seed: int = 0, events: int = 60) -> BlockManager:
    """A random run on a pool of ``num_blocks``: sequences arrive, grow, fork and finish."""
    rng = random.Random(seed)
    m = BlockManager(num_blocks=num_blocks, block_size=block_size, record=True)
    live: list[str] = []
    k = 0
    while len(m.log) < events:
        r = rng.random()
        if live and r < 0.35:
            s = rng.choice(live)
            if m.can_allocate(block_size * 2):
                m.append(s, rng.randint(1, block_size * 2))
        elif live and r < 0.45 and m.allocator.num_free_blocks > 2:
            m.fork(rng.choice(live), f"R{k}")
            live.append(f"R{k}")
            k += 1
        elif live and r < 0.6:
            s = live.pop(rng.randrange(len(live)))
            m.free(s)
        else:
            n = rng.randint(1, max(1, num_blocks * block_size // 12))
            if m.can_allocate(n):
                m.add_sequence(f"R{k}", n)
                live.append(f"R{k}")
                k += 1
    return m


def time_steps(stepper: viz.Stepper, repeat: int) -> float:
    """Median ms of one stepper move (next, wrapping back to the start)."""
    out = []
    for _ in range(repeat):
        i = (stepper.index + 1) % len(stepper)
        t = time.perf_counter()
        stepper.go(i)
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def timed(fn, repeat: int) -> float:
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)


def main(argv: list[str] | None = None) -> dict[str, float]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args(argv)
    rows: dict[str, float] = {}
    for n in (12, 256, 4096):
        m = recorded_run(n, block_size=4 if n == 12 else 16)
        s = viz.memory_map_stepper(m.snapshots, m.log, static=False)
        rows[f"stepper update, {n}-block map"] = time_steps(s, args.repeat)
    m = recorded_run(256)
    rows["whole plotly animation, 256 blocks, 60 frames"] = timed(
        lambda: viz.animate_memory_map(m.snapshots, m.log), max(3, args.repeat // 5))
    w = viz.TranslationWidget(static=False)
    pos = iter(range(10**6))
    rows["translation widget, pos slider callback"] = timed(lambda: setattr(w._pos, "value", next(pos) % 20), args.repeat)
    r = viz.radix_stepper(static=False)
    rows["radix stepper update (DOT + SVG via dot)"] = time_steps(r, max(5, args.repeat // 2))
    c = viz.compare_stepper(static=False)
    rows["contiguous vs paged stepper update"] = time_steps(c, args.repeat)
    width = max(map(len, rows))
    print(f"kvlab.viz redraw times (measured, median of repeats, this machine; target: 256-block stepper < 100 ms)")
    for k, v in rows.items():
        print(f"  {k:<{width}}  {v:8.1f} ms")
    ok = rows["stepper update, 256-block map"] < 100
    print(f"  256-block stepper update under 100 ms: {'yes' if ok else 'NO'}")
    return rows


if __name__ == "__main__":
    main()
