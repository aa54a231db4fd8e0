"""Checkers for the memory lessons (00 start here, 02 how big, 03 contiguous, 04 paging).

Each ``check.<name>(fn)`` runs the learner's ``fn`` beside kvlab's own implementation on
several sizes, seeds and edge cases, prints expected beside actual, and returns a
:class:`kvlab.check.CheckResult`. The contracts (what ``fn`` takes, returns and raises) are
stated in each checker's docstring and in the lessons.

Example:
    >>> import kvlab
    >>> from kvlab.check import memory
    >>> memory.blocks_needed(kvlab.blocks_needed, verbose=False).passed
    True
    >>> r = memory.blocks_needed(lambda n, bs: n // bs + 1, verbose=False)   # wrong on n=8
    >>> r.passed, r.failures[0].label, r.failures[0].expected, r.failures[0].actual
    (False, 'num_tokens=8, block_size=4', 2, 3)
"""
from __future__ import annotations

import random
from typing import Any, Callable

from .. import contiguous as _contiguous
from .. import paged as _paged
from ..kvspec import MODELS, KVSpec
from . import Checker, CheckResult, Raised, call

__all__ = [
    "block_and_offset",
    "common_prefix_len",
    "kv_cache_bytes",
    "requests_that_fit",
    "reservation",
    "first_fit",
    "external_fragmentation",
    "translate",
    "blocks_needed",
    "blocks_to_append",
    "block_allocator",
]


