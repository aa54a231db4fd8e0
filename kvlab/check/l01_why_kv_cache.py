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

from .diagnose import first_diagnosis
from .harness import SHARED_SLIPS, Checker, CheckResult, Raised, call_in_place, same_int

__all__ = ["count_flops", "attend_with_cache"]


def generate_step_flops(prompt_len: int, new_tokens: int) -> tuple[list[int], list[int]]:
    """FLOPs per step that :func:`kvlab.compute.generate.generate` counts on the bundled model,
    (naive recomputation, contiguous cache), for a prompt of ``prompt_len`` tokens (runs the model:
    the tests compare :func:`expected_step_flops` with it)."""
    import torch

    from kvlab.compute.generate import generate

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


def expected_step_flops(flops_per_token: Callable[[int], int], prompt_len: int, new_tokens: int,
                        cached_prefix: int = 0) -> tuple[list[int], list[int]]:
    """What :func:`generate_step_flops` counts, from ``flops_per_token`` alone (no model run: the
    checker stays under a second); with ``cached_prefix`` tokens of the prompt already cached, the
    cached path's prefill runs only the rest (positions ``cached_prefix + 1 .. prompt_len``), while
    naive recomputation, which has no cache, runs everything. Example:
    ``expected_step_flops(lambda c: c, 2, 2) == ([3, 6], [3, 3])``;
    ``expected_step_flops(lambda c: c, 2, 2, cached_prefix=1) == ([3, 6], [2, 3])``."""
    prefix = [0]
    for i in range(1, prompt_len + new_tokens + 1):
        prefix.append(prefix[-1] + flops_per_token(i))           # prefix[n]: one pass over n tokens
    naive = [prefix[prompt_len + t] for t in range(new_tokens)]
    prefill = prefix[prompt_len] - prefix[cached_prefix]         # positions cached_prefix+1 .. prompt_len
    cached = [prefill] + [flops_per_token(prompt_len + t) for t in range(1, new_tokens)]
    return naive, cached


_BUNDLED: list = []


def _bundled():
    """The bundled model and tokenizer, loaded once per process."""
    if not _BUNDLED:
        import kvlab.kernels  # noqa: F401  -- the kernel mode is decided before anything imports triton
        from kvlab.compute.loader import load_bundled  # lazy: torch (compute is being rewritten, issue 11 item 4)

        _BUNDLED.append(load_bundled())
    return _BUNDLED[0]


def _flops_note(expected, actual) -> str | None:
    """Which of the two lists is wrong, and the usual reason (issue 16: checkers name the mistake)."""
    if isinstance(actual, dict):
        return "returned a dict: return a tuple of two lists, (naive_steps, cached_steps)"
    try:
        (e_naive, e_cached), (a_naive, a_cached) = expected, actual
        kinds = {type(x).__name__ for x in (a_naive, a_cached)}
        a_naive, a_cached = list(a_naive), list(a_cached)
    except (TypeError, ValueError):
        return "return two lists, (naive_steps, cached_steps), one FLOP count per step each"
    if kinds - {"list", "tuple"}:
        return (f"returned a {' and a '.join(sorted(kinds - {'list', 'tuple'}))} where two plain lists of ints are "
                "expected: convert with .tolist() (or build the lists with append)")
    odd = next((x for x in a_naive + a_cached if not (isinstance(x, int) and not isinstance(x, bool))), None)
    if odd is not None:
        return (f"a step's FLOPs came back as {odd!r} ({type(odd).__name__}): a FLOP count is an int; sum the "
                "ints flops_per_token returns, with no / and no float()")
    if e_naive != e_cached and [a_naive, a_cached] == [list(e_cached), list(e_naive)]:
        return "naive and cached are swapped: return (naive_steps, cached_steps)"
    running = _running_totals_note((e_naive, e_cached), (a_naive, a_cached))
    if running:
        return running
    if len(a_naive) != len(e_naive) or len(a_cached) != len(e_cached):
        return f"each list needs new_tokens = {len(e_naive)} entries, one per step (the prefill, step 1, included)"
    notes = []
    if a_naive != list(e_naive):
        notes.append("naive step t (from 1) reruns all prompt_len + t - 1 tokens, positions 0 to prompt_len + t - 2, "
                     "and the token at position p attends to p + 1 tokens: itself included")
    if a_cached != list(e_cached):
        if a_cached[0] != e_cached[0]:
            notes.append("cached step 1 is the prefill: it runs every prompt token not already cached, the token at "
                         "position p attending to p + 1 tokens")
        else:
            notes.append("cached step t >= 2 runs one token, which attends to prompt_len + t - 1 tokens (itself included)")
    return "; ".join(notes) or None


