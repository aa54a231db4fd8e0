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
           "matching_mistakes",
           "more_or_less", "mistake_runner", "radix_granularity", "unit_slip", "raised_slip", "argument_slip",
           "wrong_exception", "dict_changes", "gib_gb_mixups"]

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
    words = {"gone": "{k}: missing (expected {a!r})", "new": "{k}: not expected (got {b!r})",
             "changed": "{k}: expected {a!r}, got {b!r}"}
    parts = [words[kind].format(k=k, a=expected.get(k), b=actual.get(k))
             for kind, k in _key_diffs(expected, actual, lambda x, y: x == y)]
    return "; ".join(parts) or None


def _key_diffs(a: dict, b: dict, same: Callable[[Any, Any], bool]) -> list[tuple[str, Any]]:
    """``(kind, key)`` for every key where two dicts differ, in ``a``'s order then ``b``'s new keys;
    kind is "gone" (only in a), "new" (only in b) or "changed"."""
    out = []
    for k in list(a) + [k for k in b if k not in a]:
        if k not in b:
            out.append(("gone", k))
        elif k not in a:
            out.append(("new", k))
        elif not same(a[k], b[k]):
            out.append(("changed", k))
    return out


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
    """The message of the first known mistake that, run on the same ``args``, gives ``actual`` (and
    differs from ``expected``); ``''`` when none does. ``mistakes`` is ordered likeliest first: when
    several give the same answer only the first is named (no unrelated "or:" guesses; another
    case tells them apart). A mistake is a function written the way a learner gets it wrong; one
    that raises never matches.

    >>> mistakes = {"rounded down: a request needs all its blocks (round up)": lambda n, bs: n // bs}
    >>> matching_mistake(2, mistakes, 9, 4, expected=3)
    'rounded down: a request needs all its blocks (round up)'
    >>> matching_mistake(3, mistakes, 9, 4, expected=3)
    ''
    """
    if type(actual).__name__ == "Raised":
        return ""
    found = matching_mistakes(actual, mistakes, *args, expected=expected)
    return found[0] if found else ""


def matching_mistakes(actual: Any, mistakes: dict[str, Callable[..., Any]], *args: Any, expected: Any = None) -> list[str]:
    """Every known mistake that gives ``actual`` on ``args``, in the order of ``mistakes``.

    >>> matching_mistakes(4, {"a": lambda n: 2 * n, "b": lambda n: n + 2, "c": lambda n: n}, 2, expected=2)
    ['a', 'b']
    """
    if type(actual).__name__ == "Raised":
        return []
    found = []
    for message, wrong in mistakes.items():
        try:
            got = wrong(*args)
            if got == actual and got != expected and type(got) is type(actual):
                found.append(message)
        except Exception:  # a mistake that cannot run on these inputs says nothing
            continue
    return found


def more_or_less(more: str, less: str) -> Diagnosis:
    """A diagnosis that says which way a count is wrong: ``more`` when too big, ``less`` when too small.

    >>> d = more_or_less("too many: stop at the first difference", "too few")
    >>> d(4, 6), d(4, 3), d(4, 4)
    ('too many: stop at the first difference', 'too few', None)
    """
    def diagnose(expected: Any, actual: Any) -> str | None:
        if not (_num(expected) and _num(actual)) or actual == expected:
            return None
        if isinstance(expected, int) and isinstance(actual, float):
            return None  # a float for a count: a type slip (unit_slip names it), not too many or too few
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
        found: list[str] = []

        def diagnose(e: Any, a: Any) -> str | None:
            found.extend(matching_mistakes(a, mistakes, *args, expected=e))
            return found[0] if found else None

        checker.diagnose = [diagnose, *base]
        try:
            case = checker.run(label, *args)
        finally:
            checker.diagnose = base
        if len(found) > 1 and case.note == found[0]:
            case.candidates = found  # Checker.done keeps the one that explains the most cases
        return case

    return run


# ------------------------------------------------------------------ unit and type slips (issue 28), every checker
_UNITS = ((10**9, "GB"), (2**30, "GiB"), (10**6, "MB"), (2**20, "MiB"), (10**3, "KB"), (2**10, "KiB"))


