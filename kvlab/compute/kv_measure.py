"""Measure what KV compression costs: bytes kept and read, perplexity, greedy agreement, a needle.

Every figure here is **measured**: the same model, the same prompts, one
:class:`~kvlab.compute.kv_compress.CompressedDecoder` per method, compared with the full cache.

* :func:`attention_profile`: the source notes' "hot and cold tokens" tested. For a few decode
  steps of dense attention, the K/V bytes each position is read for (the same for every position:
  dense attention reads everything) beside the attention mass each position receives, per layer.
* :func:`compare_methods`: per method, KV bytes kept at the end, K/V bytes read per decode step,
  perplexity of held-out continuations, agreement of greedy tokens with the full cache.
* :func:`needle`: one case where dropping breaks: a fact in the middle of a long prompt, asked
  for at the end.
* :func:`heldout_texts`: held-out text generated from the standard library's own docstrings
  (nothing downloaded).

Example (the bundled tiny model; a real run uses ``load_pretrained("smollm2")``):
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> ids = [(7 * i) % 4000 + 5 for i in range(40)]
    >>> p = attention_profile(model, ids, steps=2, block_size=8)
    >>> p.layer_mass.shape[1] == len(ids) + 2, min(p.reads) == max(p.reads)     # dense: uniform reads
    (True, True)
"""
from __future__ import annotations

import importlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Sequence

import torch

from .kv_compress import CompressedDecoder, CompressionConfig, PrefillState

__all__ = ["prefill", "heldout_texts", "chat_ids", "doc_prompts", "heldout_pairs", "needle_prompt", "Profile", "attention_profile", "MethodResult", "compare_methods", "needle",
           "format_results"]

STDLIB_MODULES = ("heapq", "bisect", "fractions", "statistics", "textwrap", "difflib", "fnmatch", "shlex", "csv",
                  "json", "string", "functools", "itertools", "calendar", "gettext", "decimal", "zipfile", "queue",
                  "sched", "contextlib", "dataclasses", "enum", "graphlib", "ipaddress", "pprint", "random",
                  "secrets", "tempfile", "uuid", "weakref")


def heldout_texts(n: int = 4, min_chars: int = 1200) -> list[str]:
    """``n`` texts of at least ``min_chars`` characters, each a module's docstring followed by its
    public functions' docstrings (standard library, in a fixed order; same text on every machine with
    the same Python). Example: ``heldout_texts(1)[0][:22]`` -> 'Heap queue algorithm (' (heapq)."""
    out = []
    for name in STDLIB_MODULES:
        mod = importlib.import_module(name)
        parts = [inspect.getdoc(mod) or ""]
        for attr in sorted(getattr(mod, "__all__", [a for a in dir(mod) if not a.startswith("_")])):
            doc = inspect.getdoc(getattr(mod, attr, None))
            if doc and callable(getattr(mod, attr, None)):
                parts.append(f"{attr}: {doc}")
        text = "\n\n".join(p for p in parts if p)
        if len(text) >= min_chars:
            out.append(text)
        if len(out) == n:
            return out
    raise ValueError(f"only {len(out)} standard-library texts of {min_chars} characters; ask for fewer")


def chat_ids(tokenizer, user_text: str) -> list[int]:
    """A user turn through the model's chat template (a real chat model), else the plain text's ids."""
    if hasattr(tokenizer, "apply_chat_template"):
        return list(tokenizer.apply_chat_template([{"role": "user", "content": user_text}], add_generation_prompt=True))
    return list(tokenizer.encode(user_text))


