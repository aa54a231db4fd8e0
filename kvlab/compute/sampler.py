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

Not handled here: top-k, top-p, repetition penalties, stop tokens.

Example:
    >>> logits = torch.tensor([[0.1, 2.0, 0.3], [1.0, 0.0, 0.5]])    # (n=2, V=3)
    >>> sample_next(logits, 0.0, [])                                   # greedy
    [1, 0]
    >>> gens = lambda: [torch.Generator().manual_seed(7 + i) for i in range(2)]
    >>> sample_next(logits, 1.0, gens()) == sample_next(logits, 1.0, gens())   # same seeds, same draws
    True
    >>> sample_next(logits, [0.0, 1.0], gens())[0]                   # one temperature per row
    1
"""
from __future__ import annotations

from typing import Sequence

import torch

__all__ = ["sample_next"]


def sample_next(logits: torch.Tensor, temperature: float | Sequence[float],
                generators: Sequence[torch.Generator]) -> list[int]:
    """logits (n, V) -> n token ids. ``temperature``: one for every row, or one per row;
    ``generators[i]`` is row i's (used only when its temperature is not 0)."""
    rows, V = logits.shape
    temps = [float(temperature)] * rows if isinstance(temperature, (int, float)) else list(temperature)
    if len(temps) != rows:
        raise ValueError(f"{len(temps)} temperatures for {rows} rows of logits")
    if not any(temps):
        return logits.argmax(-1).tolist()
    out = []
    for i, t in enumerate(temps):
        if t == 0:
            out.append(int(logits[i].argmax()))
            continue
        u = torch.rand(V, generator=generators[i], dtype=torch.float64).clamp_(1e-20, 1.0)  # (V,)
        gumbel = -torch.log(-torch.log(u))                                                   # (V,)
        out.append(int((logits[i].double().cpu() / t + gumbel).argmax()))
    return out
