"""One rule for every id, position, count and length kvlab takes: a Python ``int``.

``bool`` is rejected (``True`` is not a token id or a block count); numpy integer scalars are
accepted and turned into ``int``; anything else (floats, strings, ``None``) raises a
``TypeError`` that names the argument and the value. Ranges are checked where they are known:
negatives raise ``ValueError``. Every public entry point of kvlab goes through these helpers, so
the rule is written once; the request cycle's hot paths test ``type(x) is int`` (and the minimum)
first and call them only otherwise, so every error still comes from here.

    check_int(name, value, minimum=None) -> int
    as_ids(values, what="tokens", start=0)         # a sequence of non-negative ints
    check_seq_id(value, name="seq_id") -> str      # sequence ids are strings, nothing else

Cost: ``as_ids`` makes two C-level passes (the element types, then ``array('Q')`` for the
range), and only on an error a slow search that names the first bad element.

Example:
    >>> check_int("block_size", 4, minimum=1)
    4
    >>> check_int("pos", True)
    Traceback (most recent call last):
    ...
    TypeError: pos must be an int, got True (bool)
    >>> as_ids([3, 7, 1])
    [3, 7, 1]
    >>> as_ids([5, 7.2])
    Traceback (most recent call last):
    ...
    TypeError: tokens[1] = 7.2 is not an int (float)
    >>> check_seq_id(5)
    Traceback (most recent call last):
    ...
    TypeError: seq_id must be a str, got 5 (int)
"""
from __future__ import annotations

from array import array
from typing import Any, Iterable

__all__ = ["check_int", "as_ids", "check_seq_id"]


def _is_int_like(value: Any) -> bool:
    """An int or a numpy integer scalar, not a bool."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int):
        return True
    return type(value).__module__ == "numpy" and hasattr(value, "__index__") and hasattr(value, "dtype") \
        and value.dtype.kind in "iu"


def check_int(name: str, value: Any, minimum: int | None = None) -> int:
    """``value`` as an int (numpy integers converted); TypeError for a bool or a non-integer,
    ValueError below ``minimum``."""
    if type(value) is not int:
        if not _is_int_like(value):
            raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
        value = int(value)
    if minimum is not None and value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {value}")
    return value


def as_ids(values: Iterable[int], what: str = "tokens", start: int = 0) -> list[int]:
    """``values`` as a list of non-negative Python ints (the list itself when it already is one).

    Raises TypeError naming the first element that is not an int (a bool, a float, a string,
    None) and ValueError for the first negative one. A str or bytes is refused as a whole.
    ``start``: the values follow ``start`` ids checked before; an error names the element by
    its position in the whole list (``as_ids([5, 2.5], start=3)`` names ``tokens[4]``).
    """
    if isinstance(values, (str, bytes)):
        raise TypeError(f"{what} must be a sequence of int ids, got a {type(values).__name__} {values!r:.40}")
    key = values if type(values) is list else list(values)
    try:  # two C-level passes: every element exactly an int, every one >= 0
        ok = list(map(type, key)).count(int) == len(key)
        if ok:
            array("Q", key)  # raises OverflowError for a negative id
    except (TypeError, OverflowError, ValueError):
        ok = False
    if ok:
        return key
    out = []
    for i, t in enumerate(key, start):
        if not _is_int_like(t):
            raise TypeError(f"{what}[{i}] = {t!r} is not an int ({type(t).__name__})")
        t = int(t)
        if t < 0:
            raise ValueError(f"{what}[{i}] = {t} is negative; ids must be >= 0")
        out.append(t)
    return out


def check_seq_id(value: Any, name: str = "seq_id") -> str:
    """``value`` when it is a str (a sequence id); TypeError naming it otherwise (an int, None,
    bytes: ids of mixed types would also make every sorted listing of them fail)."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, got {value!r} ({type(value).__name__})")
    return value
