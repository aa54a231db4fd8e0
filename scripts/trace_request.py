"""The path of one request through kvlab, traced: which files and functions a newcomer must read.

Two prompts that share a sentence go through ``Engine.run`` on the bundled model (block size 4,
the radix tree on). A ``sys.setprofile`` hook records every Python call entered inside ``kvlab/``;
the script prints how many files and distinct functions are entered, and, for the memory and reuse
layers, how many calls there are and how often consecutive calls switch file (a reader following
the request jumps between files that often). Issue 31 item 3's targets: memory + reuse at most 6
files and 60 switches, at most 10 files in all with the engine's modules.

Example::

    .venv/bin/python scripts/trace_request.py            # the figures
    .venv/bin/python scripts/trace_request.py --path     # also the first call of each function, in order
"""
from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "kvlab"
PROMPTS = ("The cache keeps every block of the shared sentence. Then the first request asks",
           "The cache keeps every block of the shared sentence. Then the second one asks")


def _layer(rel: str) -> str:
    return rel.split("/")[0] if "/" in rel else "top"


def trace(max_new_tokens: int = 4) -> list[tuple[str, str]]:
    """(file relative to kvlab/, function) of every call entered in kvlab during the run, in order."""
    sys.path.insert(0, str(ROOT))
    from kvlab.compute.engine import Engine
    from kvlab.compute.loader import load_bundled

    model, tok = load_bundled()
    engine = Engine(model, num_blocks=64, block_size=4)
    for text in PROMPTS:
        engine.submit(tok.encode(text), max_new_tokens)
    calls: list[tuple[str, str]] = []
    pkg, kernels = str(PKG.resolve()), str((ROOT / "kernels").resolve())

    def hook(frame, event, _arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if path.startswith(pkg) or path.startswith(kernels):
            rel = str(Path(path).resolve().relative_to(ROOT))
            rel = rel[len("kvlab/"):] if rel.startswith("kvlab/") else rel
            calls.append((rel, frame.f_code.co_qualname))

    sys.setprofile(hook)
    try:
        engine.run()
    finally:
        sys.setprofile(None)
    engine.check_integrity()
    return calls


def lower_layers(calls: list[tuple[str, str]]) -> tuple[list[str], int]:
    """The memory and reuse files of ``calls`` in order, and how often consecutive ones differ.

    Example: files a, b (a compute file between them is skipped), a -> ``(["a", "b", "a"], 2)``."""
    lower = [f for f, _ in calls if _layer(f) in ("memory", "reuse")]
    return lower, sum(a != b for a, b in zip(lower, lower[1:]))


def report(calls: list[tuple[str, str]], show_path: bool = False) -> str:
    files = Counter(f for f, _ in calls)
    funcs = {c for c in calls if not c[1].startswith("<")}  # comprehensions and lambdas are not functions to read
    lower, switches = lower_layers(calls)
    model = {f for f in files if f == "compute/model.py" or f.startswith("kernels/")}  # the transformer and its ops
    lines = [f"two prompts sharing a sentence through Engine.run (bundled model, block size 4):",
             f"  kvlab files entered: {len(files)}; distinct functions: {len(funcs)}; calls: {len(calls)}",
             f"  memory + reuse layers: {len(set(lower))} files, {len(lower)} calls, {switches} file-to-file switches",
             f"  the engine's modules with memory + reuse: {len(files) - len(model)} files; the model and its "
             f"kernels: {len(model)} ({', '.join(sorted(model))})",
             "  files (calls): " + ", ".join(f"{f} ({n})" for f, n in files.most_common())]
    if show_path:
        seen: set = set()
        lines.append("  the path (first call of each function):")
        for c in calls:
            if c not in seen and c in funcs:
                seen.add(c)
                lines.append(f"    {c[0]}: {c[1]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--path", action="store_true", help="print the first call of each function, in order")
    ap.add_argument("--max-new-tokens", type=int, default=4)
    args = ap.parse_args(argv)
    print(report(trace(args.max_new_tokens), args.path))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
