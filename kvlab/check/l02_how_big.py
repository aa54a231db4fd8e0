"""Checkers for lesson 02 (how big is the KV cache).

    kv_cache_bytes               bytes of K and V for a model and a number of tokens (the former exercise 1; tests use it)
    kv_heads_for_budget          a design question: the most KV heads (a divisor of the query heads) whose cache fits
    bytes_per_token_from_config  the same from a model's config.json (GQA, head_dim, dtype defaults)
    requests_that_fit            whole requests of one length that fit in a KV budget (the former exercise 3; tests use it)
    longest_context              a design question: the longest context every one of n users gets at once, in whole blocks
    max_concurrent               how many requests of mixed lengths a GPU holds at once (paged, at a utilization)

The expected numbers come from :class:`kvlab.memory.kvspec.KVSpec` and its model table, and for
``max_concurrent`` from kvlab's :class:`~kvlab.memory.block_manager.BlockManager` admitting the
requests. Each checker names the common mistake when a wrong answer matches it. Mirrors no vLLM
or SGLang file (exercises).

Example:
    >>> kv_cache_bytes(lambda l, h, d, t, b=2: l * h * d * t * b, verbose=False).passed   # forgot K and V
    False
"""
from __future__ import annotations

import random
from typing import Callable

from ..memory.block_manager import BlockManager
from ..memory.block_pool import OutOfBlocks
from ..memory.kvspec import MODELS, KVSpec
from .diagnose import gib_gb_mixups, half_or_double, mistake_runner, off_by, should_have_raised
from .harness import Checker, CheckResult, Raised, same_int

__all__ = ["kv_cache_bytes", "kv_heads_for_budget", "bytes_per_token_from_config", "requests_that_fit", "longest_context",
           "max_concurrent", "CONFIGS"]


def _kv_cache_bytes_ref(layers: int, kv_heads: int, head_dim: int, tokens: int, dtype_bytes: int = 2) -> int:
    return KVSpec(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes).kv_bytes(tokens)