def _close(a: float, b: float) -> bool:
    return abs(a - b) <= 1e-9 * max(1.0, abs(a), abs(b))


def unit_slip(expected: Any, actual: Any) -> str | None:
    """The slips of units and types a learner makes whatever the exercise, likeliest first: a float
    for an int, a tensor or a tuple for a list, a percentage for a fraction, GB (or GiB, MB...)
    for bytes. None when the answer is not one of them.

    >>> unit_slip(3, 3.0)
    'returned the float 3.0 where an int is expected: use integer arithmetic (//, not /)'
    >>> unit_slip(2, 2.75)
    'returned 2.75, a fraction: a count is a whole number (round down with //)'
    >>> unit_slip(0.25, 25.0)
    'that is a percentage (x 100): return a fraction between 0 and 1'
    >>> unit_slip(2_000_000_000, 2.0)
    'that is in GB (10**9 bytes): the answer is in bytes'
    >>> unit_slip(3, [3])
    'returned a list holding the answer ([3]): return the number itself'
    >>> unit_slip([1, 2], (1, 2))
    'returned a tuple where a list is expected (the values are right): return a list'
    >>> unit_slip(4, 7.0)
    'returned the float 7.0 where an int is expected (and not its value): a / somewhere (use //, whole blocks and tokens)'
    """
    if isinstance(expected, bool) or isinstance(actual, bool):
        return None
    if expected is None and actual is not None and type(actual).__name__ != "Raised":
        return f"returned {actual!r} where None is expected: return None when there is no answer (not -1, 0 or [])"
    if actual is None and expected is not None:
        return "returned None: a missing return, or a case (an empty input?) without its answer"
    if isinstance(expected, dict) and isinstance(actual, dict):
        return _dict_slip(expected, actual)
    if isinstance(actual, str) and _num(expected):
        return f"returned the string {actual!r} where a number is expected: return the number itself, not text"
    if hasattr(actual, "children") and hasattr(actual, "key") and not hasattr(expected, "children"):
        return f"returned a tree node where {type(expected).__name__} is expected: return the count, not the node"
    if (isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual) and expected
            and all(isinstance(e, int) and isinstance(a, int) for e, a in zip(expected, actual))):
        ratios = {e // a for e, a in zip(expected, actual) if a and e % a == 0 and e}
        if len(ratios) == 1 and min(ratios) > 1 and all((a == 0) == (e == 0) for e, a in zip(expected, actual)) \
                and all(e == a * min(ratios) for e, a in zip(expected, actual)):
            return (f"every count is {min(ratios)} times too small: that is a count of blocks, the answer is in "
                    "tokens (x block_size)")
    if hasattr(actual, "tolist") and hasattr(actual, "shape") and not hasattr(expected, "shape"):
        try:
            same = actual.tolist() == expected
        except Exception:  # noqa: BLE001
            same = False
        kind = type(actual).__name__
        return (f"returned a {kind} where a plain {type(expected).__name__} is expected" +
                (" (the values are right): convert it (.tolist() / int(...))" if same else ": convert it (.tolist() / int(...))"))
    if _num(expected) and isinstance(actual, (list, tuple)) and len(actual) == 1 and actual[0] == expected:
        return f"returned a {type(actual).__name__} holding the answer ({actual!r}): return the number itself"
    if _num(expected) and isinstance(actual, (list, tuple)) and actual and actual[0] == expected:
        return f"returned a {type(actual).__name__} ({actual!r}) where one number is expected: return only the first"
    if _num(expected) and isinstance(actual, list):
        return f"returned a list ({len(actual)} items) where a number is expected: return how many (or which one), not the items"
    if _num(expected) and _num(actual) and type(actual).__module__ == "numpy" and actual == expected:
        return f"returned a numpy {type(actual).__name__} where a plain {type(expected).__name__} is expected: convert with int(...)"
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)) and type(expected) is not type(actual):
        if list(expected) == list(actual):
            return (f"returned a {type(actual).__name__} where a {type(expected).__name__} is expected "
                    f"(the values are right): return a {type(expected).__name__}")
    if isinstance(expected, (list, tuple)) and isinstance(actual, (list, tuple)):
        if len(expected) != len(actual):
            return None
        for i, (e, a) in enumerate(zip(expected, actual)):
            if getattr(e, "shape", ()) != () or getattr(a, "shape", ()) != ():
                return None  # tensors: compared by the exercise's own checker (a numpy scalar is not one)
            slip = None if e == a and type(e) is type(a) else unit_slip(e, a)
            if slip is None and type(a).__module__ == "numpy" and e == a:
                slip = f"a numpy {type(a).__name__} where a plain {type(e).__name__} is expected: convert with int(...)"
            if slip:
                return f"item {i}: {slip}"
        return None
    if not (_num(expected) and _num(actual)):
        return None
    if isinstance(expected, int) and isinstance(actual, float):
        if actual.is_integer() and actual == expected:
            return f"returned the float {actual!r} where an int is expected: use integer arithmetic (//, not /)"
        if expected <= actual < expected + 1:
            return f"returned {actual!r}, a fraction: a count is a whole number (round down with //)"
        if expected - 1 < actual < expected:
            return f"returned {actual!r}, a fraction: a count is a whole number (round up, with integers)"
        if expected > 1 and 0 <= actual < 1:
            return f"returned a share ({actual:.3g}) where a count is expected: count the slots (or tokens, blocks) themselves"
    if expected == 0:
        return None
    if 0 < abs(expected) <= 1 and _close(actual, expected * 100):
        return "that is a percentage (x 100): return a fraction between 0 and 1"
    if abs(expected) > 1 and _close(actual * 100, expected):
        return "that is a fraction: the answer here is a percentage (x 100)"
    for factor, unit in _UNITS:
        if _close(actual * factor, expected):
            return f"that is in {unit} ({_power(factor)} bytes): the answer is in bytes"
    if isinstance(expected, int) and isinstance(actual, float):   # the last guess: no unit explains it
        return (f"returned the float {actual!r} where an int is expected (and not its value): a / somewhere "
                "(use //, whole blocks and tokens)")
    return None


