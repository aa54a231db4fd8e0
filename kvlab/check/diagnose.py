"""Name the common mistake behind a wrong answer, so a FAIL line says what to look at.

A diagnosis is a function ``(expected, actual) -> str | None``: a short sentence when it
recognises the mistake, None otherwise. A :class:`~kvlab.check.harness.Checker` takes a list of
them (``diagnose=[...]``) and attaches the first that speaks to each failing case; its report
prints it under the case and in the FAIL summary. State comparisons (dicts) are reported by
:func:`differing_fields`: only the fields that differ, in full, never cut with "...".

Mirrors no vLLM or SGLang file (kvlab's teaching harness).

Example:
    >>> half_or_double(2_684_354_560, 1_342_177_280)
    'exactly half the right value: did you count both K and V (the 2 in 2 x layers x ...)?'
    >>> off_by(10, 11, 1, "block")
    'off by one block: check the rounding (ceil, not floor or +1)'
    >>> swapped((2, 1), (1, 2), ("logical block", "offset"))
    'logical block and offset are swapped'
    >>> differing_fields({"table": [0, 1], "ref_count": [1, 1]}, {"table": [0, 1], "ref_count": [2, 1]})
    'ref_count: expected [1, 1], got [2, 1]'
"""
from __future__ import annotations

import numbers
from typing import Any, Callable, Sequence

__all__ = ["Diagnosis", "half_or_double", "off_by", "swapped", "differing_fields", "first_diagnosis",
           "shared_block_written", "KV_FACTOR_HINT", "should_have_raised", "factor_of", "matching_mistake",
           "more_or_less", "mistake_runner", "radix_granularity"]

Diagnosis = Callable[[Any, Any], "str | None"]

KV_FACTOR_HINT = "did you count both K and V (the 2 in 2 x layers x ...)?"


def _num(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool)


def half_or_double(expected: Any, actual: Any, hint: str = KV_FACTOR_HINT) -> str | None:
    """A number exactly half (or twice) the right one: a factor of two dropped (or doubled)."""
    if not (_num(expected) and _num(actual)) or expected == 0:
        return None
    if actual * 2 == expected:
        return f"exactly half the right value: {hint}"
    if actual == expected * 2:
        return "exactly twice the right value: a factor of 2 counted twice?"
    return None


def off_by(expected: Any, actual: Any, unit: int = 1, what: str = "block",
           hint: str = "check the rounding (ceil, not floor or +1)") -> str | None:
    """``actual`` is ``expected`` plus or minus one ``unit`` (one block, one token...)."""
    if not (_num(expected) and _num(actual)) or abs(actual - expected) != unit:
        return None
    return f"off by one {what}: {hint}"


def swapped(expected: Any, actual: Any, names: Sequence[str] = ("the first value", "the second")) -> str | None:
    """A pair (or the first two of a tuple) in the wrong order, e.g. block and offset."""
    if not (isinstance(expected, (tuple, list)) and isinstance(actual, (tuple, list))):
        return None
    if len(expected) < 2 or len(actual) != len(expected) or expected[0] == expected[1]:
        return None
    if (actual[0], actual[1]) == (expected[1], expected[0]) and list(actual[2:]) == list(expected[2:]):
        return f"{names[0]} and {names[1]} are swapped"
    return None


def shared_block_written(expected: Any, actual: Any) -> str | None:
    """States (dicts with ``tables``) where the learner wrote into a shared block in place
    instead of copying it first (copy-on-write): the tables are unchanged where a copy was due."""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return None
    e, a = expected.get("copies"), actual.get("copies")
    if e and not a:
        return "no block was copied: a sequence wrote into a block it shares (copy it first: copy-on-write)"
    return None


def differing_fields(expected: Any, actual: Any) -> str | None:
    """For two dicts (states): every field that differs, in full; None when they are not dicts."""
    if not (isinstance(expected, dict) and isinstance(actual, dict)):
        return None
    parts = []
    for k in list(expected) + [k for k in actual if k not in expected]:
        if k not in actual:
            parts.append(f"{k}: missing (expected {expected[k]!r})")
        elif k not in expected:
            parts.append(f"{k}: not expected (got {actual[k]!r})")
        elif expected[k] != actual[k]:
            parts.append(f"{k}: expected {expected[k]!r}, got {actual[k]!r}")
    return "; ".join(parts) or None


def first_diagnosis(diagnoses: Sequence[Diagnosis], expected: Any, actual: Any) -> str:
    """The first diagnosis that speaks ('' when none does, or when one of them fails)."""
    for d in diagnoses:
        try:
            note = d(expected, actual)
        except Exception:  # a diagnosis must never break a check
            note = None
        if note:
            return note
    return ""