def _first_difference(expected, actual) -> str:
    """Where two pairs of per-step lists first differ, each wrong list's first wrong step with both
    counts in full (the report cuts long lists); '' when they are not two lists each of the same
    lengths. Example: ``_first_difference(([3, 6], [3, 3]), ([3, 6], [3, 4]))`` ->
    ``'first difference: cached step 2 of 2: expected 3, got 4'``."""
    try:
        pairs = [(name, list(e), list(a)) for name, e, a in zip(("naive", "cached"), expected, actual)]
    except TypeError:
        return ""
    if len(pairs) != 2 or any(len(e) != len(a) for _n, e, a in pairs):
        return ""
    parts = []
    for name, e, a in pairs:
        i = next((i for i, (x, y) in enumerate(zip(e, a)) if not same_int(x, y)), None)
        if i is not None:
            got = f"{a[i]:,}" if isinstance(a[i], int) else repr(a[i])
            parts.append(f"{name} step {i + 1} of {len(e)}: expected {e[i]:,}, got {got}")
    return "first difference: " + "; ".join(parts) if parts else ""


def _running_totals_note(expected, actual) -> str | None:
    """Lists that are the running totals (cumulative sums) of the right per-step FLOPs."""
    import itertools

    for e, a, name in zip(expected, actual, ("naive", "cached")):
        if len(e) > 1 and a != list(e) and a == list(itertools.accumulate(e)):
            return (f"{name}: these are running totals (the FLOPs of steps 1..t added up): return each step's own "
                    "FLOPs, one entry per step")
    return None


def _same_step_counts(expected, actual) -> bool:
    """Two lists (or tuples) of int FLOP counts equal to the expected ones (a float 3.0 is not a count)."""
    return (isinstance(actual, (tuple, list)) and len(actual) == 2
            and all(isinstance(a, (list, tuple)) and len(a) == len(e) and all(same_int(x, y) for x, y in zip(e, a))
                    for e, a in zip(expected, actual)))


def _step_note(f: Callable[[int], int], p: int, n: int, r: int, actual) -> str:
    """Name the mistakes any case shows (the lists swapped, a flat prefill cost), then those of a
    case with ``r`` prompt tokens already cached (:func:`_prefix_note`); '' if none fits (the
    checker's diagnosis of expected against actual speaks then)."""
    try:
        a_naive, a_cached = (list(x) for x in actual)
    except (TypeError, ValueError):
        return _prefix_note(f, p, n, r, actual) if r else ""
    naive, cached = expected_step_flops(f, p, n, r)
    if naive != cached and [a_naive, a_cached] == [cached, naive]:
        return "naive and cached are swapped: return (naive_steps, cached_steps)"
    if p - r > 1 and a_cached[:1] and a_cached[0] in {f(c) for c in range(p + n + 1)}:
        return (f"prefill counted as one token: cached step 1 runs all {p - r} prompt tokens that are not cached "
                "yet, not one; the token at position p attends to p + 1 tokens")
    if p - r > 1 and a_cached[:1] == [(p - r) * f(p)]:
        return ("the prefill's tokens do not all cost flops_per_token(prompt_len): the token at position p attends "
                "to p + 1 tokens, so each prefill token costs flops_per_token(p + 1) of its own position")
    return _decode_note(f, p, n, r, a_naive, a_cached) or (_prefix_note(f, p, n, r, actual) if r else "")


