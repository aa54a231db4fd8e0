"""Checkers for lesson 06 (sharing): copy-on-write, and the blocks parallel sampling saves.

    cow_append        append one token with copy-on-write and ref counts
    sampling_blocks   blocks used by parallel sampling, with and without sharing

The expected results are measured on the real :class:`kvlab.memory.block_manager.BlockManager`
(``append``, ``fork``). A failing state lists only the fields that differ, and each FAIL names
the common mistake when it recognises it (a shared block written in place, a reference not
dropped, a full block copied...). Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> sampling_blocks(lambda p, n, g, bs: (0, 0), verbose=False).passed
    False
"""
from __future__ import annotations

import copy
import functools
import random
import sys
from typing import Any, Callable

from ..memory.block_manager import BlockManager
from ..memory.block_pool import OutOfBlocks
from ..lessons.sharing import measured_sampling_blocks
from ..memory.block_table import blocks_needed
from .diagnose import (exact_equal, mistake_runner, shared_block_written, should_have_raised, swapped,
                       ignored_parameter, unit_slip, wrong_exception)
from .harness import Checker, CheckResult, Raised, Raises, call_in_place, same_outcome

__all__ = ["cow_append", "sampling_blocks"]


def _random_manager(rng: random.Random, num_blocks: int, block_size: int) -> BlockManager:
    """A pool with a few sequences, some forked (shared blocks), built with the real allocator."""
    m = BlockManager(num_blocks=num_blocks, block_size=block_size)
    m.add_sequence("R1", rng.randint(1, 3 * block_size))
    for i in range(rng.randint(1, 3)):
        parent = rng.choice(sorted(m.tables))
        if m.allocator.num_free_blocks >= 2:
            m.fork(parent, f"R1.{i + 1}")
            if rng.random() < 0.5:
                try:
                    m.append(f"R1.{i + 1}", rng.randint(1, block_size + 1))
                except OutOfBlocks:
                    pass
    return m


def _cow_state(m: BlockManager, seq: str) -> dict:
    t = m.tables[seq]
    return {
        "block_table": list(t.block_ids),
        "ref_count": list(m.allocator.ref_count),
        "free_blocks": list(m.allocator.free_block_ids),
    }


