"""The checkers' harness: run the learner's function beside kvlab's own, report expected vs actual.

Every exercise ends with a checker, ``check.<name>(fn)``, that runs the learner's function
beside kvlab's own implementation (the reference) on several sizes, seeds and edge cases,
prints expected beside actual, and ends with one PASS or FAIL line. A checker never shows a
traceback of its own: an exception raised by the learner's code becomes a FAIL line that
names it. The checkers themselves live in one module per lesson (``kvlab.check.l04_paging``...).

Strict mode: with ``KVLAB_CHECK_STRICT=1`` in the environment a failing check raises
``AssertionError`` (CI runs the lessons with the solutions injected this way).

Writing a checker::

    from kvlab.check.harness import Checker
    from kvlab.memory.block_table import blocks_needed as _blocks_needed

    def blocks_needed(fn, verbose=True):
        c = Checker("blocks_needed", fn, reference=_blocks_needed, verbose=verbose)
        for n in (0, 1, 4, 5, 9):
            c.run(f"n={n}, block_size=4", n, 4)   # calls both, records expected vs actual
        c.run("negative tokens", -1, 4)           # reference raises -> learner must raise too
        return c.done()                           # prints the report; strict mode raises

A checker that computes the expected outcome itself (state after each step, a kernel's
output) calls ``c.record(label, expected, actual)``; ``if c.unusable(label, expected):
continue`` skips a case cleanly when the learner handed in something that is not a function.

Mirrors no vLLM or SGLang file (kvlab's own teaching harness).

Example:
    >>> c = Checker("double", lambda x: 2 * x, reference=lambda x: x + x, verbose=False)
    >>> c.run("x=3", 3).passed
    True
    >>> r = c.done()
    >>> r.passed, r.num_passed, r.num_cases
    (True, 1, 1)
    >>> bad = Checker("double", lambda x: 3 * x, reference=lambda x: x + x, verbose=False)
    >>> bad.run("x=3", 3).actual
    9
    >>> bad.done(strict=False).summary
    'FAIL  double: 0/1 cases passed; first failure: x=3: expected 6, got 9'
    >>> from kvlab.check.diagnose import half_or_double
    >>> kv = Checker("kv_bytes", lambda t: 128 * t, reference=lambda t: 256 * t, verbose=False,
    ...              diagnose=[half_or_double])
    >>> kv.run("tokens=4", 4).note
    'exactly half the right value: did you count both K and V (the 2 in 2 x layers x ...)?'

What this module does not handle: a learner's function that never returns (interrupt the
kernel), or output printed by the learner's function (it appears above the report).
"""
from __future__ import annotations

import copy
import os
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from .diagnose import (Diagnosis, argument_slip, changed_input, dict_changes, differing_fields, first_diagnosis,
                       ignored_parameter, matching_mistakes, raised_slip, same_value, should_have_raised, unit_slip, wrong_exception)

__all__ = [
    "is_strict",
    "Raised",
    "Raises",
    "call",
    "call_in_place",
    "CaseResult",
    "CheckResult",
    "Checker",
    "same_outcome",
    "STRICT_ENV",
]

STRICT_ENV = "KVLAB_CHECK_STRICT"
SHARED_SLIPS = (unit_slip, raised_slip, wrong_exception)  # after each exercise's own diagnoses, in every checker
_MAX_REPR = 90
FAILED_ROWS = 3  # a failed check shows this many failing cases in full (the review: 13 of the same filled two screens)


def is_strict() -> bool:
    """True when ``KVLAB_CHECK_STRICT`` is set to 1/true/yes (read at every check)."""
    return os.environ.get(STRICT_ENV, "").strip().lower() in ("1", "true", "yes")


# ------------------------------------------------------------------------- outcomes
@dataclass(frozen=True)
class Raised:
    """The outcome of a call that raised: the exception, kept for the report."""

    exc: BaseException

    def __repr__(self) -> str:
        msg = str(self.exc)
        if len(msg) > 60:
            msg = msg[:57] + "..."
        return f"raised {type(self.exc).__name__}" + (f": {msg}" if msg else "")


