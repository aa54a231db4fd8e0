"""Checkers for lesson 01 (why a KV cache): the FLOPs a cache saves, one decode step with a cache.

    count_flops         FLOPs per decode step, naive recomputation vs a KV cache
    attend_with_cache   one decode step: append K/V to the cache, attend over it

Both need torch, and count_flops the bundled model: they import them inside the function, so
``import kvlab.check`` stays light for the memory-only lessons. The expected FLOPs are the ones
:func:`kvlab.compute.generate.generate` counts on the bundled model; the expected attention is
:func:`kvlab.kernels.naive_attention` over the whole sequence. Mirrors no vLLM or SGLang file
(exercises).
"""
from __future__ import annotations

from typing import Callable

from .harness import Checker, CheckResult, Raised, call_in_place

__all__ = ["count_flops", "attend_with_cache"]


def generate_step_flops(prompt_len: int, new_tokens: int) -> tuple[list[int], list[int]]:
    """FLOPs per step that :func:`kvlab.compute.generate.generate` counts on the bundled model,
    (naive recomputation, contiguous cache), for a prompt of ``prompt_len`` tokens."""
    import torch

    from kvlab.compute.generate import generate  # lazy: torch; compute is being rewritten (issue 11 item 4)

    model, _tok = _bundled()
    ids = [(7 * i + 3) % model.config.vocab_size for i in range(prompt_len)]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny model: one thread is fastest, and immune to a busy machine
    try:
        naive = generate(model, ids, new_tokens, strategy="naive").step_flops
        cached = generate(model, ids, new_tokens, strategy="contiguous").step_flops
    finally:
        torch.set_num_threads(threads)
    return list(naive), list(cached)


_BUNDLED: list = []


def _bundled():
    """The bundled model and tokenizer, loaded once per process."""
    if not _BUNDLED:
        import kvlab.kernels  # noqa: F401  -- the kernel mode is decided before anything imports triton
        from kvlab.compute.loader import load_bundled  # lazy: torch (compute is being rewritten, issue 11 item 4)

        _BUNDLED.append(load_bundled())
    return _BUNDLED[0]


def count_flops(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(flops_per_token, prompt_len, new_tokens) -> (naive_steps, cached_steps)``.

    ``flops_per_token(c)``: FLOPs to run one token that attends to ``c`` tokens (itself
    included). Step 0 yields the first new token; step t yields token t. Naive recomputation
    runs the whole sequence at every step (step t: ``prompt_len + t`` tokens, the i-th of
    them attending to i tokens); with a cache, step 0 is the prefill of the prompt and every
    later step runs one token. Return one list per strategy, ``new_tokens`` FLOP counts each.
    Expected: the per-step FLOPs that ``kvlab.compute.generate.generate`` counts on the bundled
    model (strategies ``"naive"`` and ``"contiguous"``).
    """
    model, _tok = _bundled()
    c = Checker("count_flops", fn, verbose=verbose,
                compare=lambda e, a: isinstance(a, (tuple, list)) and len(a) == 2 and [list(x) for x in a] == [list(x) for x in e])
    for p, n in [(1, 1), (1, 4), (5, 1), (5, 6), (12, 3), (30, 10)]:
        expected = generate_step_flops(p, n)
        label = f"prompt {p} tokens, {n} new tokens"
        if c.unusable(label, expected):
            continue
        c.record(label, expected, call_in_place(fn, model.flops_per_token, p, n))
    return c.done()


def attend_with_cache(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(q, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)``: one decode step.

    q (num_heads, head_dim) is the new token's query; k_new, v_new (num_kv_heads, head_dim) its
    key and value; k_cache, v_cache (T, num_kv_heads, head_dim) the cache of the T earlier tokens
    (T may be 0). Append the new K/V to the cache, then attend q over all T + 1 tokens (scale
    1/sqrt(head_dim); query head h uses KV head ``h // (num_heads // num_kv_heads)``). Return the
    output (num_heads, head_dim) and the grown caches (T + 1, num_kv_heads, head_dim). Run token
    by token from an empty cache, each output must equal ``kvlab.kernels.naive_attention`` over
    the whole sequence recomputed (causal), at that position.
    """
    import torch

    from kvlab.kernels import naive_attention

    c = Checker("attend_with_cache", fn, verbose=verbose)
    for h, kvh, d, n, seed in [(1, 1, 8, 4, 0), (2, 2, 8, 6, 1), (4, 2, 16, 7, 2), (4, 1, 8, 5, 3), (8, 2, 4, 3, 4)]:
        g = torch.Generator().manual_seed(seed)
        q = torch.randn((n, h, d), generator=g)                                     # (n, heads, head_dim)
        k = torch.randn((n, kvh, d), generator=g)                                   # (n, kv_heads, head_dim)
        v = torch.randn((n, kvh, d), generator=g)
        want = naive_attention(q, k, v, causal=True)                                # (n, heads, head_dim)
        label = f"{h} heads / {kvh} KV heads, head_dim {d}, {n} tokens one by one"
        expected = f"{n} steps match recomputation; cache grows to ({n}, {kvh}, {d})"
        if c.unusable(label, expected):
            continue
        kc, vc = torch.zeros((0, kvh, d)), torch.zeros((0, kvh, d))
        actual = expected
        for t in range(n):
            got = call_in_place(fn, q[t].clone(), k[t].clone(), v[t].clone(), kc, vc)
            if isinstance(got, Raised):
                actual = f"step {t}: {got!r}"
                break
            try:
                out, kc, vc = got
                shape_ok = tuple(out.shape) == (h, d) and tuple(kc.shape) == (t + 1, kvh, d) and tuple(vc.shape) == (t + 1, kvh, d)
            except Exception as exc:  # noqa: BLE001
                actual = f"step {t}: returned {type(got).__name__}, not (out, k_cache, v_cache) ({exc})"
                break
            if not shape_ok:
                actual = f"step {t}: shapes out {tuple(out.shape)}, k_cache {tuple(kc.shape)}, v_cache {tuple(vc.shape)}"
                break
            if not torch.allclose(out.float(), want[t], atol=1e-4, rtol=1e-4):
                actual = f"step {t}: max |out - recomputed| = {float((out.float() - want[t]).abs().max()):.3g}"
                break
        c.record(label, expected, actual, passed=actual == expected)
    return c.done()
