"""The site's exercises (used by scripts/site_render.py): the solution a stub stands for, and the
checker's verdict on that solution, computed at build time in this process.

A lesson's exercise is a stub cell (tag ``exercise-stub``) followed by its check cell
(``check.NAME(ARG)``). The site never shows the stub's own check output (a FAIL the student did
not cause): behind "show the solution" it shows the solution from ``solutions/NN_*.py`` with only
the imports it uses, and, behind that, what ``kvlab.check.NAME`` printed when it ran on that
solution here, at build time (``verdict``).

Example:
    >>> src = "import os\\nfrom math import ceil, floor\\n\\ndef f(n):\\n    return ceil(n)\\n"
    >>> print(used_imports(src, ["def f(n):\\n    return ceil(n)"]))
    from math import ceil
    >>> check_calls("from kvlab import check\\ncheck.translate(translate)")
    [('translate', 'translate')]
"""
from __future__ import annotations

import ast
import contextlib
import importlib.util
import io
import re
import time
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

_CALL = re.compile(r"^check\.(\w+)\((\w+)(?:, [^\n]*)?\)\s*$", re.M)   # extra arguments (live cases) are not passed here


def check_calls(source: str) -> list[tuple[str, str]]:
    """The ``check.NAME(ARG)`` calls of a check cell, as (checker, argument) pairs."""
    return _CALL.findall(source)


def _names_used(code: str) -> set[str]:
    tree = ast.parse(code)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}


def used_imports(solution_text: str, definitions: list[str]) -> str:
    """The solution file's top-level imports cut down to the names ``definitions`` use, one
    statement a line (``from x import a, b`` keeps only the used names; an unused one goes)."""
    used = set().union(*(_names_used(d) for d in definitions)) if definitions else set()
    lines = []
    for node in ast.parse(solution_text).body:
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        keep = [a for a in node.names if (a.asname or a.name).split(".")[0] in used]
        if not keep:
            continue
        names = ", ".join(a.name + (f" as {a.asname}" if a.asname else "") for a in keep)
        lines.append(f"from {'.' * node.level}{node.module or ''} import {names}" if isinstance(node, ast.ImportFrom)
                     else f"import {names}")
    return "\n".join(lines)


def solution_for(stub: str, solution_file: Path) -> str | None:
    """The solution's definitions of the names a stub defines, after the imports they use."""
    if not solution_file.exists():
        return None
    text = solution_file.read_text()
    tree = ast.parse(text)
    wanted = [n.name for n in ast.parse(stub).body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
    lines = text.splitlines()
    defs = {}
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            start = n.decorator_list[0].lineno if n.decorator_list else n.lineno
            defs[n.name] = "\n".join(lines[start - 1:n.end_lineno])
    chosen = [defs[w] for w in wanted if w in defs]
    if not chosen:
        return None
    head = used_imports(text, chosen)
    return ((head + "\n\n\n") if head else "") + "\n\n\n".join(chosen)


@dataclass
class Verdict:
    """What one checker printed on the solution, and whether it passed."""

    checker: str
    passed: bool
    text: str
    seconds: float


def _load(solution_file: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"kvlab_site_solution_{solution_file.stem}", solution_file)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_MODULES: dict[Path, ModuleType] = {}


def verdict(checker: str, arg: str, solution_file: Path) -> Verdict:
    """Run ``kvlab.check.<checker>`` on the solution file's ``arg`` (here, now) and keep its printout.
    A checker that raises is a verdict too (``passed`` False, the error in ``text``)."""
    from kvlab import check

    t0 = time.perf_counter()
    out = io.StringIO()
    try:
        mod = _MODULES.get(solution_file) or _MODULES.setdefault(solution_file, _load(solution_file))
        with contextlib.redirect_stdout(out):
            result = getattr(check, checker)(getattr(mod, arg))
        passed = bool(getattr(result, "passed", False))
    except Exception as e:  # shown on the page and counted by the build as an error
        print(f"{type(e).__name__}: {e}", file=out)
        passed = False
    return Verdict(checker, passed, out.getvalue(), time.perf_counter() - t0)
