#!/usr/bin/env python
"""Build the lessons: notebooks/src/NN_slug.py (percent format) -> notebooks/NN_slug.ipynb, executed.

Usage (from the repository root, with the venv's python):
    .venv/bin/python scripts/build_notebooks.py            # build and execute every lesson
    .venv/bin/python scripts/build_notebooks.py 02 04      # only these lessons
    .venv/bin/python scripts/build_notebooks.py --no-exec  # convert only (no outputs)
    .venv/bin/python scripts/build_notebooks.py --check    # every .ipynb's cells == its .py source? lint?

The source format (a subset of jupytext's "percent" format; no jupytext needed):
    # %% [markdown]              a markdown cell; each following line starts with "# " (or is "#")
    # %%                         a code cell
    # %% tags=["exercise-stub"]  a code cell with tags (a JSON list)
Lines before the first ``# %%`` are a file header and are not part of the notebook.

Executing runs each notebook top to bottom with nbclient in notebooks/ (the venv's python3
kernel), with KVLAB_STATIC and KVLAB_CHECK_STRICT removed from the kernel's environment (live
widgets; the stubs' checks report FAIL without raising). It prints each lesson's run time.
Cell ids are deterministic (``cell-NN``) so rebuilding an unchanged lesson changes only
outputs. ``--check`` compares cell types, sources and tags and exits 1 on any difference.

Lint (``lint_cells``; run by ``--check``, and a lesson that fails it is not built): a code cell
must not hold markdown written as comments. A line such as ``# ## 4. O(n^2) versus O(n)`` in a
code cell is a heading the learner never sees rendered: the cell above it is missing its
``# %% [markdown]`` header.

Also used by tests/test_notebooks.py: ``parse_source``, ``to_notebook``, ``inject_solutions``,
``execute``, ``check_sync``, ``lint_cells``, ``lint_sources``.
"""
from __future__ import annotations

import argparse
import ast
import json
import os
import re
import sys
import time
import uuid
from datetime import datetime
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "notebooks" / "src"
NB_DIR = ROOT / "notebooks"
SOLUTIONS = ROOT / "solutions"
_HEADER = re.compile(r"^# %%(?P<md> \[markdown\])?(?:\s+tags=(?P<tags>\[.*\]))?\s*$")
KERNEL_ENV_DROP = ("KVLAB_STATIC", "KVLAB_CHECK_STRICT")
_HEADING_COMMENT = re.compile(r"^\s*# +#{1,6} +\S")  # "# ## Title": a markdown heading written as a comment


# ------------------------------------------------------------------------------ parse
def parse_source(text: str, name: str = "<source>") -> list[dict]:
    """Cells as dicts ``{"cell_type", "source", "tags"}`` from percent-format text.

    >>> cells = parse_source('# %% [markdown]\\n# # Title\\n#\\n# text\\n\\n# %% tags=["a"]\\nx = 1\\n\\n')
    >>> [(c["cell_type"], c["source"], c["tags"]) for c in cells]
    [('markdown', '# Title\\n\\ntext', []), ('code', 'x = 1', ['a'])]
    """
    cells: list[dict] = []
    cur: dict | None = None
    for lineno, line in enumerate(text.splitlines(), 1):
        if line.startswith("# %%"):
            m = _HEADER.match(line)
            if not m:
                raise ValueError(f"{name}:{lineno}: bad cell header {line!r} (want '# %%', '# %% [markdown]' or '# %% tags=[...]')")
            tags = json.loads(m["tags"]) if m["tags"] else []
            if not (isinstance(tags, list) and all(isinstance(t, str) for t in tags)):
                raise ValueError(f"{name}:{lineno}: tags must be a JSON list of strings, got {m['tags']}")
            cur = {"cell_type": "markdown" if m["md"] else "code", "lines": [], "tags": tags, "line": lineno}
            cells.append(cur)
            continue
        if cur is None:
            continue  # file header
        if cur["cell_type"] == "markdown":
            if line.strip() == "":
                cur["lines"].append("")  # blank separator lines between cells
            elif line == "#":
                cur["lines"].append("")
            elif line.startswith("# "):
                cur["lines"].append(line[2:])
            else:
                raise ValueError(f"{name}:{lineno}: markdown line must start with '# ': {line!r}")
        else:
            cur["lines"].append(line)
    out = []
    for c in cells:
        src = "\n".join(c["lines"]).strip("\n")
        if not src.strip():
            raise ValueError(f"{name}:{c['line']}: empty cell")
        out.append({"cell_type": c["cell_type"], "source": src, "tags": c["tags"]})
    return out