def _decode_note(f: Callable[[int], int], p: int, n: int, r: int, a_naive: list, a_cached: list) -> str:
    """Name a slip of the naive steps' length or of the cached decode steps' context ('' if none fits).
    Example: with ``f = lambda c: c``, p = 2, n = 2, r = 0, naive ``[6, 10]`` (one token too many a step) is named."""
    naive, cached = expected_step_flops(f, p, n, r)
    if a_naive != naive:
        for k, words in ((1, "one token too many"), (-1, "one token too few")):
            if a_naive == expected_step_flops(f, p + k, n)[0]:
                return (f"the naive steps ran {words}: naive step t (from 1) reruns the prompt_len + t - 1 tokens "
                        "the sequence holds before it (positions 0 to prompt_len + t - 2), not the one it produces")
    if n > 2 and a_cached[:1] == cached[:1] and a_cached[1:] != cached[1:] and len(set(a_cached[1:])) == 1:
        return ("every cached decode step costs the same: a cached step runs one token, but its attention still "
                "grows: step t reads all prompt_len + t - 1 tokens in the cache, flops_per_token(prompt_len + t - 1)")
    if a_cached[1:] != cached[1:] and a_cached[:1] == cached[:1] and a_cached[1:] == [f(p + t + 1) for t in range(1, n)]:
        return ("the cached steps attended to one token too many: step t runs the token at position "
                "prompt_len + t - 2, which attends to prompt_len + t - 1 tokens (positions 0 to prompt_len + t - 2), "
                "flops_per_token(prompt_len + t - 1)")
    return ""


def _prefix_note(f: Callable[[int], int], p: int, n: int, r: int, actual) -> str:
    """Name the usual mistake on a case with ``r`` prompt tokens already cached ('' if none fits)."""
    if isinstance(actual, Raised):
        if isinstance(actual.exc, TypeError) and "cached_prefix" in str(actual.exc):
            return ("your function takes no cached_prefix: add the parameter, cached_prefix=0 (the prompt tokens "
                    "whose K and V are already in the cache)")
        return ""
    try:
        a_naive, a_cached = (list(x) for x in actual)
    except (TypeError, ValueError):
        return ""
    naive, cached = expected_step_flops(f, p, n, r)
    skipped = [sum(f(i) for i in range(r + 1, p + t + 1)) for t in range(n)]   # positions r .. p + t - 1
    if a_naive != naive and a_naive in (expected_step_flops(f, p - r, n)[0], skipped):
        return ("naive recomputation has no cache to reuse: the cache changes no naive step, which reruns the whole "
                "sequence, the cached prefix included; only the cached path skips the prefix")
    if a_cached[:1] == expected_step_flops(f, p, n)[1][:1]:
        return (f"cached step 1 (the prefill) ran the whole prompt: its first {r} tokens already have K and V in the cache, so "
                "the prefill runs only the tokens after them")
    if a_cached[:1] == [sum(f(i) for i in range(1, p - r + 1))]:
        return ("the prefill counted its tokens' attention from 1: the token at position p still attends "
                "to p + 1 tokens, the cached prefix included (it reads their K and V)")
    if a_cached[:1] == [sum(f(i) for i in range(r, p + 1))] or a_cached[:1] == [sum(f(i) for i in range(r + 2, p + 1))]:
        return (f"the prefill is off by one token: with {r} tokens cached (positions 0 to {r - 1}) it runs positions "
                f"{r} to {p - 1}, the token at position p attending to p + 1 tokens")
    return ""