@dataclass(frozen=True)
class Raises:
    """An expected outcome: the call must raise ``exc_type`` (or a subclass)."""

    exc_type: type

    def __repr__(self) -> str:
        return f"raises {self.exc_type.__name__}"


def call(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*deep copies of args)``; an exception comes back as :class:`Raised`, never raised.

    Arguments are deep-copied so that a function that mutates its input cannot change
    what the other side (reference or learner) sees.

        >>> call(int, "12")
        12
        >>> call(int, "x")
        raised ValueError: invalid literal for int() with base 10: 'x'
    """
    args, kwargs = copy.deepcopy(args), copy.deepcopy(kwargs)
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # the learner's bug is data here, not a crash
        return Raised(exc)


def call_in_place(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args)`` on the very arguments (no copy: some exercises change their input in
    place, and the checker then compares the input); an exception comes back as :class:`Raised`.

        >>> xs = [1]
        >>> call_in_place(list.append, xs, 2), xs
        (None, [1, 2])
    """
    try:
        return fn(*args, **kwargs)
    except Exception as exc:  # the learner's bug is data here, not a crash
        return Raised(exc)


def same_outcome(expected: Any, actual: Any, compare: Callable[[Any, Any], bool] | None = None) -> bool:
    """Whether ``actual`` matches ``expected``.

    An expected :class:`Raised` (the reference raised) or :class:`Raises` matches an
    actual :class:`Raised` of the same exception class or a subclass of it (ValueError vs
    ValueError); a NotImplementedError from an unfinished stub never matches. Values are
    compared with ``compare`` (default ``==``; a compare that raises counts as a mismatch).
    """
    if isinstance(actual, Raised) and isinstance(actual.exc, NotImplementedError):
        return False
    if isinstance(expected, (Raised, Raises)):
        want = expected.exc_type if isinstance(expected, Raises) else type(expected.exc)
        return isinstance(actual, Raised) and isinstance(actual.exc, want)
    if isinstance(actual, Raised):
        return False
    try:
        return bool(compare(expected, actual) if compare else expected == actual)
    except Exception:
        return False


def _short_text(s: str, limit: int = 160) -> str:
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _short(x: Any) -> str:
    try:
        s = repr(x)
    except Exception as exc:  # a learner's object with a broken __repr__
        s = f"<unprintable {type(x).__name__}: {type(exc).__name__}>"
    return _short_text(" ".join(s.split()), _MAX_REPR)


# -------------------------------------------------------------------------- results
@dataclass
class CaseResult:
    """One case: its label, expected and actual outcome, and whether they match."""

    label: str
    expected: Any
    actual: Any
    passed: bool
    note: str = ""
    candidates: list = field(default_factory=list)  # several known mistakes give this answer: Checker.done picks one
    input_changed: bool = False  # failed because the call changed its arguments (the note says how)

    def _right_but_changed(self) -> str:
        """For a case that failed only because the call changed its input, with the answer the
        reference gives: that answer, said as right ("returned 524288, the expected answer, but"),
        never an "expected X / actual X" pair that looks the same; else ''.

            >>> CaseResult("c", 3, 3, False, "changed its input", input_changed=True)._right_but_changed()
            'returned 3, the expected answer, but'
        """
        if self.passed or not self.input_changed or _short(self.expected) != _short(self.actual):
            return ""
        did = _short(self.actual) if isinstance(self.actual, Raised) else f"returned {_short(self.actual)}"
        return f"{did}, the expected answer, but"

    def line(self) -> str:
        mark = "ok  " if self.passed else "FAIL"
        extra = f"\n         -> {self.note}" if self.note else ""
        right = self._right_but_changed()
        if right:
            return f"  {mark} {self.label}\n         {right}{extra}"
        diff = None if self.passed else differing_fields(self.expected, self.actual)
        if diff:  # a state: only the fields that differ, in full
            return f"  {mark} {self.label}\n         differs: {diff}{extra}"
        return f"  {mark} {self.label}\n         expected {_short(self.expected)}\n         actual   {_short(self.actual)}{extra}"

    def why(self) -> str:
        """The failure in one line: what differs, and the diagnosis when there is one."""
        right = self._right_but_changed()
        if right:
            return f"{right} {self.note}"
        diff = differing_fields(self.expected, self.actual)
        what = diff if diff else f"expected {_short(self.expected)}, got {_short(self.actual)}"
        if not diff and self.note and _identical(self.expected, self.actual):   # review r8 of 10: "expected ['a'], got ['a']"
            what = f"returned {_short(self.actual)}, the value expected, yet the case fails"
        return what + (f" -- {self.note}" if self.note else "")


