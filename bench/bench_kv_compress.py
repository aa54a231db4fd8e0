"""KV compression on a real model: memory kept, bytes read and quality per method (measured).

For each method on the same prompts and budget (the full cache; StreamingLLM, H2O and Quest as
their papers define them, each beside its variant: StreamingLLM with original positions, H2O at
block level (kvlab's adaptation), Quest with one block set for all heads; int8 and fp8 KV): bytes per token, KV bytes kept at the end of a generation, K/V bytes read per
decode step, perplexity of held-out standard-library documentation, and the share of greedy tokens
equal to the full cache's (``--prompts`` prompts x ``--tokens`` tokens, each prompt a passage of
about 300 tokens followed by a question). Then the attention profile (the notes' hot/cold claim)
and one case where dropping breaks: a fact in the middle of a long prompt, asked for at the end.

Usage:
    .venv/bin/python bench/bench_kv_compress.py                      # SmolLM2, 20 prompts x 32 tokens
    .venv/bin/python bench/bench_kv_compress.py --prompts 4 --tokens 16 --model bundled   # quick
    .venv/bin/python bench/bench_kv_compress.py --json out.json

Every figure is measured on this machine's CPU (torch attention; the Triton kernels compute the
same numbers, see tests/test_kernels_compressed.py).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvlab.compute.kv_compress import CompressionConfig  # noqa: E402
from kvlab.compute.kv_measure import (  # noqa: E402
    attention_profile,
    compare_methods,
    doc_prompts,
    format_results,
    heldout_pairs,
    needle,
    needle_prompt,
    prefill,
)


def load(name: str):
    """(model, tokenizer): "smollm2" (the registry model) or "bundled" (the tiny one)."""
    from kvlab.compute import loader

    if name == "bundled":
        return loader.load_bundled()
    return loader.load_pretrained(name)


def configs(budget: int, sink: int) -> list[CompressionConfig]:
    """Every method at one budget: each paper's method, then its variant."""
    return [CompressionConfig("full"), CompressionConfig("streaming", budget, sink),
            CompressionConfig("streaming-orig", budget, sink), CompressionConfig("h2o", budget),
            CompressionConfig("h2o-block", budget), CompressionConfig("quest", budget),
            CompressionConfig("quest-shared", budget), CompressionConfig("int8"), CompressionConfig("fp8")]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="smollm2", help="smollm2 (default), bundled, or a checkpoint path")
    p.add_argument("--prompts", type=int, default=20)
    p.add_argument("--tokens", type=int, default=32, help="greedy tokens per prompt")
    p.add_argument("--heldout", type=int, default=4, help="held-out passages for perplexity")
    p.add_argument("--budget", type=int, default=64, help="tokens kept (StreamingLLM, H2O) or read (Quest)")
    p.add_argument("--sink", type=int, default=16, help="StreamingLLM's sink tokens (whole blocks)")
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument("--json", help="write the rows here")
    a = p.parse_args(argv)
    torch.manual_seed(0)
    model, tok = load(a.model)
    t0 = time.perf_counter()
    prompts = doc_prompts(tok, a.prompts)
    pairs = heldout_pairs(tok, a.heldout)
    rows = compare_methods(model, configs(a.budget, a.sink), prompts, a.tokens, pairs, a.block_size)
    print(f"{a.model}: {a.prompts} prompts of {sum(map(len, prompts)) / len(prompts):.0f} tokens x {a.tokens} greedy "
          f"tokens, perplexity on {len(pairs)} held-out passages of {len(pairs[0][0])} + {len(pairs[0][1])} tokens, "
          f"block size {a.block_size}, budget {a.budget} tokens (measured, {time.perf_counter() - t0:.0f} s)")
    print(format_results(rows))
    prof = attention_profile(model, prompts[0], steps=8, block_size=a.block_size)
    print("\nhot and cold tokens (measured on prompt 0, 8 decode steps):", prof.verdict())
    question = needle_prompt(tok)
    state = prefill(model, question, a.block_size)
    print(f"\nneedle: a code in the middle of a {len(question)}-token prompt, asked for at the end (expected 7391)")
    for cfg in configs(a.budget, a.sink):
        out = needle(model, question, cfg, max_tokens=14, block_size=a.block_size, state=state)
        text = tok.decode(out).strip().replace("\n", " ")
        print(f"  {cfg.label:<18} {cfg.kind:<9} {'found' if '7391' in text else 'MISSED':<7} {text!r}")
    if a.json:
        Path(a.json).write_text(json.dumps([dataclasses.asdict(r) | {"tokens": None} for r in rows], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
