"""Seeded run: engines with a disk tier under a small size cap, and sabotage of the shared folder.

    .venv/bin/python bench/bench_storage_chaos.py                  # 2,000 engines (a few minutes)
    .venv/bin/python bench/bench_storage_chaos.py --engines 50     # a quick look

Each engine (a tiny random Llama, so an engine takes milliseconds) gets a seeded workload:
prompts that share system prompts (so pages are saved to and fetched from disk), a pool too small
for their history, a host tier, and a :class:`~kvlab.compute.storage.FileStorage` on a folder
shared by a group of engines (a restart: the next engine reads what the last one saved), capped
at ``max_bytes`` of a few pages (so saves evict pages while fetches are queued). Between requests
the folder is sabotaged: bit flips, truncations, deletions, two pages' files swapped, a page
replaced by a directory, a FIFO or a dangling link, a lying header (a page's file copied under
another key). Every request's tokens are compared with :func:`kvlab.compute.generate.generate`
(greedy, naive recomputation: no cache at all).

Printed (and returned by :func:`run`): engines, requests, sabotage actions, engine errors (an
exception out of the engine: must be 0), requests whose tokens differ from ``generate()`` (must
be 0), the storage's own counts (misses, write errors, evicted files, scan skips) and the
tree's disk misses (pages it found unreadable at admission: recomputed).
``tests/test_tiers_cap.py`` runs :func:`run` on a few seeds (``KVLAB_STORAGE_CHAOS_ENGINES`` for more).
"""
from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

from kvlab.compute.engine import Engine
from kvlab.compute.generate import generate
from kvlab.compute.model import Llama, LlamaConfig
from kvlab.compute.storage import FileStorage

V = 64
SABOTAGE = ("flip", "truncate", "delete", "swap", "directory", "fifo", "dangling", "copy")


def tiny_model() -> Llama:
    """A 2-layer random Llama (seeded): an engine step takes about a millisecond."""
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, max_position_embeddings=128, tie_word_embeddings=False)
    return Llama(cfg).eval()


def sabotage(root: Path, rng: random.Random) -> str | None:
    """One random damage to the page files under ``root``; its name, or None when there was nothing to damage."""
    pages = sorted(p for p in root.glob("*.safetensors") if p.is_file() and not p.is_symlink())
    if not pages:
        return None
    kind, p = rng.choice(SABOTAGE), rng.choice(pages)
    if kind == "flip":
        data = bytearray(p.read_bytes())
        data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        p.write_bytes(bytes(data))
    elif kind == "truncate":
        p.write_bytes(p.read_bytes()[: rng.randrange(p.stat().st_size)])
    elif kind == "delete":
        p.unlink()
    elif kind == "swap" and len(pages) > 1:
        q = rng.choice([x for x in pages if x != p])
        tmp = root / "swap.tmp"
        os.replace(p, tmp), os.replace(q, p), os.replace(tmp, q)
    elif kind == "directory":
        p.unlink()
        p.mkdir()
    elif kind == "fifo" and hasattr(os, "mkfifo"):
        p.unlink()
        os.mkfifo(p)
    elif kind == "dangling":
        p.unlink()
        p.symlink_to(root / "nowhere.safetensors")
    elif kind == "copy" and len(pages) > 1:          # a lying header: another page's file under this key
        shutil.copyfile(rng.choice([x for x in pages if x != p]), p)
    else:
        return None
    return kind


def one_engine(model: Llama, root: Path, rng: random.Random, totals: dict, systems: list[list[int]], bs: int) -> None:
    """Serve one seeded workload on an engine with a capped disk tier under ``root`` (pages of ``bs``
    tokens), its prompts after the folder's shared ``systems`` prompts; count into ``totals``."""
    prompts = [rng.choice(systems) + [rng.randrange(V) for _ in range(rng.randint(1, 6))]
               for _ in range(rng.randint(6, 12))]
    storage = FileStorage(root, (2, bs, 2, 8), model_id="chaos", max_staged=rng.choice([2, 8, 4096]),
                          max_bytes=rng.choice([1, 4, 16, 40]) * (2 * 2 * bs * 2 * 8 * 4 + 400))
    need = max(-(-len(p) // bs) for p in prompts) + -(-6 // bs) + 1   # as blocks_needed
    eng = Engine(model, num_blocks=need + rng.randint(0, 2), block_size=bs, host_ratio=rng.choice([0.25, 0.5, 1.0]),
                 storage=storage, write_policy=rng.choice(["write_through", "write_back"]),
                 storage_write=rng.choice(["on_host_evict", "write_through"]),
                 prefetch_policy=rng.choice(["best_effort", "wait_complete", "timeout"]), check=True)
    while prompts:                                   # one to three requests at a time
        k = rng.randint(1, 3)
        batch, prompts = prompts[:k], prompts[k:]
        states = [(p, new, eng.submit(p, new, arrival_step=eng.step_no + rng.randint(0, 2)))
                  for p, new in ((p, rng.randint(1, 6)) for p in batch)]
        eng.run()
        for p, new, state in states:
            totals["requests"] += 1
            if state.outputs != generate(model, p, new, "naive").sequences:
                totals["wrong_tokens"] += 1
        if rng.random() < 0.5 and sabotage(root, rng):
            totals["sabotage"] += 1
    for k in ("misses", "write_errors", "evicted_files", "scan_skipped"):
        totals[k] += getattr(storage, k, 0)
    totals["disk_misses"] += eng.cache_manager.tier_stats.disk_misses


def run(engines: int, seed: int = 0, group: int = 8, verbose: bool = False) -> dict:
    """``engines`` seeded engines, ``group`` at a time on one shared folder; the counts (see the docstring)."""
    model = tiny_model()
    totals = dict.fromkeys(("engines", "requests", "sabotage", "engine_errors", "wrong_tokens", "misses",
                            "write_errors", "evicted_files", "scan_skipped", "disk_misses"), 0)
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(engines):
            root = Path(tmp) / f"g{i // group}"
            g = random.Random(seed * 1_000_003 + i // group)   # a folder's engines share system prompts
            systems = [[g.randrange(V) for _ in range(g.randint(8, 24))] for _ in range(g.randint(2, 5))]
            bs = g.choice([1, 2, 4])
            rng = random.Random(seed * 1_000_003 + 500_000 + i)
            totals["engines"] += 1
            try:
                one_engine(model, root, rng, totals, systems, bs)
            except Exception:
                totals["engine_errors"] += 1
                if verbose:
                    traceback.print_exc()
    return totals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--engines", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--verbose", action="store_true", help="print each engine error's traceback")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    totals = run(a.engines, a.seed, verbose=a.verbose)
    print(f"seeded storage run (measured, {time.perf_counter() - t0:.0f} s, seed {a.seed}):")
    for k, v in totals.items():
        print(f"  {k:<14} {v:,}")
    ok = totals["engine_errors"] == 0 and totals["wrong_tokens"] == 0
    print("engine errors and wrong tokens: " + ("none (as required)" if ok else "FOUND (must be 0)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