def lint_cells(cells: list[dict], name: str = "<source>") -> list[str]:
    """Problems a learner would see in the built notebook: a code cell with a markdown heading
    written as a comment (its ``# %% [markdown]`` header is missing).

    >>> lint_cells(parse_source('# %%\\nx = 1\\n#\\n# ## 4. Next part\\n'), "01")
    ["01: code cell 0 holds a markdown heading written as a comment (line 3: '# ## 4. Next part'); start a '# %% [markdown]' cell before it"]
    >>> lint_cells(parse_source('# %%\\n# a comment\\nx = 1  # ## not at the start\\n'))
    []
    """
    problems = []
    for i, c in enumerate(cells):
        if c["cell_type"] != "code":
            continue
        for k, line in enumerate(c["source"].splitlines(), 1):
            if _HEADING_COMMENT.match(line):
                problems.append(f"{name}: code cell {i} holds a markdown heading written as a comment "
                                f"(line {k}: {line.strip()!r}); start a '# %% [markdown]' cell before it")
                break
    return problems


def lint_sources(selected: list[str] | None = None) -> list[str]:
    """:func:`lint_cells` over every lesson source (or the ``selected`` ones): all problems, every lesson."""
    problems = []
    for path in lesson_sources(selected):
        problems += lint_cells(parse_source(path.read_text(), str(path)), path.stem)
    return problems


def to_notebook(cells: list[dict]) -> nbformat.NotebookNode:
    """An nbformat v4 notebook with deterministic cell ids and the python3 kernelspec."""
    nb = nbformat.v4.new_notebook()
    nb.metadata = {
        "kernelspec": {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    for i, c in enumerate(cells):
        make = nbformat.v4.new_markdown_cell if c["cell_type"] == "markdown" else nbformat.v4.new_code_cell
        cell = make(c["source"])
        cell.id = f"cell-{i:02d}"
        if c["tags"]:
            cell.metadata["tags"] = list(c["tags"])
        nb.cells.append(cell)
    return nb


def lesson_sources(selected: list[str] | None = None) -> list[Path]:
    """notebooks/src/NN_*.py, all or those whose number or stem is in ``selected``."""
    paths = sorted(SRC.glob("[0-9][0-9]_*.py"))
    if selected:
        want = set(selected)
        paths = [p for p in paths if p.stem in want or p.stem[:2] in want]
        missing = want - {p.stem for p in paths} - {p.stem[:2] for p in paths}
        if missing:
            raise SystemExit(f"no lesson source for {sorted(missing)} in {SRC}")
    return paths


# ------------------------------------------------------------------------ solutions
def _functions(source: str) -> list[str]:
    return [n.name for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]


def inject_solutions(cells: list[dict], solution_path: Path) -> list[dict]:
    """Replace every ``exercise-stub`` cell by the same-named definitions from the solution file.

    The new cell holds the solution file's top-level imports, then the source of each
    function (or class) the stub defines. KeyError names a definition the solution lacks.
    """
    text = solution_path.read_text()
    tree = ast.parse(text)
    imports = [ast.get_source_segment(text, n) for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    defs = {
        n.name: ast.get_source_segment(text, n, padded=False)
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    }
    # decorators are outside the node's segment; keep them
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and n.decorator_list:
            start = n.decorator_list[0].lineno
            defs[n.name] = "\n".join(text.splitlines()[start - 1 : n.end_lineno])
    out = []
    for c in cells:
        if "exercise-stub" in c["tags"]:
            names = _functions(c["source"])
            if not names:
                raise ValueError(f"exercise-stub cell defines no function:\n{c['source']}")
            missing = [n for n in names if n not in defs]
            if missing:
                raise KeyError(f"{solution_path.name} has no definition of {missing}")
            src = "\n".join(imports + [""] + [defs[n] + "\n" for n in names]).strip("\n")
            c = {**c, "source": "# solution injected from " + solution_path.name + "\n" + src}
        out.append(c)
    return out


# -------------------------------------------------------------------------- execute
def kernel_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in KERNEL_ENV_DROP}
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def execute(nb: nbformat.NotebookNode, cwd: Path = NB_DIR, timeout: int = 300, env: dict[str, str] | None = None,
            allow_errors: bool = False) -> float:
    """Run ``nb`` in place with nbclient (kernel python3, cwd ``cwd``); return seconds taken.

    ``env``: the kernel's environment (default: ours minus KVLAB_STATIC and KVLAB_CHECK_STRICT).
    Raises nbclient's CellExecutionError on an error unless ``allow_errors``.
    """
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(cwd)}},
        allow_errors=allow_errors,
        record_timing=True,
    )
    t0 = time.perf_counter()
    new = env if env is not None else kernel_env()  # read before the clear below (it reads os.environ)
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(new)
    try:
        client.execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    seconds = time.perf_counter() - t0
    nb.metadata.pop("execution", None)
    times = []
    for i, cell in enumerate(nb.cells):  # per-cell times, then drop them (they would churn the diffs)
        ex = cell.get("metadata", {}).pop("execution", None) or {}
        if "shell.execute_reply" in ex and "iopub.execute_input" in ex:
            start = datetime.fromisoformat(ex["iopub.execute_input"].replace("Z", "+00:00"))
            end = datetime.fromisoformat(ex["shell.execute_reply"].replace("Z", "+00:00"))
            times.append(((end - start).total_seconds(), i))
    execute.last_cell_times = sorted(times, reverse=True)  # type: ignore[attr-defined]
    return seconds