@dataclass
class CheckResult:
    """The result of one ``check.<name>(fn)`` call. ``.passed`` is True only if every case passed."""

    name: str
    cases: list[CaseResult] = field(default_factory=list)
    error: str = ""  # set when the checker could not run the learner's code at all

    @property
    def num_cases(self) -> int:
        return len(self.cases)

    @property
    def num_passed(self) -> int:
        return sum(c.passed for c in self.cases)

    @property
    def passed(self) -> bool:
        return not self.error and bool(self.cases) and all(c.passed for c in self.cases)

    @property
    def failures(self) -> list[CaseResult]:
        return [c for c in self.cases if not c.passed]

    @property
    def not_implemented(self) -> bool:
        """True when the learner's function raised NotImplementedError (an untouched stub)."""
        return any(isinstance(c.actual, Raised) and isinstance(c.actual.exc, NotImplementedError) for c in self.cases)

    @property
    def _untouched(self) -> bool:
        """Every case raised NotImplementedError: the stub as the lesson gave it."""
        return bool(self.cases) and all(isinstance(c.actual, Raised) and isinstance(c.actual.exc, NotImplementedError)
                                        for c in self.cases)

    @property
    def summary(self) -> str:
        if self.error:
            return f"FAIL  {self.name}: {self.error}"
        if self.passed:
            return f"PASS  {self.name}: all {self.num_cases} cases passed"
        if self._untouched:  # no answer yet: one friendly line, nothing of the expected values (a predict-first answer)
            return (f"FAIL  {self.name}: 0/{self.num_cases} cases passed: not started yet (the stub as given still "
                    "raises NotImplementedError): write your code in it and run its cell again")
        first = self.failures[0] if self.failures else None
        why = f"; first failure: {first.label}: {first.why()}" if first else ""
        if self.not_implemented:
            why += " -- the stub still raises NotImplementedError: finish it and run its cell again"
        return f"FAIL  {self.name}: {self.num_passed}/{self.num_cases} cases passed{why}"

    def report(self) -> str:
        """What a check prints: the verdict first (on a projector it must not sit a screen below the
        code), then for a failure the first :data:`FAILED_ROWS` failing cases, expected beside actual,
        each diagnosis written once ("the same mistake as above" after), and a count of the rest.

        Example (a failure; a pass is its summary line alone)::

            FAIL  blocks_needed: 3/5 cases passed; first failure: 9 tokens: expected 3, got 2 -- ...
              FAIL 9 tokens
                     expected 3
                     actual   2
                     -> rounded down: a partial block still needs a whole block
              FAIL 5 tokens
                     expected 2
                     actual   1
                     -> the same mistake as above
              3 case(s) passed: 8 tokens; 0 tokens; 4 tokens
        """
        if self.passed or self.error or self._untouched:   # one line says it all (and no expected value of a stub)
            return self.summary
        lines, seen = [self.summary], set()
        for case in self.failures[:FAILED_ROWS]:
            note = "the same mistake as above" if case.note and case.note in seen else case.note
            seen.add(case.note)
            lines.append(replace(case, note=note).line())
        rest = self.failures[FAILED_ROWS:]
        if rest:
            same = all(c.note == self.failures[0].note for c in rest)
            lines.append(f"  ... {len(rest)} more failed" + (" (the same mistake)" if same and self.failures[0].note else ""))
        ok = [c.label for c in self.cases if c.passed]
        if ok:
            listed = "; ".join(ok[:3]) + ("; ..." if len(ok) > 3 else "")
            lines.append(f"  {len(ok)} case(s) passed: {_short_text(listed)}")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return f"<CheckResult {self.summary}>"

    def _ipython_display_(self) -> None:
        # The report was printed when the check ran; show nothing more in a notebook.
        return None