# ------------------------------------------------------------------ appended for lessons 05-08
def radix_granularity(expected: Any, actual: Any, block_size: int = 16) -> str | None:
    """Lists of reused token counts where the learner matched token by token (as a radix tree
    with page size 1 does) instead of whole blocks: some count is not a multiple of the block
    size and every count is at least the right one.

    Example:
        >>> radix_granularity([0, 16], [0, 20], block_size=16)[:40]
        'some counts are not whole blocks of 16: '
        >>> radix_granularity([0, 16], [0, 32], block_size=16) is None
        True
    """
    if not (isinstance(expected, list) and isinstance(actual, list)) or len(expected) != len(actual):
        return None
    if not all(_num(a) for a in actual) or all(a % block_size == 0 for a in actual):
        return None
    if all(a >= e for e, a in zip(expected, actual)):
        return (f"some counts are not whole blocks of {block_size}: a block-hash cache shares whole full blocks "
                "only (that is the radix tree's token-by-token answer)")
    return None


# ------------------------------------------------------------------ added for lessons 00-04 (issue 16)
def should_have_raised(expected: Any, actual: Any) -> str | None:
    """The reference raised (or must raise) but the learner returned a value: a missing check.

    >>> class Raised:  # what kvlab.check.harness.Raised looks like
    ...     def __init__(self, exc): self.exc = exc
    >>> should_have_raised(Raised(ValueError("pos -1")), (0, 3))
    'this input must raise ValueError: check the arguments before computing anything'
    """
    kind = type(expected).__name__
    if kind not in ("Raised", "Raises") or type(actual).__name__ == "Raised":
        return None
    exc = expected.exc_type if kind == "Raises" else type(expected.exc)
    return f"this input must raise {exc.__name__}: check the arguments before computing anything"


def factor_of(factor: float, message: str) -> Diagnosis:
    """A diagnosis for an answer exactly ``factor`` times the right one (a known wrong factor).

    >>> gqa = factor_of(8, "you used the query heads: with GQA the cache has num_key_value_heads heads")
    >>> gqa(100, 800)
    'exactly 8 times the right value: you used the query heads: with GQA the cache has num_key_value_heads heads'
    >>> gqa(100, 200) is None
    True
    """
    def diagnose(expected: Any, actual: Any) -> str | None:
        if _num(expected) and _num(actual) and expected != 0 and factor != 1 and actual == expected * factor:
            shown = int(factor) if float(factor).is_integer() else factor
            return f"exactly {shown} times the right value: {message}"
        return None

    return diagnose


def matching_mistake(actual: Any, mistakes: dict[str, Callable[..., Any]], *args: Any,
                     expected: Any = None) -> str:
    """The messages of the known mistakes that, run on the same ``args``, give ``actual`` (and
    differ from ``expected``), joined with " -- or: " when several give the same answer; ``''``
    when none does. A mistake is a function written the way a learner gets it wrong; one that
    raises never matches.

    >>> mistakes = {"rounded down: a request needs all its blocks (round up)": lambda n, bs: n // bs}
    >>> matching_mistake(2, mistakes, 9, 4, expected=3)
    'rounded down: a request needs all its blocks (round up)'
    >>> matching_mistake(3, mistakes, 9, 4, expected=3)
    ''
    """
    if type(actual).__name__ == "Raised":
        return ""
    found = []
    for message, wrong in mistakes.items():
        try:
            got = wrong(*args)
            if got == actual and got != expected:
                found.append(message)
        except Exception:  # a mistake that cannot run on these inputs says nothing
            continue
    return " -- or: ".join(found)


def more_or_less(more: str, less: str) -> Diagnosis:
    """A diagnosis that says which way a count is wrong: ``more`` when too big, ``less`` when too small.

    >>> d = more_or_less("too many: stop at the first difference", "too few")
    >>> d(4, 6), d(4, 3), d(4, 4)
    ('too many: stop at the first difference', 'too few', None)
    """
    def diagnose(expected: Any, actual: Any) -> str | None:
        if not (_num(expected) and _num(actual)) or actual == expected:
            return None
        return more if actual > expected else less

    return diagnose


def mistake_runner(checker: Any, mistakes: dict[str, Callable[..., Any]]) -> Callable[..., Any]:
    """``checker.run`` with this case's known ``mistakes`` tried first: when the learner's answer is
    what a mistake gives on the case's own arguments, the FAIL line names that mistake.

    >>> from kvlab.check.harness import Checker
    >>> c = Checker("ceil_div", lambda n, bs: n // bs, reference=lambda n, bs: -(-n // bs), verbose=False)
    >>> run = mistake_runner(c, {"rounded down: round up instead": lambda n, bs: n // bs})
    >>> run("9 tokens, blocks of 4", 9, 4).note
    'rounded down: round up instead'
    """
    def run(label: str, *args: Any) -> Any:
        base = checker.diagnose
        checker.diagnose = [lambda e, a: matching_mistake(a, mistakes, *args, expected=e) or None, *base]
        try:
            return checker.run(label, *args)
        finally:
            checker.diagnose = base

    return run


