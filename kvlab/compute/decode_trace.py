"""Decoding one step at a time, without a cache and with one: what each step computes and reads.

:func:`trace_decode` runs greedy decoding of one prompt twice with :func:`kvlab.compute.generate.generate`
(``"naive"``: every step reruns the whole sequence; ``"paged"``: every step runs one token and reads
the others' K and V from the cache) and records, for every step (step 0 is the prefill of the
prompt), a :class:`DecodeStep`: the rows of K and V the cached path computes and writes, the rows
the naive path recomputes, the FLOPs of the step and so far (as ``generate`` counted them), and
one number of every cached K row beside the same number recomputed by that step's naive forward
pass, with the largest difference over the whole of K and V in every layer. That is the evidence
the lesson's stepper draws: a row, once written, is what a recomputation would give again.

The cached rows come from the real paged pool (``pool.gather`` through the block table after the
run); a row is written once and never changed, so the cache at step ``t`` is its first
``prompt_len + t`` rows. The naive rows come from a forward pass over step ``t``'s whole sequence
with an attention callback that keeps every layer's K and V.

Mirrors no vLLM or SGLang file (a picture of what ``generate``'s two paths do per step).

Not handled here: sampling (greedy only), more than one sample, the timing of steps (a step of
this size takes well under a millisecond; the lesson times real steps elsewhere).

Example:
    >>> from kvlab.compute.loader import load_bundled
    >>> model, tok = load_bundled()
    >>> steps = trace_decode(model, tok.encode("Return the"), 4)
    >>> [(s.rows, s.written) for s in steps]
    [(2, (0, 2)), (3, (2, 3)), (4, (3, 4)), (5, (4, 5))]
    >>> all(s.max_diff < 1e-4 for s in steps), steps[-1].naive_total > steps[-1].cached_total
    (True, True)
"""
from __future__ import annotations

import math
from collections import abc
from dataclasses import dataclass

import torch

from ..memory.ids import check_int
from .generate import generate
from .model import causal_attention

__all__ = ["DecodeStep", "trace_decode"]


@dataclass(frozen=True)
class DecodeStep:
    """One decode step of one sequence, naive against cached.

    ``token_ids``: the sequence the step works on (prompt + tokens produced so far); ``rows`` =
    its length = the K/V rows the cache holds after the step (and the rows the naive step
    recomputes); ``written``: the rows [start, end) the cached step computes and writes (the whole
    prompt at step 0, then only the last row); ``new_token``: the token the step produces.
    ``k_cache[i]`` / ``k_naive[i]``: element ``dim`` of KV head 0 of row ``i``'s K in layer
    ``layer``, from the cache and from this step's naive forward; ``max_diff``: the largest
    difference between the naive step's K and V and the cache's, over every layer.
    """

    step: int
    prompt_len: int
    token_ids: tuple[int, ...]
    new_token: int
    written: tuple[int, int]
    naive_flops: int
    cached_flops: int
    naive_total: int
    cached_total: int
    k_cache: tuple[float, ...]
    k_naive: tuple[float, ...]
    max_diff: float
    layer: int = 0
    dim: int = 0

    @property
    def rows(self) -> int:
        return len(self.token_ids)

    @property
    def read(self) -> tuple[int, int]:
        """The rows the cached step reads from the cache that it did not compute itself."""
        return 0, self.written[0]

    def check_integrity(self) -> None:
        """The step's shape: its rows, its writes, its FLOPs and its numbers agree."""
        start, end = self.written
        assert self.rows >= self.prompt_len >= 1, f"{self.rows} rows for a {self.prompt_len}-token prompt"
        assert self.rows == self.prompt_len + self.step, f"step {self.step} works on {self.rows} rows"
        assert end == self.rows, f"the cached step writes up to row {end}, not its last row {self.rows}"
        assert start == (0 if self.step == 0 else self.rows - 1), f"step {self.step} writes rows {start}..{end - 1}"
        assert len(self.k_cache) == len(self.k_naive) == self.rows, "one K number per row, from each path"
        assert 0 < self.cached_flops <= self.naive_flops, f"FLOPs {self.cached_flops} cached, {self.naive_flops} naive"
        assert self.step > 0 or self.cached_flops == self.naive_flops, "the prefill costs the same on both paths"
        assert self.naive_total >= self.naive_flops and self.cached_total >= self.cached_flops, "totals below a step"
        assert math.isfinite(self.max_diff) and self.max_diff >= 0, f"max_diff {self.max_diff}"


def _naive_kv(model, ids: list[int]) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Every layer's (K, V) of one forward pass over ``ids``: [(T, nkv, hs)] * layers."""
    kept: list[tuple[torch.Tensor, torch.Tensor]] = []

    def attention(layer, q, k, v):                       # q (1, T, nh, hs); k, v (1, T, nkv, hs)
        kept.append((k[0], v[0]))                        # (T, nkv, hs)
        return causal_attention(q, k, v)                 # (1, T, nh, hs)

    with torch.no_grad():
        model(torch.tensor([ids], dtype=torch.long, device=model.device), attention=attention,
              logits_rows=slice(-1, None))
    return kept


def trace_decode(model, prompt_ids: abc.Sequence[int], new_tokens: int, layer: int = 0) -> list[DecodeStep]:
    """The ``new_tokens`` steps of greedy decoding, naive against cached (see the module doc).
    Raises ValueError naming a bad ``new_tokens`` or ``layer`` (``generate`` checks the prompt)."""
    new_tokens = check_int("new_tokens", new_tokens, 1)
    layer = check_int("layer", layer, 0)
    if layer >= model.config.num_hidden_layers:
        raise ValueError(f"layer {layer} is not one of the model's {model.config.num_hidden_layers} layers")
    naive = generate(model, prompt_ids, new_tokens, strategy="naive")
    cached = generate(model, prompt_ids, new_tokens, strategy="paged", keep=True)
    if naive.tokens != cached.tokens:
        raise RuntimeError(f"the two paths disagree: {naive.tokens} against {cached.tokens}")
    manager, pool = cached.manager, cached.pool
    (seq,) = manager.tables
    table, P = manager.table(seq), len(naive.prompt_ids)
    kv = [pool.gather(i, table.block_ids, P + new_tokens - 1) for i in range(model.config.num_hidden_layers)]
    manager.free(seq)
    dim = int(kv[layer][0][:, 0].abs().mean(0).argmax())   # the element of KV head 0 that varies most visibly
    ids, steps, totals = list(naive.prompt_ids), [], [0, 0]
    for t in range(new_tokens):
        fresh = _naive_kv(model, ids)                    # what a recomputation gives: [(P + t, nkv, hs)] * layers
        rows = len(ids)
        diff = max(float((mine - held[:rows]).abs().max())                     # naive against the cache,
                   for pair, kept in zip(fresh, kv) for mine, held in zip(pair, kept))  # K and V, every layer
        totals = [totals[0] + naive.step_flops[t], totals[1] + cached.step_flops[t]]
        steps.append(DecodeStep(
            step=t, prompt_len=P, token_ids=tuple(ids), new_token=naive.tokens[t],
            written=(0, rows) if t == 0 else (rows - 1, rows), naive_flops=naive.step_flops[t],
            cached_flops=cached.step_flops[t], naive_total=totals[0], cached_total=totals[1],
            k_cache=tuple(float(x) for x in kv[layer][0][:rows, 0, dim]),
            k_naive=tuple(float(x) for x in fresh[layer][0][:, 0, dim]), max_diff=diff, layer=layer, dim=dim))
        ids.append(naive.tokens[t])
    return steps