def build(path: Path, run: bool = True) -> float | None:
    cells = parse_source(path.read_text(), str(path))
    problems = lint_cells(cells, path.stem)
    if problems:
        raise SystemExit("not built:\n" + "\n".join(problems))
    nb = to_notebook(cells)
    seconds = execute(nb) if run else None
    out = NB_DIR / (path.stem + ".ipynb")
    nbformat.validate(nb)
    out.write_text(stable_widget_ids(nb, path.stem) + "\n", encoding="utf-8")
    return seconds


def stable_widget_ids(nb: nbformat.NotebookNode, stem: str) -> str:
    """Replace the random widget model ids (uuid4) by ids derived from the lesson and the
    widgets' structure, so rebuilding an unchanged lesson gives an unchanged file.

    Models are numbered in a depth-first walk from each widget output (cells in order),
    following ``IPY_MODEL_<id>`` references in key order; unreachable models come last,
    ordered by their content. Returns the notebook's JSON text.
    """
    state = nb.metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
    if not state:
        return nbformat.writes(nb)
    ref = re.compile(r"IPY_MODEL_([0-9a-f]{32})")
    order: list[str] = []

    def visit(model_id: str) -> None:
        if model_id in order or model_id not in state:
            return
        order.append(model_id)
        for child in ref.findall(json.dumps(state[model_id], sort_keys=True)):
            visit(child)

    for cell in nb.cells:
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get("application/vnd.jupyter.widget-view+json")
            if view:
                visit(view["model_id"])
    rest = sorted((m for m in state if m not in order), key=lambda m: ref.sub("", json.dumps(state[m], sort_keys=True)))
    for m in rest:
        visit(m)
    text = nbformat.writes(nb)
    for i, model_id in enumerate(order):
        text = text.replace(model_id, uuid.uuid5(uuid.NAMESPACE_URL, f"kvlab/{stem}/{i}").hex)
    return nbformat.writes(nbformat.reads(text, as_version=4))  # keys sorted again, now by the stable ids


# ---------------------------------------------------------------------------- check
def _cell_key(cell) -> tuple:
    return (cell["cell_type"], cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"]),
            list(cell.get("metadata", {}).get("tags", [])))


def check_sync(selected: list[str] | None = None) -> list[str]:
    """Problems found (empty when every .ipynb matches its source); also flags orphan notebooks."""
    problems = []
    sources = lesson_sources(selected)
    for path in sources:
        nb_path = NB_DIR / (path.stem + ".ipynb")
        if not nb_path.exists():
            problems.append(f"{nb_path.relative_to(ROOT)} is missing: run scripts/build_notebooks.py {path.stem[:2]}")
            continue
        want = [(c["cell_type"], c["source"], c["tags"]) for c in parse_source(path.read_text(), str(path))]
        got = [_cell_key(c) for c in nbformat.read(nb_path, as_version=4).cells]
        if want != got:
            first = next((i for i, (a, b) in enumerate(zip(want, got)) if a != b), min(len(want), len(got)))
            problems.append(
                f"{nb_path.relative_to(ROOT)} differs from {path.relative_to(ROOT)} (first at cell {first}; "
                f"{len(got)} vs {len(want)} cells): run scripts/build_notebooks.py {path.stem[:2]}"
            )
        else:
            nb = nbformat.read(nb_path, as_version=4)
            code = [c for c in nb.cells if c.cell_type == "code"]
            if code and any(c.get("execution_count") is None for c in code):
                problems.append(f"{nb_path.relative_to(ROOT)} has unexecuted cells: run scripts/build_notebooks.py {path.stem[:2]}")
    if not selected:
        stems = {p.stem for p in sources}
        for nb_path in sorted(NB_DIR.glob("[0-9][0-9]_*.ipynb")):
            if nb_path.stem not in stems:
                problems.append(f"{nb_path.relative_to(ROOT)} has no source in notebooks/src/")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("lessons", nargs="*", help="lesson numbers or stems (default: all)")
    ap.add_argument("--check", action="store_true",
                    help="only verify that each .ipynb matches its source, and lint the sources")
    ap.add_argument("--no-exec", action="store_true", help="convert without executing")
    args = ap.parse_args(argv)
    if args.check:
        problems = check_sync(args.lessons or None)
        for p in problems:
            print(p)
        print("notebooks in sync" if not problems else f"{len(problems)} problem(s)")
        lint = lint_sources(args.lessons or None)
        for p in lint:
            print(p)
        print("sources lint clean" if not lint else f"{len(lint)} lint problem(s)")
        return 1 if problems or lint else 0
    total = 0.0
    for path in lesson_sources(args.lessons or None):
        seconds = build(path, run=not args.no_exec)
        if seconds is None:
            print(f"{path.stem}: converted (not executed)")
        else:
            total += seconds
            slow = ", ".join(f"cell {i} {dt:.1f} s" for dt, i in execute.last_cell_times[:3])  # type: ignore[attr-defined]
            print(f"{path.stem}: built and executed in {seconds:.1f} s (slowest: {slow})")
    if total:
        print(f"total {total:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
