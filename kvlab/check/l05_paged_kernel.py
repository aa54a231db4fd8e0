"""Checkers for lesson 05 (the paged attention kernel).

    paged_gather_kernel   a Triton kernel: the paged kernel's block loop (gather K rows)
    paged_decode_torch    decode attention for one sequence through its block table (plain torch)
    kernel_tiles          the kernel's loop bounds: which logical blocks each split reads, tile by tile

The first two need torch (and the first Triton): they import them inside the function, so
``import kvlab.check`` stays light. The expected outputs are the kernels' torch references
(:mod:`kvlab.kernels.reference`) and, for ``kernel_tiles``, the kernel view's
``kernel_access_order``. Each FAIL names the common mistake when the answer is exactly what
that mistake gives. Mirrors no vLLM or SGLang file (exercises); the kernel it grades is a
piece of vLLM's ``paged_attention`` / ``kvlab.kernels.paged_decode``.

Example:
    >>> kernel_tiles(lambda n, bs, tile, s: [[[0, 1], [2, 3]], [[4]]], verbose=False).passed   # one case right only
    False
"""
from __future__ import annotations

import functools
import importlib
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from ..memory.block_table import blocks_needed
from .diagnose import mistake_runner
from .harness import Checker, CheckResult, Raised, call_in_place, changed_argument

__all__ = ["paged_gather_kernel", "paged_decode_torch", "kernel_tiles", "CalledKvlabsOwn"]


class CalledKvlabsOwn(RuntimeError):
    """An answer called the kvlab function its exercise asks the student to write."""


# What each exercise asks the student to write, as kvlab has it (module, name): calling it is no answer.
DECODE_OWN = (("kvlab.kernels", "paged_decode_attention_ref"), ("kvlab.kernels.reference", "paged_decode_attention_ref"),
              ("kvlab.kernels", "paged_decode_attention"))
TILES_OWN = (("kvlab.viz.kernel_view", "kernel_access_order"), ("kvlab.viz", "kernel_access_order"),
             ("kvlab.check.l05_paged_kernel", "kernel_tiles_reference"))


@contextmanager
def _refusing(fn: Callable, own: tuple[tuple[str, str], ...]) -> Iterator[None]:
    """While the answer runs, each of ``own`` raises :class:`CalledKvlabsOwn` naming itself, in its
    module and wherever the answer's globals or closure hold it (``from kvlab.kernels import ...``)."""
    globs = getattr(fn, "__globals__", None)
    swapped: list[tuple[Any, str, Any]] = []   # (module or globals, name, the original)
    for mod_name, name in own:
        mod = importlib.import_module(mod_name)
        original = getattr(mod, name, None)
        if original is None:
            continue

        def refuse(*_args: Any, _name: str = name, **_kwargs: Any) -> Any:
            raise CalledKvlabsOwn(f"it calls kvlab's own {_name}")

        swapped.append((mod, name, original))
        setattr(mod, name, refuse)
        for key, value in list(globs.items()) if isinstance(globs, dict) else []:
            if value is original:
                swapped.append((globs, key, original))
                globs[key] = refuse
        for cell in getattr(fn, "__closure__", None) or ():   # a name of an enclosing function
            if _contents(cell) is original:
                swapped.append((cell, "cell_contents", original))
                cell.cell_contents = refuse
    try:
        yield
    finally:
        for holder, key, value in reversed(swapped):
            if isinstance(holder, dict):
                holder[key] = value
            else:
                setattr(holder, key, value)


def _contents(cell: Any) -> Any:
    try:
        return cell.cell_contents
    except ValueError:   # a cell not filled yet
        return None


def _own_refused(fn: Callable, own: tuple[tuple[str, str], ...]) -> Callable:
    """``fn`` that may not call ``own`` (the exercise is to write it, not to call it)."""
    @functools.wraps(fn)
    def answer(*args, **kwargs):
        with _refusing(fn, own):
            return fn(*args, **kwargs)
    return answer


def _gather_cases() -> list[tuple[int, int, int, int, int]]:
    """(block_size, context_len, TILE_N, head_dim, seed): a partial last block, one token, a tile
    of several blocks with a partial last tile, block sizes 2 to 8, a long shuffled table. Six
    small launches (about 14 loop iterations in all: well under a second in the interpreter)."""
    return [(4, 5, 4, 8, 0), (4, 1, 4, 8, 2), (4, 19, 16, 8, 3),
            (8, 13, 8, 16, 4), (2, 9, 8, 4, 5), (4, 30, 8, 8, 7)]


