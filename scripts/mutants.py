"""Mutation testing of the exercise checkers: a checker that accepts a mutant of the reference
solution has a hole.

For every lesson NN it reads ``solutions/NN_*.py`` and the lesson source ``notebooks/src/NN_*.py``
(whose ``check.<checker>(<definition>)`` calls say which checker grades which definition), makes
small AST mutants of every top-level function and every method of a top-level class, and runs
that definition's checker on each mutant, in a forked child process (a crash, an abort or a hang
of one mutant cannot stop the run; ``--timeout`` seconds a mutant, SIGALRM). A definition that no
check call names (a helper) is graded by every checker of its lesson.

Mutation operators (one change per mutant):
    cmp        < <-> <=, > <-> >=, == <-> !=, in <-> not in, is <-> is not; cmp-flip: < <-> >, <= <-> >=
    const      an int constant +1 and -1
    index      a subscript's index (or slice bound) +1 and -1; range-end: range(..., end +1 and -1)
    binop      // <-> /, + <-> -, % -> //, * -> //
    round      round/math.floor/math.ceil/int swapped for one another; min <-> max
    copy       sorted(x) -> (x.sort() or x) (in place); list(x), x.copy(), deepcopy(x) -> x
    args       the first two positional arguments of a call swapped
    boolop     and <-> or; ``not x`` -> x
    drop       an ``if`` replaced by its else branch (always-if: by its body); an assert, a raise, an expression statement
               (x.append(...)), an augmented assignment (n += 1) removed
    flow       break <-> continue; the first statement of a loop body made ``return None`` when the
               function returns a value (an early return)

A mutant id is ``NN:qualname:+line:col:op`` (line relative to the definition's ``def``). Survivors
judged equivalent (the mutant behaves exactly as the reference, or differs only where the
exercise leaves the behaviour open) are listed in ``tests/mutants_equivalent.txt``, one a line:
``<id>  <one-line reason>``; tests/test_mutants.py reads it.

Usage (from the repository root, with the project's python; ``make mutants`` runs the first)::

    python scripts/mutants.py                      # every lesson: figures per lesson, survivors
    python scripts/mutants.py 03 04                # some lessons
    python scripts/mutants.py 04 --list            # the mutants, not run
    python scripts/mutants.py 04 --only TinyAllocator.free   # the mutants of one definition
    python scripts/mutants.py --sample 3           # every k-th mutant: about 3 a lesson (the suite)
    python scripts/mutants.py --json out.json      # also write every outcome as JSON

Exit status 1 when a lesson's kill rate (killed / (mutants - equivalent)) is under ``--target``
(default 0.95), or a survivor is not listed as equivalent and ``--strict`` is given.

In a test: ``run_lesson("04", sample=3)`` returns the list of :class:`Outcome`.
"""
from __future__ import annotations

import argparse
import ast
import copy
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS, SOURCES = ROOT / "solutions", ROOT / "notebooks" / "src"
EQUIVALENT = ROOT / "tests" / "mutants_equivalent.txt"
_CHECK_CALL = re.compile(r"^check\.(\w+)\((\w+)[,)]", re.M)

_CMP_SWAP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq,
             ast.NotEq: ast.Eq, ast.In: ast.NotIn, ast.NotIn: ast.In, ast.Is: ast.IsNot, ast.IsNot: ast.Is}
_CMP_FLIP = {ast.Lt: ast.Gt, ast.Gt: ast.Lt, ast.LtE: ast.GtE, ast.GtE: ast.LtE}
_BIN_SWAP = {ast.FloorDiv: ast.Div, ast.Div: ast.FloorDiv, ast.Add: ast.Sub, ast.Sub: ast.Add,
             ast.Mod: ast.FloorDiv, ast.Mult: ast.FloorDiv}
_ROUNDING = {"round": "math.floor", "floor": "math.ceil", "ceil": "math.floor", "int": "round",
             "min": "max", "max": "min"}
_COPIES = ("list", "copy", "deepcopy", "tuple")
_COMMUTATIVE = ("min", "max")  # swapping their arguments is always an equivalent mutant


@dataclass
class Site:
    """One mutation: where (a path of (field, index) from the module), and the change."""

    mutant_id: str
    path: tuple
    op: str
    before: str
    after: str
    make: Callable  # node -> replacement node (a statement may become ast.Pass)


