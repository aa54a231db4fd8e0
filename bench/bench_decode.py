"""Decode cost per step against position: naive recomputation versus the cached paths (measured).

For each position L (64 .. 1024 by default) a prompt of L tokens is generated from, and the
decode steps that follow are timed: the naive path runs all L+t tokens through the model again
at every step, the contiguous and paged paths run one token against their cache. Reported per
position: median seconds per step (measured, this machine), the counted matmul FLOPs per step
(Llama.flops_per_token), and the ratios. Targets from issue 5 on a 2-core CPU: cached step at
1024 <= 2x its cost at 64; naive at 1024 >= 8x slower per step than cached.

Usage:
    .venv/bin/python bench/bench_decode.py                       # CPU, torch backend
    .venv/bin/python bench/bench_decode.py --backend triton      # GPU: the Triton kernels natively
    .venv/bin/python bench/bench_decode.py --positions 64,256,1024 --steps 6 --json out.json

``figure(rows)`` builds the plotly figure the lessons reuse (plotly imported only there).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvlab.compute.generate import generate  # noqa: E402
from kvlab.compute.loader import load_bundled  # noqa: E402


def prompt_of(tok, length: int) -> list[int]:
    """``length`` tokens of real text (the training script's Chinese block and English repeated)."""
    text = ("Return a new list containing all items from the iterable in ascending order. "
            "The socket module provides access to the BSD socket interface. ")
    ids = tok.encode(text)
    return (ids * (length // len(ids) + 1))[:length]


def measure(model, tok, positions, steps: int, backend: str, strategies, block_size: int = 16) -> list[dict]:
    rows = []
    for L in positions:
        prompt = prompt_of(tok, L)
        row = {"position": L}
        for s in strategies:
            r = generate(model, prompt, steps + 1, strategy=s, attention_backend=backend, block_size=block_size)
            row[f"{s}_s"] = statistics.median(r.step_times[1:])         # decode steps only
            row[f"{s}_min_s"] = min(r.step_times[1:])                    # least disturbed by other load
            row[f"{s}_flops"] = r.step_flops[1]
        rows.append(row)
    return rows


def print_table(rows, strategies, cached: str) -> None:
    """ms per step as 'median (min)'; FLOPs per step counted."""
    head = f"{'pos':>5} " + " ".join(f"{s + ' ms':>16}" for s in strategies) + \
        f" {'naive/' + cached:>12} {'naive MFLOP':>12} {cached + ' MFLOP':>12} {'FLOP ratio':>10}"
    print(head)
    for r in rows:
        print(f"{r['position']:>5} " + " ".join(f"{1e3 * r[s + '_s']:>8.2f} ({1e3 * r[s + '_min_s']:>5.2f})"
                                                for s in strategies)
              + f" {r['naive_s'] / r[cached + '_s']:>12.1f} {r['naive_flops'] / 1e6:>12.1f}"
              + f" {r[cached + '_flops'] / 1e6:>12.2f} {r['naive_flops'] / r[cached + '_flops']:>10.1f}")


def figure(rows, strategies=("naive", "contiguous", "paged")):
    """Measured seconds per decode step against position (plotly; for the lessons)."""
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in strategies:
        if f"{s}_s" in rows[0]:
            fig.add_trace(go.Scatter(x=[r["position"] for r in rows], y=[1e3 * r[f"{s}_s"] for r in rows],
                                     mode="lines+markers", name=s))
    fig.update_layout(title="Decode cost per step (measured)", xaxis_title="position (tokens)",
                      yaxis_title="ms per step", yaxis_type="log", width=640, height=400)
    return fig


def parse_common(ap: argparse.ArgumentParser):
    """Options both benches share; parses, sets threads, loads the bundled model: (args, model, tok)."""
    ap.add_argument("--backend", default="torch", choices=("torch", "triton"))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok = load_bundled(device=args.device)
    if tok is None:  # a GPU machine without the tokenizers package: the same shapes, made-up ids
        print("(tokenizers is not installed: prompts are synthetic token ids of the same lengths)")
        tok = SyntheticTokenizer(model.config.vocab_size)
    return args, model, tok


class SyntheticTokenizer:
    """Stands in for the bundled tokenizer where the tokenizers package is missing: one id per
    character (ord modulo the vocabulary), so shared text still gives shared token prefixes."""

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text: str) -> list[int]:
        return [1 + ord(c) % (self.vocab_size - 1) for c in text]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--positions", default="64,128,256,512,1024")
    ap.add_argument("--steps", type=int, default=20)
    args, model, tok = parse_common(ap)
    positions = [int(p) for p in args.positions.split(",")]
    strategies = ("naive", "contiguous", "paged")
    generate(model, prompt_of(tok, 16), 3, "paged", args.backend)                  # warm-up (and JIT on GPU)
    rows = measure(model, tok, positions, args.steps, args.backend, strategies)
    print(f"decode cost per step, measured on {args.device} ({args.backend} backend for paged): "
          f"median (min) of {args.steps} steps in ms; FLOPs counted")
    print_table(rows, strategies, "paged")
    lo, hi = rows[0], rows[-1]
    for stat, key in (("median", "_s"), ("min", "_min_s")):
        growth = hi["paged" + key] / lo["paged" + key]
        speedup = hi["naive" + key] / hi["paged" + key]
        print(f"\n[{stat}] paged step at {hi['position']} / at {lo['position']}: {growth:.2f}x (target <= 2x) "
              f"{'OK' if growth <= 2 else 'MISSED'}; naive / paged at {hi['position']}: {speedup:.1f}x "
              f"(target >= 8x) {'OK' if speedup >= 8 else 'MISSED'}; contiguous {hi['position']}/{lo['position']}: "
              f"{hi['contiguous' + key] / lo['contiguous' + key]:.2f}x")
    print("(median: what a step typically cost here; min: the least disturbed by other processes on the machine)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
