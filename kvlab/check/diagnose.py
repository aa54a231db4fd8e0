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
           "shared_block_written", "KV_FACTOR_HINT"]

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
