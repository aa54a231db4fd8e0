"""Checkers for lesson 03 (contiguous allocation, the pre-vLLM baseline).

    reservation             slots a request reserves up front under a policy (max, pow2, exact)
    first_fit               the lowest-address free range that is long enough
    external_fragmentation  free slots outside the largest free range
    place_first_fit         place a sequence of requests first-fit: where each went, who was
                            refused, the largest hole left and the share of free memory stranded

The expected answers come from :class:`kvlab.memory.contiguous.ContiguousArena`. Each checker
names the common mistake when a wrong answer matches it. Mirrors no vLLM or SGLang file (exercises).

Example:
    >>> external_fragmentation(lambda ranges: sum(n for _, n in ranges), verbose=False).passed
    False
"""
from __future__ import annotations

import math
import random
from typing import Callable

from ..memory.contiguous import ContiguousArena, OutOfContiguousSpace
from .diagnose import mistake_runner, should_have_raised
from .harness import Checker, CheckResult, Raised, same_int

__all__ = ["reservation", "first_fit", "external_fragmentation", "place_first_fit"]


def _reservation_ref(policy: str, length: int, max_len: int, final_len: int | None = None) -> int:
    if not 1 <= length <= max_len:
        raise ValueError(f"length {length} must be in [1, max_len {max_len}]")
    arena = ContiguousArena(capacity=max_len, policy=policy, max_len=max_len)  # ValueError for a bad policy
    return arena.reservation_for(length, final_len)