def _dict_slip(expected: dict, actual: dict) -> str | None:
    """A result dict with a field missing, or one field with a unit or type slip."""
    missing = [k for k in expected if k not in actual]
    if missing:
        return f"the result has no {missing[0]!r}: return every field of the contract (also when it is empty)"
    for k in expected:
        if hasattr(expected[k], "shape") or hasattr(actual[k], "shape"):
            continue
        if not (expected[k] == actual[k] and type(expected[k]) is type(actual[k])):
            slip = unit_slip(expected[k], actual[k])
            if slip:
                return f"{k}: {slip}"
    return None


def wrong_exception(expected: Any, actual: Any) -> str | None:
    """The call had to raise one exception and raised another (a ZeroDivisionError, an IndexError...
    from computing with the bad value instead of refusing it).

    >>> class Raised:  # what kvlab.check.harness.Raised looks like
    ...     def __init__(self, exc): self.exc = exc
    >>> wrong_exception(Raised(ValueError("n < 0")), Raised(ZeroDivisionError("division by zero")))
    'raised ZeroDivisionError where ValueError is due: check the arguments first and raise ValueError naming the bad value'
    """
    kind = type(expected).__name__
    if kind not in ("Raised", "Raises") or type(actual).__name__ != "Raised":
        return None
    want = expected.exc_type if kind == "Raises" else type(expected.exc)
    if isinstance(actual.exc, want) or isinstance(actual.exc, NotImplementedError):
        return None
    return (f"raised {type(actual.exc).__name__} where {want.__name__} is due: check the arguments first and raise "
            f"{want.__name__} naming the bad value")