# -------------------------------------------------------------------------- checker
class Checker:
    """Collects cases for one exercise, then prints the report (``done``).

    ``fn``: the learner's function; ``reference``: kvlab's own implementation (the
    expected outcome of ``run`` is computed by calling it); ``compare(expected, actual)``:
    equality by default. ``diagnose``: functions ``(expected, actual) -> str | None`` that name
    the common mistake behind a wrong answer (:mod:`kvlab.check.diagnose`); the first that
    speaks is shown under the failing case and in the summary. ``verbose=False`` keeps ``done``
    quiet (for tests). ``run`` also fails a call that changed its arguments (a list popped, a
    dict sorted in place), whether it returned or raised, unless ``inputs_unchanged=False``.
    """

    def __init__(
        self,
        name: str,
        fn: Any = None,
        reference: Callable | None = None,
        compare: Callable[[Any, Any], bool] | None = None,
        verbose: bool = True,
        diagnose: Sequence[Diagnosis] = (),
        inputs_unchanged: bool = True,
    ) -> None:
        self.name, self.fn, self.reference, self.compare, self.verbose = name, fn, reference, compare, verbose
        self.inputs_unchanged = inputs_unchanged
        self.diagnose = list(diagnose)
        self.result = CheckResult(name)
        if fn is not None and not callable(fn):
            self.result.error = f"expected a function, got {_short(fn)} ({type(fn).__name__})"

    @property
    def ok(self) -> bool:
        """False once the learner's object proved unusable (not callable)."""
        return not self.result.error

    def unusable(self, label: str, expected: Any) -> bool:
        """True, with a FAIL case recorded for ``label``, when the learner's object is not a
        function: the checker skips the case (``if c.unusable(label, expected): continue``)."""
        if self.ok:
            return False
        self.record(label, expected, Raised(TypeError(self.result.error)), passed=False)
        return True

    def record(self, label: str, expected: Any, actual: Any, passed: bool | None = None, note: str = "") -> CaseResult:
        """Add one case whose outcomes were computed by the checker itself."""
        if passed is None:
            passed = same_outcome(expected, actual, self.compare)
        if not passed and not note:  # the exercise's own mistakes first, then the slips every exercise shares
            note = (first_diagnosis(self.diagnose, expected, actual) if not isinstance(actual, Raised) else "") \
                or first_diagnosis(SHARED_SLIPS, expected, actual)
        case = CaseResult(label, expected, actual, bool(passed), note)
        self.result.cases.append(case)
        return case

    def run(self, label: str, *args: Any, **kwargs: Any) -> CaseResult:
        """Call reference and learner on the same (deep-copied) arguments and record the pair."""
        if self.reference is None:
            raise TypeError(f"Checker {self.name!r} has no reference; use record()")
        expected = call(self.reference, *args, **kwargs)
        if isinstance(expected, Raised) and not isinstance(expected.exc, (ValueError, TypeError, KeyError, LookupError, ArithmeticError)) and not _is_kvlab_error(expected.exc):
            raise RuntimeError(f"reference for {self.name!r} failed on {label!r}: {expected!r}")  # a checker bug
        if self.unusable(label, expected):
            return self.result.cases[-1]
        given = copy.deepcopy((args, kwargs))
        before = copy.deepcopy(given)
        actual = call_in_place(self.fn, *given[0], **given[1])
        changed = changed_argument(self.reference, before, given) if self.inputs_unchanged else ""
        if changed:  # the contract: the caller's arguments are left as they were (raised or not)
            case = self.record(label, expected, actual, passed=False, note=changed)
            case.input_changed = True
            return case
        case = self.record(label, expected, actual)
        if not case.passed and not case.note and not kwargs:
            try:
                case.note = argument_slip(self.reference, args, actual, _param_names(self.reference)) or ""
            except Exception:  # noqa: BLE001 -- a diagnosis never breaks a check
                case.note = ""
        return case

    def done(self, strict: bool | None = None) -> CheckResult:
        """Print the report (when verbose) and return the result; in strict mode a FAIL raises AssertionError."""
        if not self.result.error and not self.result.cases:
            self.result.error = "the checker ran no cases (a checker bug)"
        _likeliest_mistakes(self.result.cases)
        if self.verbose:
            print(self.result.report())
        if (is_strict() if strict is None else strict) and not self.result.passed:
            raise AssertionError(f"{STRICT_ENV}=1 and the check failed:\n{self.result.report()}")
        return self.result