def reservation(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(policy, length, max_len, final_len=None) -> int`` slots reserved up front.

    policy "max": max_len; "pow2": the next power of two >= length, capped at max_len;
    "exact": final_len (ValueError when final_len is None). ValueError for another
    policy or a length outside [1, max_len].
    """
    c = Checker("reservation", fn, _reservation_ref, verbose=verbose, compare=same_int,
                diagnose=[should_have_raised, _pow2_slip])
    run = mistake_runner(c, {
        "pow2 must not exceed max_len: no request reserves more than the longest one allowed":
            lambda p, n, m, f=None: 1 << (n - 1).bit_length() if p == "pow2" else _reservation_ref(p, n, m, f),
        "pow2: a length that is a power of two is its own next power of two (8 -> 8, not 16)":
            lambda p, n, m, f=None: min(1 << n.bit_length(), m) if p == "pow2" else _reservation_ref(p, n, m, f),
        "'max' reserves max_len whatever the length": lambda p, n, m, f=None: n if p == "max" else _reservation_ref(p, n, m, f),
        "float log2: math.log2 rounds a huge length (2**53 + 1 comes out as 53.0), so the power of two is too small: "
        "find it with integers only (the length's bits)": _pow2_by_float_log2,
    })
    for policy, length, max_len, final in [
        ("max", 10, 2048, None), ("max", 2048, 2048, None), ("pow2", 1600, 1600, None), ("exact", 512, 512, 512),
        ("pow2", 5, 2048, None), ("pow2", 8, 2048, None), ("pow2", 9, 2048, None), ("pow2", 1, 2048, None),
        ("pow2", 1500, 2048, None), ("pow2", 1500, 1600, None),
        ("pow2", 1025, 1 << 20, None), ("pow2", 1500, 1 << 20, None), ("pow2", 5000, 1 << 20, None),
        ("pow2", 4096, 1 << 16, None), ("pow2", 2**53 + 1, 2**60, None), ("pow2", 2**40 + 3, 2**60, None),
        ("exact", 10, 2048, 300), ("exact", 10, 2048, 10),
    ]:
        case = run(f"policy={policy!r}, length={length}, max_len={max_len}" + (f", final_len={final}" if final else ""),
                   policy, length, max_len, final)
        if length == max_len and isinstance(case.actual, Raised) and isinstance(case.actual.exc, ValueError):
            case.note = ("a length equal to max_len was refused: the range [1, max_len] includes max_len "
                         "(length <= max_len, not <)")
    for policy, length, max_len, final in [("pow2", 3000, 2048, None), ("exact", 2049, 2048, 2049),
                                           ("pow2", 0, 2048, None), ("exact", 0, 2048, 5), ("max", 2049, 2048, None)]:
        c.run(f"policy={policy!r}, length={length} outside [1, {max_len}] (must raise ValueError, whatever the policy)",
              policy, length, max_len, final)
    c.run("policy 'exact' without final_len (must raise ValueError)", "exact", 10, 2048, None)
    c.run("unknown policy 'best' (must raise ValueError)", "best", 10, 2048, None)
    c.run("unknown policy 'best' with a final_len (must raise ValueError, not act as 'exact')", "best", 10, 2048, 300)
    c.run("length=0 (must raise ValueError)", "max", 0, 2048, None)
    return c.done()


def _is_pow2(x: object) -> bool:
    return type(x) is int and x > 0 and x & (x - 1) == 0


def _pow2_slip(expected: object, actual: object) -> str | None:
    """A power-of-two reservation answered wrong (checked after the exercise's named mistakes)."""
    if not _is_pow2(expected) or type(actual) is not int or actual == expected:
        return None
    if not _is_pow2(actual):
        return (f"{actual} is not a power of two: pow2 reserves the smallest power of two >= the length "
                f"({expected} here), however long the request (above 1024 too); only max_len caps it")
    return (f"{actual} is a power of two, but not the smallest one >= the length ({expected}): that holds "
            "for every length (above 1024 too); only max_len caps it")


def _pow2_by_float_log2(policy: str, length: int, max_len: int, final_len: int | None = None) -> int:
    if policy != "pow2" or not 1 <= length <= max_len:
        return _reservation_ref(policy, length, max_len, final_len)
    return min(1 << math.ceil(math.log2(length)), max_len)


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
    c = Checker("first_fit", fn, _first_fit_ref, verbose=verbose, diagnose=[should_have_raised])

    def best(ranges, n):
        fits = [(length, s) for s, length in ranges if length >= n]
        return min(fits)[1] if fits else None

    def worst(ranges, n):
        fits = [(-length, s) for s, length in ranges if length >= n]
        return min(fits)[1] if fits else None

    run = mistake_runner(c, {
        "that is best fit (the smallest hole that fits): first fit takes the first hole, in address order": best,
        "that is worst fit (the largest hole): first fit takes the first hole that is long enough, in address order":
            worst,
        "only the first hole was tried: when it is too short, look at the next ones, in address order":
            lambda r, n: r[0][0] if r and r[0][1] >= n else None,
        "a hole exactly n long fits too (length >= n)": lambda r, n: next((s for s, ln in r if ln > n), None),
        "you added up the holes (the notes' slip): a request needs ONE hole that is long enough":
            lambda r, n: r[0][0] if r and sum(ln for _, ln in r) >= n else None,
        "that is the hole's index in the list: return its start address (the first number of the pair)":
            lambda r, n: next((i for i, (_, ln) in enumerate(r) if ln >= n), None),
        "that is where the request's last n slots would begin (the hole's end minus n): return the start of "
        "the hole (the first number of the pair)": lambda r, n: next((s + ln - n for s, ln in r if ln >= n), None),
    })
    notes = [(0, 4096), (10240, 2048)]  # the notes' arena after A finished: holes of 4096 and 2048
    run("the notes' holes, D needs 8192", notes, 8192)
    run("the notes' holes, 6144 (all free space, but split)", notes, 6144)
    run("the notes' holes, 4096 fits exactly in the first", notes, 4096)
    run("the notes' holes, 3000", notes, 3000)
    run("first hole too small, second fits", [(0, 10), (50, 100)], 20)
    run("exact fit in a later hole", [(0, 10), (50, 20), (90, 40)], 20)
    run("a big hole first, a snug one later", [(0, 100), (300, 25)], 20)
    run("no free space", [], 1)
    rng = random.Random(4)
    for seed in range(4):
        ranges = _random_free_ranges(rng)
        n = rng.randrange(1, 320)
        run(f"random seed {seed}: {len(ranges)} holes, n={n}", ranges, n)
    c.run("n=0 (must raise ValueError)", notes, 0)
    return c.done()


def _external_fragmentation_ref(free_ranges: list[tuple[int, int]]) -> int:
    return sum(n for _, n in free_ranges) - max((n for _, n in free_ranges), default=0)


def external_fragmentation(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(free_ranges) -> int``: free slots outside the largest free range (0 when <= 1 range)."""
    c = Checker("external_fragmentation", fn, _external_fragmentation_ref, verbose=verbose, compare=same_int)
    run = mistake_runner(c, {
        "that is all the free space: subtract the largest hole (a request can use that one)": lambda r: sum(n for _, n in r),
        "that counted the holes (how many beside the largest): the answer counts free SLOTS, those outside the "
        "largest hole": lambda r: max(len(r) - 1, 0),
        "subtract the LARGEST hole, not the first": lambda r: sum(n for _, n in r) - r[0][1] if r else 0,
        "subtracted the SMALLEST hole: subtract the LARGEST one (a request can use that one)":
            lambda r: sum(n for _, n in r) - min((n for _, n in r), default=0),
        "subtracted the LAST hole: subtract the LARGEST one, wherever it lies":
            lambda r: sum(n for _, n in r) - r[-1][1] if r else 0,
        "that is the largest hole itself: the answer is the free space outside it":
            lambda r: max((n for _, n in r), default=0),
        "that is a percentage of the free space: the answer is a number of slots":
            lambda r: 100 * _external_fragmentation_ref(r) / sum(n for _, n in r) if r else 0,
        "that is a share of the free space: the answer is a number of slots":
            lambda r: _external_fragmentation_ref(r) / sum(n for _, n in r) if r else 0,
        "every hole tied for the largest was left out: subtract ONE largest hole; another of the same size "
        "is stranded too": lambda r: sum(n for _, n in r if n != max(m for _, m in r)) if r else 0,
        "that used each hole's start, not its length: the pairs are (start, length)":
            lambda r: sum(s for s, _ in r) - max(s for s, _ in r) if r else 0,
        "that is the largest minus the smallest hole: add up every hole except the largest one":
            lambda r: max(n for _, n in r) - min(n for _, n in r) if len(r) > 1 else 0,
    })
    arena = ContiguousArena(capacity=12288, policy="exact", max_len=12288)
    for rid, n in [("A", 4096), ("B", 2048), ("C", 4096)]:
        arena.admit(rid, n, final_len=n)
    arena.finish("A")
    assert arena.stats().external_fragmentation == _external_fragmentation_ref(arena.free_ranges())
    run("the notes' arena after A finished (kvlab's ContiguousArena)", arena.free_ranges())
    run("one hole", [(0, 100)])
    run("no free space", [])
    run("three equal holes", [(0, 10), (20, 10), (40, 10)])
    run("largest hole last", [(0, 5), (10, 7), (20, 50)])
    run("largest hole in the middle", [(0, 6), (10, 40), (60, 9)])
    rng = random.Random(5)
    for seed in range(3):
        ranges = _random_free_ranges(rng)
        run(f"random seed {seed}: {len(ranges)} holes", ranges)
    return c.done()


# ------------------------------------------------------------------ a whole trace, first fit
def _place_ref(capacity: int, ops: list[tuple]) -> dict:
    """kvlab's ContiguousArena (first fit, exact sizes) runs the trace."""
    return _place_run(capacity, ops)[0]


def _place_run(capacity: int, ops: list[tuple]) -> tuple[dict, int, set[str]]:
    """The expected result, the free slots at the end and the ids still placed then."""
    if capacity < 1:
        raise ValueError(f"capacity must be >= 1, got {capacity}")
    arena = ContiguousArena(capacity=capacity, policy="exact", max_len=capacity)
    starts: dict[str, int] = {}
    refused: list[str] = []
    for op in ops:
        if op[0] == "admit":
            rid, n = op[1], op[2]
            if n < 1:
                raise ValueError(f"admit {rid}: size must be >= 1, got {n}")
            if rid in arena.requests:
                raise ValueError(f"admit {rid}: it is already placed")
            try:
                if n > capacity:
                    raise OutOfContiguousSpace(n, arena.free_tokens, arena.largest_free_range, rid)
                starts[rid] = arena.admit(rid, n, final_len=n).start
            except OutOfContiguousSpace:
                refused.append(rid)
        elif op[0] == "finish":
            if op[1] in arena.requests:
                arena.finish(op[1])
        else:
            raise ValueError(f"unknown operation {op[0]!r} (admit or finish)")
    arena.check_integrity()
    st = arena.stats()
    return {"starts": starts, "refused": refused, "largest_hole": st.largest_free_range,
            "wasted_share": (st.free - st.largest_free_range) / st.free if st.free else 0.0}, st.free, set(arena.requests)


def _simulate(capacity: int, ops: list[tuple], fit: str = "first", coalesce: bool = True, bump: bool = False,
              remainder_back: bool = False) -> dict:
    """The trace done the ways learners get it wrong (for the diagnoses): best fit, holes never
    merged, a bump allocator that never reuses a hole, or a split hole's remainder put at the back
    of the list (first fit then takes the first hole in list order, no longer address order)."""
    holes = [(0, capacity)]  # (start, length), address order
    live: dict[str, tuple[int, int]] = {}
    starts, refused, end = {}, [], 0
    for op in ops:
        if op[0] == "admit":
            rid, n = op[1], op[2]
            if bump:
                ok = end + n <= capacity
                s = end if ok else None
            else:
                fits = [(ln, st) for st, ln in holes if ln >= n]
                s = (min(fits)[1] if fit == "best" else fits[0][1]) if fits else None  # fits: in list order
            if s is None:
                refused.append(rid)
                continue
            starts[rid], live[rid] = s, (s, n)
            end = max(end, s + n)
            if not bump:
                i = next(i for i, (st, _) in enumerate(holes) if st == s)
                st, ln = holes[i]
                holes[i:i + 1] = [] if remainder_back else [(st + n, ln - n)] if ln > n else []
                holes += [(st + n, ln - n)] if remainder_back and ln > n else []
        elif op[1] in live:
            s, n = live.pop(op[1])
            holes = sorted(holes + [(s, n)])
            if coalesce:
                merged: list[tuple[int, int]] = []
                for st, ln in holes:
                    if merged and merged[-1][0] + merged[-1][1] == st:
                        merged[-1] = (merged[-1][0], merged[-1][1] + ln)
                    else:
                        merged.append((st, ln))
                holes = merged
    if bump:
        holes = [(end, capacity - end)] if end < capacity else []
    free = sum(ln for _, ln in holes)
    largest = max((ln for _, ln in holes), default=0)
    return {"starts": starts, "refused": refused, "largest_hole": largest,
            "wasted_share": (free - largest) / free if free else 0.0}


def _same_placement(expected: dict, actual) -> bool:
    if not isinstance(actual, dict) or set(actual) != set(expected):
        return False
    share = actual["wasted_share"]
    ok_share = isinstance(share, (int, float)) and abs(share - expected["wasted_share"]) < 1e-9
    return ok_share and same_int(expected["largest_hole"], actual["largest_hole"]) and all(
        actual[k] == expected[k] for k in ("starts", "refused"))


def _trace_ops(rng: random.Random, capacity: int) -> list[tuple]:
    ops, live, k = [], [], 0
    for _ in range(rng.randrange(6, 14)):
        if live and rng.random() < 0.4:
            ops.append(("finish", live.pop(rng.randrange(len(live)))))
        else:
            k += 1
            ops.append(("admit", f"R{k}", rng.randrange(1, capacity // 3)))
            live.append(f"R{k}")
    return ops


def place_first_fit(fn: Callable, verbose: bool = True) -> CheckResult:
    """``fn(capacity, ops) -> {"starts", "refused", "largest_hole", "wasted_share"}``.

    ``ops``: ``("admit", rid, n)`` places a request of ``n`` slots at the start of the first
    hole (lowest address) that holds it, or refuses it (it takes no space; its later finish is
    ignored); ``("finish", rid)`` frees its range (a hole merges with free neighbours). Returns
    where each placed request started, the refused ids in order, the largest hole at the end and
    the share of free memory outside it (0.0 when nothing is free: no free slots, nothing stranded).
    A refused id may be admitted again later: it is placed if a hole then holds it (each refusal
    is listed). ValueError for a size below 1, a request admitted twice while placed, or an
    unknown operation.
    """
    c = Checker("place_first_fit", fn, _place_ref, verbose=verbose, compare=_same_placement,
                diagnose=[should_have_raised, _share_rounded])
    run = mistake_runner(c, _place_mistakes())
    run = _naming_raised(_naming_no_free(run))
    notes = [("admit", "A", 4096), ("admit", "B", 2048), ("admit", "C", 4096), ("finish", "A"),
             ("admit", "D", 8192), ("admit", "E", 3000)]
    run("the notes: A, B, C; A finishes; D (8,192) is refused; E (3,000) goes where A was", 12288, notes)
    run("two neighbours finish: their ranges make one hole of 20",
        60, [("admit", "A", 10), ("admit", "B", 10), ("admit", "C", 10), ("finish", "A"), ("finish", "B"),
             ("admit", "D", 15)])
    run("first fit, not best fit: a big hole first, a snug one later",
        100, [("admit", "A", 30), ("admit", "B", 20), ("admit", "C", 12), ("admit", "X", 38), ("finish", "A"),
              ("finish", "C"), ("admit", "D", 12)])
    run("a split hole's remainder keeps its place: D goes right after C, in what is left of A's hole",
        30, [("admit", "A", 10), ("admit", "B", 5), ("finish", "A"), ("admit", "C", 4), ("admit", "D", 3)])
    run("a refused request takes no space, and its finish is ignored",
        50, [("admit", "A", 30), ("admit", "B", 30), ("finish", "B"), ("admit", "C", 20)])
    run("everything fits, nothing is free", 30, [("admit", "A", 10), ("admit", "B", 20)])
    run("a request bigger than the arena is refused", 30, [("admit", "A", 31), ("admit", "B", 5)])
    rng = random.Random(13)
    for seed in range(4):
        cap = rng.choice([64, 100, 256])
        ops = _trace_ops(rng, cap)
        run(f"random seed {seed}: {len(ops)} operations in {cap} slots", cap, ops)
    run("three holes, the last two neighbours: the freed range merges with the hole before it, not the first",
        50, [("admit", k, n) for k, n in zip("ABCDE", (5, 10, 10, 10, 15))]
        + [("finish", "A"), ("finish", "C"), ("finish", "D"), ("admit", "G", 20)])
    run("a request admitted again after it finished", 20, [("admit", "A", 5), ("finish", "A"), ("admit", "A", 7)])
    run("a refused request admitted again: placed once a hole holds it (B refused twice, listed twice)",
        20, [("admit", "A", 15), ("admit", "B", 10), ("admit", "B", 10), ("finish", "A"), ("admit", "B", 10),
             ("admit", "C", 5)])
    run("a refused request asks again for less, and fits", 20, [("admit", "A", 25), ("admit", "A", 20)])
    c.run("A admitted twice while placed (must raise ValueError)", 20, [("admit", "A", 5), ("admit", "A", 3)])
    c.run("a request of 0 slots (must raise ValueError)", 10, [("admit", "A", 0)])
    c.run("an unknown operation 'grow' (must raise ValueError)", 10, [("admit", "A", 2), ("grow", "A", 1)])
    return c.done()


def _place_mistakes() -> dict[str, Callable]:
    """place_first_fit's named mistakes: each note beside a trace run the wrong way (see ``mistake_runner``).

    Example: ``_place_mistakes()["that is best fit (the smallest hole that fits): ..."]`` runs best fit.
    """
    return {
        "a freed range must merge with the free ranges beside it: two neighbouring holes are one hole":
            lambda cap, ops: _simulate(cap, ops, coalesce=False),
        "that is best fit (the smallest hole that fits): first fit takes the lowest address that fits":
            lambda cap, ops: _simulate(cap, ops, fit="best"),
        "freed holes were never reused: place each request in the first hole that fits, not after the last one":
            lambda cap, ops: _simulate(cap, ops, bump=True),
        "wasted_share is a share of the FREE memory, not of the capacity": _share_of_capacity,
        "wasted_share is a share of the free memory, 0..1, not slots: (free - largest) / free":
            lambda cap, ops: (lambda r, free: {**r, "wasted_share": free - r["largest_hole"]})(
                *_place_run(cap, ops)[:2]),
        "first fit scans holes in address order: keep the list sorted (a split hole's remainder stays where the "
        "hole was, not at the back of the list)": lambda cap, ops: _simulate(cap, ops, remainder_back=True),
        "wasted_share came out as the largest hole's own share of the free memory: it is the share OUTSIDE "
        "it, (free - largest) / free": _share_inverted,
        "the refused ids are missing: list every request that found no hole, in the order they came":
            lambda cap, ops: {**_place_ref(cap, ops), "refused": []},
        "largest_hole is the biggest single hole, not all the free slots added up":
            lambda cap, ops: {**_place_ref(cap, ops), "largest_hole": _place_run(cap, ops)[1]},
        "a refused id may be admitted again later: it is placed when a hole then holds it": _refused_forever,
        "each refusal is listed: a request refused twice appears twice in refused, in the order they came":
            lambda cap, ops: (lambda r: {**r, "refused": list(dict.fromkeys(r["refused"]))})(_place_ref(cap, ops)),
        "starts keeps every request ever placed (where each went), finished ones too: a finish does not remove it":
            lambda cap, ops: (lambda r, live: {**r, "starts": {k: v for k, v in r["starts"].items() if k in live}})(
                *_place_run(cap, ops)[::2]),
    }


def _refused_forever(capacity: int, ops: list[tuple]) -> dict:
    """The trace run by an answer that refuses a once-refused id whatever fits later."""
    refused_once: set[str] = set()
    kept: list[tuple] = []
    for op in ops:
        if op[0] == "admit" and op[1] in refused_once:
            op = ("admit", op[1], capacity + 1)  # refused again
        kept.append(op)
        if op[0] == "admit" and op[1] in _place_run(capacity, kept)[0]["refused"]:
            refused_once.add(op[1])
    return _place_ref(capacity, kept)


def _naming_raised(run: Callable) -> Callable:
    """``run``, naming an error raised where the contract refuses or ignores instead (likeliest by tally)."""
    def named(label: str, capacity: int, ops: list[tuple]):
        case = run(label, capacity, ops)
        a = case.actual
        if case.passed or isinstance(case.expected, Raised) or not isinstance(a, Raised):
            return case
        refused = case.expected["refused"]
        found = []
        if isinstance(a.exc, KeyError) and a.exc.args and a.exc.args[0] in refused:
            found.append(f"raised KeyError {a.exc.args[0]!r}: the finish of a refused request is ignored "
                         "(it holds no slots), not an error")
        if isinstance(a.exc, ValueError) and any(op[0] == "admit" and op[2] > capacity for op in ops):
            found.append("a request bigger than the whole arena is refused (listed in refused), not an error: "
                         "only a size below 1 raises ValueError")
        again = len(refused) > len(set(refused)) or any(rid in case.expected["starts"] for rid in refused)
        if isinstance(a.exc, ValueError) and again:
            found.append("a refused id may be admitted again later: it is placed when a hole then holds it "
                         "(a refused request was never placed)")
        if found:
            case.note, case.candidates = found[0], found
        return case
    return named


def _naming_no_free(run: Callable) -> Callable:
    """``run``, naming a 0/0 (nan, or ZeroDivisionError) for the share when nothing is free."""
    def named(label: str, *args: object):
        case = run(label, *args)
        e, a = case.expected, case.actual
        nothing_free = isinstance(e, dict) and e["largest_hole"] == 0
        nan = isinstance(a, dict) and isinstance(a.get("wasted_share"), float) and math.isnan(a["wasted_share"])
        if not case.passed and nothing_free and (nan or isinstance(a, Raised) and isinstance(a.exc, ZeroDivisionError)):
            case.note, case.candidates = ("no free slots -> the share is 0 (nothing is stranded), not 0/0: "
                                          "the empty case needs its own answer"), []
        return case
    return named


def _share_of_capacity(capacity: int, ops: list[tuple]) -> dict:
    r, free, _ = _place_run(capacity, ops)
    return {**r, "wasted_share": (free - r["largest_hole"]) / capacity}


def _share_inverted(capacity: int, ops: list[tuple]) -> dict:
    r, free, _ = _place_run(capacity, ops)
    return {**r, "wasted_share": r["largest_hole"] / free if free else 0.0}


def _share_rounded(expected: dict, actual: object) -> str | None:
    """Everything right but wasted_share, which is the right share rounded (to 0-6 digits)."""
    if not isinstance(actual, dict) or set(actual) != set(expected) or not isinstance(actual["wasted_share"], (int, float)):
        return None
    rest = all(actual[k] == expected[k] for k in ("starts", "refused", "largest_hole"))
    if rest and any(actual["wasted_share"] == round(expected["wasted_share"], k) for k in range(7)):
        return "wasted_share was rounded: return the exact fraction (round only when you print it)"
    return None