def count_flops(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(flops_per_token, prompt_len, new_tokens, cached_prefix=0) -> (naive_steps, cached_steps)``.

    ``flops_per_token(c)``: FLOPs to run one token that attends to ``c`` tokens (itself
    included). Steps count from 1, as the lesson does: entry t - 1 of a list is step t, which yields
    the t-th new token; positions count from 0 (the prompt is positions 0 .. prompt_len - 1). Naive
    recomputation runs the whole sequence at every step (step t: ``prompt_len + t - 1`` tokens, the
    one at position p attending to p + 1 tokens); with a cache, step 1 is the prefill of the prompt
    and every later step runs one token. ``cached_prefix`` (0 <= cached_prefix < prompt_len) prompt tokens
    already have K and V in the cache (an earlier request started the same way): the prefill runs
    only the others, each still attending to its position; naive has no cache and runs them all.
    Return one list per strategy, ``new_tokens`` FLOP counts each. Expected (cached_prefix 0):
    the per-step FLOPs that ``kvlab.compute.generate.generate`` counts on the bundled model
    (strategies ``"naive"`` and ``"contiguous"``); with a prefix, the same minus the prefix's prefill.
    """
    model, _tok = _bundled()
    f = model.flops_per_token
    c = Checker("count_flops", fn, verbose=verbose, diagnose=[_flops_note],
                compare=_same_step_counts)
    for p, n, r in [(1, 1, 0), (1, 4, 0), (5, 1, 0), (5, 6, 0), (12, 3, 0), (30, 10, 0),
                    (2, 1, 1), (5, 6, 2), (12, 3, 11), (30, 10, 16)]:
        expected = expected_step_flops(f, p, n, r)  # r = 0: = generate_step_flops (tests/test_check_l01.py)
        label = f"prompt {p} tokens, {n} new tokens" + (f", first {r} prompt tokens already cached" if r else "")
        if c.unusable(label, expected):
            continue
        actual = call_in_place(fn, f, p, n, cached_prefix=r) if r else call_in_place(fn, f, p, n)
        wrong = not _same_step_counts(expected, actual)
        c.record(label, expected, actual, note=_case_note(f, (p, n, r), expected, actual) if wrong else "")
    return c.done()


def _case_note(f: Callable[[int], int], case: tuple[int, int, int], expected, actual) -> str:
    """A failing case's note: the mistake named (this lesson's, then the slips every checker knows),
    then where the lists first differ, in full (the report cuts a long pair of lists at 90
    characters, where expected and actual can read the same). Example: a cached step 2 of 10
    counted as 2,525,184 instead of 2,586,624 ends with
    ``first difference: cached step 2 of 10: expected 2,586,624, got 2,525,184``."""
    name = _step_note(f, *case, actual)
    if not name and not isinstance(actual, Raised):
        name = first_diagnosis([_flops_note], expected, actual)
    name = name or first_diagnosis(SHARED_SLIPS, expected, actual)
    where = _first_difference(expected, actual) if not isinstance(actual, Raised) else ""
    return "; ".join(part for part in (name, where) if part)


def _attention_mistake(out, q, k, v, t: int) -> str:
    """Name the usual mistake when ``out`` (one step's output) is wrong: it equals attention computed
    one of the wrong ways below, on the same q and cache."""
    import math

    import torch

    h, d = q.shape[-2], q.shape[-1]
    kvh = k.shape[1]
    group = h // kvh

    def attend(keys, values, scale, head_of, softmax_dim=-1):
        kk = keys[:, [head_of(i) for i in range(h)]]                        # (T, h, d)
        vv = values[:, [head_of(i) for i in range(h)]]
        w = torch.softmax(torch.einsum("hd,thd->ht", q[t], kk) * scale, dim=softmax_dim)  # (h, T)
        return torch.einsum("ht,thd->hd", w, vv)                            # (h, d)

    right_head = lambda i: i // group  # noqa: E731
    if t == 0 and (not torch.isfinite(out).all() or not out.float().abs().any()):
        return ("step 1 gave zeros (or NaN), what attention over an EMPTY cache gives: attended before appending; "
                "append the new K and V first, the token attends to itself")
    tries = {
        "attended before appending: the new token attends to itself too (append its K and V first)":
            (lambda: attend(k[:t], v[:t], 1 / math.sqrt(d), right_head)) if t > 0 else None,
        "no scale: multiply the scores by 1/sqrt(head_dim)": lambda: attend(k[:t + 1], v[:t + 1], 1.0, right_head),
        "scaled by 1/head_dim: the scale is 1/sqrt(head_dim)": lambda: attend(k[:t + 1], v[:t + 1], 1 / d, right_head),
        "scaled by 1/sqrt(num_heads * head_dim), the model's width: the scale is 1/sqrt(head_dim), one head's size":
            (lambda: attend(k[:t + 1], v[:t + 1], 1 / math.sqrt(h * d), right_head)) if h > 1 else None,
        "multiplied the scores by sqrt(head_dim): divide by it (the scale is 1/sqrt(head_dim))":
            lambda: attend(k[:t + 1], v[:t + 1], math.sqrt(d), right_head),
        "query heads mapped to KV heads with h % num_kv_heads: query head h uses KV head h // (num_heads // num_kv_heads)":
            (lambda: attend(k[:t + 1], v[:t + 1], 1 / math.sqrt(d), lambda i: i % kvh)) if group > 1 and kvh > 1 else None,
        "query heads mapped to KV heads with min(h, num_kv_heads - 1): the heads past the last KV head all read it; "
        "query head h uses KV head h // (num_heads // num_kv_heads), a group of consecutive heads per KV head":
            (lambda: attend(k[:t + 1], v[:t + 1], 1 / math.sqrt(d), lambda i: min(i, kvh - 1))) if group > 1 and kvh > 1 else None,
        "every query head read KV head 0: query head h uses KV head h // (num_heads // num_kv_heads), a group of "
        "consecutive query heads per KV head": (lambda: attend(k[:t + 1], v[:t + 1], 1 / math.sqrt(d), lambda i: 0))
            if kvh > 1 else None,
        "softmax over the heads: each head's weights are a softmax over the tokens (the last dimension of the scores)":
            lambda: attend(k[:t + 1], v[:t + 1], 1 / math.sqrt(d), right_head, softmax_dim=0),
        "attended only the new token: q attends over the whole cache, the T earlier tokens and the new one":
            (lambda: attend(k[t:t + 1], v[t:t + 1], 1 / math.sqrt(d), right_head)) if t > 0 else None,
        "keys and values swapped: the scores come from K, the output is a weighted sum of V":
            lambda: attend(v[:t + 1], k[:t + 1], 1 / math.sqrt(d), right_head),
    }
    for note, make in tries.items():
        if make is None:
            continue
        try:
            if torch.allclose(out.float(), make(), atol=1e-4, rtol=1e-4):
                return note
        except Exception:  # noqa: BLE001 - a diagnosis never breaks a check
            continue
    if torch.allclose(out.float(), attend(k[:t + 1], v[:t + 1], 1 / math.sqrt(d), right_head), atol=1e-2, rtol=1e-2):
        return ("right to about 1e-2 but not 1e-4: the rounding of a low-precision step (float16 or bfloat16 "
                "somewhere); compute in the inputs' dtype")
    return ""


def _cache_order_note(kc, vc, k, v) -> str:
    """'' when the caches are exactly k and v (the tokens in order); else what is wrong with them."""
    import torch

    def same(a, b) -> bool:
        return tuple(a.shape) == tuple(b.shape) and torch.allclose(a.float(), b.float(), atol=1e-6)

    if same(kc, k) and same(vc, v):
        return ""
    if len(k) > 1 and (same(kc, k.flip(0)) or same(kc[1:], k[:-1]) or same(kc[0], k[-1])):
        return ("the new token went to the FRONT of the cache: append it at the end (the token at position t is "
                "entry t; attention gives the same output either way, the cache does not)")
    if same(kc, v) and same(vc, k):
        return "k_cache and v_cache are swapped in what you return"
    return "the returned caches are not the earlier caches with the new K and V appended, unchanged"


def _right_with(fn: Callable, args: tuple, want) -> bool:
    """Whether ``fn(*args)``'s output (its first result) is ``want`` to 1e-4 (a raise is False)."""
    import torch

    got = call_in_place(fn, *args)
    try:
        return not isinstance(got, Raised) and torch.allclose(got[0].float(), want, atol=1e-4, rtol=1e-4)
    except Exception:  # noqa: BLE001 - a diagnosis never breaks a check
        return False


def _reads_heads_first(fn: Callable, args: tuple, want) -> str:
    """The note when ``fn``, which raised on token-first caches, gives the right output once they are
    handed to it heads-first, (num_kv_heads, T, head_dim); '' otherwise."""
    q, k_new, v_new, kc, vc = args
    if not _right_with(fn, (q.clone(), k_new.clone(), v_new.clone(), kc.transpose(0, 1).clone(),
                            vc.transpose(0, 1).clone()), want):
        return ""
    return ("your code reads the caches heads-first, (num_kv_heads, T, head_dim): they come token-first, "
            "(T, num_kv_heads, head_dim), one entry per position; append the new token's as the last")


def _kv_heads_not_repeated(fn: Callable, args: tuple, want) -> str:
    """The note when ``fn``, wrong (or raising) on a grouped-query case, gives the right output once
    every KV head is handed to it already repeated for its query heads (as many KV heads as query
    heads): it never mapped query head h to KV head h // group; '' otherwise (and when there are as
    many KV heads as query heads). Example: an einsum "hd,thd->ht" of q (4, d) with an unrepeated
    (T, 2, d) cache raises "subscript h has size 2"; with the cache repeated to (T, 4, d) it is right."""
    q, k_new, v_new, kc, vc = args
    group = q.shape[0] // k_new.shape[0]
    if group <= 1:
        return ""
    rep = lambda x, dim: x.repeat_interleave(group, dim=dim).clone()  # noqa: E731 - (.., h, d)
    if not _right_with(fn, (q.clone(), rep(k_new, 0), rep(v_new, 0), rep(kc, 1), rep(vc, 1)), want):
        return ""
    return (f"the KV heads were not repeated for the query heads (grouped-query attention): {q.shape[0]} query "
            f"heads share {k_new.shape[0]} KV heads, query head h reading KV head h // {group} "
            "(repeat each KV head for its group; with one KV head, broadcasting hid it)")


def _shares_memory(outs: tuple, inputs: dict) -> str:
    """The name of the first input whose storage one of ``outs`` uses ('' when none).

    >>> import torch
    >>> k = torch.ones(2, 3)
    >>> _shares_memory((k[None], torch.ones(1)), {"k_new": k}), _shares_memory((k.clone()[None],), {"k_new": k})
    ('k_new', '')
    """
    for name, x in inputs.items():
        ptr = x.untyped_storage().data_ptr()
        if any(o.untyped_storage().data_ptr() == ptr for o in outs):
            return name
    return ""


def attend_with_cache(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(q, k_new, v_new, k_cache, v_cache) -> (out, k_cache, v_cache)``: one decode step.

    q (num_heads, head_dim) is the new token's query; k_new, v_new (num_kv_heads, head_dim) its
    key and value; k_cache, v_cache (T, num_kv_heads, head_dim) the cache of the T earlier tokens
    (T may be 0). Append the new K/V to the cache, then attend q over all T + 1 tokens (scale
    1/sqrt(head_dim); query head h uses KV head ``h // (num_heads // num_kv_heads)``). Return the
    output (num_heads, head_dim) and the grown caches (T + 1, num_kv_heads, head_dim); the five
    inputs come back unchanged. Run token
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
        actual, note = expected, ""
        for t in range(n):
            args = (q[t].clone(), k[t].clone(), v[t].clone(), kc, vc)
            before = [a.clone() for a in args]
            got = call_in_place(fn, *args)
            if isinstance(got, Raised):
                # an untouched stub stays a Raised: the report says "not started yet" in one line
                actual = got if isinstance(got.exc, NotImplementedError) else f"step {t + 1}: {got!r}"
                note = "" if isinstance(got.exc, NotImplementedError) else (
                    _reads_heads_first(fn, args, want[t]) or _kv_heads_not_repeated(fn, args, want[t]))
                break
            changed = [name for name, a, b in zip(("q", "k_new", "v_new", "k_cache", "v_cache"), args, before)
                       if tuple(a.shape) != tuple(b.shape) or not torch.equal(a, b)]
            if changed:
                actual = f"step {t + 1}: {', '.join(changed)} changed by the call"
                note = (f"changed the caller's {' and '.join(changed)} in place (an in-place op such as /=, mul_ "
                        "or an indexed write): the inputs must come back as they were; compute on new tensors")
                break
            try:
                out, kc, vc = got
                shape_ok = tuple(out.shape) == (h, d) and tuple(kc.shape) == (t + 1, kvh, d) and tuple(vc.shape) == (t + 1, kvh, d)
            except Exception as exc:  # noqa: BLE001
                actual = f"step {t + 1}: returned {type(got).__name__}, not (out, k_cache, v_cache) ({exc})"
                break
            if not shape_ok:
                actual = f"step {t + 1}: shapes out {tuple(out.shape)}, k_cache {tuple(kc.shape)}, v_cache {tuple(vc.shape)}"
                if (kvh, t + 1, d) != (t + 1, kvh, d) and (kvh, t + 1, d) in (tuple(kc.shape), tuple(vc.shape)):
                    note = (f"the caches came back heads-first, (num_kv_heads, T + 1, head_dim) = ({kvh}, {t + 1}, {d}): "
                            "the cache keeps the token dimension first, (T + 1, num_kv_heads, head_dim)")
                elif tuple(kc.shape)[:1] == (t,) or tuple(vc.shape)[:1] == (t,):
                    note = "the caches came back without the new token: return the grown caches (T + 1 tokens)"
                elif tuple(out.shape) == (d, h):
                    note = (f"out is transposed, (head_dim, num_heads) = ({d}, {h}): return it heads first, "
                            f"(num_heads, head_dim) = ({h}, {d})")
                elif tuple(out.shape) != (h, d) and out.numel() == h * d:
                    note = (f"out has shape {tuple(out.shape)}: return it as (num_heads, head_dim) = ({h}, {d}), "
                            "without the token dimension")
                break
            wrong_dtype = [(name, x.dtype) for name, x in (("out", out), ("k_cache", kc), ("v_cache", vc))
                           if x.dtype != q.dtype]
            if wrong_dtype:
                name, dt = wrong_dtype[0]
                actual = f"step {t + 1}: {name} is {str(dt).replace('torch.', '')}, the inputs {str(q.dtype).replace('torch.', '')}"
                note = f"{name} came back as {str(dt).replace('torch.', '')}: keep the inputs' dtype " + (
                    "(a float64 cache holds twice the bytes, and the next layer expects the model's dtype)"
                    if dt.itemsize > q.dtype.itemsize else
                    "(fewer bits round the result: the next layer expects the model's dtype and its precision)")
                break
            shared = _shares_memory((kc, vc), dict(zip(("q", "k_new", "v_new"), args[:3])))
            if shared:   # review r4: k_new[None] on an empty cache is a view of the caller's tensor
                actual = f"step {t + 1}: the returned cache shares memory with the caller's {shared}"
                note = (f"the cache shares memory with the caller's {shared} (k_new[None] is a view, not a copy): when "
                        "the caller reuses that buffer for the next token, the cached K/V changes with it. Return a "
                        "cache of its own (torch.cat copies; or .clone())")
                break
            order = _cache_order_note(kc, vc, k[:t + 1], v[:t + 1])
            if order:  # attention does not care about the order of the tokens; the cache does
                actual, note = f"step {t + 1}: the returned cache is not the earlier one with the new token last", order
                break
            if not torch.allclose(out.float(), want[t], atol=1e-4, rtol=1e-4):
                actual = f"step {t + 1}: max |out - recomputed| = {float((out.float() - want[t]).abs().max()):.3g}"
                note = _attention_mistake(out, q, k, v, t) or _kv_heads_not_repeated(fn, args, want[t])
                break
        c.record(label, expected, actual, passed=actual == expected, note=note if actual != expected else "")
    return c.done()