def refused_valid(expected: Any, actual: Any, why: str = "") -> str | None:
    """The learner raised ValueError on an input the contract allows: a bound check one off (``<=``
    where ``<`` is due), e.g. ``pos <= 0`` refusing position 0. ``why`` says why the input is valid.

    >>> class Raised:  # what kvlab.check.harness.Raised looks like
    ...     def __init__(self, exc): self.exc = exc
    >>> refused_valid((0, 0), Raised(ValueError("pos")), "pos = 0 is the first token")
    'raised ValueError on a valid input (pos = 0 is the first token): a bound check one off (<= where < is due, or >= for >)'
    """
    if type(actual).__name__ != "Raised" or type(expected).__name__ in ("Raised", "Raises") \
            or not isinstance(actual.exc, ValueError):
        return None
    return (f"raised ValueError on a valid input{f' ({why})' if why else ''}: a bound check one off (<= where < is "
            "due, or >= for >)")


def _power(factor: int) -> str:
    return f"10**{len(str(factor)) - 1}" if str(factor).startswith("1") and set(str(factor)[1:]) <= {"0"} else f"2**{factor.bit_length() - 1}"


def raised_slip(expected: Any, actual: Any) -> str | None:
    """An answer that raised where a value was due, named by what usually causes it.

    >>> class Raised:  # what kvlab.check.harness.Raised looks like
    ...     def __init__(self, exc): self.exc = exc
    >>> raised_slip(0, Raised(ValueError("max() iterable argument is empty")))
    'max() or min() of an empty list raised: an empty input needs its own answer, decided before the max'
    >>> raised_slip(3, Raised(IndexError("list index out of range")))[:40]
    'raised IndexError (list index out of ran'
    """
    if type(actual).__name__ != "Raised" or type(expected).__name__ in ("Raised", "Raises"):
        return None
    exc, msg = actual.exc, str(actual.exc)
    if isinstance(exc, ValueError) and ("empty" in msg and ("max(" in msg or "min(" in msg)):
        return "max() or min() of an empty list raised: an empty input needs its own answer, decided before the max"
    if isinstance(exc, IndexError):
        return (f"raised IndexError ({msg}): an index one past the end (off by one: < for <=, or a range one too "
                "long), or an empty list read at [0] or [-1]")
    if isinstance(exc, ZeroDivisionError):
        return "divided by zero: an empty or zero-sized case needs its own answer before the division"
    if isinstance(exc, TypeError) and ("float" in msg and ("index" in msg or "integer" in msg)):
        return f"raised TypeError ({msg}): a float was used as an index or a count: use // instead of /"
    if isinstance(exc, KeyError):
        return f"raised KeyError {msg}: a key that is not there: a missing key has the contract's default value, not an error"
    return None


def argument_slip(reference: Callable | None, args: Sequence[Any], actual: Any, names: Sequence[str] = ()) -> str | None:
    """The reference on the same arguments with one slip gives ``actual``: two arguments swapped, or
    one integer argument one more or one less (an off-by-one at a boundary: >= for >, < for <=).

    >>> argument_slip(lambda n, bs: -(-n // bs), (9, 4), 1, ("num_tokens", "block_size"))
    'num_tokens and block_size are swapped'
    >>> argument_slip(lambda n: n * 2, (5,), 12, ("n",))
    'as if n were one more (6): an off-by-one (check > against >=, < against <=, or a +1 too many)'
    """
    if reference is None or type(actual).__name__ == "Raised":
        return None

    def gives(new_args) -> bool:
        try:
            got = reference(*new_args)
        except Exception:  # noqa: BLE001 -- a slip that cannot run says nothing
            return False
        return type(got) is type(actual) and got == actual

    def name(i: int) -> str:
        return names[i] if i < len(names) else f"argument {i + 1}"

    args = list(args)
    for i in range(len(args) - 1):
        for j in range(i + 1, len(args)):
            if type(args[i]) is type(args[j]) and args[i] != args[j]:
                swapped_args = args[:]
                swapped_args[i], swapped_args[j] = args[j], args[i]
                if gives(swapped_args):
                    return f"{name(i)} and {name(j)} are swapped"
    for i, a in enumerate(args):
        if type(a) is int:
            for k, word in ((1, "one more"), (-1, "one less")):
                if gives(args[:i] + [a + k] + args[i + 1:]):
                    return (f"as if {name(i)} were {word} ({a + k}): an off-by-one "
                            f"(check > against >=, < against <=, or a {'+' if k > 0 else '-'}1 too many)")
    return None