# ------------------------------------------------------------------ added for lessons 06-11 (issue 28)
def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "tolist")


def same_value(a: Any, b: Any) -> bool:
    """Deep equality that also compares tensors (same dtype, shape and values) and never raises.

    >>> same_value([1, [2, 3]], [1, [2, 3]]), same_value({"a": (1,)}, {"a": (2,)})
    (True, False)
    """
    try:
        if _is_tensor(a) or _is_tensor(b):
            if not (_is_tensor(a) and _is_tensor(b)) or a.dtype != b.dtype or tuple(a.shape) != tuple(b.shape):
                return False
            return bool(((a == b) | ((a != a) & (b != b))).all())  # NaN where both are NaN counts as equal
        if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
            return type(a) is type(b) and len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
        if isinstance(a, dict) and isinstance(b, dict):
            return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
        return bool(a == b)
    except Exception:
        return False


def exact_equal(expected: Any, actual: Any) -> bool:
    """``expected == actual`` where every whole number must come back as an int (3.0 is not 3, True is
    not 1), a float within 1e-9; a list and a tuple of the same items are equal; None only equals None.

    >>> exact_equal((2, [4, 4]), [2, (4, 4)]), exact_equal([3], [3.0]), exact_equal(0.5, 0.5 + 1e-12)
    (True, False, True)
    """
    if expected is None or isinstance(expected, (bool, str)):
        return type(actual) is type(expected) and actual == expected
    if isinstance(expected, numbers.Integral):
        return isinstance(actual, int) and not isinstance(actual, bool) and actual == expected
    if isinstance(expected, numbers.Real):
        return _num(actual) and not _is_tensor(actual) and abs(float(actual) - float(expected)) <= 1e-9
    if isinstance(expected, (list, tuple)):
        return (isinstance(actual, (list, tuple)) and len(actual) == len(expected)
                and all(exact_equal(e, a) for e, a in zip(expected, actual)))
    if isinstance(expected, dict):
        return (isinstance(actual, dict) and actual.keys() == expected.keys()
                and all(exact_equal(expected[k], actual[k]) for k in expected))
    return same_value(expected, actual)


def _leaves(x: Any) -> list:
    if isinstance(x, (list, tuple)):
        return [y for v in x for y in _leaves(v)]
    if isinstance(x, dict):
        return [y for v in x.values() for y in _leaves(v)]
    return [x]


def type_slip(expected: Any, actual: Any) -> str | None:
    """The right numbers in the wrong type or unit: a float for an int, a tensor for a list, a
    percentage for a fraction, a bool for a count, a dict or a str for a list.

    >>> type_slip([2, 4], [2.0, 4.0])
    'a float where a whole number is expected (2.0 for 2): count with // or -(-a // b), not /, or return int(...)'
    >>> type_slip(0.25, 25.0)
    'a percentage: return the fraction (0.25, not 25.0)'
    """
    if _is_tensor(actual) and not _is_tensor(expected):
        try:
            if exact_equal(expected, actual.tolist()) or same_value(_leaves(expected), _leaves(actual.tolist())):
                return "a tensor where a plain Python value is expected: return .tolist() (or int(...)) of it"
        except Exception:
            pass
        return "a tensor where a plain Python value (a list or a number) is expected"
    if isinstance(expected, numbers.Real) and not isinstance(expected, (numbers.Integral, bool)) and _num(actual):
        if expected and abs(float(actual) - 100 * float(expected)) <= 1e-6 * max(1.0, abs(float(actual))):
            return f"a percentage: return the fraction ({expected!r}, not {actual!r})"
    e, a = _leaves(expected), _leaves(actual) if isinstance(actual, (list, tuple, dict)) == isinstance(
        expected, (list, tuple, dict)) else [actual]
    if len(e) == len(a):
        for x, y in zip(e, a):
            if isinstance(x, numbers.Integral) and not isinstance(x, bool):
                if isinstance(y, float) and y == x:
                    return (f"a float where a whole number is expected ({y!r} for {x!r}): count with // or "
                            "-(-a // b), not /, or return int(...)")
                if isinstance(y, bool):
                    return f"a bool ({y!r}) where a count is expected: return the number itself"
    if isinstance(expected, (list, tuple)) and isinstance(actual, (set, dict, str)):
        return f"a {type(actual).__name__} where a list is expected: return a list, in the order asked"
    return None


