"""Checkers for lesson 02 (how big is the KV cache).

    kv_cache_bytes      bytes of K and V for a model and a number of tokens
    requests_that_fit   whole requests of one length that fit in a KV budget

The expected numbers come from :class:`kvlab.memory.kvspec.KVSpec` and its model table.
Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> kv_cache_bytes(lambda l, h, d, t, b=2: l * h * d * t * b, verbose=False).passed   # forgot K and V
    False
"""
from __future__ import annotations

import random
from typing import Callable

from ..memory.kvspec import MODELS, KVSpec
from .diagnose import half_or_double
from .harness import Checker, CheckResult

__all__ = ["kv_cache_bytes", "requests_that_fit"]


def _kv_cache_bytes_ref(layers: int, kv_heads: int, head_dim: int, tokens: int, dtype_bytes: int = 2) -> int:
    return KVSpec(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes).kv_bytes(tokens)


def kv_cache_bytes(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(layers, kv_heads, head_dim, tokens, dtype_bytes=2) -> int`` bytes of K and V.

    ValueError when layers, kv_heads, head_dim or dtype_bytes < 1, or tokens < 0.
    """
    c = Checker("kv_cache_bytes", fn, _kv_cache_bytes_ref, verbose=verbose, diagnose=[half_or_double])
    for name in ("llama-2-70b", "llama-2-7b", "llama-3-8b"):
        m = MODELS[name]
        c.run(f"{name} ({m.layers} layers, {m.kv_heads} KV heads), 4096 tokens, fp16",
              m.layers, m.kv_heads, m.head_dim, 4096, 2)
    c.run("llama-2-70b, 1 token, fp16", 80, 8, 128, 1, 2)
    c.run("llama-2-70b, 4096 tokens, fp32 (dtype_bytes=4)", 80, 8, 128, 4096, 4)
    c.run("tiny model, default dtype_bytes", 2, 2, 16, 10)
    c.run("0 tokens", 32, 8, 128, 0, 2)
    rng = random.Random(2)
    for _ in range(3):
        args = (rng.randrange(1, 100), rng.choice([1, 2, 4, 8, 32]), rng.choice([64, 80, 128]), rng.randrange(1, 9000), rng.choice([1, 2, 4]))
        c.run(f"random {args}", *args)
    c.run("tokens=-1 (must raise ValueError)", 32, 8, 128, -1, 2)
    c.run("kv_heads=0 (must raise ValueError)", 32, 0, 128, 10, 2)
    return c.done()


def _requests_that_fit_ref(kv_budget_bytes: int, bytes_per_token: int, tokens_per_request: int) -> int:
    if bytes_per_token < 1 or tokens_per_request < 1:
        raise ValueError(f"bytes_per_token {bytes_per_token} and tokens_per_request {tokens_per_request} must be >= 1")
    if kv_budget_bytes < 0:
        raise ValueError(f"kv_budget_bytes must be >= 0, got {kv_budget_bytes}")
    return kv_budget_bytes // (bytes_per_token * tokens_per_request)


def requests_that_fit(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(kv_budget_bytes, bytes_per_token, tokens_per_request) -> int`` whole requests that fit.

    Rounds down (a request needs all its tokens). ValueError when bytes_per_token or
    tokens_per_request < 1, or kv_budget_bytes < 0.
    """
    c = Checker("requests_that_fit", fn, _requests_that_fit_ref, verbose=verbose)
    m = MODELS["llama-2-70b"]
    c.run("llama-2-70b per-token bytes, 20 GB budget, 4096 tokens", 20 * 10**9, m.bytes_per_token, 4096)
    c.run("exactly 3 requests", 3 * 4096 * 100, 100, 4096)
    c.run("one byte short of 3 requests", 3 * 4096 * 100 - 1, 100, 4096)
    c.run("budget smaller than one request", 500, 100, 10)
    c.run("zero budget", 0, 100, 10)
    rng = random.Random(3)
    for _ in range(3):
        args = (rng.randrange(0, 10**11), rng.randrange(1, 10**6), rng.randrange(1, 10**4))
        c.run(f"random {args}", *args)
    c.run("tokens_per_request=0 (must raise ValueError)", 1000, 10, 0)
    c.run("negative budget (must raise ValueError)", -1, 10, 10)
    return c.done()