# ------------------------------------------------------------------ added for lessons 06-11 (issue 28)
def _is_tensor(x: Any) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and hasattr(x, "tolist")




def _is_tensor(v: Any) -> bool:
    """A torch tensor, by its duck type (diagnose imports no torch)."""
    return hasattr(v, "shape") and hasattr(v, "dtype") and hasattr(v, "equal")


def same_value(a: Any, b: Any) -> bool:
    """Deep equality that also compares tensors (same shape, dtype and values) inside containers.

        >>> same_value([1, (2, 3)], [1, (2, 3)]), same_value({"a": [1]}, {"a": []})
        (True, False)
    """
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same_value(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same_value(a[k], b[k]) for k in a)
    if _is_tensor(a):
        return a.shape == b.shape and a.dtype == b.dtype and bool(a.equal(b))
    try:
        return bool(a == b) or (a != a and b != b)  # NaN equals NaN here
    except Exception:  # noqa: BLE001 -- an object that cannot be compared: call it changed
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




def changed_input(before: Sequence[Any], after: Sequence[Any], names: Sequence[str]) -> str | None:
    """The first argument that the learner's function changed in place, named ('' -> None).

    >>> changed_input(([1, 2], 3), ([1], 3), ("leaves", "need"))
    "it changed its argument `leaves` in place ([1, 2] became [1]): the caller's input must be left as it was (work on a copy)"
    """
    for name, b, a in zip(names, before, after):
        if not same_value(b, a):
            if isinstance(b, dict) and isinstance(a, dict):
                return (f"it changed its argument `{name}` in place ({dict_changes(b, a)}): the caller's input "
                        "must be left as it was (work on a copy)")
            return (f"it changed its argument `{name}` in place ({describe_change(b, a)}): the caller's input "
                    "must be left as it was (work on a copy)")
    return None


def _short(v: Any) -> str:
    """``repr(v)`` on one line, at most 40 characters (a longer one ends with '...')."""
    text = " ".join(repr(v).split())
    return text if len(text) <= 40 else text[:37] + "..."


def describe_change(before: Any, after: Any) -> str:
    """What changed between two values, in words a learner can act on: a tensor's shape, dtype or
    first changed element; a long list's length or first changed item; else both values, shortened.

    >>> describe_change([1, 2, 3] * 20, [1, 2, 3] * 19)
    'its length 60 became 57'
    >>> describe_change(list(range(30)), list(range(29)) + [0])
    'item 29 29 became 0'
    """
    if _is_tensor(before) and _is_tensor(after):
        if tuple(before.shape) != tuple(after.shape):
            return f"its shape {tuple(before.shape)} became {tuple(after.shape)}"
        if before.dtype != after.dtype:
            return f"its dtype {before.dtype} became {after.dtype}"
        diff = (before != after).nonzero()  # [n_changed, ndim]
        if len(diff):
            idx = tuple(int(i) for i in diff[0])
            many = f"{len(diff)} elements changed, the first" if len(diff) > 1 else "1 element changed,"
            return (f"{many} at {list(idx)}: "
                    f"{before[idx].item()!r} became {after[idx].item()!r}")
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) and len(repr(before)) > 40:
        if len(before) != len(after):
            return f"its length {len(before)} became {len(after)}"
        i = next((i for i, (x, y) in enumerate(zip(before, after)) if not same_value(x, y)), None)
        if i is not None:
            return f"item {i} {_short(before[i])} became {_short(after[i])}"
    return f"{_short(before)} became {_short(after)}"


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