def cow_append(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(block_table, num_tokens, ref_count, free_blocks, block_size) -> copies``.

    The contract (lesson 06): make room for ONE more token of a sequence whose blocks may
    be shared. ``block_table``, ``ref_count`` and ``free_blocks`` are lists changed in place;
    the free list is used from the front. Returns the copies to do, ``[]`` or ``[(src, dst)]``.
    Raise ``kvlab.OutOfBlocks`` (changing nothing) when a block is needed and none is free.
    The expected result is what ``BlockManager.append(seq_id, 1)`` does on the same state.
    """
    rng = random.Random(6)
    scenarios: list[tuple[str, BlockManager, str]] = []
    # Hand-made edge cases first: shared partial block, shared full block, private partial block.
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    scenarios.append(("shared partial last block (6 tokens, bs 4)", m, "B"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 8)
    m.fork("A", "B")
    scenarios.append(("shared FULL last block (8 tokens, bs 4)", m, "B"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 5)
    scenarios.append(("private partial last block", m, "A"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 0)
    scenarios.append(("empty sequence", m, "A"))
    m = BlockManager(num_blocks=8, block_size=4)
    m.add_sequence("A", 3)
    m.fork("A", "B")
    m.fork("A", "C")
    scenarios.append(("block shared three ways", m, "C"))
    for seed in range(8):
        bs = rng.choice([2, 4, 8])
        m = _random_manager(rng, num_blocks=rng.randint(10, 16), block_size=bs)
        seq = rng.choice(sorted(m.tables))
        scenarios.append((f"random pool seed {seed} (bs {bs}), append to {seq}", m, seq))
    # Out of blocks: a shared partial block and an empty free list.
    m = BlockManager(num_blocks=2, block_size=4)
    m.add_sequence("A", 6)
    m.fork("A", "B")
    scenarios.append(("no free block left (must raise OutOfBlocks)", m, "B"))
    for label, (num_blocks, bs, tokens, forks, seq) in {
            "last block full and no free block (must raise OutOfBlocks)": (2, 4, 8, 0, "A"),
            "private partial last block and no free block (no block needed: no error)": (2, 4, 5, 0, "A"),
            "block_size 1: every block is full, shared or not": (3, 1, 2, 1, "B")}.items():
        m = BlockManager(num_blocks=num_blocks, block_size=bs)
        m.add_sequence("A", tokens)
        for name in "BC"[:forks]:
            m.fork("A", name)
        scenarios.append((label, m, seq))

    c = Checker("cow_append", fn, verbose=verbose, diagnose=[_cow_mistake, shared_block_written])
    after_copy: list = []   # (case, its other name) where a rebound table and a missing copy look alike
    rebound_alone = False
    for label, m, seq in scenarios:
        before = _cow_state(m, seq)
        mine = copy.deepcopy(before)
        num_tokens, bs = m.tables[seq].num_tokens, m.block_size
        try:
            copies = m.append(seq, 1)
            expected: Any = dict(copies=copies, **_cow_state(m, seq))
        except OutOfBlocks:
            expected = Raises(OutOfBlocks)
        if c.unusable(label, expected):
            continue
        got = call_in_place(fn, mine["block_table"], num_tokens, mine["ref_count"], mine["free_blocks"], bs)
        if isinstance(got, Raised) or isinstance(expected, Raises):
            changed = mine != before
            c.record(label, expected, got, passed=same_outcome(expected, got) and not changed,
                     note=("it changed the lists before raising: a refused append must change nothing (check "
                           "free_blocks first)") if changed else _out_of_blocks_due(expected, got)
                     or _needless_raise(expected, got)
                     or _no_last_block(before, got)
                     or wrong_exception(expected, got)
                     or should_have_raised(expected, got)
                     or (next(iter(_cow_slips(before, num_tokens, bs, got)), "") if isinstance(got, Raised) else ""))
            continue
        copies = [tuple(x) if isinstance(x, (list, tuple)) else x for x in got] if isinstance(got, list) else got
        actual = dict(copies=copies, **mine)
        rebound = [] if actual == expected else _rebound(before, expected, actual)
        slips = [] if actual == expected else [*rebound, *_cow_slips(before, num_tokens, bs, actual)]
        case = c.record(label, expected, actual, note=slips[0] if slips else "")
        case.candidates = slips if len(slips) > 1 else case.candidates
        also = _cow_mistake(expected, actual) if rebound else None   # the same state from another slip
        if also:
            after_copy.append((case, also))
        rebound_alone = rebound_alone or bool(rebound and not also)
    if not rebound_alone:   # the table was kept only where a copy was due: a missing block_table[-1] = dst
        for case, also in after_copy:
            case.note, case.candidates = also, []
    return c.done()


def _out_of_blocks_due(expected: Any, got: Any) -> str:
    """Another exception where the pool ran out: OutOfBlocks is the error to raise (not a bad argument)."""
    if isinstance(expected, Raises) and isinstance(got, Raised) and not isinstance(got.exc, OutOfBlocks) \
            and not isinstance(got.exc, NotImplementedError):
        return (f"raised {type(got.exc).__name__} where OutOfBlocks is due: the arguments are fine, the pool is "
                "out of blocks (free_blocks is empty), so raise kvlab.OutOfBlocks, changing nothing")
    return ""


def _needless_raise(expected: Any, got: Any) -> str:
    """OutOfBlocks raised where no block is needed (a private partial last block, the pool empty)."""
    if isinstance(expected, dict) and not expected["copies"] and isinstance(got, Raised) \
            and isinstance(got.exc, OutOfBlocks):
        return ("raised OutOfBlocks where no block is needed: the last block is partial and private, so the token "
                "is written in place; an empty free_blocks is an error only when a block must be taken")
    return ""


def _no_last_block(before: dict, got: Any) -> str:
    """An IndexError on an empty block table: the answer read its last block, and an empty sequence has none."""
    if not before["block_table"] and isinstance(got, Raised) and isinstance(got.exc, IndexError):
        return ("the sequence had no tokens, so it has no last block to read: its first token needs a fresh "
                "block from the free list (look at the last block only when there is one)")
    return ""


def _rebound(before: dict, expected: dict, actual: dict) -> list[str]:
    """``block_table = ...`` (a new list): the caller's table is unchanged while the counts moved as due."""
    if actual["block_table"] == before["block_table"] != expected["block_table"] \
            and actual["ref_count"] == expected["ref_count"] and actual["free_blocks"] == expected["free_blocks"]:
        return ["block_table was rebound to a new list the caller never sees: change the caller's list in place "
                "(its last entry replaced, or a block added at its end), as ref_count and free_blocks were"]
    return []


def _cow_variant(bt: list, n: int, rc: list, free: list, bs: int, slip: str) -> list:
    """cow_append with one student slip switched on (``slip``; "" is the right answer), for naming."""
    full = (n + (slip == "full_off")) % bs == 0
    if slip == "share_first" and bt and rc[bt[-1]] > 1 and n % bs == 0:
        full = False
    if full:
        src = bt[-1] if bt else None
        copies = []
        if slip == "copy_full_too" and src is not None and rc[src] > 1:
            dst = free.pop(0)
            rc[dst], rc[src], bt[-1] = 1, rc[src] - 1, dst
            copies = [(src, dst)]
        if slip == "drop_full_ref" and src is not None:
            rc[src] -= 1
        b = free.pop(0)
        rc[b] = 1
        bt.append(b)
        return copies
    src = bt[-1]
    if rc[src] == 1:
        return []
    dst = free.pop(0)
    rc[dst], bt[-1] = 1, dst
    rc[src] -= 1
    return [(dst, src)] if slip == "swap_pair" else [(src, dst)]


COW_SLIPS = {
    "share_first": "the last block was full: it is never written again, shared or not, so take a fresh block "
                   "and copy nothing (ask 'is it full?' before 'is it shared?')",
    "copy_full_too": "the last block was full: the fresh block is all it needs; copying the full shared block too "
                     "wastes a block (a full block is never written again, so nothing is copied)",
    "drop_full_ref": "a full last block stays in the table: taking a fresh block after it drops no reference "
                     "(ref_count changes only for the block taken, and for a block copied)",
    "full_off": "off by one on 'is the last block full?': num_tokens counts the tokens already held, not the one "
                "being added, so the block is full when the tokens held fill it exactly",
    "swap_pair": "a copy is (src, dst): the shared block first, then the fresh block it is copied into",
}


def _cow_slips(before: dict, num_tokens: int, bs: int, actual: Any) -> list[str]:
    """The slips of :data:`COW_SLIPS` whose outcome on ``before`` is the learner's (state or exception)."""
    found = []
    for slip, note in COW_SLIPS.items():
        s = copy.deepcopy(before)
        try:
            copies = _cow_variant(s["block_table"], num_tokens, s["ref_count"], s["free_blocks"], bs, slip)
        except (IndexError, OutOfBlocks) as e:
            if isinstance(actual, Raised) and type(actual.exc) is type(e) and slip == "full_off":
                found.append(note)
            continue
        if dict(copies=copies, **s) == actual:
            found.append(note)
    return found


def _cow_mistake(expected: Any, actual: Any) -> str | None:
    """The usual copy-on-write mistakes, read from the expected and actual states."""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return None
    e_cp, a_cp = expected.get("copies"), actual.get("copies")
    if not isinstance(a_cp, list):
        if isinstance(a_cp, tuple) and len(a_cp) == 2 and all(isinstance(x, int) for x in a_cp):
            return f"returned the pair {a_cp} itself: return a LIST of copies, [{a_cp}] ([] when nothing is copied)"
        what = "None (a missing return?)" if a_cp is None else f"a {type(a_cp).__name__}"
        return f"returned {what}: return a list of (src, dst) copies, [] or [(src, dst)]"
    if actual.get("block_table") == [] and len(expected["block_table"]) == 1 and not e_cp:
        return ("the sequence had no tokens, so it has no last block to write into: its first token needs a "
                "fresh block from the free list")
    et, at, free = expected["block_table"], actual.get("block_table", []), expected["free_blocks"]
    kept = [b for b in at if b in actual.get("free_blocks", [])]
    if kept:
        return (f"the block you took, P{kept[0]}, is still in free_blocks: take it out of the free list "
                "(from its front), or the next request gets it too")
    src = e_cp[0][0] if e_cp else None
    if src is not None and len(at) == len(et) + 1 and at[:-2] == et[:-1] and at[-2:] == [src, et[-1]]:
        return (f"the copy P{et[-1]} replaces the shared block P{src} in the table, it is "
                "not appended after it: the table now holds one block too many")
    arc = actual.get("ref_count", [])
    if src is not None and len(arc) > src and arc[src] == 0 < expected["ref_count"][src]:
        return (f"the copied block P{src} is still held by the other tables: drop ONE reference (this table's), "
                "not all of them")
    if not e_cp and a_cp:
        if len(at) < len(et):
            return "the last block was full: it is never written again, so take a fresh block (no copy)"
        return "the last block had no other holder: the last holder writes in place, no copy"
    if e_cp and a_cp and at == et:
        src = e_cp[0][0]
        if actual["ref_count"][src] == expected["ref_count"][src] + 1:
            return f"the copied block P{src} kept this table's reference: the table no longer holds it, so its count drops by one"
    if a_cp and e_cp and at and et and at[-1] == e_cp[0][0]:
        return (f"you returned the copy {a_cp[0]} but the table still points at the shared block P{at[-1]}: "
                "the sequence must write into its copy")
    if at and et and at[-1] == et[-1] and len(arc) > at[-1] and arc[at[-1]] != expected["ref_count"][et[-1]]:
        return (f"the block you took, P{at[-1]}, has ref_count {arc[at[-1]]}: only this table holds it, so its "
                "count is 1")
    if free and at and et and at[-1] != et[-1] and at[-1] == free[-1]:
        return "take the FIRST free block (the front of free_blocks), not the last"
    return None


# ----------------------------------------------------------------- memory saved by sharing
def sampling_blocks(fn: Callable, verbose: bool = True) -> CheckResult:
    """Grade ``fn(prompt_len, num_samples, gen_len, block_size) -> (without_sharing, with_sharing)``.

    The expected numbers are measured on the real allocator (:func:`measured_sampling_blocks`).
    """
    cases_in = [(10, 4, 5, 4), (8, 4, 5, 4), (10, 4, 0, 4), (1, 1, 1, 4), (16, 3, 16, 16),
                (17, 2, 15, 16), (100, 8, 37, 16), (5, 6, 3, 1)]
    rng = random.Random(66)
    for _ in range(4):
        cases_in.append((rng.randint(1, 60), rng.randint(1, 8), rng.randint(0, 40), rng.choice([2, 4, 8, 16])))
    c = Checker("sampling_blocks", fn, reference=_measured, verbose=verbose,
                compare=lambda e, a: isinstance(a, tuple) and exact_equal(e, a),
                diagnose=[_not_a_pair, lambda e, a: swapped(e, a, ("without sharing", "with sharing")), unit_slip])
    simulated = _simulation_used(fn, cases_in[0])
    if simulated:
        c.record("a formula, not a simulation", "no allocator call", f"called {simulated}", passed=False,
                 note=(f"it called {simulated}, which runs kvlab's allocator: the exercise asks for a formula in "
                       "prompt_len, num_samples, gen_len and block_size (count the blocks, do not simulate them)"))
    run = mistake_runner(c, SAMPLING_MISTAKES)
    base = c.diagnose
    for p, n, g, bs in cases_in:
        c.diagnose = [*base, lambda e, a, x=(p, n, g, bs): ignored_parameter(
            _measured, x, a, ("prompt_len", "num_samples", "gen_len", "block_size"), values=(0, 1, 2, 4, 8, 16))]
        run(f"prompt {p}, {n} samples, {g} new tokens each, block_size {bs}", p, n, g, bs)
    return c.done()


def _simulation_used(fn: Callable, args: tuple) -> str:
    """The simulation ``fn(*args)`` ran ('' for none): ``measured_sampling_blocks`` or a
    :class:`BlockManager` call, seen by a profile hook during the call (the exercise asks for a formula).

        >>> _simulation_used(measured_sampling_blocks, (10, 4, 5, 4))
        'measured_sampling_blocks'
    """
    codes = {measured_sampling_blocks.__code__: "measured_sampling_blocks",
             **{getattr(BlockManager, m).__code__: f"BlockManager.{m}" for m in ("add_sequence", "fork", "append")}}
    seen: list[str] = []

    def hook(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code in codes and not seen:
            seen.append(codes[frame.f_code])
    old = sys.getprofile()
    sys.setprofile(hook)
    try:
        call_in_place(fn, *args)
    finally:
        sys.setprofile(old)
    return seen[0] if seen else ""


def _not_a_pair(expected: Any, actual: Any) -> str | None:
    """A single number (or None) where the pair (without_sharing, with_sharing) is due; a list
    where the tuple is due."""
    if isinstance(actual, list) and len(actual) == 2 and exact_equal(expected, tuple(actual)):
        return f"returned the list {actual!r}: return a tuple, (without_sharing, with_sharing)"
    if isinstance(actual, (tuple, list)) and len(actual) == 2:
        return None
    return f"returned {type(actual).__name__} {actual!r}: return both counts, (without_sharing, with_sharing)"


@functools.lru_cache(maxsize=4096)
def _measured(prompt_len: int, num_samples: int, gen_len: int, block_size: int) -> tuple[int, int]:
    """:func:`measured_sampling_blocks`, remembered: the diagnoses ask for the same runs again and a
    wrong answer must be graded in well under a second."""
    return measured_sampling_blocks(prompt_len, num_samples, gen_len, block_size)


def _with_sharing(p: int, n: int, g: int, bs: int, shared: int) -> tuple[int, int]:
    """(without, with) sharing when ``shared`` prompt blocks stay shared and the rest is per sample."""
    alone = blocks_needed(p + g, bs)
    return n * alone, shared + n * (alone - shared)


def _kept_partial(p: int, n: int, g: int, bs: int) -> tuple[int, int]:
    """The answer that keeps the prompt's partial block beside every sample's copy: one block too many."""
    without, with_sharing = _with_sharing(p, n, g, bs, p // bs)
    return (without, with_sharing + 1) if g and p % bs else _measured(p, n, g, bs)


SAMPLING_MISTAKES = dict([
    ("a sample holds whole blocks: round its tokens UP to blocks (ceil), not down, with sharing and without",
     lambda p, n, g, bs: (n * ((p + g) // bs), p // bs + n * ((p + g) // bs - p // bs)) if g else
     (n * ((p + g) // bs), p // bs)),
    ("with sharing: a sample's own blocks are its whole blocks, rounded UP (ceil), minus the full prompt blocks",
     lambda p, n, g, bs: (n * blocks_needed(p + g, bs), p // bs + n * ((p + g) // bs - p // bs)) if g else
     _measured(p, n, g, bs)),
    ("the second number is the blocks held WITH sharing, not the blocks saved",
     lambda p, n, g, bs: (_measured(p, n, g, bs)[0], _measured(p, n, g, bs)[0] - _measured(p, n, g, bs)[1])),
    ("with sharing: count blocks, not tokens (the prompt's blocks once, then each sample's own blocks)",
     lambda p, n, g, bs: (_measured(p, n, g, bs)[0], p + n * g)),
    ("with sharing: every sample holds its own blocks for its new tokens, the first sample too (n, not n - 1)",
     lambda p, n, g, bs: (n * blocks_needed(p + g, bs), p // bs + (n - 1) * (blocks_needed(p + g, bs) - p // bs))
     if g else _measured(p, n, g, bs)),
    ("without sharing: count each sample's blocks (a partial block is a whole block), not its tokens",
     lambda p, n, g, bs: (n * (p + g), _measured(p, n, g, bs)[1])),
    ("without sharing: a sample needs whole blocks: round its tokens UP to blocks (ceil), not down",
     lambda p, n, g, bs: (n * ((p + g) // bs), _measured(p, n, g, bs)[1])),
    ("without sharing: a sample needs whole blocks: round its tokens up to blocks, / gives a fraction",
     lambda p, n, g, bs: (n * (p + g) / bs, _measured(p, n, g, bs)[1])),
    ("when no token is generated nothing is copied yet: every block is still shared (gen_len == 0)",
     lambda p, n, g, bs: _with_sharing(p, n, g, bs, p // bs)),
    ("the partial last prompt block does not stay shared: every sample but one copies it when it writes",
     lambda p, n, g, bs: _with_sharing(p, n, g, bs, blocks_needed(p, bs))),
    ("with sharing: no extra block for the partial prompt block: the last sample to write into it is its last "
     "holder and writes in place (exercise 1's rule), so it is not kept beside the n copies",
     lambda p, n, g, bs: _kept_partial(p, n, g, bs)),
    ("each sample's new tokens first fill its own copy of the partial prompt block: its own blocks hold the "
     "prompt's leftover tokens and its new tokens together, not its new tokens alone",
     lambda p, n, g, bs: (n * blocks_needed(p + g, bs), blocks_needed(p, bs) + n * blocks_needed(g, bs))),
    ("each sample holds its own blocks for its new tokens: they are not pooled across samples",
     lambda p, n, g, bs: (n * blocks_needed(p + g, bs), blocks_needed(p, bs) + blocks_needed(n * g, bs))),
    ("prompt and answer are not in separate blocks: the new tokens fill the prompt's partial last block first, "
     "so a sample's prompt and answer are rounded up to blocks together, not each on its own",
     lambda p, n, g, bs: (n * (blocks_needed(p, bs) + blocks_needed(g, bs)),
                          blocks_needed(p, bs) + n * blocks_needed(g, bs))),
    ("without sharing: prompt and answer are not in separate blocks: a sample's new tokens fill the prompt's "   # r5
     "partial last block first, so its prompt and answer are rounded up to blocks together, not each on its own",
     lambda p, n, g, bs: (n * (blocks_needed(p, bs) + blocks_needed(g, bs)), _measured(p, n, g, bs)[1])),
    ("count blocks, not token slots: do not multiply the block counts by block_size",
     lambda p, n, g, bs: (bs * _measured(p, n, g, bs)[0], _measured(p, n, g, bs)[1])),
    ("count blocks, not token slots: do not multiply the block counts by block_size (both counts)",
     lambda p, n, g, bs: tuple(bs * x for x in _measured(p, n, g, bs))),
    ("gen_len == 0: the samples still hold the prompt's blocks once, not nothing",
     lambda p, n, g, bs: (_measured(p, n, g, bs)[0], 0) if g == 0 else _measured(p, n, g, bs)),
    ("gen_len == 0: every block is still shared, so the prompt's blocks count once, not once per sample",
     lambda p, n, g, bs: (_measured(p, n, g, bs)[0],) * 2 if g == 0 else _measured(p, n, g, bs)),
    ("x // block_size + 1 is not a ceiling (one block too many when x fills its blocks exactly), and the "
     "rounding up is per sample (each sample its own blocks), not of all the samples' tokens at once",
     lambda p, n, g, bs: (n * (p + g) // bs + 1, _measured(p, n, g, bs)[1])),
    ("x // block_size + 1 is not a ceiling: it is one block too many when x fills its blocks exactly; "
     "round up to whole blocks instead",
     lambda p, n, g, bs: (n * ((p + g) // bs + 1), _measured(p, n, g, bs)[1])),
    ("with sharing: one shared prompt block too few when the prompt fills its last block exactly: a full "
     "prompt block is never written, so it stays shared however the prompt ends",
     lambda p, n, g, bs: _with_sharing(p, n, g, bs, (p - 1) // bs) if g else _measured(p, n, g, bs)),
    ("without sharing: each sample holds its prompt AND its gen_len new tokens in blocks of its own, not its "
     "prompt alone",
     lambda p, n, g, bs: (n * blocks_needed(p, bs), _measured(p, n, g, bs)[1])),
    ("without sharing: every sample has blocks of its own: round up per sample, not the pooled tokens of all "
     "samples",
     lambda p, n, g, bs: (blocks_needed(n * (p + g), bs), _measured(p, n, g, bs)[1])),
    ("with sharing: one block too few: the full prompt blocks count once, then EVERY sample holds its own "
     "blocks from there (its copy of a partial prompt block included)",
     lambda p, n, g, bs: (_measured(p, n, g, bs)[0], _measured(p, n, g, bs)[1] - 1)),
])