def kv_cache_bytes(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(layers, kv_heads, head_dim, tokens, dtype_bytes=2) -> int`` bytes of K and V.

    ValueError when layers, kv_heads, head_dim or dtype_bytes < 1, or tokens < 0.
    """
    c = Checker("kv_cache_bytes", fn, _kv_cache_bytes_ref, verbose=verbose, compare=same_int, diagnose=[half_or_double, should_have_raised])
    # In fp16 (2 bytes) "no factor 2 for K and V" and "no bytes per number" give the same answer, half the
    # right one; the fp32 and fp8 cases, run first, tell the two apart (issue 21: the dtype mistake was
    # told "did you count both K and V").
    run = mistake_runner(c, {
        "the bytes per number are missing: the formula counts numbers, and each is dtype_bytes bytes wide "
        "(2 in fp16, 4 in fp32, 1 in fp8)":
            lambda l, h, d, t, b=2: 2 * l * h * d * t,
        "the 2 for K and V is missing: every token stores a key AND a value vector per KV head and layer":
            lambda l, h, d, t, b=2: l * h * d * t * b,
        "dtype_bytes ignored: the size was always computed for fp16 (2 bytes), whatever dtype_bytes says":
            lambda l, h, d, t, b=2: 2 * l * h * d * t * 2,
    })
    run("llama-2-70b, 4096 tokens, fp8 (dtype_bytes=1)", 80, 8, 128, 4096, 1)
    run("llama-2-70b, 4096 tokens, fp32 (dtype_bytes=4)", 80, 8, 128, 4096, 4)
    for name in ("llama-2-70b", "llama-2-7b", "llama-3-8b"):
        m = MODELS[name]
        run(f"{name} ({m.layers} layers, {m.kv_heads} KV head{'' if m.kv_heads == 1 else 's'}), 4096 tokens, fp16", m.layers, m.kv_heads, m.head_dim, 4096, 2)
    run("llama-2-70b, 1 token, fp16", 80, 8, 128, 1, 2)
    run("tiny model, default dtype_bytes", 2, 2, 16, 10)
    run("0 tokens", 32, 8, 128, 0, 2)
    rng = random.Random(2)
    for _ in range(3):
        args = (rng.randrange(1, 100), rng.choice([1, 2, 4, 8, 32]), rng.choice([64, 80, 128]), rng.randrange(1, 9000), rng.choice([1, 2, 4]))
        run(f"random {args}", *args)
    c.run("tokens=-1 (must raise ValueError)", 32, 8, 128, -1, 2)
    c.run("kv_heads=0 (must raise ValueError)", 32, 0, 128, 10, 2)
    return c.done()


# ------------------------------------------------------------------ a design question: how many KV heads
def _kv_heads_for_budget_ref(layers: int, num_heads: int, head_dim: int, tokens: int, budget_bytes: int,
                             dtype_bytes: int = 2) -> int:
    if min(layers, num_heads, head_dim, tokens, dtype_bytes) < 1:
        raise ValueError("layers, num_heads, head_dim, tokens and dtype_bytes must be >= 1")
    per_head = _kv_cache_bytes_ref(layers, 1, head_dim, tokens, dtype_bytes)
    for g in range(min(num_heads, budget_bytes // per_head), 0, -1):  # at most min(heads, room) steps
        if num_heads % g == 0:
            return g
    raise ValueError(f"not even one KV head ({per_head:,} bytes) fits in {budget_bytes:,} bytes")


def _heads(per_head: Callable[..., int], pick: Callable[[list[int]], int] = max, allowed=None, fits=None):
    """A learner's kv_heads_for_budget built from one slip: the cost of one head, the counts allowed,
    the fit test, which count is picked."""
    def wrong(l, h, d, t, budget, b=2):
        cost = per_head(l, d, t, b)
        ok = [g for g in range(1, h + 1) if (allowed or (lambda g, h: h % g == 0))(g, h)
              and (fits or (lambda need, have: need <= have))(g * cost, budget)]
        if not ok:
            raise ValueError("nothing fits")
        return pick(ok)
    return wrong


_FULL = lambda l, d, t, b: 2 * l * d * t * b  # noqa: E731  -- one KV head's K and V for the request
_HEADS_MISTAKES = {
    "that count does not divide num_heads: with grouped-query attention every KV head serves the same number "
    "of query heads, so only divisors of num_heads are possible":
        _heads(_FULL, allowed=lambda g, h: True),
    "a cache exactly the size of the budget fits: compare with <=, not <": _heads(_FULL, fits=lambda n, have: n < have),
    "the 2 for K and V is missing: one KV head stores a key AND a value vector per token and layer":
        _heads(lambda l, d, t, b: l * d * t * b),
    "dtype_bytes ignored: the cost was computed for fp16 (2 bytes) whatever dtype_bytes says":
        _heads(lambda l, d, t, b: 2 * l * d * t * 2),
    "the smallest count that fits: the designer wants the MOST KV heads the budget allows (better quality)":
        _heads(_FULL, pick=min),
    "only powers of two tried: any divisor of num_heads makes equal groups (12 query heads: 1, 2, 3, 4, 6 or 12)":
        _heads(_FULL, allowed=lambda g, h: h % g == 0 and g & (g - 1) == 0),
    "powers of two are not the rule: the count must divide num_heads, so that every KV head serves as many query "
    "heads (12 query heads: 1, 2, 3, 4, 6 or 12; 8 does not divide 12)":
        _heads(_FULL, allowed=lambda g, h: g & (g - 1) == 0),
    "more KV heads than query heads: each KV head serves at least one query head, so the count is at most "
    "num_heads (the room the budget leaves is only an upper bound)":
        lambda l, h, d, t, budget, b=2: budget // _FULL(l, d, t, b) if budget // _FULL(l, d, t, b) > h else float("nan"),  # nan: matches no answer
    "that is num_heads whatever the budget (multi-head attention): check which counts fit the budget":
        lambda l, h, d, t, budget, b=2: h,
    "the cost of one KV head must cover every layer (x layers): each layer stores its own K and V for every token":
        _heads(lambda l, d, t, b: 2 * d * t * b),
    "the cost of one KV head must cover every token of the request (x tokens)": _heads(lambda l, d, t, b: 2 * l * d * b),
    "rounded up to a divisor: the smallest divisor of num_heads at or above what the budget pays for does not fit; "
    "take the largest divisor at or below it": lambda l, h, d, t, budget, b=2: min(
        g for g in range(max(1, min(h, budget // _FULL(l, d, t, b))), h + 1) if h % g == 0)
        if budget >= _FULL(l, d, t, b) else float("nan"),
    "the 2 for K and V was counted twice: one KV head costs 2 x layers x head_dim x tokens x dtype_bytes":
        _heads(lambda l, d, t, b: 4 * l * d * t * b),
    "that is the group size (query heads per KV head, num_heads // kv_heads): return the number of KV heads":
        lambda l, h, d, t, budget, b=2: h // _kv_heads_for_budget_ref(l, h, d, t, budget, b),
    "the cost of ONE KV head has no num_heads in it: x num_heads prices every query head":
        lambda l, h, d, t, budget, b=2: _heads(lambda l, d, t, b: 2 * l * d * t * b * h)(l, h, d, t, budget, b),
}


def kv_heads_for_budget(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(layers, num_heads, head_dim, tokens, budget_bytes, dtype_bytes=2) -> int``: the largest number
    of KV heads that divides ``num_heads`` and whose K and V for one request of ``tokens`` tokens fit in
    ``budget_bytes`` (a cache exactly the budget fits). ValueError when layers, num_heads, head_dim,
    tokens or dtype_bytes is below 1, or when not even one KV head fits.
    """
    c = Checker("kv_heads_for_budget", fn, _kv_heads_for_budget_ref, verbose=verbose, compare=same_int,
                diagnose=[should_have_raised])
    named = mistake_runner(c, _HEADS_MISTAKES)

    def run(label: str, *args: int) -> None:
        case = named(label, *args)
        if not case.passed and isinstance(case.actual, Raised) and isinstance(case.actual.exc, ValueError):
            case.note = (f"raised ValueError though {case.expected} KV heads fit: one KV head costs "
                         "2 x layers x head_dim x tokens x dtype_bytes (no num_heads in it); compare it with the budget")

    one = 2 * 80 * 128 * 4096 * 2  # one KV head of Llama-2 70B's shape, 4,096 tokens, fp16: 167,772,160 bytes
    run("Llama-2 70B's shape, 4,096 tokens, fp16, 2 GB", 80, 64, 128, 4096, 2 * 10**9)
    run("the same, a budget of exactly 8 KV heads", 80, 64, 128, 4096, 8 * one)
    run("the same, one byte less than 8 KV heads", 80, 64, 128, 4096, 8 * one - 1)
    run("12 query heads, room for 5 KV heads (5 does not divide 12)", 4, 12, 64, 100, 5 * 2 * 4 * 64 * 100 * 2)
    run("12 query heads, room for 11", 4, 12, 64, 100, 11 * 2 * 4 * 64 * 100 * 2)
    run("40 query heads, room for 6 (the divisors around it: 5 and 8)", 4, 40, 64, 100, 6 * 2 * 4 * 64 * 100 * 2)
    run("7 query heads (prime), room for 6", 2, 7, 32, 10, 6 * 2 * 2 * 32 * 10 * 2)
    run("room for far more than num_heads", 2, 8, 16, 10, 10**9)
    run("fp8 (dtype_bytes=1): room for 4 heads", 2, 8, 16, 10, 4 * 2 * 2 * 16 * 10, 1)
    run("fp32 (dtype_bytes=4): room for 2 heads at 4 bytes", 2, 8, 16, 10, 2 * 2 * 2 * 16 * 10 * 4, 4)
    run("one of everything", 1, 1, 1, 1, 4)
    run("default dtype_bytes (fp16)", 2, 4, 8, 3, 2 * 2 * 2 * 8 * 3 * 2)
    run("2 tokens, room for 3 KV heads of 8", 2, 8, 16, 2, 3 * 2 * 2 * 16 * 2 * 2)
    rng = random.Random(3)
    for _ in range(3):
        h = rng.choice([6, 8, 12, 32, 40])
        args = (rng.randrange(1, 40), h, rng.choice([64, 128]), rng.randrange(1, 5000), rng.randrange(10**6, 10**10),
                rng.choice([1, 2, 4]))
        run(f"random {args}", *args)
    c.run("not even one KV head fits (must raise ValueError)", 80, 64, 128, 4096, one - 1)
    c.run("tokens=0 (must raise ValueError)", 80, 64, 128, 0, 10**9)
    c.run("num_heads=0 (must raise ValueError)", 80, 0, 128, 10, 10**9)
    c.run("layers=0 (must raise ValueError)", 0, 8, 128, 10, 10**9)
    c.run("head_dim=0 (must raise ValueError)", 8, 8, 0, 10, 10**9)
    c.run("dtype_bytes=0 (must raise ValueError)", 8, 8, 128, 10, 10**9, 0)
    return c.done()


# ------------------------------------------------------------------ from a config.json
DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

# The fields that matter, as the models' config.json files on the Hugging Face hub give them.
CONFIGS: dict[str, dict] = {
    "llama-2-7b": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 32,
                   "hidden_size": 4096, "torch_dtype": "float16"},
    "llama-2-70b": {"num_hidden_layers": 80, "num_attention_heads": 64, "num_key_value_heads": 8,
                    "hidden_size": 8192, "torch_dtype": "float16"},
    "llama-3-8b": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "hidden_size": 4096, "torch_dtype": "bfloat16"},
    "mistral-7b": {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
                   "hidden_size": 4096, "torch_dtype": "bfloat16"},
    "qwen2-7b": {"num_hidden_layers": 28, "num_attention_heads": 28, "num_key_value_heads": 4,
                 "hidden_size": 3584, "torch_dtype": "bfloat16"},
    "gemma-7b": {"num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16, "head_dim": 256,
                 "hidden_size": 3072, "torch_dtype": "bfloat16"},
    "opt-13b": {"num_hidden_layers": 40, "num_attention_heads": 40, "hidden_size": 5120, "torch_dtype": "float16"},
}