# ------------------------------------------------------------------ lesson 00 (warm-ups)
def _block_and_offset_ref(pos: int, block_size: int) -> tuple[int, int]:
    t = _paged.translate(list(range(max(pos, 0) // max(block_size, 1) + 1)), pos, block_size)
    return (t.logical_block, t.offset)


def block_and_offset(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(pos, block_size) -> (logical_block, offset)``; ValueError for pos < 0 or block_size < 1."""
    c = Checker("block_and_offset", fn, _block_and_offset_ref, verbose=verbose)
    for pos, bs in [(9, 4), (0, 4), (3, 4), (4, 4), (15, 16), (16, 16), (1000, 16), (7, 1)]:
        c.run(f"pos={pos}, block_size={bs}", pos, bs)
    rng = random.Random(0)
    for _ in range(3):
        pos, bs = rng.randrange(0, 500), rng.choice([2, 4, 8, 16, 32])
        c.run(f"pos={pos}, block_size={bs} (random)", pos, bs)
    c.run("pos=-1 (must raise ValueError)", -1, 4)
    c.run("block_size=0 (must raise ValueError)", 5, 0)
    return c.done()


def _common_prefix_len_ref(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def common_prefix_len(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(a, b) -> int``: how many leading tokens two token-id lists share (0 if none)."""
    c = Checker("common_prefix_len", fn, _common_prefix_len_ref, verbose=verbose)
    cases = [
        ("shared system prompt", [1, 2, 3, 4, 9], [1, 2, 3, 4, 7, 7]),
        ("identical", [5, 6, 7], [5, 6, 7]),
        ("one is a prefix of the other", [5, 6], [5, 6, 7, 8]),
        ("other way round", [5, 6, 7, 8], [5, 6]),
        ("differ at the first token", [1, 2], [2, 2]),
        ("empty list", [], [1, 2]),
        ("both empty", [], []),
        ("same tokens later, not at the start", [0, 1, 2, 3], [9, 1, 2, 3]),
    ]
    for label, a, b in cases:
        c.run(f"{label}: {a} vs {b}", a, b)
    rng = random.Random(1)
    for seed in range(3):
        k = rng.randrange(0, 12)
        common = [rng.randrange(50) for _ in range(k)]
        a = common + [100 + rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        b = common + [200 + rng.randrange(5) for _ in range(rng.randrange(0, 5))]
        c.run(f"random seed {seed} ({len(a)} vs {len(b)} tokens)", a, b)
    return c.done()


# ----------------------------------------------------------------------- lesson 02
def _kv_cache_bytes_ref(layers: int, kv_heads: int, head_dim: int, tokens: int, dtype_bytes: int = 2) -> int:
    return KVSpec(layers=layers, kv_heads=kv_heads, head_dim=head_dim, dtype_bytes=dtype_bytes).kv_bytes(tokens)


def kv_cache_bytes(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(layers, kv_heads, head_dim, tokens, dtype_bytes=2) -> int`` bytes of K and V.

    ValueError when layers, kv_heads, head_dim or dtype_bytes < 1, or tokens < 0.
    """
    c = Checker("kv_cache_bytes", fn, _kv_cache_bytes_ref, verbose=verbose)
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


# ----------------------------------------------------------------------- lesson 03
def _reservation_ref(policy: str, length: int, max_len: int, final_len: int | None = None) -> int:
    if not 1 <= length <= max_len:
        raise ValueError(f"length {length} must be in [1, max_len {max_len}]")
    arena = _contiguous.ContiguousArena(capacity=max_len, policy=policy, max_len=max_len)  # ValueError for a bad policy
    return arena.reservation_for(length, final_len)


def reservation(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(policy, length, max_len, final_len=None) -> int`` slots reserved up front.

    policy "max": max_len; "pow2": the next power of two >= length, capped at max_len;
    "exact": final_len (ValueError when final_len is None). ValueError for another
    policy or a length outside [1, max_len].
    """
    c = Checker("reservation", fn, _reservation_ref, verbose=verbose)
    for policy, length, max_len, final in [
        ("max", 10, 2048, None), ("max", 2048, 2048, None),
        ("pow2", 5, 2048, None), ("pow2", 8, 2048, None), ("pow2", 9, 2048, None), ("pow2", 1, 2048, None),
        ("pow2", 1500, 2048, None), ("pow2", 1500, 1600, None),
        ("exact", 10, 2048, 300), ("exact", 10, 2048, 10),
    ]:
        c.run(f"policy={policy!r}, length={length}, max_len={max_len}" + (f", final_len={final}" if final else ""),
              policy, length, max_len, final)
    c.run("policy 'exact' without final_len (must raise ValueError)", "exact", 10, 2048, None)
    c.run("unknown policy 'best' (must raise ValueError)", "best", 10, 2048, None)
    c.run("length=0 (must raise ValueError)", "max", 0, 2048, None)
    return c.done()


def _first_fit_ref(free_ranges: list[tuple[int, int]], n: int) -> int | None:
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    for start, length in sorted(free_ranges):
        if length >= n:
            return start
    return None


def _random_free_ranges(rng: random.Random) -> list[tuple[int, int]]:
    out, cursor = [], 0
    for _ in range(rng.randrange(0, 6)):
        cursor += rng.randrange(1, 300)  # a used range before each hole
        length = rng.randrange(1, 300)
        out.append((cursor, length))
        cursor += length
    return out


def first_fit(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(free_ranges, n) -> start | None``: the lowest-address free range of length >= n.

    ``free_ranges``: ``(start, length)`` pairs in address order. None when no range is
    long enough. ValueError for n < 1.
    """
    c = Checker("first_fit", fn, _first_fit_ref, verbose=verbose)
    notes = [(0, 4096), (10240, 2048)]  # the notes' arena after A finished: holes of 4096 and 2048
    c.run("the notes' holes, D needs 8192", notes, 8192)
    c.run("the notes' holes, 6144 (all free space, but split)", notes, 6144)
    c.run("the notes' holes, 4096 fits exactly in the first", notes, 4096)
    c.run("the notes' holes, 3000", notes, 3000)
    c.run("first hole too small, second fits", [(0, 10), (50, 100)], 20)
    c.run("exact fit in a later hole", [(0, 10), (50, 20), (90, 40)], 20)
    c.run("no free space", [], 1)
    rng = random.Random(4)
    for seed in range(4):
        ranges = _random_free_ranges(rng)
        n = rng.randrange(1, 320)
        c.run(f"random seed {seed}: {len(ranges)} holes, n={n}", ranges, n)
    c.run("n=0 (must raise ValueError)", notes, 0)
    return c.done()


def _external_fragmentation_ref(free_ranges: list[tuple[int, int]]) -> int:
    return sum(n for _, n in free_ranges) - max((n for _, n in free_ranges), default=0)


def external_fragmentation(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(free_ranges) -> int``: free slots outside the largest free range (0 when <= 1 range)."""
    c = Checker("external_fragmentation", fn, _external_fragmentation_ref, verbose=verbose)
    arena = _contiguous.ContiguousArena(capacity=12288, policy="exact", max_len=12288)
    for rid, n in [("A", 4096), ("B", 2048), ("C", 4096)]:
        arena.admit(rid, n, final_len=n)
    arena.finish("A")
    c.record("the notes' arena after A finished (kvlab's ContiguousArena)", arena.stats().external_fragmentation,
             call(fn, arena.free_ranges()))
    c.run("one hole", [(0, 100)])
    c.run("no free space", [])
    c.run("three equal holes", [(0, 10), (20, 10), (40, 10)])
    c.run("largest hole last", [(0, 5), (10, 7), (20, 50)])
    rng = random.Random(5)
    for seed in range(3):
        ranges = _random_free_ranges(rng)
        c.run(f"random seed {seed}: {len(ranges)} holes", ranges)
    return c.done()


# ----------------------------------------------------------------------- lesson 04
def _translate_ref(block_table: list[int], pos: int, block_size: int, bytes_per_token: int = 1) -> tuple[int, int, int, int]:
    t = _paged.translate(block_table, pos, block_size, bytes_per_token)
    return (t.logical_block, t.offset, t.physical_block, t.byte_address)


def translate(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(block_table, pos, block_size, bytes_per_token=1) -> (logical_block, offset, physical_block, byte_address)``.

    byte_address = (physical_block x block_size + offset) x bytes_per_token (pool base 0).
    ValueError for pos < 0 or pos past the table's last slot.
    """
    c = Checker("translate", fn, _translate_ref, verbose=verbose)
    notes = [3, 7, 1, 5, 9]
    c.run("the notes: table [3,7,1,5,9], pos 9, block_size 4", notes, 9, 4)
    c.run("the notes, pos 9, bytes_per_token 1024", notes, 9, 4, 1024)
    for pos in (0, 3, 4, 19):
        c.run(f"the notes' table, pos {pos}", notes, pos, 4)
    c.run("block_size 16, pos 40", [8, 2, 5], 40, 16, 2)
    rng = random.Random(6)
    for seed in range(3):
        bs = rng.choice([1, 2, 4, 8, 16])
        table = rng.sample(range(64), rng.randrange(1, 8))
        pos = rng.randrange(len(table) * bs)
        c.run(f"random seed {seed}: {len(table)} blocks, block_size {bs}, pos {pos}", table, pos, bs, rng.choice([1, 64, 320]))
    c.run("pos 20 past the notes' table (5 blocks x 4 = 20 slots; must raise ValueError)", notes, 20, 4)
    c.run("pos -1 (must raise ValueError)", notes, -1, 4)
    return c.done()


def blocks_needed(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(num_tokens, block_size) -> int`` = ceil(num_tokens / block_size); ValueError for num_tokens < 0 or block_size < 1."""
    c = Checker("blocks_needed", fn, _paged.blocks_needed, verbose=verbose)
    for n, bs in [(9, 4), (8, 4), (0, 4), (1, 4), (4, 4), (5, 4), (16, 16), (17, 16), (1, 1), (4096, 16), (4097, 16)]:
        c.run(f"num_tokens={n}, block_size={bs}", n, bs)
    rng = random.Random(7)
    for _ in range(3):
        n, bs = rng.randrange(0, 5000), rng.choice([3, 8, 16, 32])
        c.run(f"num_tokens={n}, block_size={bs} (random)", n, bs)
    c.run("num_tokens=-1 (must raise ValueError)", -1, 4)
    c.run("block_size=0 (must raise ValueError)", 5, 0)
    return c.done()


def _blocks_to_append_ref(num_tokens: int, n: int, block_size: int) -> int:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return _paged.blocks_needed(num_tokens + n, block_size) - _paged.blocks_needed(num_tokens, block_size)


def blocks_to_append(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(num_tokens, n, block_size) -> int`` new blocks a sequence of num_tokens needs to append n tokens.

    ValueError for num_tokens < 0, n < 0 or block_size < 1.
    """
    c = Checker("blocks_to_append", fn, _blocks_to_append_ref, verbose=verbose)
    for t, n, bs in [(9, 1, 4), (8, 1, 4), (7, 1, 4), (0, 1, 4), (0, 0, 4), (5, 10, 4), (4, 4, 4), (3, 1, 4), (16, 100, 16)]:
        c.run(f"num_tokens={t}, append n={n}, block_size={bs}", t, n, bs)
    rng = random.Random(8)
    for _ in range(3):
        t, n, bs = rng.randrange(0, 300), rng.randrange(0, 40), rng.choice([2, 4, 16])
        c.run(f"num_tokens={t}, n={n}, block_size={bs} (random)", t, n, bs)
    c.run("n=-1 (must raise ValueError)", 5, -1, 4)
    return c.done()


# ------------------------------------------------------------ lesson 04: the allocator
def _alloc_state(obj: Any, num_blocks: int) -> Any:
    try:
        return {"ref_count": [int(obj.ref_count[b]) for b in range(num_blocks)], "num_free_blocks": int(obj.num_free_blocks)}
    except Exception as exc:
        return Raised(exc)


def _scenario_ops(seed: int, num_blocks: int) -> list[tuple]:
    """A deterministic op list; the scripted seeds cover FIFO reuse, sharing, double free, out of blocks."""
    if seed == 0:  # scripted: FIFO order, sharing, a release only at ref count 0
        return [("allocate", 2), ("allocate", 3), ("free", 0), ("allocate", 2), ("incref", 1), ("free", 1),
                ("free", 1), ("allocate", 4)]
    if seed == 1:  # scripted: out of blocks (all-or-nothing), double free, n=0, negative n
        return [("allocate", 3), ("allocate", num_blocks), ("allocate", 0), ("free", 0), ("free_again", 0),
                ("allocate", -1), ("allocate", num_blocks - 3)]
    rng = random.Random(seed)
    ops: list[tuple] = []
    for _ in range(14):
        ops.append(rng.choice([("allocate", rng.randrange(0, 4)), ("allocate", rng.randrange(0, 4)), ("free", rng.randrange(6)),
                               ("incref", rng.randrange(6)), ("allocate", num_blocks + 1)]))
    return ops


def _run_scenario(make: Callable, ops: list[tuple], num_blocks: int) -> list[tuple[str, Any, Any]]:
    """Apply ops; ``("free", i)`` frees the i-th list returned by allocate (mod how many). Returns (op, outcome, state)."""
    obj = call(make, num_blocks)
    if isinstance(obj, Raised):
        return [(f"{getattr(make, '__name__', 'cls')}({num_blocks})", obj, None)]
    held: list[list[int]] = []
    trace = []
    for op, arg in ops:
        if op == "allocate":
            label = f"allocate({arg})"
            out = call(obj.allocate, arg)
            if isinstance(out, list) and arg > 0:
                held.append(list(out))
            elif not isinstance(out, (list, Raised)):
                out = Raised(TypeError(f"allocate returned {type(out).__name__}, not a list"))
        elif not held:  # nothing allocated yet: nothing to share or free
            label, out = "allocate(1)", call(obj.allocate, 1)
            if isinstance(out, list):
                held.append(list(out))
        else:
            ids = held[arg % len(held)]
            if op == "incref":
                label = f"incref({ids})"
                out = call(obj.incref, ids)
            else:
                label = f"free({ids})" + (" again" if op == "free_again" else "")
                out = call(obj.free, ids)
        trace.append((label, out, _alloc_state(obj, num_blocks)))
        if isinstance(out, Raised) and isinstance(out.exc, NotImplementedError):
            break
    return trace


def _kvlab_allocator(num_blocks: int) -> _paged.BlockAllocator:
    return _paged.BlockAllocator(num_blocks, block_size=4)


def _same_step(expected: tuple, actual: tuple) -> bool:
    (_, e_out, e_state), (_, a_out, a_state) = expected, actual
    if isinstance(e_out, Raised):
        ok = isinstance(a_out, Raised) and isinstance(a_out.exc, type(e_out.exc))
    else:
        ok = not isinstance(a_out, Raised) and a_out == e_out
    return ok and e_state == a_state


def block_allocator(cls: Callable, verbose: bool = True) -> CheckResult:
    """``cls(num_blocks)`` -> an allocator like kvlab's ``BlockAllocator``, step for step.

    Contract: ``allocate(n) -> list[int]`` takes n blocks from the front of a FIFO free
    queue (initially 0..num_blocks-1), each with ref count 1, all or nothing:
    ``kvlab.OutOfBlocks`` when fewer than n are free, ValueError for n < 0.
    ``incref(ids)`` adds one reference to each (``kvlab.KVCacheError`` for a free block,
    nothing changed). ``free(ids) -> list[int]`` drops one
    reference from each and returns the blocks that reached 0, which join the back of
    the queue; ``kvlab.DoubleFree`` (nothing changed) for a block that is already free.
    Attributes ``ref_count`` (indexable by block id) and ``num_free_blocks``.
    Each scenario is compared after every operation (its result and the state).
    """
    c = Checker("block_allocator", cls, verbose=verbose)
    if not c.ok:
        c.record("construct", "an allocator class", Raised(TypeError(c.result.error)), passed=False)
        return c.done()
    for seed, num_blocks in [(0, 8), (1, 6), (2, 8), (3, 5), (4, 12)]:
        ops = _scenario_ops(seed, num_blocks)
        want = _run_scenario(_kvlab_allocator, ops, num_blocks)
        got = _run_scenario(cls, ops, num_blocks)
        name = "scripted: FIFO reuse and ref counts" if seed == 0 else "scripted: errors leave the state unchanged" if seed == 1 else f"random seed {seed}"
        for i, w in enumerate(want):
            g = got[i] if i < len(got) else ("(not reached)", Raised(RuntimeError("stopped earlier")), None)
            if not _same_step(w, g):
                stub = isinstance(g[1], Raised) and isinstance(g[1].exc, NotImplementedError)
                got = g[1] if g[2] is None or stub else {"returns": g[1], **(g[2] if isinstance(g[2], dict) else {"state": g[2]})}
                c.record(f"{name}, {num_blocks} blocks, step {i + 1} {w[0]}", {"returns": w[1], **w[2]}, got, passed=False)
                break
        else:
            c.record(f"{name}, {num_blocks} blocks: {len(want)} operations", f"{len(want)} steps as kvlab",
                     f"{len(want)} steps as kvlab", passed=True)
    return c.done()