def changed_argument(before: Sequence[Any], after: Sequence[Any], names: Sequence[str]) -> str | None:
    """The first argument that the learner's function changed in place, named ('' -> None).

    >>> changed_argument(([1, 2], 3), ([1], 3), ("leaves", "need"))
    "it changed its argument `leaves` in place ([1, 2] became [1]): the caller's input must be left as it was (work on a copy)"
    """
    for name, b, a in zip(names, before, after):
        if not same_value(b, a):
            shown = lambda v: " ".join(repr(v).split())[:40]  # noqa: E731
            return (f"it changed its argument `{name}` in place ({shown(b)} became {shown(a)}): the caller's input "
                    "must be left as it was (work on a copy)")
    return None


def run_keeping_input(checker: Any, label: str, names: Sequence[str], *args: Any,
                      mistakes: "dict[str, Callable[..., Any]] | None" = None) -> Any:
    """``checker.run(label, *args)`` where the learner's function gets copies it must not change:
    a changed argument fails the case and is named; otherwise, when ``mistakes`` are given, the
    FAIL line names the mistake whose answer on these arguments is the learner's.

    >>> from kvlab.check.harness import Checker
    >>> c = Checker("total", lambda xs: [xs.pop()] and 0, reference=lambda xs: 0, verbose=False)
    >>> run_keeping_input(c, "xs [1]", ("xs",), [1]).note[:37]
    'it changed its argument `xs` in place'
    """
    import copy as _copy

    from .harness import call, call_in_place

    expected = call(checker.reference, *args)
    if checker.unusable(label, expected):
        return checker.result.cases[-1]
    mine = _copy.deepcopy(args)
    got = call_in_place(checker.fn, *mine)
    note = changed_argument(args, mine, names) or wrong_exception(expected, got) or should_have_raised(expected, got)
    if note:
        return checker.record(label, expected, got, passed=False, note=note)
    base = checker.diagnose
    if mistakes:
        checker.diagnose = [lambda e, a: matching_mistake(a, mistakes, *args, expected=e) or None, *base]
    try:
        return checker.record(label, expected, got)
    finally:
        checker.diagnose = base


def wrong_exception(expected: Any, actual: Any) -> str | None:
    """The learner raised, but not the exception the contract names (IndexError for OutOfBlocks...).

    >>> class Raised:  # what kvlab.check.harness.Raised looks like
    ...     def __init__(self, exc): self.exc = exc
    >>> wrong_exception(Raised(ValueError("mode")), Raised(KeyError("exact")))
    'raise ValueError here, not KeyError: check the input first and raise the error the contract names'
    """
    if type(actual).__name__ != "Raised" or type(expected).__name__ not in ("Raised", "Raises"):
        return None
    want = expected.exc_type if type(expected).__name__ == "Raises" else type(expected.exc)
    if isinstance(actual.exc, want) or isinstance(actual.exc, NotImplementedError):
        return None
    return (f"raise {want.__name__} here, not {type(actual.exc).__name__}: check the input first and raise the "
            "error the contract names")


def off_by_one_items(expected: Any, actual: Any) -> str | None:
    """Lists of counts where every wrong count is off by exactly one: a loop bound (< or <=) or a +-1.

    >>> off_by_one_items([2, 2, 5], [2, 3, 5])
    'count 1 is off by one (expected 2, got 3): check where the count stops (< or <=, a +1 or -1)'
    """
    if not (isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple))) or len(expected) != len(actual):
        return None
    if not all(_num(e) and _num(a) for e, a in zip(expected, actual)):
        return None
    bad = [i for i, (e, a) in enumerate(zip(expected, actual)) if e != a]
    if bad and all(abs(actual[i] - expected[i]) == 1 for i in bad):
        i = bad[0]
        return (f"count {i} is off by one (expected {expected[i]!r}, got {actual[i]!r}): check where the count stops "
                "(< or <=, a +1 or -1)")
    return None


def settle_guesses(result: Any, sep: str = " -- or: ") -> None:
    """Where a FAIL note offers several guesses ("a -- or: b"), keep the one that explains the most
    failing cases of this check (the first on a tie): one mistake, the likeliest, per line.

    >>> class Case:
    ...     def __init__(self, note): self.note = note
    >>> class Result:
    ...     failures = [Case("ignored target -- or: decided once"), Case("decided once")]
    >>> r = Result(); settle_guesses(r); r.failures[0].note
    'decided once'
    """
    notes = [c.note for c in result.failures]
    for case in result.failures:
        options = case.note.split(sep) if case.note else []
        if len(options) > 1:
            case.note = max(options, key=lambda o: (sum(o in n for n in notes), -options.index(o)))