def _bytes_per_token_ref(config: dict) -> int:
    heads = config["num_attention_heads"]
    kv_heads = config.get("num_key_value_heads", heads)
    head_dim = config.get("head_dim", config["hidden_size"] // heads)
    dtype = config.get("torch_dtype", "float16")
    if dtype not in DTYPE_BYTES:
        raise ValueError(f"unknown torch_dtype {dtype!r}; known: {sorted(DTYPE_BYTES)}")
    return KVSpec(config["num_hidden_layers"], kv_heads, head_dim, DTYPE_BYTES[dtype]).bytes_per_token


def _hidden(config: dict) -> int:
    return 2 * config["num_hidden_layers"] * config["hidden_size"] * DTYPE_BYTES[config.get("torch_dtype", "float16")]


def bytes_per_token_from_config(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(config) -> int``: K and V bytes of one token, from a model's config.json (a dict).

    ``num_key_value_heads`` absent: multi-head attention (as many KV heads as query heads);
    ``head_dim`` absent: ``hidden_size // num_attention_heads``; ``torch_dtype`` "float16" or
    "bfloat16": 2 bytes, "float32": 4, absent: 2; any other dtype: ValueError naming it.
    """
    c = Checker("bytes_per_token_from_config", fn, _bytes_per_token_ref, verbose=verbose, compare=same_int, diagnose=[half_or_double])
    run = mistake_runner(c, {
        "head_dim given in the config was ignored (hidden_size // num_attention_heads is only the default)":
            lambda cfg: 2 * cfg["num_hidden_layers"] * cfg.get("num_key_value_heads", cfg["num_attention_heads"])
            * (cfg["hidden_size"] // cfg["num_attention_heads"]) * DTYPE_BYTES[cfg.get("torch_dtype", "float16")],
        "float32 is 4 bytes a number (32 bits of 8), not 8":
            lambda cfg: 2 * _bytes_per_token_ref(cfg) if cfg.get("torch_dtype") == "float32" else None,
        "you used hidden_size (the notes' formula): with grouped-query attention the cache stores only "
        "num_key_value_heads x head_dim numbers per layer": _hidden,
        "torch_dtype ignored: a float32 model takes 4 bytes a number":
            lambda cfg: _bytes_per_token_ref({**cfg, "torch_dtype": "float16"}),
        "no torch_dtype counts 2 bytes a number (served in float16), not 4":
            lambda cfg: None if "torch_dtype" in cfg else _bytes_per_token_ref({**cfg, "torch_dtype": "float32"}),
        "no num_key_value_heads means multi-head attention: as many KV heads as query heads, not 1":
            lambda cfg: _bytes_per_token_ref({"num_key_value_heads": 1, **cfg}),
    })
    for name, cfg in CONFIGS.items():
        note = {"opt-13b": " (no num_key_value_heads: MHA)", "gemma-7b": " (head_dim 256 given; 3072 / 16 = 192)",
                "mistral-7b": " (no head_dim)", "llama-3-8b": " (no head_dim)"}.get(name, "")
        case = run(f"{name}{note}", cfg)
        dtype = cfg.get("torch_dtype")
        if not case.passed and isinstance(case.actual, Raised) and dtype in DTYPE_BYTES:
            case.note = (f"raised {type(case.actual.exc).__name__} on torch_dtype {dtype!r}: a known dtype, "
                         f"{DTYPE_BYTES[dtype]} bytes a number (bfloat16 is 2 bytes, like float16)")
        elif not case.passed and isinstance(case.actual, Raised) and isinstance(case.actual.exc, KeyError):
            case.note = (f"raised KeyError {case.actual.exc}: a config may leave out num_key_value_heads, head_dim "
                         "or torch_dtype; use the defaults of the contract (dict.get)")
    tiny = {"num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "hidden_size": 128,
            "head_dim": 32, "torch_dtype": "float32"}
    run("kvlab's bundled model (fp32)", tiny)
    run("llama-2-70b's shape in float32 (GQA: 8 of 64 heads)", {**CONFIGS["llama-2-70b"], "torch_dtype": "float32"})
    case = run("no torch_dtype (2 bytes)", {k: v for k, v in CONFIGS["llama-2-70b"].items() if k != "torch_dtype"})
    if not case.passed and isinstance(case.actual, Raised) and isinstance(case.actual.exc, KeyError):
        case.note = "raised KeyError: no torch_dtype means 2 bytes (fp16), see the contract"
    for bad in ("int4", "float8_e4m3fn"):
        _unknown_dtype(c, bad)
    return c.done()


def _unknown_dtype(c: Checker, dtype: str) -> None:
    """An unknown torch_dtype must raise ValueError, and the message must name it (the contract)."""
    case = c.run(f"torch_dtype {dtype!r} (must raise ValueError naming it)", {**CONFIGS["llama-2-7b"], "torch_dtype": dtype})
    if not case.passed and not isinstance(case.actual, Raised):
        case.note = (f"returned {case.actual!r} for an unknown torch_dtype: raise ValueError naming it (a guessed "
                     "size would be wrong without a word)")
    elif case.passed and dtype not in str(case.actual.exc):
        case.passed = False
        case.note = (f"the ValueError does not name the unknown torch_dtype {dtype!r} (it says {str(case.actual.exc)!r}): "
                     "put the bad value in the message, so the reader knows which dtype to fix")


# ------------------------------------------------------------------ requests that fit
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
    c = Checker("requests_that_fit", fn, _requests_that_fit_ref, verbose=verbose, compare=same_int, diagnose=[
        should_have_raised, lambda e, a: off_by(e, a, 1, "request", "a request needs all of its tokens: round down (//)")])
    run = mistake_runner(c, {
        "float division: int(kv_budget_bytes / (...)) is a float, exact only up to 2**53; use integer division (//)":
            lambda kv, b, t: int(kv / (b * t)),
        "rounded up: a request that fits only part of the way does not fit (round down)":
            lambda kv, b, t: -(-kv // (b * t)) if -(-kv // (b * t)) != round(kv / (b * t)) else None,
        "rounded to the nearest whole number: 2.9 requests are 2 requests, not 3 (round down)":
            lambda kv, b, t: round(kv / (b * t)),
        "returned a fraction: count whole requests (an int)": lambda kv, b, t: kv / (b * t),
        "that counts tokens, not requests: divide by the bytes of a whole request (bytes_per_token x tokens_per_request)":
            lambda kv, b, t: kv // b,
        **gib_gb_mixups(_requests_that_fit_ref, 0, "kv_budget_bytes"),
    })
    m = MODELS["llama-2-70b"]
    run("2.2 requests' worth of bytes", 22 * 4096 * 10, 100, 4096)
    run("2.9 requests' worth of bytes", 29 * 4096 * 10, 100, 4096)
    run("llama-2-70b per-token bytes, 20 GB budget, 4096 tokens", 20 * 10**9, m.bytes_per_token, 4096)
    run("exactly 3 requests", 3 * 4096 * 100, 100, 4096)
    run("one byte short of 3 requests", 3 * 4096 * 100 - 1, 100, 4096)
    run("budget smaller than one request", 500, 100, 10)
    case = run("zero budget", 0, 100, 10)
    if not case.passed and isinstance(case.actual, Raised):
        case.note = "a budget of 0 bytes is a valid budget: 0 requests fit (raise only for a budget below 0)"
    rng = random.Random(3)
    for _ in range(3):
        args = (rng.randrange(0, 10**11), rng.randrange(1, 10**6), rng.randrange(1, 10**4))
        run(f"random {args}", *args)
    run("one byte a token, one token a request", 7, 1, 1)
    run("a budget near 2**60 bytes (float division loses the last digits)", 2**60 - 1, 3, 1)
    c.run("tokens_per_request=0 (must raise ValueError)", 1000, 10, 0)
    c.run("bytes_per_token=0 (must raise ValueError)", 1000, 0, 10)
    _negative_budget(c, -1, 10, 10)
    return c.done()


def _negative_budget(c: Checker, *args: int) -> None:
    """A budget below 0 bytes must raise: a count returned for it (0, or -1 from floor division) is named."""
    case = c.run("negative budget (must raise ValueError)", *args)
    if not case.passed and not isinstance(case.actual, Raised):
        case.note = (f"a negative budget is an error (raise ValueError), not {case.actual!r}: no KV cache has less "
                     "than 0 bytes, so a negative one is a bug upstream that a count would hide")


# ------------------------------------------------------------------ the longest context for n users (exercise 3)
def _longest_context_ref(kv_budget_bytes: int, bytes_per_token: int, users: int, block_size: int = 16) -> int:
    if min(bytes_per_token, users, block_size) < 1:
        raise ValueError(f"bytes_per_token {bytes_per_token}, users {users} and block_size {block_size} must be >= 1")
    if kv_budget_bytes < 0:
        raise ValueError(f"kv_budget_bytes must be >= 0, got {kv_budget_bytes}")
    return kv_budget_bytes // (bytes_per_token * block_size) // users * block_size


_LONGEST_MISTAKES = {
    "not whole blocks: each user's request holds ceil(tokens / block_size) blocks, so a share that ends inside a "
    "block needs one block more per user than the pool has; round each user's share down to whole blocks":
        lambda kv, b, u, bs=16: kv // (b * u),
    "the pool was cut into whole blocks, but not each user's share: users x that context needs more blocks than "
    "the pool holds (give each user whole blocks: blocks // users)":
        lambda kv, b, u, bs=16: kv // (b * bs) * bs // u,
    "that counts blocks per user: the answer is in tokens (x block_size)": lambda kv, b, u, bs=16: kv // (b * bs) // u,
    "users ignored: the users are served at once, so they share the pool (each gets a part of it)":
        lambda kv, b, u, bs=16: kv // (b * bs) * bs if u > 1 else None,
    "block_size ignored (16 hard-coded): a block holds block_size tokens, whatever the default":
        lambda kv, b, u, bs=16: _longest_context_ref(kv, b, u, 16) if bs != 16 else None,
    "rounded a user's share of blocks up: a part of a block is not a block the pool has (round down)":
        lambda kv, b, u, bs=16: -(-(kv // (b * bs)) // u) * bs,
    "float division: kv_budget_bytes / (...) is exact only up to 2**53; use integer division (//)":
        lambda kv, b, u, bs=16: int(kv / (b * bs) / u) * bs,
    "rounded to the nearest block: a share of 29.75 blocks is 29 whole blocks, not 30 (round down)":
        lambda kv, b, u, bs=16: round(kv / (b * bs * u)) * bs,
    "that is bytes per user: divide by bytes_per_token to count tokens": lambda kv, b, u, bs=16: kv // u,
    "one block short: each user gets every whole block of its share, blocks // users, not one fewer (a share "   # r4
    "that fills whole blocks exactly needs no spare one)":
        lambda kv, b, u, bs=16: max(kv // (b * bs) // u - 1, 0) * bs,
    **gib_gb_mixups(_longest_context_ref, 0, "kv_budget_bytes"),
}


def longest_context(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(kv_budget_bytes, bytes_per_token, users, block_size=16) -> int``: the longest context (tokens)
    that every one of ``users`` requests can have at once in a paged pool of ``kv_budget_bytes`` (whole
    blocks of ``block_size`` tokens; a request of n tokens holds ceil(n / block_size) blocks), 0 when not
    one block each is there. ValueError when bytes_per_token, users or block_size < 1, or the budget < 0.
    """
    c = Checker("longest_context", fn, _longest_context_ref, verbose=verbose, compare=same_int,
                diagnose=[should_have_raised])
    named = mistake_runner(c, _LONGEST_MISTAKES)

    def run(label: str, *args: int) -> None:
        case = named(label, *args)
        if case.expected == 0 and isinstance(case.actual, Raised) and isinstance(case.actual.exc, ValueError):
            case.note = ("raised ValueError on a valid budget: a budget too small for one block each is a promise "
                         "of 0 tokens, not an error")

    l3 = MODELS["llama-3-8b"].bytes_per_token
    run("the prediction: 1 GB, llama-3-8b, 16 users, blocks of 16", 10**9, l3, 16, 16)
    run("a budget of exactly 3 x 4,096 tokens, 3 users", 3 * 4096 * 100, 100, 3, 16)
    run("one byte less than that", 3 * 4096 * 100 - 1, 100, 3, 16)
    run("one user: the whole pool, in whole blocks", 10**9, l3, 1, 16)
    run("blocks of 32, llama-2-7b, 10 GB, 7 users", 10 * 10**9, MODELS["llama-2-7b"].bytes_per_token, 7, 32)
    run("blocks of 1 token", 1000, 3, 7, 1)
    run("one byte a token, one user, blocks of 1: every byte a token", 1000, 1, 1, 1)
    run("default block_size (16)", 5 * 16 * 64 + 63, 64, 2)
    run("less than one block a user: 0 tokens", 5 * 16 * 64, 64, 8, 16)
    run("zero budget", 0, 64, 3, 16)
    run("a budget near 2**60 bytes (float division loses the last digits)", 2**60 - 1, 3, 1, 16)
    rng = random.Random(5)
    for _ in range(3):
        args = (rng.randrange(10**9, 10**11), rng.choice([65536, 131072, 327680, 524288]), rng.randrange(2, 300),
                rng.choice([8, 16, 32]))
        run(f"random {args}", *args)
    c.run("users=0 (must raise ValueError)", 10**9, 64, 0, 16)
    c.run("bytes_per_token=0 (must raise ValueError)", 10**9, 0, 4, 16)
    c.run("block_size=0 (must raise ValueError)", 10**9, 64, 4, 0)
    _negative_budget(c, -1, 64, 4, 16)
    return c.done()


# ------------------------------------------------------------------ mixed lengths, paged
def _pool_blocks(gpu_bytes: int, utilization: float, weight_bytes: int, bytes_per_token: int, block_size: int) -> int:
    budget = int(gpu_bytes * utilization) - weight_bytes
    return max(0, budget) // (block_size * bytes_per_token)


def _max_concurrent_ref(lengths: list[int], gpu_bytes: int, utilization: float, weight_bytes: int,
                        bytes_per_token: int, block_size: int = 16) -> int:
    """kvlab's allocator admits the requests shortest first until one does not fit."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization must be in (0, 1], got {utilization}")
    if block_size < 1 or bytes_per_token < 1 or any(n < 1 for n in lengths):
        raise ValueError("block_size, bytes_per_token and every length must be >= 1")
    blocks = _pool_blocks(gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size)
    if blocks == 0:
        return 0
    m = BlockManager(num_blocks=blocks, block_size=block_size)
    for i, n in enumerate(sorted(lengths)):
        try:
            m.add_sequence(f"r{i}", n)
        except OutOfBlocks:
            return i
    return len(lengths)


def _ceil(n: int, d: int) -> int:
    return -(-n // d)


def _count_fitting(sizes: list[int], room: int, skip: bool = False) -> int:
    """How many of ``sizes``, taken in their order, fit in ``room``: stop at the first that does not
    fit, or (``skip``) pass over it and try the next.

    >>> _count_fitting([13, 3, 7, 3], 20), _count_fitting([13, 3, 7, 3], 20, skip=True)
    (2, 3)
    """
    k, used = 0, 0
    for s in sizes:
        if used + s > room:
            if skip:
                continue
            break
        used, k = used + s, k + 1
    return k


def _in_order(longest_first: bool, skip: bool) -> Callable[..., int]:
    """A learner's max_concurrent that admits the requests in arrival order or longest first (not
    shortest first), stopping at the first that does not fit or skipping it."""
    def wrong(L, g, u, w, b, bs=16):
        blocks = [_ceil(n, bs) for n in L]
        return _count_fitting(sorted(blocks, reverse=True) if longest_first else blocks, _pool_blocks(g, u, w, b, bs), skip)
    return wrong


def max_concurrent(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(lengths, gpu_bytes, utilization, weight_bytes, bytes_per_token, block_size=16) -> int``.

    The most requests of ``lengths`` (tokens each) whose KV fits at once in a paged pool: the pool
    is ``int(gpu_bytes x utilization) - weight_bytes`` bytes cut into whole blocks of
    ``block_size`` tokens; a request holds ``ceil(length / block_size)`` blocks. ValueError for
    a utilization outside (0, 1], a block_size or bytes_per_token below 1, a length below 1.
    """
    c = Checker("max_concurrent", fn, _max_concurrent_ref, verbose=verbose, compare=same_int, diagnose=[should_have_raised])
    named = mistake_runner(c, {
        "utilization is a share of the whole GPU, weights included: int(gpu_bytes x utilization) - weight_bytes, "
        "not (gpu_bytes - weight_bytes) x utilization":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(_ceil(n, bs) for n in L),
                                                        max(0, int((g - w) * u)) // (bs * b)),
        "admitted in arrival order (the order given), stopping at the first that does not fit: to fit the MOST "
        "requests, take the shortest first": _in_order(longest_first=False, skip=False),
        "admitted in arrival order, skipping the requests that do not fit: a long request admitted early still "
        "holds the blocks of several short ones; to fit the MOST requests, take the shortest first":
            _in_order(longest_first=False, skip=True),
        "admitted longest first (sorted in reverse): a long request holds the blocks of several short ones; to fit "
        "the MOST requests, take the shortest first": _in_order(longest_first=True, skip=False),
        "admitted longest first (sorted in reverse), skipping the requests that do not fit: a long request holds "
        "the blocks of several short ones; to fit the MOST requests, take the shortest first":
            _in_order(longest_first=True, skip=True),
        "counted tokens, not blocks: every request holds whole blocks (its last one partly empty)":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(L), max(0, int(g * u) - w) // b),
        "rounded each request's blocks down: a request of 17 tokens needs 2 blocks of 16":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(n // bs for n in L), _pool_blocks(g, u, w, b, bs)),
        "utilization ignored: a server gives the KV cache only utilization x the GPU's memory":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(_ceil(n, bs) for n in L), _pool_blocks(g, 1.0, w, b, bs)),
        "the weights were not subtracted: they live in the same GPU memory":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(_ceil(n, bs) for n in L), _pool_blocks(g, u, 0, b, bs)),
        "rounded up twice (ceil of length + block_size - 1): a request of 32 tokens needs 2 blocks of 16, not 3":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(_ceil(n + bs - 1, bs) for n in L), _pool_blocks(g, u, w, b, bs)),
        "used the mean length: requests differ, and short ones fit where long ones do not":
            lambda L, g, u, w, b, bs=16: min(len(L), _pool_blocks(g, u, w, b, bs) // _ceil(round(sum(L) / len(L)), bs)),
        "block_size ignored (16 hard-coded): a block holds block_size tokens, whatever the default":
            lambda L, g, u, w, b, bs=16: _max_concurrent_ref(L, g, u, w, b, 16) if bs != 16 else None,
        "the budget left a float: gpu_bytes x utilization - weight_bytes loses bytes past 2**53; "
        "take int(gpu_bytes x utilization) first, then subtract the weights":
            lambda L, g, u, w, b, bs=16: _count_fitting(sorted(_ceil(n, bs) for n in L), max(0, g * u - w) // (bs * b)),
    })

    def run(label: str, lengths: list[int], g: int, u: float, w: int, *rest: int) -> None:
        case = named(label, lengths, g, u, w, *rest)
        if case.passed or not (isinstance(case.actual, Raised) and isinstance(case.actual.exc, ValueError)):
            return
        if u == 1:
            case.note = "utilization 1 is valid: the range (0, 1] includes 1 (the whole memory); refuse only above 1"
        elif int(g * u) - w < 0:
            case.note = ("weights past the server's share leave no room for the KV cache: that is 0 requests, not an "
                         "error (the contract: nothing if the budget is not positive)")
    a100, gib = 80 * 1024**3, 1024**3
    llama7 = MODELS["llama-2-7b"]
    rng = random.Random(11)
    chat = [rng.randrange(100, 2000) for _ in range(60)] + [4096] * 4
    rng.shuffle(chat)
    run("64 chat requests (100-2,000 tokens, four of 4,096), A100 80 GB at 90%, llama-2-7b (13.5 GB of weights)",
        chat, a100, 0.9, 13_480_000_000, llama7.bytes_per_token)
    run("the prediction: 200, 40, 40, 100, 40, 40 and 40 tokens in arrival order, a pool of 20 blocks of 16",
        [200, 40, 40, 100, 40, 40, 40], 20 * 16 * 64, 1.0, 0, 64, 16)
    run("a long request that fits first, then five short ones (arrival order), a pool of 16 blocks",
        [200, 40, 40, 40, 40, 40], 16 * 16 * 64, 1.0, 0, 64, 16)
    run("a long request too big for the pool, then four short ones (arrival order), a pool of 17 blocks",
        [3000, 40, 40, 40, 40], 17 * 16 * 64, 1.0, 0, 64, 16)
    run("short ones, then two long ones that fit only alone, then short ones, a pool of 12 blocks",
        [16, 16, 160, 176, 16, 16, 16], 12 * 16 * 8, 1.0, 0, 8, 16)
    run("lengths that are not multiples of the block size", [17, 17, 17, 33], 200 * 16, 1.0, 0, 1, 16)
    run("utilization 0.5 halves the pool", [100] * 10, 64 * 16 * 100, 0.5, 0, 16, 16)
    run("weights take most of the card", [16] * 20, 10_000, 1.0, 6_000, 16, 16)
    run("weights bigger than the budget: nothing fits", [10, 10], 1000, 0.9, 950, 1, 16)
    run("all fit", [5, 9, 30], 10**6, 0.9, 0, 2, 8)
    run("no requests at all", [], 10**6, 0.9, 0, 2, 8)
    run("one request that fills the pool exactly (two blocks of 8)", [16], 2 * 8 * 2, 1.0, 0, 2, 8)
    run("mean length would overestimate", [1, 1, 1, 1, 60], 5 * 16 * 8, 1.0, 0, 8, 16)
    run("block size 1 (tokens)", [3, 4, 5], 11, 1.0, 0, 1, 1)
    for seed in range(2):
        r = random.Random(20 + seed)
        lengths = [r.randrange(1, 3000) for _ in range(r.randrange(5, 30))]
        args = (lengths, r.randrange(1, 80) * gib, r.choice([0.8, 0.9, 0.95]), r.randrange(0, 10) * gib,
                r.choice([131072, 327680, 524288]), r.choice([8, 16, 32]))
        run(f"random seed {seed}: {len(lengths)} requests, block size {args[5]}", *args)
    run("a pool of 17.5 bytes holds 17 (int() rounds down)", [18], 35, 0.5, 0, 1, 1)
    run("weights bigger than the budget, blocks of one byte: nothing fits", [1, 1], 1000, 0.9, 950, 1, 1)
    run("a card of 2**60 bytes, a pool of 1,040 bytes left: one block (in floats the weights round to 1,024 "
        "bytes less)", [1], 2**60, 1.0, 2**60 - 1040, 65, 16)
    c.run("utilization 1.5 (must raise ValueError)", [10], 1000, 1.5, 0, 1, 16)
    c.run("utilization 0 (must raise ValueError)", [10], 1000, 0.0, 0, 1, 16)
    c.run("block_size 0 (must raise ValueError)", [10], 1000, 0.9, 0, 1, 0)
    c.run("bytes_per_token 0 (must raise ValueError)", [10], 1000, 0.9, 0, 0, 16)
    c.run("a request of 0 tokens (must raise ValueError)", [10, 0], 1000, 0.9, 0, 1, 16)
    _validated_first(c)
    return c.done()


def _validated_first(c: Checker) -> None:
    """Bad arguments where nothing would fit anyway (weights fill the share, or no requests): the
    checks come first, so a 0 returned early does not hide them."""
    for label, args in (("a request of 0 tokens, and the weights fill the share", ([10, 0], 1000, 0.9, 950, 1, 16)),
                        ("block_size 0 and no requests", ([], 1000, 0.9, 0, 1, 0)),
                        ("bytes_per_token 0, and the weights fill the share", ([10], 1000, 0.9, 950, 0, 16))):
        case = c.run(f"{label} (must raise ValueError)", *args)
        if not case.passed and not isinstance(case.actual, Raised):
            case.note = (f"returned {case.actual!r} before checking the arguments: validate first; a bad length, "
                         "block_size or bytes_per_token is an error even when nothing fits")