@dataclass
class Outcome:
    mutant_id: str
    status: str   # killed | survived | timeout | crashed | checker-error | equivalent
    change: str
    seconds: float
    detail: str = ""  # a checker-error: the last line of the checker's traceback


# ------------------------------------------------------------------------------ lessons
def lesson_files(nn: str) -> tuple[Path, Path]:
    """The solution file and the lesson source of lesson ``nn`` ('04')."""
    sol = sorted(SOLUTIONS.glob(f"{nn}_*.py"))
    src = sorted(SOURCES.glob(f"{nn}_*.py"))
    if not sol or not src:
        raise SystemExit(f"lesson {nn}: no solutions/{nn}_*.py or notebooks/src/{nn}_*.py")
    return sol[0], src[0]


def checkers_of(src: Path) -> dict[str, str]:
    """``{definition: checker}`` from the lesson's ``check.<checker>(<definition>)`` calls."""
    return {defn: chk for chk, defn in _CHECK_CALL.findall(src.read_text())}


def all_lessons() -> list[str]:
    return sorted(p.name[:2] for p in SOLUTIONS.glob("[0-9][0-9]_*.py"))


# ------------------------------------------------------------------------------ sites
def _text(node: ast.AST) -> str:
    try:
        s = ast.unparse(node)
    except Exception:  # noqa: BLE001 -- a node that cannot be shown alone
        s = type(node).__name__
    s = " ".join(s.split())
    return s if len(s) <= 70 else s[:67] + "..."


def _call_name(node: ast.Call) -> str:
    f = node.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""


def _plus(node: ast.expr, k: int) -> ast.expr:
    return ast.BinOp(left=node, op=ast.Add() if k > 0 else ast.Sub(), right=ast.Constant(abs(k)))


def _expr_sites(node: ast.AST, returns_value: bool) -> Iterator[tuple[str, Callable]]:
    """(op, make) for the mutations of one node."""
    if isinstance(node, ast.Compare):
        for i, op in enumerate(node.ops):
            if type(op) in _CMP_SWAP:
                def make(n, i=i):
                    n.ops[i] = _CMP_SWAP[type(n.ops[i])]()
                    return n
                yield "cmp", make
            if type(op) in _CMP_FLIP:
                def flip(n, i=i):
                    n.ops[i] = _CMP_FLIP[type(n.ops[i])]()
                    return n
                yield "cmp-flip", flip
    elif isinstance(node, ast.Constant) and type(node.value) is int:
        for k in (1, -1):
            yield f"const{k:+d}", lambda n, k=k: ast.Constant(n.value + k)
    elif isinstance(node, ast.Subscript) and not (isinstance(node.slice, ast.Constant)):
        sl = node.slice
        if isinstance(sl, ast.Slice):
            for bound in ("lower", "upper"):
                if getattr(sl, bound) is not None:
                    for k in (1, -1):
                        def make(n, bound=bound, k=k):
                            setattr(n.slice, bound, _plus(getattr(n.slice, bound), k))
                            return n
                        yield f"index-{bound}{k:+d}", make
        elif not isinstance(sl, ast.Tuple):
            for k in (1, -1):
                def make(n, k=k):
                    n.slice = _plus(n.slice, k)
                    return n
                yield f"index{k:+d}", make
    elif isinstance(node, ast.BinOp) and type(node.op) in _BIN_SWAP:
        def make(n):
            n.op = _BIN_SWAP[type(n.op)]()
            return n
        yield "binop", make
    elif isinstance(node, ast.BoolOp):
        yield "boolop", lambda n: ast.BoolOp(op=ast.Or() if isinstance(n.op, ast.And) else ast.And(), values=n.values)
    elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        yield "not", lambda n: n.operand
    elif isinstance(node, ast.Call):
        yield from _call_sites(node)


