"""Checkers for lesson 04 (paging): address translation, block counts, the block allocator.

    translate          pos -> (logical block, offset, physical block, byte address)
    blocks_needed      ceil(num_tokens / block_size)
    blocks_to_append   new blocks a sequence needs to append n tokens
    block_allocator    an allocator class, compared with kvlab's BlockAllocator step for step

Mirrors no vLLM or SGLang file (exercises); the reference allocator is
:class:`kvlab.memory.block_pool.BlockAllocator` (vLLM's ``BlockPool``).

Example:
    >>> from kvlab.memory.block_table import blocks_needed as right
    >>> blocks_needed(right, verbose=False).passed
    True
    >>> r = blocks_needed(lambda n, bs: n // bs + 1, verbose=False)   # wrong on n=8
    >>> r.passed, r.failures[0].label, r.failures[0].expected, r.failures[0].actual
    (False, 'num_tokens=8, block_size=4', 2, 3)
"""
from __future__ import annotations

import math
import random
import re
from typing import Any, Callable

from ..memory.block_pool import BlockAllocator
from ..memory.block_table import blocks_needed as _blocks_needed
from ..memory.block_table import translate as _translate
from .diagnose import mistake_runner, off_by, should_have_raised, swapped
from .harness import Checker, CheckResult, Raised, call, same_int, same_ints

__all__ = ["translate", "blocks_needed", "blocks_to_append", "block_allocator"]


def _translate_ref(block_table: list[int], pos: int, block_size: int, bytes_per_token: int = 1) -> tuple[int, int, int, int]:
    t = _translate(block_table, pos, block_size, bytes_per_token)
    return (t.logical_block, t.offset, t.physical_block, t.byte_address)