def _identical(expected: Any, actual: Any) -> bool:
    """The same type and equal: a right answer that failed for another reason (a changed input).

        >>> _identical(["a"], ["a"]), _identical((1,), [1]), _identical(2, 2.0)
        (True, False, False)
    """
    try:
        return type(expected) is type(actual) and bool(expected == actual)
    except Exception:  # noqa: BLE001 -- arrays and the like: never claimed identical
        return False


def same_int(expected: Any, actual: Any) -> bool:
    """Equal and an int (a count or a number of bytes): a float 2.0 is not a count, 2.25 never is.

        >>> same_int(2, 2), same_int(2, 2.0), same_int(1, True)
        (True, False, False)
    """
    return isinstance(actual, int) and not isinstance(actual, bool) and actual == expected


def same_ints(expected: Any, actual: Any) -> bool:
    """A tuple of ints equal to ``expected`` (a tuple): ``(2, 1)``, not ``[2, 1]`` nor ``(2.0, 1)``.

        >>> same_ints((2, 1), (2, 1)), same_ints((2, 1), (2.0, 1)), same_ints((2, 1), [2, 1])
        (True, False, False)
    """
    return (type(actual) is type(expected) and len(actual) == len(expected)
            and all(same_int(e, a) for e, a in zip(expected, actual)))


def changed_argument(reference: Callable | None, before: tuple, after: tuple) -> str:
    """'' when the call left its arguments as they were; else a sentence naming the first one changed.

        >>> changed_argument(None, (([1, 2],), {}), (([1],), {}))
        'changed its input: argument 1 was [1, 2], is [1] after the call: work on a copy, the caller still needs it'
    """
    names = _param_names(reference)
    (args0, kw0), (args1, kw1) = before, after
    for i, (x, y) in enumerate(zip(args0, args1)):
        if not same_value(x, y):
            name = f"{names[i]!r}" if i < len(names) else f"argument {i + 1}"
            if isinstance(x, dict) and isinstance(y, dict):  # a config: what changed, key by key, never cut
                return (f"changed its input {name} in place ({dict_changes(x, y)}): "
                        "work on a copy, the caller still needs it")
            return (f"changed its input: {name} was {_short(x)}, is {_short(y)} after the call: "
                    "work on a copy, the caller still needs it")
    for k in kw0:
        if not same_value(kw0[k], kw1.get(k)):
            return f"changed its input: {k!r} was {_short(kw0[k])}, is {_short(kw1.get(k))} after the call: work on a copy"
    return ""


def _likeliest_mistakes(cases: list[CaseResult]) -> None:
    """Where several known mistakes give a case's answer, name the one that gives the answer in the
    most failing cases of this check (a learner makes one mistake throughout); ties: the first."""
    from collections import Counter

    tally = Counter(m for c in cases if not c.passed for m in (c.candidates or [c.note]) if m)
    for c in cases:
        if len(c.candidates) > 1:
            c.note = max(c.candidates, key=lambda m: (tally[m], -c.candidates.index(m)))


def _param_names(fn: Callable | None) -> list[str]:
    import inspect

    try:
        return list(inspect.signature(fn).parameters) if fn else []
    except (TypeError, ValueError):
        return []


def _is_kvlab_error(exc: BaseException) -> bool:
    return type(exc).__module__.startswith("kvlab")


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
    expected = call(checker.reference, *args)
    if checker.unusable(label, expected):
        return checker.result.cases[-1]
    mine = copy.deepcopy(args)
    got = call_in_place(checker.fn, *mine)
    note = changed_input(args, mine, names) or wrong_exception(expected, got) or should_have_raised(expected, got)
    if note:
        return checker.record(label, expected, got, passed=False, note=note)
    found = matching_mistakes(got, mistakes, *args, expected=expected) if mistakes else []
    case = checker.record(label, expected, got, note=found[0] if found else "")
    case.candidates = found if not case.passed else []  # Checker.done keeps the likeliest
    if not case.passed and not case.note:
        case.note = ignored_parameter(checker.reference, args, got, names) or ""
    return case