def _call_sites(node: ast.Call) -> Iterator[tuple[str, Callable]]:
    name = _call_name(node)
    if name == "range" and node.args and not node.keywords:
        for k in (1, -1):
            def bound(n, k=k):
                n.args[-1 if len(n.args) < 3 else 1] = _plus(n.args[-1 if len(n.args) < 3 else 1], k)
                return n
            yield f"range-end{k:+d}", bound
    if name in _ROUNDING and node.args:
        new = _ROUNDING[name]

        def make(n, new=new):
            func = ast.parse(new, mode="eval").body
            return ast.Call(func=func, args=n.args[:1] if new != "round" else n.args, keywords=[]) \
                if new.startswith("math.") else ast.Call(func=func, args=n.args, keywords=n.keywords)
        yield "round", make
    if name == "sorted" and len(node.args) == 1 and not node.keywords:
        yield "copy", lambda n: ast.BoolOp(op=ast.Or(), values=[
            ast.Call(func=ast.Attribute(value=n.args[0], attr="sort", ctx=ast.Load()), args=[], keywords=[]),
            n.args[0]])
    if name in _COPIES and len(node.args) == 1 and not node.keywords:
        yield "copy", lambda n: n.args[0]
    if name == "copy" and not node.args and isinstance(node.func, ast.Attribute):
        yield "copy", lambda n: n.func.value
    if name not in _COMMUTATIVE and len(node.args) >= 2 and not any(isinstance(a, ast.Starred) for a in node.args[:2]):
        def make(n):
            n.args[0], n.args[1] = n.args[1], n.args[0]
            return n
        yield "args", make


def _stmt_sites(node: ast.stmt, returns_value: bool) -> Iterator[tuple[str, Callable]]:
    if isinstance(node, ast.If) and not (len(node.body) == 1 and isinstance(node.body[0], ast.Raise)):
        yield "drop-if", lambda n: n.orelse if n.orelse else ast.Pass()
    if isinstance(node, ast.If) and not isinstance(node.body[0], ast.Raise):
        yield "always-if", lambda n: n.body
    elif isinstance(node, (ast.Assert, ast.Raise)):
        yield f"drop-{type(node).__name__.lower()}", lambda n: ast.Pass()
    elif isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
        yield "drop-call", lambda n: ast.Pass()
    elif isinstance(node, ast.AugAssign):
        yield "drop-augassign", lambda n: ast.Pass()
    elif isinstance(node, ast.Break):
        yield "flow", lambda n: ast.Continue()
    elif isinstance(node, ast.Continue):
        yield "flow", lambda n: ast.Break()
    if isinstance(node, (ast.For, ast.While)) and returns_value:
        def make(n):
            n.body = [ast.Return(value=ast.Constant(None))] + n.body
            return n
        yield "return-early", make


def _walk(node: ast.AST, path: tuple) -> Iterator[tuple[ast.AST, tuple]]:
    """Every node under ``node`` with its path; not into f-strings nor into the exception a
    ``raise`` builds (a change there changes a message only: an equivalent mutant)."""
    yield node, path
    if isinstance(node, ast.JoinedStr):
        return
    for fld, value in ast.iter_fields(node):
        if isinstance(node, ast.Raise) and fld in ("exc", "cause"):
            continue
        if fld in ("decorator_list", "returns", "annotation", "type_comment"):
            continue
        if isinstance(value, list):
            for i, item in enumerate(value):
                if isinstance(item, ast.AST):
                    yield from _walk(item, path + ((fld, i),))
        elif isinstance(value, ast.AST):
            yield from _walk(value, path + ((fld, None),))


def _definitions(tree: ast.Module) -> Iterator[tuple[str, ast.AST, tuple]]:
    """(qualname, node, path) of each top-level function and each method of a top-level class."""
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.FunctionDef):
            yield node.name, node, (("body", i),)
        elif isinstance(node, ast.ClassDef):
            for j, m in enumerate(node.body):
                if isinstance(m, ast.FunctionDef):
                    yield f"{node.name}.{m.name}", m, (("body", i), ("body", j))


def sites(nn: str, tree: ast.Module) -> list[Site]:
    """Every mutation of every definition of lesson ``nn``'s solution, in source order."""
    out: list[Site] = []
    for qual, fdef, fpath in _definitions(tree):
        returns_value = any(isinstance(n, ast.Return) and n.value is not None for n in ast.walk(fdef))
        for field_, value in ast.iter_fields(fdef):
            if field_ not in ("body",):
                continue
            for i, stmt in enumerate(value):
                if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    continue  # the docstring
                for node, path in _walk(stmt, fpath + (("body", i),)):
                    gen = _stmt_sites(node, returns_value) if isinstance(node, ast.stmt) else _expr_sites(node, returns_value)
                    for op, make in gen:
                        line = getattr(node, "lineno", fdef.lineno) - fdef.lineno
                        mid = f"{nn}:{qual}:+{line}:{getattr(node, 'col_offset', 0)}:{op}"
                        after = _apply_one(copy.deepcopy(node), make)
                        out.append(Site(mid, path, op, _text(node), after, make))
    return _unique(out)