def _chunks(tokenizer, n: int, tokens: int, from_end: bool = False) -> list[str]:
    """``n`` passages of about ``tokens`` tokens cut from the standard-library texts (the last ``n``
    with ``from_end``: held-out text far from the prompts' passages)."""
    out: list[str] = []
    for text in heldout_texts(len(STDLIB_MODULES) // 2, 400):
        ids = tokenizer.encode(text)
        for start in range(0, len(ids) - tokens + 1, tokens):
            out.append(tokenizer.decode(ids[start:start + tokens]))
    if len(out) < n:
        raise ValueError(f"only {len(out)} passages of {tokens} tokens; ask for fewer")
    return out[len(out) - n:] if from_end else out[:n]


def doc_prompts(tokenizer, n: int, doc_tokens: int = 300) -> list[list[int]]:
    """``n`` chat prompts: a passage of standard-library documentation, then a question about it."""
    return [chat_ids(tokenizer, f"{p}\n\nIn one sentence, what does the text above describe?")
            for p in _chunks(tokenizer, n, doc_tokens)]


def heldout_pairs(tokenizer, n: int, context_tokens: int = 300, continuation: int = 32) -> list[tuple[list[int], list[int]]]:
    """``n`` (context, continuation) id pairs of documentation text (other passages than doc_prompts')."""
    pairs = []
    for p in _chunks(tokenizer, n, context_tokens + continuation, from_end=True):
        ids = tokenizer.encode(p)[:context_tokens + continuation]
        pairs.append((ids[:context_tokens], ids[context_tokens:]))
    return pairs


def needle_prompt(tokenizer, filler_tokens: int = 400, code: str = "7391") -> list[int]:
    """A fact in the middle of ``filler_tokens`` of documentation, asked for at the end."""
    text = tokenizer.decode(tokenizer.encode("\n\n".join(heldout_texts(6, 400)))[:filler_tokens])
    cut = len(text) // 2
    fact = f"\n\nImportant: the secret code of the vault is {code}.\n\n"
    return chat_ids(tokenizer, text[:cut] + fact + text[cut:] + "\n\nWhat is the secret code of the vault? "
                    "Answer with the number only.")


@dataclass
class Profile:
    """Attention mass and K/V reads by position over ``steps`` dense decode steps.

    layer_mass (layers, T): attention each position received, averaged over heads and steps;
    reads (T,): bytes of K and V read for each position per decode step it was in the cache (all layers);
    sinks, recent: how many first / last positions the verdict groups.
    """

    layer_mass: torch.Tensor
    reads: list[float]
    sinks: int
    recent: int

    @property
    def mass(self) -> torch.Tensor:
        """(T,) attention mass by position, averaged over layers."""
        return self.layer_mass.mean(0)

    def shares(self) -> dict[str, float]:
        """Share of attention mass and of tokens on the first ``sinks`` and last ``recent`` positions."""
        m, T = self.mass, self.layer_mass.shape[1]
        total = float(m.sum())
        return {"sink_mass": float(m[:self.sinks].sum()) / total, "sink_tokens": self.sinks / T,
                "recent_mass": float(m[-self.recent:].sum()) / total, "recent_tokens": min(self.recent, T) / T,
                "middle_mass": float(m[self.sinks:T - self.recent].sum()) / total,
                "reads_ratio": max(self.reads) / min(self.reads)}

    def verdict(self) -> str:
        """The notes' claim judged from this profile, in plain sentences."""
        s = self.shares()
        reads = ("every position's K and V were read the same number of bytes in every step "
                 f"(max/min = {s['reads_ratio']:.2f})") if s["reads_ratio"] < 1.001 else \
            f"reads differed by position (max/min = {s['reads_ratio']:.2f})"
        sink = s["sink_mass"] > 2 * s["sink_tokens"]
        early = (f"wrong that early tokens are cold: the first {self.sinks} act as attention sinks" if sink else
                 f"right that these early tokens are cold: the first {self.sinks} get no more than their share")
        recent = "right" if s["recent_mass"] > 1.05 * s["recent_tokens"] else "wrong"
        return (f"Access: {reads}, so by access no token is hotter than another. Attention mass: the first "
                f"{self.sinks} tokens ({s['sink_tokens']:.1%} of them) received {s['sink_mass']:.1%}, the last "
                f"{self.recent} tokens ({s['recent_tokens']:.1%}) {s['recent_mass']:.1%}, the middle "
                f"{s['middle_mass']:.1%}. By attention the notes are {recent} that recent tokens matter more than "
                f"their share ({s['recent_mass'] / s['recent_tokens']:.2f}x), and {early}.")


@torch.no_grad()
def attention_profile(model, prompt_ids: Sequence[int], steps: int = 8, block_size: int = 16, sinks: int = 4,
                      recent: int = 100) -> Profile:
    """Greedy-decode ``steps`` tokens with the full cache and record, per layer and position, the
    attention each decode query gave (head mean, averaged over steps) and the K/V bytes read."""
    d = CompressedDecoder(model, CompressionConfig("full"), block_size=block_size,
                          num_blocks=-(-(len(prompt_ids) + steps) // block_size) + 1)
    d.generate(prompt_ids, steps)
    T, L = len(prompt_ids) + steps, model.config.num_hidden_layers
    mass = torch.zeros(L, T)
    for layer, values in d.record.decode_mass.items():
        mass[layer, :len(values)] = values / steps
    per_layer_token = d.pool.bytes_per_token() / L
    in_cache = torch.tensor([steps - max(0, p - len(prompt_ids)) for p in range(T)])   # decoded token k: steps - k
    reads = (d.record.reads[:T] * per_layer_token / in_cache).tolist()   # per step the position was in the cache
    return Profile(mass[:, :T], reads, sinks, min(recent, T - sinks))


@dataclass
class MethodResult:
    """One method's measured cost and quality (means over prompts)."""

    label: str
    bytes_per_token: int                 # of the pool (values + scales)
    kv_bytes: float                      # held at the end of a generation
    read_bytes_per_step: float           # K/V bytes read per decode step, all layers
    ppl: float                           # perplexity of the held-out continuations
    agreement: float                     # share of greedy tokens equal to the full cache's, same position
    tokens: list[list[int]] = field(default_factory=list)
    kind: str = ""                       # "paper", "variant", "reference" or "kvlab" (METHOD_KIND)
    pool_bytes: float = 0.0              # of the paged pool's blocks the table holds at the end
    prompts: int = 0                     # the sample: prompts x greedy tokens, held-out tokens scored
    greedy_tokens: int = 0
    scored_tokens: int = 0


def _decoder(model, config: CompressionConfig, tokens: int, block_size: int) -> CompressedDecoder:
    return CompressedDecoder(model, config, block_size=block_size, num_blocks=-(-tokens // block_size) + 2)


@torch.no_grad()
def prefill(model, prompt_ids: Sequence[int], block_size: int = 16) -> PrefillState:
    """The dense prefill of a prompt, once, for every method to start from."""
    d = _decoder(model, CompressionConfig("full"), len(prompt_ids), block_size)
    d.prefill(prompt_ids)
    return d.prefill_state


def _run(model, config: CompressionConfig, prompt: Sequence[int], state: PrefillState, n: int, block_size: int):
    d = _decoder(model, config, len(prompt) + n, block_size)
    out = d.generate(prompt, n, state)
    steps = max(1, n)
    read = float(d.record.reads.sum()) * d.pool.bytes_per_token() / model.config.num_hidden_layers / steps
    return out, d.kv_bytes(), read, d.pool.bytes_per_token(), d.pool_bytes()


@torch.no_grad()
def compare_methods(model, configs: Sequence[CompressionConfig], prompts: Sequence[Sequence[int]], n_tokens: int,
                    heldout: Sequence[tuple[Sequence[int], Sequence[int]]], block_size: int = 16,
                    reference: MethodResult | None = None,
                    prefilled: dict[str, list[PrefillState]] | None = None) -> list[MethodResult]:
    """Run every config on the same prompts; the first config is the reference (use "full"),
    unless ``reference`` is a full-cache result of an earlier call on the same prompts (then its
    tokens are the reference and every config is measured against them).

    prefilled: a dict the caller keeps between calls on the same prompts, held-out pairs and
    block size; the dense prefills are stored in it on the first call and reused after (lesson
    11's budget control: the two prefills were about two thirds of a one-method call).

    heldout: (context ids, continuation ids) pairs for perplexity. Agreement: for each prompt, the
    share of the ``n_tokens`` greedy tokens equal to the reference's at the same position.
    """
    if reference is None and (not configs or configs[0].method != "full"):
        raise ValueError("the first config must be the full cache (the reference)")
    if reference is not None and len(reference.tokens) != len(prompts):
        raise ValueError(f"the reference holds tokens for {len(reference.tokens)} prompts, not {len(prompts)}")
    results: list[MethodResult] = []
    pre = {} if prefilled is None else prefilled
    if "prompts" not in pre:
        pre["prompts"] = [prefill(model, p, block_size) for p in prompts]  # one prefill per prompt, shared
        pre["heldout"] = [prefill(model, c, block_size) for c, _ in heldout]
    states, held = pre["prompts"], pre["heldout"]
    if len(states) != len(prompts) or len(held) != len(heldout):
        raise ValueError(f"prefilled holds {len(states)} prompts and {len(held)} held-out pairs, "
                         f"not {len(prompts)} and {len(heldout)}")
    for cfg in configs:
        runs = [_run(model, cfg, p, st, n_tokens, block_size) for p, st in zip(prompts, states)]
        toks = [r[0] for r in runs]
        ref = reference.tokens if reference is not None else (toks if not results else results[0].tokens)
        agree = sum(sum(a == b for a, b in zip(t, r)) / max(1, len(r)) for t, r in zip(toks, ref)) / len(toks)
        nll = [_decoder(model, cfg, len(c) + len(x), block_size).continuation_nll(c, x, st)
               for (c, x), st in zip(heldout, held)]
        mean = [sum(r[i] for r in runs) / len(runs) for i in (1, 2, 4)]
        results.append(MethodResult(cfg.label, runs[0][3], mean[0], mean[1], math.exp(sum(nll) / max(1, len(nll))),
                                    agree, toks, cfg.kind, mean[2], len(prompts), n_tokens,
                                    sum(len(x) for _, x in heldout)))
    return results


def format_results(rows: Sequence[MethodResult]) -> str:
    """A fixed-width table, the full cache first; percentages relative to it; the sample size last.
    "KV kept": the bytes the method keeps (for h2o, a per-head token cache's); "pool": the bytes of
    the paged pool's blocks the table still holds."""
    full = rows[0]
    lines = [f"{'method':<18}{'kind':<10}{'bytes':>8}{'KV kept':>14}{'pool':>8}{'read per step':>15}"
             f"{'perplexity':>12}{'% tokens':>10}",
             f"{'':<18}{'':<10}{'/token':>8}{'(MB / %)':>14}{'(MB)':>8}{'(MB / %)':>15}{'':>12}{'= full':>10}"]
    for r in rows:
        lines.append(f"{r.label:<18}{r.kind:<10}{r.bytes_per_token:>8,}{r.kv_bytes / 1e6:>8.2f} /"
                     f"{r.kv_bytes / full.kv_bytes:>4.0%}{r.pool_bytes / 1e6:>8.2f}{r.read_bytes_per_step / 1e6:>9.2f} /"
                     f"{r.read_bytes_per_step / full.read_bytes_per_step:>4.0%}{r.ppl:>12.2f}{r.agreement:>10.0%}")
    lines.append(f"sample: {full.prompts} prompt(s) x {full.greedy_tokens} greedy tokens each (agreement); "
                 f"perplexity over {full.scored_tokens} held-out tokens")
    return "\n".join(lines)


@torch.no_grad()
def needle(model, prompt_ids: Sequence[int], config: CompressionConfig, max_tokens: int = 8,
           block_size: int = 16, state: PrefillState | None = None) -> list[int]:
    """Greedy tokens after a long prompt that hides a fact in its middle and asks for it at the end
    (``state``: the prompt's prefill, shared between methods)."""
    return _decoder(model, config, len(prompt_ids) + max_tokens, block_size).generate(prompt_ids, max_tokens, state)
