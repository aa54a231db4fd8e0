"""The next token from logits: greedy, or Gumbel-max sampling with one generator per sample.

Temperature 0 is greedy (``argmax``; no random number is drawn). Otherwise row ``i`` draws
``V`` uniforms ``u`` from its own ``torch.Generator`` (float64) and takes
``argmax(logits / T + g)`` with Gumbel noise ``g = -log(-log(u))``: a draw from
``softmax(logits / T)`` (the Gumbel-max trick). A sample's generator is seeded ``seed + i`` and
draws once per token, so the naive, contiguous and paged paths of ``generate`` and the engine
draw the same noise and, given equal logits, pick the same tokens.

Mirrors nano-vllm ``nanovllm/layers/sampler.py`` (``Sampler``: logits / T, then the
exponential-noise form of Gumbel-max); kvlab draws from per-sample seeded generators on the CPU
so every path is reproducible, and keeps greedy rows exact.

``top_p < 1`` (nucleus sampling, a sampled row only): the tokens outside the smallest set holding
``top_p`` of ``softmax(logits / T)`` get ``-inf`` before the noise is added; the same ``V``
uniforms are drawn, so ``top_p`` never shifts another token's draw.

Not handled here: top-k, repetition penalties, stop tokens (``Sequence.stop_reason``).

Example:
    >>> logits = torch.tensor([[0.1, 2.0, 0.3], [1.0, 0.0, 0.5]])    # (n=2, V=3)
    >>> sample_next(logits, 0.0, [])                                   # greedy
    [1, 0]
    >>> gens = lambda: [torch.Generator().manual_seed(7 + i) for i in range(2)]
    >>> sample_next(logits, 1.0, gens()) == sample_next(logits, 1.0, gens())   # same seeds, same draws
    True
    >>> sample_next(logits, [0.0, 1.0], gens())[0]                   # one temperature per row
    1
    >>> sample_next(logits, 5.0, gens(), top_p=[0.01, 0.01])          # a nucleus of one token: the argmax
    [1, 0]
"""
from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["sample_next", "nucleus"]


def _per_row(name: str, value: float | Sequence[float], rows: int) -> list[float]:
    out = [float(value)] * rows if isinstance(value, (int, float)) else [float(v) for v in value]
    if len(out) != rows:
        raise ValueError(f"{len(out)} {name} values for {rows} rows of logits")
    return out


def nucleus(scaled: torch.Tensor, top_p: float) -> torch.Tensor:
    """scaled (V,) float64 logits / T -> the same with ``-inf`` outside the smallest set of tokens
    holding ``top_p`` of the probability (the most likely token is always kept).

    Example: probabilities [0.5, 0.3, 0.2], top_p 0.7 -> tokens 0 and 1 kept, token 2 -inf.
    """
    if top_p >= 1:
        return scaled
    probs, order = torch.softmax(scaled, -1).sort(descending=True)    # (V,), (V,)
    outside = probs.cumsum(-1) - probs >= top_p                          # (V,) mass before it already >= top_p
    return scaled.clone().index_put_((order[outside],), torch.tensor(float("-inf"), dtype=scaled.dtype))


def sample_next(logits: torch.Tensor, temperature: float | Sequence[float],
                generators: Sequence[torch.Generator], top_p: float | Sequence[float] = 1.0) -> list[int]:
    """logits (n, V) -> n token ids. ``temperature`` and ``top_p``: one for every row, or one per
    row; ``generators[i]`` is row i's (used only when its temperature is not 0)."""
    rows, V = logits.shape
    temps, tops = _per_row("temperature", temperature, rows), _per_row("top_p", top_p, rows)
    if not any(temps):
        return logits.argmax(-1).tolist()
    out = []
    for i, t in enumerate(temps):
        if t == 0:
            out.append(int(logits[i].argmax()))
            continue
        u = torch.rand(V, generator=generators[i], dtype=torch.float64).clamp_(1e-20, 1.0)  # (V,)
        gumbel = -torch.log(-torch.log(u))                                                   # (V,)
        out.append(int((nucleus(logits[i].double().cpu() / t, tops[i]) + gumbel).argmax()))
    return out