def _apply_one(node: ast.AST, make: Callable) -> str:
    new = make(node)
    if isinstance(new, list):
        return "; ".join(_text(n) for n in new) or "pass"
    return _text(new)


def _unique(found: list[Site]) -> list[Site]:
    seen: dict[str, int] = {}
    for s in found:
        n = seen.get(s.mutant_id, 0)
        seen[s.mutant_id] = n + 1
        if n:
            s.mutant_id += f"#{n + 1}"
    return found


def mutate(tree: ast.Module, site: Site) -> ast.Module:
    """A copy of ``tree`` with ``site``'s one change."""
    new = copy.deepcopy(tree)
    parent: ast.AST = new
    for fld, idx in site.path[:-1]:
        parent = getattr(parent, fld) if idx is None else getattr(parent, fld)[idx]
    fld, idx = site.path[-1]
    node = getattr(parent, fld) if idx is None else getattr(parent, fld)[idx]
    repl = site.make(node)
    if idx is None:
        setattr(parent, fld, repl)
    elif isinstance(repl, list):
        getattr(parent, fld)[idx:idx + 1] = repl
    else:
        getattr(parent, fld)[idx] = repl
    return ast.fix_missing_locations(new)


# ------------------------------------------------------------------------------ running
def _child(src_text: str, qual: str, checkers: list[str], workdir: str, timeout: float) -> None:
    """In the forked child: import the mutant, run its checkers; exit 0 if every one passes."""
    signal.alarm(max(1, int(round(timeout))))
    code = 3
    try:
        path = Path(workdir) / f"mutant_{os.getpid()}.py"
        path.write_text(src_text)
        spec = importlib.util.spec_from_file_location(path.stem, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)  # type: ignore[union-attr]
        path.unlink()
        from kvlab import check
        obj = getattr(mod, qual.split(".")[0])
        code = 0
        for name in checkers:
            if not getattr(check, name)(obj, verbose=False).passed:
                code = 1
                break
    except BaseException:  # noqa: BLE001 -- a checker that raises: a checker defect, reported
        import traceback

        (Path(workdir) / f"traceback_{os.getpid()}.txt").write_text(traceback.format_exc())
        code = 2
    finally:
        sys.stdout.flush()
        os._exit(code)


def run_mutant(tree: ast.Module, site: Site, checkers: list[str], workdir: str, timeout: float) -> Outcome:
    src_text = "import math\n" + ast.unparse(mutate(tree, site))   # the rounding swaps may need math
    t0 = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        _child(src_text, site.mutant_id.split(":")[1], checkers, workdir, timeout)
    _, status = os.waitpid(pid, 0)
    dt = time.perf_counter() - t0
    tb = Path(workdir) / f"traceback_{pid}.txt"
    detail = tb.read_text().strip().splitlines()[-1] if tb.exists() else ""
    if os.WIFSIGNALED(status):
        kind = "timeout" if os.WTERMSIG(status) == signal.SIGALRM else "crashed"
    else:
        kind = {0: "survived", 1: "killed", 2: "checker-error"}.get(os.WEXITSTATUS(status), "crashed")
    return Outcome(site.mutant_id, kind, f"{site.before}  ->  {site.after}", round(dt, 3), detail)


def load_equivalent(path: Path = EQUIVALENT) -> dict[str, str]:
    """``{mutant id: reason}`` from the equivalents file (``#`` comments and blank lines skipped)."""
    out: dict[str, str] = {}
    if path.exists():
        for line in path.read_text().splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                mid, _, reason = line.partition(" ")
                out[mid] = reason.strip()
    return out


def lesson_sites(nn: str, only: str | None = None) -> tuple[ast.Module, list[Site], dict[str, list[str]]]:
    """The solution's tree, its mutation sites, and the checkers each definition gets."""
    sol, src = lesson_files(nn)
    tree = ast.parse(sol.read_text())
    graded = checkers_of(src)
    found = [s for s in sites(nn, tree) if only is None or s.mutant_id.split(":")[1] == only]
    per_def = {}
    for s in found:
        qual = s.mutant_id.split(":")[1]
        top = qual.split(".")[0]
        per_def[qual] = [graded[top]] if top in graded else sorted(set(graded.values()))
    return tree, found, per_def