def ignored_parameter(reference: Callable | None, args: Sequence[Any], actual: Any, names: Sequence[str] = (),
                      values: Sequence[int] = (0, 1, 2, 4, 8, 16, 32, 2048)) -> str | None:
    """The answer is the reference's with one argument replaced by a constant (its default, or a
    usual 1, 4, 16, 2048; a bool flipped): the learner's code ignores that parameter. The later
    parameters (the settings) are tried first, the data last.

    >>> ignored_parameter(lambda n, bs=16: -(-n // bs), (40, 4), 3, ("num_tokens", "block_size"))
    'hard-coded block_size? as if block_size were 16 (its default), not 4: use the argument, not a constant in its place'
    """
    import inspect

    if reference is None or type(actual).__name__ == "Raised":
        return None
    try:
        params = list(inspect.signature(reference).parameters.values())
        want = reference(*args)
    except Exception:  # noqa: BLE001 -- a diagnosis never breaks a check
        return None
    for i in reversed(range(len(args))):  # the later parameters first: block_size, max_len, need...
        a = args[i]
        if isinstance(a, bool):
            tries = [not a]
        elif isinstance(a, int):
            default = params[i].default if i < len(params) and isinstance(params[i].default, int) else None
            tries = ([default] if default is not None else []) + [v for v in values if v != default]
        else:
            continue
        for v in tries:
            if v == a:
                continue
            try:
                got = reference(*args[:i], v, *args[i + 1:])
            except Exception:  # noqa: BLE001
                continue
            if exact_equal(got, actual) and not exact_equal(want, actual):
                name = names[i] if i < len(names) else (params[i].name if i < len(params) else f"argument {i + 1}")
                why = " (its default)" if i < len(params) and v == params[i].default and not isinstance(a, bool) else ""
                told = "" if isinstance(a, bool) else f"hard-coded {name}? "
                return f"{told}as if {name} were {v!r}{why}, not {a!r}: use the argument, not a constant in its place"
    return None


# ------------------------------------------------------------------ added for lesson 02 (review r12)
def dict_changes(before: dict, after: dict, limit: int = 3) -> str:
    """What an in-place change did to a dict, key by key (added, removed, changed), each value in full
    up to 40 characters; '' when nothing changed.

    >>> dict_changes({"a": 1, "b": 2}, {"a": 1, "b": 3, "c": 4})
    "'b' was 2, is 3; 'c' added (4)"
    >>> dict_changes({"a": 1}, {})
    "'a' removed (was 1)"
    """
    def shown(v: Any) -> str:
        s = " ".join(repr(v).split())
        return s if len(s) <= 40 else s[:37] + "..."

    words = {"gone": "{k!r} removed (was {a})", "new": "{k!r} added ({b})", "changed": "{k!r} was {a}, is {b}"}
    parts = [words[kind].format(k=k, a=shown(before.get(k)), b=shown(after.get(k)))
             for kind, k in _key_diffs(before, after, same_value)]
    more = f"; and {len(parts) - limit} more" if len(parts) > limit else ""
    return "; ".join(parts[:limit]) + more


def gib_gb_mixups(wrong: Callable[..., Any], index: int, what: str = "the budget") -> dict[str, Callable[..., Any]]:
    """Two known mistakes for a function whose argument ``index`` is a size in bytes: the learner
    "converted" it between GB (10**9) and GiB (2**30), so it came in 7.4% too small or too large.
    ``wrong(*args)`` is the right answer computed on the changed arguments (the reference).

    >>> m = gib_gb_mixups(lambda kv, b: kv // b, 0)
    >>> [f(2**30, 1) for f in m.values()]
    [1000000000, 1152921504]
    """
    def scaled(num: int, den: int) -> Callable[..., Any]:
        def mistake(*args: Any) -> Any:
            args = list(args)
            args[index] = int(args[index] * num / den)
            return wrong(*args)
        return mistake

    return {f"GB and GiB mixed: {what} was scaled by 10**9 / 2**30; it is in bytes already (no unit to convert), "
            "and a GiB is 7.4% more than a GB": scaled(10**9, 2**30),
            f"GB and GiB mixed: {what} was scaled by 2**30 / 10**9; it is in bytes already (no unit to convert), "
            "and a GiB is 7.4% more than a GB": scaled(2**30, 10**9)}