def paged_gather_kernel(kernel: Callable, verbose: bool = True) -> CheckResult:
    """Grade a Triton kernel that copies one sequence's K rows out of the paged cache.

    Launched as ``kernel[(1,)](cache, block_table, out, context_len, HEAD_DIM=..,
    BLOCK_SIZE=.., TILE_N=..)`` with ``cache`` (num_blocks, BLOCK_SIZE, HEAD_DIM) fp32,
    ``block_table`` (num_logical_blocks,) int32 and ``out`` (context_len + guard, HEAD_DIM)
    fp32 pre-filled with the canary -7. Expected: ``out[:context_len]`` equals
    ``kvlab.kernels.reference.gather_kv`` of the cache, and the guard rows keep the canary.

    ``out`` is a view into a buffer the checker owns, with canary rows before it and after it
    (as many as the cache has slots): a store at a wrong row lands there and is named ("stored
    outside the output"), never in memory Python uses. In the interpreter every load and store
    address is also checked before it happens (:func:`_watch_memory`): a load past the block
    table or the cache is named, not read.
    """
    import torch

    import kvlab.kernels  # noqa: F401  -- sets the kernel mode before any launch
    from kvlab.kernels import DEVICE
    from kvlab.kernels.reference import gather_kv

    c = Checker("paged_gather_kernel", kernel, verbose=verbose)
    kernel = _interpretable(kernel)
    for bs, n, tile, d, seed in _gather_cases():
        g = torch.Generator().manual_seed(seed)
        nblk = blocks_needed(n, bs)
        num_blocks = nblk + 3
        table = torch.randperm(num_blocks, generator=g)[:nblk].to(torch.int32)          # shuffled physical blocks
        cache = torch.randn((num_blocks, bs, d), generator=g)                          # (num_blocks, bs, head_dim)
        guard, pad = bs + tile, num_blocks * bs + tile
        want = gather_kv(cache[:, :, None, :], table, n)[:, 0, :]                     # (n, head_dim)
        label = f"block_size {bs}, context_len {n}, TILE_N {tile}, table {table.tolist()}"
        expected = f"rows 0..{n - 1} = K through the table; {guard} guard rows untouched"
        if c.unusable(label, expected):
            continue
        cache_d, table_d = cache.to(DEVICE), table.to(DEVICE)
        big = torch.full((pad + n + guard + pad, d), -7.0, device=DEVICE)             # canaries around out
        out_d = big[pad:pad + n + guard]                                                # (n + guard, head_dim), a view
        with _watch_memory(loads={"the cache": cache_d, "the block table": table_d}, stores={"the output": big},
                           count="the cache") as seen:
            err = call_in_place(lambda: kernel[(1,)](cache_d, table_d, out_d, n, HEAD_DIM=d, BLOCK_SIZE=bs, TILE_N=tile))
        if isinstance(err, Raised):
            if "active drivers" in str(err.exc):
                seen["note"] = _NO_DRIVER
            candidates: list[str] = []
            if "addrs" in seen:    # a load left the buffers: name the slip from the addresses it read
                candidates = _table_read_notes(seen["addrs"], table_d, n, bs, tile)
                seen["note"] = candidates[0] if candidates else _load_note(seen["addrs"], cache_d, table_d, table,
                                                                           n, bs, tile)
            case = c.record(label, expected, seen.get("what", err), passed=False, note=seen.get("note", ""))
            case.candidates = candidates if len(candidates) > 1 else case.candidates   # the likeliest over all cases
            continue
        whole = big.cpu()
        got = whole[pad:pad + n + guard]
        written = (whole != -7.0).any(dim=1).tolist()                                 # (rows,) bool
        outside = [i - pad for i, w in enumerate(written) if w and not pad <= i < pad + n + guard]
        bad_rows = [i for i in range(n) if not torch.allclose(got[i], want[i])]
        guard_hit = [n + i for i in range(guard) if not torch.all(got[n + i] == -7.0)]
        ok = not bad_rows and not guard_hit and not outside
        parts = []
        if outside:
            parts.append(f"stored outside the output, at rows {outside[:6]}{'...' if len(outside) > 6 else ''}")
        if bad_rows:
            parts.append(f"wrong rows {bad_rows[:6]}{'...' if len(bad_rows) > 6 else ''}")
        if guard_hit:
            parts.append(f"wrote past context_len into rows {guard_hit[:4]}")
        note = _outside_note(outside, table, n, bs) if outside else _gather_note(
            got, cache, want, table, n, bs, tile, bad_rows, guard_hit)
        if ok and seen.get("read", 0) > n * d:    # right rows stored, but K read for positions past context_len
            ok, note = False, _unmasked_k_note(seen["read"] // d, n)
            parts.append(f"read {seen['read'] // d} K rows for {n} positions")
        c.record(label, expected, expected if ok else "; ".join(parts), passed=ok, note=note)
    return c.done()


_NO_DRIVER = ("the kernel was compiled for a GPU (Triton's '0 active drivers'): it was decorated with @triton.jit "
              "before kvlab chose the interpreter; run `import kvlab.kernels` before `import triton` (restart the kernel)")


def _interpretable(kernel: Any) -> Any:
    """A ``@triton.jit`` kernel decorated before ``TRITON_INTERPRET`` was set (``triton`` imported
    before ``kvlab.kernels``) launches into "0 active drivers" on a machine without a GPU. In the
    interpreter, the checker re-wraps its Python function so that it runs, under the memory watch,
    and its own mistakes get named instead. Anything else comes back as it was.

    >>> _interpretable(len) is len
    True
    """
    from kvlab.kernels import KERNEL_MODE

    fn = getattr(kernel, "fn", None)
    if KERNEL_MODE != "interpreter" or type(kernel).__name__ != "JITFunction" or not callable(fn):
        return kernel
    from triton.runtime.interpreter import InterpretedFunction

    return InterpretedFunction(fn)


class _OutOfBounds(Exception):
    """A load or store address outside the buffers the checker handed the kernel."""


@contextmanager
def _watch_memory(loads: dict, stores: dict, count: str | None = None):
    """In the Triton interpreter: check every tl.load / tl.store address (where its mask is on)
    against ``loads`` / ``stores`` (name -> tensor) BEFORE the access; an address outside raises
    :class:`_OutOfBounds` and the dict this yields gets "what" and "note". ``count`` names one of
    ``loads``: the elements read from it (mask on) are summed in ``seen["read"]``, so a load that
    should have been masked shows as more reads than the real positions need. Natively: nothing
    (the canary rows around the output still catch a wrong store)."""
    from kvlab.kernels import KERNEL_MODE

    seen: dict = {}
    if KERNEL_MODE != "interpreter":
        yield seen
        return
    import numpy as np
    from triton.runtime import interpreter

    b = interpreter.interpreter_builder

    def active(ptrs, mask):   # the addresses a masked access touches: its mask on
        return np.asarray(ptrs.data)[np.broadcast_to(np.asarray(mask.data), np.shape(ptrs.data))].astype(np.uint64)

    def inside(addr, tensors: dict) -> bool:
        ok = np.zeros(addr.shape, dtype=bool)
        for t in tensors.values():
            lo = t.data_ptr()
            ok |= (addr >= lo) & (addr < lo + t.numel() * t.element_size())
        return bool(ok.all())

    def load(ptrs, mask, other, *rest):
        addr = active(ptrs, mask)
        if count is not None and inside(addr, {count: loads[count]}):
            seen["read"] = seen.get("read", 0) + int(addr.size)
        if not inside(addr, loads):
            seen["addrs"] = {int(a) for a in addr}   # for naming the slip
            seen["what"] = "a tl.load read outside " + " and ".join(loads)
            raise _OutOfBounds(seen["what"])
        return type(b).create_masked_load(b, ptrs, mask, other, *rest)

    def store(ptrs, value, mask, *rest):
        if not inside(active(ptrs, mask), stores):
            seen["what"] = "a tl.store wrote far outside the output (stopped before it happened)"
            seen["note"] = "stored outside the output: the output row of position pos is out_ptr + pos * HEAD_DIM"
            raise _OutOfBounds(seen["what"])
        return type(b).create_masked_store(b, ptrs, value, mask, *rest)

    b.create_masked_load, b.create_masked_store = load, store
    try:
        yield seen
    finally:
        del b.create_masked_load, b.create_masked_store


_TILE_SLIP = ("TILE_N where BLOCK_SIZE belongs: the logical block is pos // BLOCK_SIZE, the offset pos % BLOCK_SIZE and "
              "the slot physical * BLOCK_SIZE + offset (a tile holds several blocks; the table is indexed by block)")
_OFFSET_TILE = ("the offset inside a block is pos % BLOCK_SIZE, not pos % TILE_N: a tile holds several blocks, and each "
                "position's offset counts from the start of its own block")
_UNITS_HEAD_DIM = ("the slot is physical * BLOCK_SIZE + offset, in token slots: physical * HEAD_DIM mixes units (a block "
                   "holds BLOCK_SIZE slots; HEAD_DIM comes in once, when the slot becomes an address, cache_ptr + slot * HEAD_DIM)")
_UNITS_TWICE = ("the slot was multiplied by HEAD_DIM twice: the slot physical * BLOCK_SIZE + offset counts token rows, "
                "and cache_ptr + slot * HEAD_DIM is its address (HEAD_DIM once)")
_SWAPPED = ("// and % swapped: the logical block (the block table's index) is pos // BLOCK_SIZE and the offset inside "
            "the block pos % BLOCK_SIZE (lesson 04: pos 9 with blocks of 4 is block 2, offset 1)")
_LOAD_MASK = ("a load past the block table or the cache: positions past context_len must not load either "
              "(mask=valid on every tl.load, not only on the store)")


def _unmasked_k_note(rows: int, n: int) -> str:
    """The K load ran without ``mask=valid``: the output is right (the store is masked), but the
    kernel read ``rows`` K rows where only ``n`` positions are real.

    >>> _unmasked_k_note(16, 10)[:45]
    'the K load read 16 rows for 10 real positions'
    """
    return (f"the K load read {rows} rows for {n} real positions: a load without mask=valid reads a row for every "
            "position of the last tile, past context_len (here from the physical block the masked table load "
            "defaulted to; on a GPU, any address). The store's mask hides it in the output: give the K load the mask too "
            "(mask=valid on every tl.load, not only on the store)")


def _slot_slips(table, bs: int, tile: int, d: int) -> list[tuple[str, Callable[[int], int]]]:
    """(what the slip is, the cache row position pos is read from with it): the review's slips in the
    slot arithmetic (TILE_N where BLOCK_SIZE belongs, HEAD_DIM in the slot's units)."""
    def entry(i: int) -> int:
        return int(table[min(i, len(table) - 1)])
    return [(_SWAPPED, lambda i: entry(i % bs) * bs + i // bs),
            (_OFFSET_TILE, lambda i: entry(i // bs) * bs + i % tile),
            (_TILE_SLIP, lambda i: entry(i // tile) * bs + i % tile),
            (_TILE_SLIP, lambda i: entry(i // tile) * tile + i % tile),
            (_UNITS_HEAD_DIM, lambda i: entry(i // bs) * d + i % bs),
            (_UNITS_TWICE, lambda i: (entry(i // bs) * bs + i % bs) * d)]


def _load_note(addrs, cache, table_d, table, n: int, bs: int, tile: int) -> str:
    """Why a tl.load left the cache and the block table (``addrs``: the bytes that load read): a
    slot slip when every address is one that slip reads, the mask when it read past the table."""
    if not addrs:
        return _LOAD_MASK
    base, d, size = cache.data_ptr(), cache.shape[-1], cache.element_size()
    for message, slot_of in _slot_slips(table, bs, tile, d):   # a slip that gives the right rows never gets here
        if addrs <= {base + size * (slot_of(i) * d + j) for i in range(n) for j in range(d)}:
            return message
    lo, entry = table_d.data_ptr(), table_d.element_size()
    past_the_table = range(lo + entry * len(table), lo + entry * (len(table) + tile))
    if any(a in past_the_table for a in addrs):
        return _LOAD_MASK
    return ("a tl.load read outside the cache: work the address out for one position by hand: its table entry at "
            "block_table_ptr + pos // BLOCK_SIZE, its slot physical * BLOCK_SIZE + pos % BLOCK_SIZE, its K row "
            "at cache_ptr + slot * HEAD_DIM (and mask=valid on every load)")


_TABLE_BY_POS = ("the block table is indexed by the LOGICAL BLOCK, pos // BLOCK_SIZE, not by the position: "
                 "block_table_ptr + pos reads entries the table does not have (it has one per block)")


def _table_read_notes(addrs, table_d, n: int, bs: int, tile: int) -> list[str]:
    """The slips a refused block-table load fits, likeliest first (a tile of BLOCK_SIZE positions or fewer
    cannot tell the two apart: the case that can decides, :func:`~kvlab.check.harness._likeliest_mistakes`)."""
    lo, entry = table_d.data_ptr(), table_d.element_size()
    unmasked = {lo + entry * (i // bs) for i in range(-(-n // tile) * tile)}   # at pos // BLOCK_SIZE, no mask
    if addrs <= unmasked:
        return []
    read = {_SWAPPED: {lo + entry * (i % bs) for i in range(n)},              # at pos % BLOCK_SIZE
            _TABLE_BY_POS: {lo + entry * i for i in range(n)}}                 # at pos
    return [note for note, at in read.items() if addrs <= at]


def _outside_note(outside: list[int], table, n: int, bs: int) -> str:
    """What a kernel that stored outside ``out`` did (rows relative to out's row 0)."""
    slots = {int(table[p // bs]) * bs + p % bs for p in range(n)}
    if set(outside) <= slots:
        return ("stored outside the output, at the cache's slot rows (physical * BLOCK_SIZE + offset): "
                "the output row of position pos is pos (out_ptr + pos * HEAD_DIM)")
    return "stored outside the output: the output row of position pos is pos (out_ptr + pos * HEAD_DIM), 0 <= pos < context_len"


def _gather_note(got, cache, want, table, n: int, bs: int, tile: int, bad_rows: list[int],
                 guard_hit: list[int]) -> str:
    """What a wrong gather kernel did, from what it wrote ('' when it is not one of the usual)."""
    import torch

    if not bad_rows and not guard_hit:
        return ""
    if guard_hit == [n] and not bad_rows:
        return ("exactly one row past the end was written (row context_len): valid = pos < context_len, not <= "
                "(positions run from 0 to context_len - 1)")
    if guard_hit and any(bool(got[i].any()) for i in guard_hit):   # real K rows past the end: loads unmasked too
        return ("rows past context_len were loaded and stored: valid must be pos < context_len for THIS tile's "
                "positions (pos = tile * TILE_N + offs_t; offs_t restarts at 0 every tile), on every load and store")
    if guard_hit:
        return "a store without the mask wrote past context_len: mask every tl.store with valid"
    flat = cache.reshape(-1, cache.shape[-1])                      # (num_blocks * bs, head_dim): one row a slot

    def rows_are(slot_of) -> bool:
        slots = [slot_of(i) for i in bad_rows]
        return all(0 <= x < flat.shape[0] for x in slots) and all(
            torch.allclose(got[i], flat[x]) for i, x in zip(bad_rows, slots))

    canary = [bool(torch.all(got[i] == -7.0)) for i in bad_rows]
    if all(canary) and len(bad_rows) == n:
        return "nothing was written (every row still holds the canary -7): load the K rows and tl.store them"
    if all(canary) and min(bad_rows) >= tile:
        return "only the first tile was written: every iteration of the loop must store its tile"
    if rows_are(lambda i: i):
        return "rows were read from slot pos, not through the block table: physical = block_table[pos // BLOCK_SIZE]"
    if rows_are(lambda i: int(table[i // bs]) * bs + i // bs):
        return "the offset inside the block is pos % BLOCK_SIZE (not pos // BLOCK_SIZE)"
    if rows_are(lambda i: int(table[i // bs]) + i % bs):
        return ("the slot is physical * BLOCK_SIZE + offset: the block number was used as a slot "
                "(the * BLOCK_SIZE is missing)")
    if rows_are(lambda i: int(table[min(i // tile, len(table) - 1)]) * bs + i % bs):
        return ("the logical block is pos // BLOCK_SIZE, not pos // TILE_N: a tile holds several blocks, "
                "the table is indexed by block")
    for message, slot_of in _slot_slips(table, bs, tile, flat.shape[-1]):
        if rows_are(slot_of):
            return message
    d, numbers = flat.shape[-1], cache.reshape(-1)                 # every number of the cache, in memory order
    slots = [int(table[i // bs]) * bs + i % bs for i in bad_rows]
    if all(x + d <= numbers.numel() and torch.allclose(got[i], numbers[x:x + d]) for i, x in zip(bad_rows, slots)):
        return ("the row stride is missing: the K row of slot s starts at cache_ptr + s * HEAD_DIM (the numbers "
                "of a row are HEAD_DIM apart from the next row's), not cache_ptr + s")
    return ""


_OVERFLOW = ("the output holds inf or nan: exp() of a score in the hundreds overflows float32 (its largest is ~3.4e38, "
             "exp(89)): subtract each head's largest score before exp (softmax is unchanged by it), as torch.softmax does")


def paged_decode_torch(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(q, k_cache, v_cache, block_table, context_len, scale) -> out`` (plain torch).

    q (num_heads, head_dim); k_cache, v_cache (num_blocks, block_size, num_kv_heads, head_dim);
    block_table a list of ints; out (num_heads, head_dim). Query head h uses KV head
    ``h // (num_heads // num_kv_heads)``. Expected: ``kvlab.kernels.paged_decode_attention_ref``.
    """
    import torch

    from kvlab.kernels.reference import paged_decode_attention_ref

    fn = _own_refused(fn, DECODE_OWN)   # wrapping kvlab's reference is no answer (the review passed one)
    c = Checker("paged_decode_torch", fn, verbose=verbose)
    configs = [  # (num_heads, num_kv_heads, head_dim, block_size, context_len, seed, scale; None: 1/sqrt(head_dim))
        (1, 1, 8, 4, 5, 0, None), (2, 2, 8, 4, 8, 1, None), (4, 2, 8, 4, 11, 2, 0.9), (4, 1, 16, 8, 3, 3, None),
        (8, 2, 16, 4, 1, 4, None), (2, 1, 4, 2, 9, 5, 0.125), (2, 2, 8, 4, 16, 6, 1.5),
        (2, 1, 8, 4, 6, 7, 40.0),   # scores in the hundreds: exp() of them overflows float32 (review r5)
    ]
    for h, kvh, d, bs, n, seed, scale in configs:
        g = torch.Generator().manual_seed(seed)
        nblk = blocks_needed(n, bs)
        num_blocks = nblk + 3
        table = torch.randperm(num_blocks, generator=g)[:nblk].to(torch.int32)
        q = torch.randn((h, d), generator=g)                                            # (num_heads, head_dim)
        k_cache = torch.randn((num_blocks, bs, kvh, d), generator=g) * 2               # (num_blocks, bs, kv_heads, head_dim)
        v_cache = torch.randn((num_blocks, bs, kvh, d), generator=g)
        scale = 1.0 / d**0.5 if scale is None else scale
        want = paged_decode_attention_ref(q[None], k_cache, v_cache, table[None], torch.tensor([n]), scale=scale)[0]
        label = (f"{h} heads / {kvh} KV heads, head_dim {d}, block_size {bs}, context_len {n}, scale {scale:.3g}, "
                 f"table {table.tolist()}")
        exp_s = f"out[0,:3] = {[round(x, 4) for x in want[0, :3].tolist()]}"
        if c.unusable(label, exp_s):
            continue
        given = (q.clone(), k_cache.clone(), v_cache.clone(), table.tolist(), n, scale)
        got = call_in_place(fn, *given)
        changed = changed_argument(fn, ((q, k_cache, v_cache, table.tolist(), n, scale), {}), (given, {}))
        if changed:  # q and the caches are the caller's: read them, never write them
            c.record(label, exp_s, got if isinstance(got, Raised) else "an answer", passed=False, note=changed)
            continue
        if isinstance(got, Raised):
            c.record(label, exp_s, got, passed=False)
            continue
        if not isinstance(got, torch.Tensor) or tuple(got.shape) != tuple(want.shape):
            shape = tuple(got.shape) if isinstance(got, torch.Tensor) else type(got).__name__
            c.record(label, exp_s, f"shape {shape}, expected {tuple(want.shape)}", passed=False,
                     note=_shape_note(got, tuple(want.shape)))
            continue
        if got.dtype != q.dtype:  # float64 holds twice the bytes, and the next layer expects the model's dtype
            dt, want_dt = str(got.dtype).replace("torch.", ""), str(q.dtype).replace("torch.", "")
            c.record(label, exp_s, f"out is {dt}, the inputs {want_dt}", passed=False,
                     note=f"out came back as {dt}: keep the inputs' dtype ({want_dt})")
            continue
        ok = torch.allclose(got.float(), want, atol=1e-4, rtol=1e-4)
        worst = int((got.float() - want).abs().amax(dim=-1).argmax()) if not ok else 0   # the head to show
        exp_s = f"out[{worst},:3] = {[round(x, 4) for x in want[worst, :3].tolist()]}"
        act_s = f"out[{worst},:3] = {[round(x, 4) for x in got[worst, :3].float().tolist()]}"
        note = ""
        if not ok:
            act_s += f" (max |diff| {float((got.float() - want).abs().max()):.3g}, head {worst} the worst)"
            note = _OVERFLOW if not bool(torch.isfinite(got).all()) else _close_to_mistake(
                got.float(), _decode_mistakes(paged_decode_attention_ref, h, kvh, bs), q[None], k_cache, v_cache,
                table, n, scale)
        c.record(label, exp_s, act_s, passed=bool(ok), note=note)
    return c.done()


def _shape_note(got, want: tuple) -> str:
    """Why an answer of paged_decode_torch is not a (num_heads, head_dim) tensor."""
    import torch

    if not isinstance(got, torch.Tensor):
        return (f"returned a {type(got).__name__}: return a torch tensor of shape {want} (num_heads, head_dim), "
                "not a list, tuple or array")
    if got.numel() == int(torch.Size(want).numel()):
        return f"out has shape {tuple(got.shape)}: return it as (num_heads, head_dim) = {want}, without extra dimensions"
    return f"out must be (num_heads, head_dim) = {want}: one output vector per query head"


def _decode_mistakes(ref: Callable, heads: int, kv_heads: int, block_size: int) -> list[tuple[str, Callable]]:
    """Plausible wrong answers of paged_decode_torch, each as the reference on changed inputs."""
    import torch

    def run(q, k, v, table, n, scale):
        return ref(q, k, v, table[None], torch.tensor([n]), scale=scale)[0]

    modulo = [h % kv_heads for h in range(heads)]      # query head h -> KV head h % kv_heads
    return [
        ("the scale argument was ignored: multiply the scores by the scale you are given, not 1/sqrt(head_dim)",
         lambda q, k, v, t, n, s: run(q, k, v, t, n, 1 / q.shape[-1] ** 0.5) if abs(s - 1 / q.shape[-1] ** 0.5) > 1e-9 else None),
        ("the scores were divided by scale: multiply them (softmax(q.K^T * scale))",
         lambda q, k, v, t, n, s: run(q, k, v, t, n, 1 / s)),
        ("the scores were not multiplied by scale (softmax(q.K^T * scale))",
         lambda q, k, v, t, n, s: run(q, k, v, t, n, 1.0)),
        ("the block table was not used: position pos lives in block block_table[pos // block_size]",
         lambda q, k, v, t, n, s: run(q, k, v, torch.arange(len(t), dtype=t.dtype), n, s)),
        ("the blocks were read in physical (sorted) order: read them in the block table's order, logical block "
         "i is block_table[i] whatever its number", lambda q, k, v, t, n, s: run(q, k, v, torch.sort(t).values, n, s)),
        ("positions past context_len were attended: the last block may be partial, mask it",
         lambda q, k, v, t, n, s: run(q, k, v, t, -(-n // block_size) * block_size, s)),
        ("query head h uses KV head h // (num_heads // num_kv_heads), not h % num_kv_heads",
         lambda q, k, v, t, n, s: _gqa_modulo(ref, q, k, v, t, n, s, modulo)),
        ("one position too few: attend positions 0 to context_len - 1, the last one included (< context_len, "
         "not < context_len - 1)", lambda q, k, v, t, n, s: run(q, k, v, t, n - 1, s) if n > 1 else None),
        ("one position too many: positions run up to context_len - 1 (pos < context_len, not <=)",
         lambda q, k, v, t, n, s: run(q, k, v, t, n + 1, s) if n + 1 <= len(t) * block_size else None),
        ("the softmax ran over the heads: each head's weights sum to 1 over the positions (softmax over the "
         "last dimension of (heads, context_len))", lambda q, k, v, t, n, s: _plain_decode(q, k, v, t, n, s, softmax_dim=0)),
        ("K was read at offset pos // block_size: the offset inside a block is pos % block_size",
         lambda q, k, v, t, n, s: _plain_decode(q, k, v, t, n, s, k_offset_div=True)),
        ("K and V were read at offset pos // block_size: the offset inside a block is pos % block_size",
         lambda q, k, v, t, n, s: _plain_decode(q, k, v, t, n, s, k_offset_div=True, v_offset_div=True)),
    ]


def _plain_decode(q, k_cache, v_cache, table, n: int, scale: float, softmax_dim: int = -1,
                  k_offset_div: bool = False, v_offset_div: bool = False):
    """Plain paged decode attention with one slip switched on (for naming a wrong answer)."""
    import torch

    q = q.reshape(q.shape[-2], q.shape[-1])                                       # (heads, d): the batch of 1 dropped
    bs, group = k_cache.shape[1], q.shape[0] // k_cache.shape[2]
    pos = torch.arange(n)
    blocks = torch.as_tensor(table).long().flatten()[pos // bs]                  # (n,)
    k = k_cache[blocks, pos // bs if k_offset_div else pos % bs].repeat_interleave(group, dim=1)   # (n, heads, d)
    v = v_cache[blocks, pos // bs if v_offset_div else pos % bs].repeat_interleave(group, dim=1)
    w = torch.softmax(torch.einsum("hd,thd->ht", q, k) * scale, dim=softmax_dim)  # (heads, n)
    return torch.einsum("ht,thd->hd", w, v)


def _close_to_mistake(got, mistakes: list[tuple[str, Callable]], *args) -> str:
    """The message of the first mistake whose output on ``args`` is (allclose) ``got``; '' if none."""
    import torch

    for message, wrong in mistakes:
        try:
            if torch.allclose(wrong(*args), got, atol=1e-4, rtol=1e-4):
                return message
        except Exception:  # a mistake that cannot run on these inputs says nothing
            continue
    return ""


def _gqa_modulo(ref: Callable, q, k, v, table, n: int, scale: float, modulo: list[int]):
    """Attention where query head h reads KV head ``modulo[h]`` (one KV head per query head)."""
    import torch

    k1, v1 = k[:, :, modulo], v[:, :, modulo]        # (num_blocks, block_size, heads, head_dim)
    return ref(q, k1, v1, table[None], torch.tensor([n]), scale=scale)[0]


# ---------------------------------------------------------------------------- kernel tiles
def kernel_tiles_reference(context_len: int, block_size: int, tile_tokens: int, num_splits: int) -> list:
    """The logical blocks each program reads, tile by tile, as the kernel's loop bounds give them
    (from the kernel view's :func:`~kvlab.viz.kernel_view.kernel_access_order`).

    Example:
        >>> kernel_tiles_reference(18, 4, 8, 2)
        [[[0, 1], [2, 3]], [[4]]]
    """
    from ..viz.kernel_view import kernel_access_order

    table = list(range(blocks_needed(context_len, block_size)))   # identity: physical = logical
    out: list[list[list[int]]] = [[] for _ in range(num_splits)]
    for r in kernel_access_order(table, context_len, block_size, num_splits, tile_tokens):
        tiles = out[r.split]
        if len(tiles) <= r.iteration:
            tiles.append([])
        tiles[r.iteration].append(r.logical)
    return out


def _tiles_from(num_tiles: Callable[[int, int], int], per: Callable[[int, int], int], last: bool = True,
                round_robin: bool = False) -> Callable:
    """A kernel_tiles with one rule changed (each a plausible mistake)."""
    def fn(n: int, bs: int, tile: int, splits: int) -> list:
        t_count = num_tiles(n, tile)
        p = per(t_count, splits)
        out: list[list[list[int]]] = [[] for _ in range(splits)]
        for t in range(t_count):
            start, end = t * tile, (min((t + 1) * tile, n) if last else (t + 1) * tile)
            s = t % splits if round_robin else (t // p if p else splits)
            if s < splits:
                out[s].append(list(range(start // bs, -(-end // bs))))
        return out
    return fn


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


def _tiles_blocks(blocks: Callable[[int, int, int], list]) -> Callable:
    """A kernel_tiles with the right tiles whose blocks come from ``blocks(start, end, block_size)``."""
    def fn(n: int, bs: int, tile: int, splits: int) -> list:
        num = _ceil(n, tile)
        per = _ceil(num, splits)
        return [[blocks(t * tile, min((t + 1) * tile, n), bs) for t in range(s * per, min((s + 1) * per, num))]
                for s in range(splits)]
    return fn


TILE_MISTAKES = dict([
    ("the last, partial tile is missing: num_tiles = ceil(context_len / tile_tokens), not a floor",
     _tiles_from(lambda n, t: n // t, _ceil)),
    ("tiles per program is a ceiling too (ceil(num_tiles / num_splits)): with a floor the last tiles "
     "are read by nobody, or by a program that does not exist", _tiles_from(_ceil, lambda t, s: max(1, t // s))),
    ("the last tile reads blocks past the context: it ends at min((t + 1) * tile_tokens, context_len)",
     _tiles_from(_ceil, _ceil, last=False)),
    ("programs read contiguous ranges of tiles, not every num_splits-th tile",
     _tiles_from(_ceil, _ceil, round_robin=True)),
    ("these are token positions (slots), not blocks: a tile's blocks run from start // block_size to "
     "(end - 1) // block_size", _tiles_blocks(lambda a, e, bs: list(range(a, e)))),
    ("one block too many where a tile ends on a block boundary: the tile's last position is end - 1, "
     "in block (end - 1) // block_size", _tiles_blocks(lambda a, e, bs: list(range(a // bs, e // bs + 1)))),
    ("each tile's last block is missing: range(first, last) stops before last; include it (last + 1)",
     _tiles_blocks(lambda a, e, bs: list(range(a // bs, (e - 1) // bs)))),
    ("blocks count from 0: position p is in block p // block_size",
     _tiles_blocks(lambda a, e, bs: list(range(a // bs + 1, (e - 1) // bs + 2)))),
    ("a tile that ends inside a block misses that block: its last block is (end - 1) // block_size, included "
     "(end // block_size is that block only when the tile ends on a boundary)",
     _tiles_blocks(lambda a, e, bs: list(range(a // bs, e // bs)))),
    ("tiles per program is a ceiling too (ceil(num_tiles / num_splits)): with a floor the last tiles are "
     "read by nobody (no tile at all when num_tiles < num_splits)", _tiles_from(_ceil, lambda t, s: t // s)),
    ("the tiles were counted in blocks: num_tiles = ceil(context_len / tile_tokens), a tile holds "
     "tile_tokens positions", lambda n, bs, tile, splits: _tiles_counted(_ceil(n, bs), n, bs, tile, splits)),
    ("one block per tile: a tile of tile_tokens positions spans tile_tokens // block_size blocks, from "   # review r5
     "start // block_size to (end - 1) // block_size; list each of them", _tiles_blocks(lambda a, e, bs: [a // bs])),
    # the review of 6b9afee: the right tiles, shared out by another rule
    ("one list for all the programs: num_splits was ignored; return num_splits lists, one a program, in split "
     "order (an empty one for a program that gets no tile)", lambda n, bs, tile, splits: _tiles_split(n, bs, tile, [n])),
    ("every tile went to program 0 and the others got none: the split rule is the same at every length (each "
     "program takes the same number of tiles, the fewest that covers them all; only the late ones get fewer)",
     lambda n, bs, tile, splits: _tiles_split(n, bs, tile, [n] + [0] * (splits - 1))),
    ("an even spread (num_tiles // num_splits each and one more for the first programs, as numpy.array_split): "
     "the kernel gives every program the same number, ceil(num_tiles / num_splits), so only the late programs "
     "get fewer, or none", lambda n, bs, tile, splits: _tiles_split(n, bs, tile, _even_counts(_ceil(n, tile), splits))),
    ("floor(num_tiles / num_splits) tiles each and the rest went to the last program: every program takes "
     "ceil(num_tiles / num_splits), so the first ones take more and only the late ones fewer",
     lambda n, bs, tile, splits: _tiles_split(n, bs, tile, [max(1, _ceil(n, tile) // splits)] * (splits - 1) + [n])),
    *[(f"tile_tokens was ignored: these are tiles of {fixed} tokens (a number written into the code?); a tile "
       f"holds tile_tokens positions", lambda n, bs, tile, splits, fixed=fixed:
       _tiles_counted(_ceil(n, fixed), n, bs, fixed, splits) if fixed != tile else None) for fixed in (4, 8, 16, 32, 64)],
    ("tile_tokens was ignored: these are tiles of one block (block_size tokens); a tile holds tile_tokens "
     "positions, several blocks", lambda n, bs, tile, splits: _tiles_counted(_ceil(n, bs), n, bs, bs, splits) if bs != tile else None),
])


def _tiles_split(n: int, bs: int, tile: int, counts: list[int]) -> list:
    """The right tiles of the context in loop order, shared out ``counts[i]`` to program i (a slice
    past the end is empty): the review's other rules for the split. (Not from kernel_tiles_reference:
    an answer may not call it, and the mistakes are run as answers in the tests.)"""
    tiles = _tiles_counted(_ceil(n, tile), n, bs, tile, 1)[0]
    out, start = [], 0
    for k in counts:
        out.append(tiles[start:start + k])
        start += k
    return out


def _even_counts(num_tiles: int, splits: int) -> list[int]:
    """``num_tiles`` spread as evenly as can be: q or q + 1 each, the first ones the bigger.

    >>> _even_counts(10, 3)
    [4, 3, 3]
    """
    q, r = divmod(num_tiles, splits)
    return [q + (s < r) for s in range(splits)]


def _tiles_counted(num: int, n: int, bs: int, tile: int, splits: int) -> list:
    """kernel_tiles as the solution writes it, with ``num`` tiles (a wrong count, e.g. in blocks)."""
    per = _ceil(num, splits)
    out = []
    for s in range(splits):
        tiles = []
        for t in range(s * per, min((s + 1) * per, num)):
            start, end = t * tile, min((t + 1) * tile, n)
            tiles.append(list(range(start // bs, (end - 1) // bs + 1)))
        out.append(tiles)
    return out


def _not_lists(expected, actual) -> str | None:
    """The right blocks, but as ranges, tuples or floats where the contract says lists of ints."""
    if isinstance(actual, list) and len(actual) == len(expected) and all(_num_like(x) for x in actual):
        return "one number a program: return each program's tiles, each the list of blocks it reads, not a count"
    try:
        floats = [[[b for b in t] for t in p] for p in actual]
        if floats == expected and any(isinstance(b, float) for p in actual for t in p for b in t):
            return "block numbers came back as floats: they are ints (use //, not /)"
    except TypeError:
        pass
    if len(actual) < len(expected) and actual == [p for p in expected if p]:
        return ("a program with no tile was left out: return one list per program, num_splits lists, "
                "an empty one for a program that reads nothing")
    if actual == expected[::-1] and expected != expected[::-1]:
        return "the programs are in reverse order: program 0 reads the first tiles"
    if actual == [[b for t in p for b in t] for p in expected]:
        return "one flat list a program: each program's list holds one list of blocks per tile, in loop order"
    try:
        if [[list(t) for t in p] for p in actual] == expected:
            return "the right blocks, but not as lists: each tile is a list of block numbers (list(range(...)))"
    except TypeError:
        return None
    return None


def _num_like(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def kernel_tiles(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(context_len, block_size, tile_tokens, num_splits) -> list`` (one list per
    program, its tiles in loop order, each the logical blocks it reads). Expected:
    :func:`kernel_tiles_reference`; the FAIL names the mistake when the answer is exactly one
    of :data:`TILE_MISTAKES`."""
    import random

    cases = [(18, 4, 8, 2), (18, 4, 4, 1), (5, 4, 4, 4), (1, 4, 64, 2), (64, 4, 64, 2), (65, 4, 64, 2),
             (300, 16, 64, 2), (300, 16, 64, 3), (37, 4, 4, 3), (100, 2, 8, 5), (30, 4, 64, 1), (7, 1, 2, 3)]
    rng = random.Random(5)
    for _ in range(6):
        bs = rng.choice([1, 2, 4, 8, 16])
        cases.append((rng.randint(1, 200), bs, bs * rng.choice([1, 2, 4]), rng.randint(1, 5)))
    cmp = lambda e, a: (isinstance(a, list) and all(isinstance(p, list) and all(isinstance(t, list) for t in p) for p in a)  # noqa: E731
                        and a == e and all(type(b) is int for p in a for t in p for b in t))
    fn = _own_refused(fn, TILES_OWN)    # wrapping the kernel view's kernel_access_order is no answer
    c = Checker("kernel_tiles", fn, reference=kernel_tiles_reference, verbose=verbose, compare=cmp, diagnose=[_not_lists])
    run = mistake_runner(c, TILE_MISTAKES)
    for n, bs, tile, splits in cases:
        run(f"context_len {n}, block_size {bs}, tile_tokens {tile}, num_splits {splits}", n, bs, tile, splits)
    return c.done()