def warm_up(nn: str, per_def: dict[str, list[str]]) -> None:
    """Run each checker once on the reference solution, in this process, before the forks: the
    children inherit what it imported (torch, the model, Triton). SystemExit if the reference fails."""
    from kvlab import check

    sol, _ = lesson_files(nn)
    spec = importlib.util.spec_from_file_location(f"reference_{nn}", sol)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    for qual, names in per_def.items():
        for name in names:
            if not getattr(check, name)(getattr(mod, qual.split(".")[0]), verbose=False).passed:
                raise SystemExit(f"lesson {nn}: the reference {qual} fails check.{name}: fix that first")


def run_lesson(nn: str, sample: int = 0, only: str | None = None, timeout: float = 20.0,
               equivalent: dict[str, str] | None = None, progress: bool = False) -> list[Outcome]:
    """Run lesson ``nn``'s mutants (``sample``: about that many, every k-th); an outcome each."""
    tree, found, per_def = lesson_sites(nn, only)
    if sample:
        step = max(1, len(found) // sample)
        found = found[::step][:sample]
    equivalent = load_equivalent() if equivalent is None else equivalent
    warm_up(nn, per_def)
    outcomes = []
    with tempfile.TemporaryDirectory(prefix="kvlab-mutants-") as workdir:
        for s in found:
            o = run_mutant(tree, s, per_def[s.mutant_id.split(":")[1]], workdir, timeout)
            if o.status == "survived" and s.mutant_id in equivalent:
                o.status = "equivalent"
            outcomes.append(o)
            if progress:
                print(f"  {o.status:13s} {o.seconds:5.2f}s {o.mutant_id}", file=sys.stderr, flush=True)
    return outcomes


def figures(outcomes: list[Outcome]) -> dict[str, float]:
    n = len(outcomes)
    eq = sum(o.status == "equivalent" for o in outcomes)
    survived = sum(o.status == "survived" for o in outcomes)
    killed = n - eq - survived
    rate = killed / (n - eq) if n - eq else 1.0
    return {"mutants": n, "killed": killed, "equivalent": eq, "survived": survived, "kill_rate": rate,
            "checker_errors": sum(o.status in ("checker-error", "crashed") for o in outcomes),
            "seconds": round(sum(o.seconds for o in outcomes), 1)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    ap.add_argument("--list", action="store_true", help="list the mutants, do not run them")
    ap.add_argument("--only", help="only the mutants of this definition (qualname: TinyAllocator.free)")
    ap.add_argument("--sample", type=int, default=0, help="about this many mutants a lesson")
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds a mutant (default 20)")
    ap.add_argument("--target", type=float, default=0.95, help="kill rate every lesson must reach")
    ap.add_argument("--strict", action="store_true", help="fail on any survivor not listed as equivalent")
    ap.add_argument("--json", type=Path, help="write every outcome here")
    ap.add_argument("-v", "--verbose", action="store_true", help="one line a mutant as it runs")
    args = ap.parse_args(argv)
    os.environ.pop("KVLAB_CHECK_STRICT", None)
    lessons = args.lessons or all_lessons()
    if args.list:
        for nn in lessons:
            for s in lesson_sites(nn, args.only)[1]:
                print(f"{s.mutant_id}  {s.before}  ->  {s.after}")
        return 0
    import kvlab.check  # noqa: F401 -- imported once, before the forks
    equivalent, results, bad = load_equivalent(), {}, False
    print(f"{'lesson':6s} {'mutants':>7s} {'killed':>6s} {'equiv':>5s} {'survived':>8s} {'kill rate':>9s} {'errors':>6s} {'s':>6s}")
    for nn in lessons:
        outs = run_lesson(nn, args.sample, args.only, args.timeout, equivalent, args.verbose)
        f = figures(outs)
        results[nn] = {"figures": f, "outcomes": [asdict(o) for o in outs]}
        print(f"{nn:6s} {f['mutants']:7d} {f['killed']:6d} {f['equivalent']:5d} {f['survived']:8d} "
              f"{f['kill_rate']:9.1%} {f['checker_errors']:6d} {f['seconds']:6.1f}", flush=True)
        for o in outs:
            if o.status in ("survived", "checker-error", "crashed"):
                print(f"    {o.status}: {o.mutant_id}  {o.change}" + (f"\n        {o.detail}" if o.detail else ""))
        bad |= f["kill_rate"] < args.target or (args.strict and f["survived"] > 0)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