def translate(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(block_table, pos, block_size, bytes_per_token=1) -> (logical_block, offset, physical_block, byte_address)``.

    byte_address = (physical_block x block_size + offset) x bytes_per_token (pool base 0).
    ValueError for pos < 0 or pos past the table's last slot.
    """
    c = Checker("translate", fn, _translate_ref, verbose=verbose, compare=same_ints,
                diagnose=[lambda e, a: swapped(e, a, ("logical block", "offset")), should_have_raised])

    def addr(t, p, bs, bpt, block):
        return (p // bs, p % bs, t[p // bs], (block * bs + p % bs) * bpt)

    def addr_mod_len(t, p, bs, bpt):
        return (p // bs, p % len(t), t[p // bs], (t[p // bs] * bs + p % len(t)) * bpt)

    run = mistake_runner(c, {
        "bytes_per_token ignored: the address counts bytes, and every token slot before it is bytes_per_token bytes":
            lambda t, p, bs, bpt=1: _translate_ref(t, p, bs, 1),
        "the address used the logical block: bytes are counted from the PHYSICAL block (the table's entry)":
            lambda t, p, bs, bpt=1: addr(t, p, bs, bpt, p // bs),
        "only the offset was multiplied by bytes_per_token: the whole slot (P x block_size + offset) is":
            lambda t, p, bs, bpt=1: (p // bs, p % bs, t[p // bs], t[p // bs] * bs + p % bs * bpt),
        "the offset counts token slots too: only the block's start was multiplied by bytes_per_token; "
        "the whole slot is, (P x block_size + offset) x bytes_per_token":
            lambda t, p, bs, bpt=1: (p // bs, p % bs, t[p // bs], t[p // bs] * bs * bpt + p % bs),
        "logical block and offset swapped: pos // block_size is the block, pos % block_size the offset in it":
            lambda t, p, bs, bpt=1: (lambda lb, off: (lb, off, t[lb], (t[lb] * bs + off) * bpt))(p % bs, p // bs),
        "the address forgot the offset inside the block": lambda t, p, bs, bpt=1: addr(t, p, bs, bpt, t[p // bs])[:3]
            + (t[p // bs] * bs * bpt,),
        "the address is pos x bytes_per_token only if the blocks were in order: go through the table":
            lambda t, p, bs, bpt=1: (p // bs, p % bs, t[p // bs], p * bpt),
        "offset and physical block swapped in the tuple: the order is (logical block, offset, physical block, "
        "byte address)": lambda t, p, bs, bpt=1: (lambda r: (r[0], r[2], r[1], r[3]))(_translate_ref(t, p, bs, bpt)),
        "the offset is pos % block_size (the slot inside the block), not pos % len(block_table)":
            lambda t, p, bs, bpt=1: addr_mod_len(t, p, bs, bpt),
        "float division: int(pos / block_size) goes through a float, which rounds a huge position (here into the "
        "next block): use pos // block_size and pos % block_size": _translate_by_float,
    })
    notes = [3, 7, 1, 5, 9]
    run("the notes: table [3,7,1,5,9], pos 9, block_size 4", notes, 9, 4)
    run("the notes, pos 9, bytes_per_token 1024", notes, 9, 4, 1024)
    for pos in (0, 3, 4, 19):
        run(f"the notes' table, pos {pos}", notes, pos, 4)
    run("block_size 16, pos 40", [8, 2, 5], 40, 16, 2)
    rng = random.Random(6)
    for seed in range(3):
        bs = rng.choice([1, 2, 4, 8, 16])
        table = rng.sample(range(64), rng.randrange(1, 8))
        pos = rng.randrange(len(table) * bs)
        run(f"random seed {seed}: {len(table)} blocks, block_size {bs}, pos {pos}", table, pos, bs, rng.choice([1, 64, 320]))
    huge = 2**60 + 1
    run("block_size 2**60 + 1, pos 2 x block_size - 1 (a float rounds pos / block_size up to 2.0)",
        [5, 2, 8], 2 * huge - 1, huge)
    case = c.run("pos 20 past the notes' table (5 blocks x 4 = 20 slots; must raise ValueError)", notes, 20, 4)
    if not case.passed and _refuses(fn, notes, 21, 4):  # pos 21 refused, pos 20 not: the bound is one off
        case.note = ("the bound is checked one slot too late: pos 20 = len(block_table) x block_size is already past "
                     "the last slot (slots 0..19), so refuse pos >= len(block_table) x block_size, not pos > ...")
    c.run("pos -1 (must raise ValueError)", notes, -1, 4)
    return c.done()


def _refuses(fn: Callable, *args: Any) -> bool:
    """True when ``fn(*args)`` raises ValueError (the contract's refusal).

    >>> _refuses(lambda pos: 1 // 0, 3), _refuses(int, "x")
    (False, True)
    """
    out = call(fn, *args)
    return isinstance(out, Raised) and isinstance(out.exc, ValueError)


def _translate_by_float(t: list[int], p: int, bs: int, bpt: int = 1) -> tuple[int, int, int, int] | None:
    lb = int(p / bs)
    off = p - lb * bs
    return (lb, off, t[lb], (t[lb] * bs + off) * bpt) if (lb, off) != divmod(p, bs) and 0 <= lb < len(t) else None


def _float_answer(expected: Any, actual: Any) -> str | None:
    if not isinstance(actual, float):
        return None
    if actual.is_integer():
        return f"returned the float {actual!r}: a block count is an int (use integer division, //)"
    return f"returned {actual!r}, a fraction of a block: a request holds whole blocks (round up, with integers)"


def blocks_needed(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(num_tokens, block_size) -> int`` = ceil(num_tokens / block_size); ValueError for num_tokens < 0 or block_size < 1."""
    c = Checker("blocks_needed", fn, _blocks_needed, verbose=verbose, diagnose=[_float_answer, off_by, should_have_raised],
                compare=same_int)
    run = mistake_runner(c, {
        "float division: math.ceil(num_tokens / block_size) goes through a float, which drops the last digits of a "
        "big count (2**60 + 1 tokens): round up with integers only":
            lambda n, bs: math.ceil(n / bs) if math.ceil(n / bs) != -(-n // bs) else None,
        "0 tokens need 0 blocks: a request with no tokens holds no block (do not round 0 up to 1)":
            lambda n, bs: max(1, -(-n // bs)),
        "rounded down: 9 tokens in blocks of 4 need 3 blocks, the last one partly empty":
            lambda n, bs: n // bs if n // bs != -(-n // bs) else None,
        "off by one block: n // block_size + 1 is one too many when the tokens fill their blocks exactly "
        "(8 tokens, blocks of 4: 2)":
            lambda n, bs: n // bs + 1,
    })
    for n, bs in [(9, 4), (8, 4), (0, 4), (1, 4), (4, 4), (5, 4), (16, 16), (17, 16), (1, 1), (4096, 16), (4097, 16)]:
        run(f"num_tokens={n}, block_size={bs}", n, bs)
    run("num_tokens=2**60 + 1, block_size=16 (floats lose the +1)", 2**60 + 1, 16)
    run("num_tokens=2**60 + 17, block_size=16 (floats lose the +17)", 2**60 + 17, 16)
    rng = random.Random(7)
    for _ in range(3):
        n, bs = rng.randrange(0, 5000), rng.choice([3, 8, 16, 32])
        run(f"num_tokens={n}, block_size={bs} (random)", n, bs)
    c.run("num_tokens=-1 (must raise ValueError)", -1, 4)
    c.run("block_size=0 (must raise ValueError)", 5, 0)
    return c.done()


def _blocks_to_append_ref(num_tokens: int, n: int, block_size: int) -> int:
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    return _blocks_needed(num_tokens + n, block_size) - _blocks_needed(num_tokens, block_size)


def blocks_to_append(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(num_tokens, n, block_size) -> int`` new blocks a sequence of num_tokens needs to append n tokens.

    ValueError for num_tokens < 0, n < 0 or block_size < 1.
    """
    c = Checker("blocks_to_append", fn, _blocks_to_append_ref, verbose=verbose, compare=same_int, diagnose=[
        should_have_raised, lambda e, a: off_by(e, a, 1, "block", "a new block is taken only when the last one is full")])
    run = mistake_runner(c, {
        "n ignored: the answer depends on how many tokens are appended (as if n were always 1)":
            lambda t, n, bs: _blocks_to_append_ref(t, 1, bs),
        "float division: math.ceil(x / block_size) goes through a float, which drops the last digits of a big "
        "count (2**60 tokens): round up with integers only":
            lambda t, n, bs: math.ceil((t + n) / bs) - math.ceil(t / bs),
        "the last block's free slots were not used: the new tokens fill it before a new block is taken":
            lambda t, n, bs: -(-n // bs),
        "that counts all the blocks after the append: subtract the blocks the request already holds":
            lambda t, n, bs: -(-(t + n) // bs),
        "at least one block came out where none is needed: tokens that fit in the last block's free slots "
        "(or n = 0) take no new block": lambda t, n, bs: max(1, _blocks_to_append_ref(t, n, bs)),
    })
    for t, n, bs in [(9, 1, 4), (8, 1, 4), (7, 1, 4), (0, 1, 4), (0, 0, 4), (5, 10, 4), (4, 4, 4), (3, 1, 4), (16, 100, 16)]:
        run(f"num_tokens={t}, append n={n}, block_size={bs}", t, n, bs)
    rng = random.Random(8)
    for _ in range(3):
        t, n, bs = rng.randrange(0, 300), rng.randrange(0, 40), rng.choice([2, 4, 16])
        run(f"num_tokens={t}, n={n}, block_size={bs} (random)", t, n, bs)
    run("num_tokens=2**60, append n=17, block_size=16 (floats lose the +17)", 2**60, 17, 16)
    c.run("n=-1 (must raise ValueError)", 5, -1, 4)
    for label, args, want in [("num_tokens=-1", (-1, 1, 4), "num_tokens < 0"), ("block_size=0", (5, 1, 0), "block_size < 1")]:
        case = c.run(f"{label} (must raise ValueError)", *args)
        if not case.passed:
            case.note = (f"{label} must raise ValueError: add the check {want} (the contract's other checks: "
                         "ValueError for num_tokens < 0, n < 0 or block_size < 1, before computing anything)")
    return c.done()


# ------------------------------------------------------------------ the allocator
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
    if seed == 5:  # scripted: a list with one block in use and one already free changes nothing
        return [("allocate", 2), ("allocate", 2), ("free", 1), ("free_ids", [0, 2]), ("incref_ids", [1, 3]),
                ("free_ids", [1, 1]), ("allocate", 0), ("free_ids", [0, 1]), ("allocate", 4)]  # [1, 1]: a double free
    if seed == 6:  # scripted: blocks freed out of order come back, and join the queue, in the order listed
        return [("allocate", 4), ("free_ids", [3, 1, 2]), ("allocate", 1), ("free_ids", [0]), ("allocate", 3)]
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
        elif op in ("free_ids", "incref_ids"):  # explicit block ids (FIFO order is checked before)
            label = f"{op[:-4]}({arg})"
            out = call(obj.free if op == "free_ids" else obj.incref, list(arg))
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


def _kvlab_allocator(num_blocks: int) -> BlockAllocator:
    return BlockAllocator(num_blocks, block_size=4)


def _same_step(expected: tuple, actual: tuple) -> bool:
    (_, e_out, e_state), (_, a_out, a_state) = expected, actual
    if isinstance(e_out, Raised):
        ok = isinstance(a_out, Raised) and isinstance(a_out.exc, type(e_out.exc)) and _same_exc_args(e_out.exc, a_out.exc)
    else:
        ok = not isinstance(a_out, Raised) and a_out == e_out
    return ok and e_state == a_state


def _same_exc_args(expected: BaseException, actual: BaseException) -> bool:
    """OutOfBlocks carries (requested, free): both must be the right numbers, in that order."""
    if type(expected).__name__ != "OutOfBlocks":
        return True
    return (getattr(actual, "requested", None), getattr(actual, "free", None)) == (expected.requested, expected.free)


_FRONT = ("a different block came out: allocate takes blocks from the FRONT of the free queue "
          "(the longest-free block first)")
_BACK = ("a different block came out: freed blocks join the BACK of the free queue (first in, first out), "
         "so the block freed last is reused last")


def _allocator_note(label: str, want: tuple, got: tuple, freed_before: bool = True) -> str:
    """The usual allocator mistake behind a step that differs from kvlab's (``freed_before``: a free
    came before this step, so the queue's order is no longer 0, 1, 2...)."""
    (_, w_out, w_state), (_, g_out, g_state) = want, got
    if isinstance(w_out, Raised) and not isinstance(g_out, Raised):
        ids = [int(x) for x in re.findall(r"\d+", label)]
        if type(w_out.exc).__name__ == "DoubleFree" and len(ids) > len(set(ids)):
            return ("a block listed more times than its ref count is a double free: raise kvlab.DoubleFree "
                    "and change nothing (count each id's uses in the list first)")
        if type(w_out.exc).__name__ == "DoubleFree":
            return "freeing a block that is already free must raise kvlab.DoubleFree and change nothing"
        if type(w_out.exc).__name__ == "OutOfBlocks":
            return "asking for more blocks than are free must raise kvlab.OutOfBlocks (all or nothing)"
        if type(w_out.exc).__name__ == "KVCacheError":
            return "incref of a free block must raise kvlab.KVCacheError: only blocks in use can be shared"
        return f"this call must raise {type(w_out.exc).__name__}"
    if isinstance(w_out, Raised) and isinstance(g_out, Raised) and type(g_out.exc) is not type(w_out.exc) \
            and w_state == g_state and type(w_out.exc).__name__ == "DoubleFree":
        return (f"raised {type(g_out.exc).__name__} for a block that is already free: raise kvlab.DoubleFree "
                "(a KVCacheError of its own kind, so a caller can tell a double free from other errors)")
    if isinstance(w_out, Raised) and isinstance(g_out, Raised) and w_state != g_state:
        return "the call raised but changed the state first: check everything, then change (all or nothing)"
    if isinstance(w_out, Raised) and isinstance(g_out, Raised) and not _same_exc_args(w_out.exc, g_out.exc):
        e, a = w_out.exc, g_out.exc
        if (getattr(a, "requested", None), getattr(a, "free", None)) == (e.free, e.requested):
            return (f"OutOfBlocks(requested, free): the arguments are swapped (asked for {e.requested}, "
                    f"{e.free} free, not the other way round)")
        return (f"raise OutOfBlocks(requested, free) with the blocks asked for ({e.requested}) and the blocks "
                f"free ({e.free})")
    if label.startswith("allocate") and isinstance(w_out, list) and isinstance(g_out, list) and sorted(w_out) == sorted(g_out):
        return "the right blocks in the wrong order: take them from the FRONT of the queue, in order"
    if label.startswith("allocate") and isinstance(w_out, list) and isinstance(g_out, list):
        return _BACK if freed_before else _FRONT
    if label.startswith("free") and isinstance(w_out, list) and isinstance(g_out, list) and sorted(w_out) == sorted(g_out):
        return ("the right blocks in the wrong order: free returns the released blocks in the order they were listed "
                "(the order they join the queue), not sorted")
    if label.startswith("free") and isinstance(w_out, list) and isinstance(g_out, list) and w_state == g_state:
        return ("free returns only the blocks whose count reached 0 (those that went back to the queue), "
                "not every id it was given")
    if label.startswith("free") and isinstance(w_state, dict) and isinstance(g_state, dict):
        if w_state.get("num_free_blocks", 0) < g_state.get("num_free_blocks", 0):
            return "a block with ref count 2 stays in use after one free: it goes back only when its count reaches 0"
    return ""


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
    if c.unusable("construct", "an allocator class"):
        return c.done()
    for seed, num_blocks in [(0, 8), (1, 6), (5, 6), (6, 4), (2, 8), (3, 5), (4, 12)]:
        ops = _scenario_ops(seed, num_blocks)
        want = _run_scenario(_kvlab_allocator, ops, num_blocks)
        got = _run_scenario(cls, ops, num_blocks)
        name = {0: "scripted: FIFO reuse and ref counts", 1: "scripted: errors leave the state unchanged",
                5: "scripted: a list with a free block in it changes nothing",
                6: "scripted: blocks freed out of order"}.get(seed, f"random seed {seed}")
        for i, w in enumerate(want):
            g = got[i] if i < len(got) else ("(not reached)", Raised(RuntimeError("stopped earlier")), None)
            if not _same_step(w, g):
                stub = isinstance(g[1], Raised) and isinstance(g[1].exc, NotImplementedError)
                got = g[1] if g[2] is None or stub else {"returns": g[1], **(g[2] if isinstance(g[2], dict) else {"state": g[2]})}
                freed = any(x[0].startswith("free") for x in want[:i])
                note = "" if stub else _allocator_note(w[0], w, g, freed)
                case = c.record(f"{name}, {num_blocks} blocks, step {i + 1} {w[0]}", {"returns": w[1], **w[2]}, got,
                                passed=False, note=note)
                if note == _BACK:  # after a free, a wrong block is either end of the queue: the tally decides
                    case.candidates = [_BACK, _FRONT]
                break
        else:
            c.record(f"{name}, {num_blocks} blocks: {len(want)} operations", f"{len(want)} steps as kvlab",
                     f"{len(want)} steps as kvlab", passed=True)
    return c.done()
