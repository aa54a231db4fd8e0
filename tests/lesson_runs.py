"""One run of each lesson per test session, shared by the tests that need it.

A lesson's run is made in one of two ways, whichever comes first:

- **in the browser** (tests/test_browser.py, the usual way): JupyterLab runs the lesson live;
  meanwhile tests/site_recorder.py records, in a fork of the kernel at each drawing cell, that
  cell's outputs with ``KVLAB_STATIC=frames`` (figures static, every stepper a player with all its
  frames: what the static site renders); after the lesson, each exercise's solution and its check
  run in the same kernel, strict. :func:`save_browser_run` saves it: the notebook as JupyterLab
  held it (``<stem>.live.ipynb``, what the checks read), the site's copy (``<stem>.ipynb``: the
  same with the drawing cells' recorded outputs) and the solutions' outputs (``<stem>.json``).
- **headless** (:func:`executed`, when no browser run of this session exists: no browser on the
  machine, a lesson whose drawing cells could not be recorded, or a browser run that failed):
  nbclient runs ``notebooks/<stem>.ipynb`` (outputs stripped) top to bottom with
  ``KVLAB_STATIC=frames``, then, in the SAME kernel, with ``KVLAB_CHECK_STRICT=1`` set, each
  exercise's solution (solutions/<stem>.py, injected as scripts/build_notebooks.py's
  ``inject_solutions`` does) followed by its check cell again. Same files, one copy for both.

Once per session: the browser test holds its lessons' file locks from its first lesson on, and a
test that asks for a run (:func:`executed`) takes the lesson's lock, so pytest-xdist workers wait
for each other; a run is reused while its run id (``KVLAB_TEST_RUN_ID``, set by tests/conftest.py
before the workers start) is this session's. A copy left by an earlier session is never trusted.

The checks on a run (tests/test_lessons_headless.py): :func:`nbval_differences` (nbval's
``--nbval-lax`` rules: cells marked ``# NBVAL_CHECK_OUTPUT`` compared with their stored outputs,
streams coalesced, metadata, widget views and PNGs skipped), :func:`cell_errors` (of the lesson and,
for a browser run, of the site's recorded outputs), :func:`stub_check_problems` and
:func:`solution_failures`.

Example:
    >>> run = executed("04_paging")                       # doctest: +SKIP
    >>> nbval_differences(run), solution_failures(run)     # doctest: +SKIP
    ([], [])
"""
from __future__ import annotations

import fcntl
import json
import os
import re
import sys
import time
from collections import defaultdict
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NB_DIR = ROOT / "notebooks"
RUNS = ROOT / "build" / "lesson-runs"
if str(ROOT / "scripts") not in sys.path:
    sys.path.insert(0, str(ROOT / "scripts"))  # build_notebooks
RUN_ID_ENV = "KVLAB_TEST_RUN_ID"
CELL_TIMEOUT_S = 240  # lesson 09's slowest cell ran 100 s on a loaded 2-core machine
SOLUTION_TAG = "kvlab-solution-check"
STRICT_CELL = "import os\nos.environ['KVLAB_CHECK_STRICT'] = '1'  # a failing check raises from here on"
CHECK_CALL = re.compile(r"^\s*check\.\w+\(", re.M)
# nbval's comparison skips these keys (nbval.plugin.IPyNbFile.skip_compare without --nbdime)
SKIP_COMPARE = ("metadata", "traceback", "prompt_number", "output_type", "name", "execution_count",
                "application/vnd.jupyter.widget-view+json", "image/png", "image/jpeg")


@dataclass
class LessonRun:
    """A lesson's run: the executed notebook (its own cells), the stored notebook it ran from, and
    per exercise the solution check's cells (``[solution cell, check cell]``)."""

    stem: str
    notebook: nbformat.NotebookNode
    stored: nbformat.NotebookNode
    solutions: list[dict]
    seconds: float
    path: Path
    site: nbformat.NotebookNode   # the copy the static site renders (the drawing cells' outputs as players)
    made_by: str = "headless"     # or "browser": the browser test's run (tests/test_browser.py)


def lesson_stems() -> list[str]:
    return sorted(p.stem for p in NB_DIR.glob("[0-9][0-9]_*.ipynb"))


def run_id() -> str:
    rid = os.environ.get(RUN_ID_ENV)
    if not rid:
        raise RuntimeError(f"{RUN_ID_ENV} is not set (tests/conftest.py sets it for every session)")
    return rid


@contextmanager
def _locked(stem: str) -> Iterator[None]:
    f = hold(stem)  # another worker running this lesson (headless or in the browser): wait for it
    try:
        yield
    finally:
        release(f)


def hold(stem: str):
    """Take lesson ``stem``'s lock (waiting for whoever holds it); :func:`release` gives it back.
    The browser test holds its lessons' locks from its first lesson on, so a test that asks for
    a run (:func:`executed`) waits for the browser's run instead of running the lesson itself."""
    RUNS.mkdir(parents=True, exist_ok=True)
    f = open(RUNS / f"{stem}.lock", "w")
    fcntl.flock(f, fcntl.LOCK_EX)
    return f


def release(f) -> None:
    fcntl.flock(f, fcntl.LOCK_UN)
    f.close()


def executed(stem: str) -> LessonRun:
    """This session's run of lesson ``stem`` (``NN_slug``): the one the browser test or another
    test (or worker) of this session made, or a headless run made now."""
    with _locked(stem):
        meta_path = RUNS / f"{stem}.json"
        meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
        if meta.get("run_id") != run_id():
            meta = _run(stem)
            meta_path.write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    stored = nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4)
    site = nbformat.read(RUNS / f"{stem}.ipynb", as_version=4)
    live = RUNS / f"{stem}.live.ipynb"
    nb = nbformat.read(live, as_version=4) if meta.get("made_by") == "browser" else site
    return LessonRun(stem, nb, stored, meta["solutions"], meta["seconds"], RUNS / f"{stem}.ipynb", site,
                     meta.get("made_by", "headless"))


def solution_codes(stem: str) -> list[str]:
    """What runs in the lesson's kernel after the lesson, in order: the strict cell, then per
    exercise its solution and its check (none for a lesson without exercises)."""
    sols = solution_cells(nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4), stem)
    return [STRICT_CELL] + [code for _i, sol, check in sols for code in (sol, check)] if sols else []


def _solution_records(sols: list[tuple[int, str, str]], outputs: list[list]) -> list[dict]:
    """Per exercise its solution and check with their outputs, ``outputs`` being those of
    :func:`solution_codes` in order; the strict cell's errors, if any, as one more record."""
    if not sols:
        return []
    records = [{"stub_cell": i, "solution": sol, "check": check, "outputs": [outputs[1 + 2 * k], outputs[2 + 2 * k]]}
               for k, (i, sol, check) in enumerate(sols)]
    strict_errors = [o for o in outputs[0] if o.get("output_type") == "error"]
    if strict_errors:
        records.append({"stub_cell": -1, "solution": STRICT_CELL, "check": "", "outputs": [strict_errors, []]})
    return records


def save_browser_run(stem: str, live: dict, frames: Path, outputs: list[list], seconds: float) -> str:
    """Save the browser test's run of lesson ``stem`` as this session's run (call it holding the
    lesson's lock): ``live``, the notebook as JupyterLab holds it after Run All; ``frames``, the
    folder where tests/site_recorder.py wrote each drawing cell's static-site outputs; ``outputs``,
    those of :func:`solution_codes`, run in order in the same kernel after the lesson. The site's copy is the live notebook with each drawing cell's
    outputs replaced by its recorded ones. Returns "" when saved, else why not (a drawing cell not
    recorded: a thread of the lesson's own was running, not one of kvlab's servers); the lesson is then
    run headless for the site and its checks."""
    stored = nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4)
    live = {**live, "cells": [{k: v for k, v in c.items() if v is not None} for c in live["cells"]]}  # JupyterLab: "attachments": null
    nb = nbformat.from_dict(live)
    drawn = drawn_cells(stored)
    records = [json.loads(p.read_text()) for p in sorted(frames.glob("*.json"))]
    unsafe = [r["unsafe"] for r in records if "unsafe" in r]
    if unsafe or len(records) != len(drawn) or len(nb.cells) != len(stored.cells):
        return (unsafe[0] if unsafe else f"{len(records)} drawing cells recorded of {len(drawn)}, "
                f"{len(nb.cells)} cells of {len(stored.cells)}")
    site = nbformat.from_dict(json.loads(json.dumps(live)))
    for i, record in zip(drawn, records):
        site.cells[i].outputs = [nbformat.from_dict(o) for o in record["outputs"]]
    sols = solution_cells(stored, stem)
    if len(outputs) != len(solution_codes(stem)):
        return f"{len(outputs)} of the {len(solution_codes(stem))} solution codes run"
    meta_sols = _solution_records(sols, outputs)
    nbformat.write(nb, RUNS / f"{stem}.live.ipynb")
    nbformat.write(site, RUNS / f"{stem}.ipynb")
    meta = {"run_id": run_id(), "made_by": "browser", "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "pid": os.getpid(), "seconds": round(seconds, 1), "solutions": json.loads(json.dumps(meta_sols))}
    (RUNS / f"{stem}.json").write_text(json.dumps(meta, indent=1, ensure_ascii=False))
    return ""


DRAWN_MIMES = {"text/html", "image/svg+xml", "image/png", "application/vnd.plotly.v1+json",
               "application/vnd.jupyter.widget-view+json"}


def drawn_cells(stored: nbformat.NotebookNode) -> list[int]:
    """The code cells whose stored outputs are drawn (HTML, SVG, plotly, widgets, images): the ones
    classroom mode draws differently and the static site draws as players and static figures."""
    return [i for i, c in enumerate(stored.cells) if c.cell_type == "code"
            and any(DRAWN_MIMES & set(o.get("data", {})) for o in c.get("outputs", []))]


def solution_cells(stored: nbformat.NotebookNode, stem: str) -> list[tuple[int, str, str]]:
    """``(stub cell index, solution source, check source)`` per exercise of the lesson."""
    import build_notebooks as bn

    cells = [{"cell_type": c.cell_type, "source": c.source, "tags": list(c.get("metadata", {}).get("tags", []))}
             for c in stored.cells]
    stubs = [i for i, c in enumerate(cells) if "exercise-stub" in c["tags"]]
    if not stubs:
        return []
    injected = bn.inject_solutions(cells, ROOT / "solutions" / f"{stem}.py")
    out = []
    for i in stubs:
        check = next(c for c in cells[i + 1:] if c["cell_type"] == "code")
        if not CHECK_CALL.search(check["source"]):
            raise ValueError(f"{stem}: exercise stub at cell {i} is not followed by a check cell")
        out.append((i, injected[i]["source"], check["source"]))
    return out


def _run(stem: str) -> dict:
    """Execute the lesson, then its solution checks in the same kernel; save the executed copy."""
    import build_notebooks as bn

    stored = nbformat.read(NB_DIR / f"{stem}.ipynb", as_version=4)
    nb = nbformat.from_dict(json.loads(json.dumps(stored)))  # a deep copy, outputs stripped below
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    own = len(nb.cells)
    sols = solution_cells(stored, stem)
    stubs = [-1] + [i for i, _sol, _check in sols for _ in (0, 1)]   # the stub each code belongs to
    nb.cells += [_extra(code, stub) for code, stub in zip(solution_codes(stem), stubs)]
    env = bn.kernel_env()
    env.update(KVLAB_STATIC="frames", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"),
               PYTHONPATH=os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p))
    t0 = time.perf_counter()
    bn.execute(nb, cwd=NB_DIR, timeout=CELL_TIMEOUT_S, env=env, allow_errors=True)
    seconds = time.perf_counter() - t0
    solutions = _solution_records(sols, [c.outputs for c in nb.cells[own:]])
    nb.cells = nb.cells[:own]
    nbformat.write(nb, RUNS / f"{stem}.ipynb")
    return {"run_id": run_id(), "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"), "pid": os.getpid(),
            "seconds": round(seconds, 1), "solutions": json.loads(json.dumps(solutions)),
            "cell_times": [[round(dt, 2), i] for dt, i in getattr(bn.execute, "last_cell_times", [])]}


def _extra(source: str, stub: int) -> nbformat.NotebookNode:
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata[SOLUTION_TAG] = stub
    return cell


# ------------------------------------------------------------------------------ checks
def text_of(outputs) -> str:
    parts = []
    for o in outputs:
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o:
            parts.append(str(o["data"].get("text/plain", "")))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(parts)


def cell_options(cell) -> dict:
    """nbval's options for a code cell under ``--nbval-lax``: ``check``, ``skip``, ``check_exception``."""
    from nbval.plugin import find_comment_markers, find_metadata_tags

    options = defaultdict(bool, find_metadata_tags(cell.get("metadata", {})))
    options.update(dict(find_comment_markers(cell.source)))
    options.setdefault("check", False)
    return options


def cell_errors(run: LessonRun) -> list[str]:
    """Every cell of the lesson's own run that raised (as nbval fails a cell that raises, unless it
    is marked ``# NBVAL_RAISES_EXCEPTION``)."""
    found = []
    cells = list(enumerate(run.notebook.cells))
    if run.site is not run.notebook:  # a browser run: the site's recorded outputs too
        cells += [(i, c) for i in drawn_cells(run.stored) for c in [run.site.cells[i]]]
    for i, c in cells:
        if c.cell_type != "code" or cell_options(c)["check_exception"]:
            continue
        for o in c.outputs:
            if o.get("output_type") == "error":
                found.append(f"{run.stem} cell {i} raised {o.get('ename')}: {o.get('evalue')}\n{c.source[:300]}")
    return found


def _flatten(outputs) -> dict[str, list]:
    """nbval's compare_outputs layout: key (stream name or MIME type) -> values in order."""
    from nbval.plugin import coalesce_streams, transform_streams_for_comparison

    flat: dict[str, list] = defaultdict(list)
    outs = [nbformat.from_dict(json.loads(json.dumps(o))) for o in outputs]  # coalesce_streams edits in place
    for out in transform_streams_for_comparison(coalesce_streams(outs)):
        for key, value in out.items():
            if key in SKIP_COMPARE:
                continue
            if key == "data":
                for mime, v in value.items():
                    if mime not in SKIP_COMPARE:
                        flat[mime].append(v)
            else:
                flat[key].append(value)
    return flat


def compare_outputs(test, ref) -> str:
    """'' when ``test`` matches ``ref`` by nbval's rules, else what differs."""
    t, r = _flatten(test), _flatten(ref)
    if set(r) - set(t):
        return f"missing output fields from running code: {sorted(set(r) - set(t))}"
    if set(t) - set(r):
        return f"unexpected output fields from running code: {sorted(set(t) - set(r))}"
    for key in r:
        if len(t[key]) != len(r[key]):
            return f"dissimilar number of outputs for {key!r}: stored {len(r[key])}, now {len(t[key])}"
        for a, b in zip(r[key], t[key]):
            if a != b:
                return f"{key} differs:\n<<<<<<<< stored\n{a}\n======== now\n{b}\n>>>>>>>>"
    return ""


def nbval_differences(run: LessonRun) -> list[str]:
    """The ``# NBVAL_CHECK_OUTPUT`` cells whose fresh outputs differ from the stored ones
    (a stored cell that never ran is not compared, as in nbval)."""
    found = []
    for k, (stored, fresh) in enumerate(zip(run.stored.cells, run.notebook.cells)):
        if stored.cell_type != "code":
            continue
        opts = cell_options(stored)
        if opts["skip"]:
            raise ValueError(f"{run.stem} cell {k}: NBVAL_SKIP is not supported by this runner (the cell ran)")
        if not opts["check"] or stored.get("execution_count") is None:
            continue
        diff = compare_outputs(fresh.outputs, stored.outputs)
        if diff:
            found.append(f"{run.stem} cell {k} (# NBVAL_CHECK_OUTPUT): {diff}")
    return found


def stub_check_problems(run: LessonRun) -> list[str]:
    """Check cells of the lesson as shipped (the stubs) that do not report a clean FAIL."""
    found = []
    for k, c in enumerate(run.notebook.cells):
        if c.cell_type == "code" and CHECK_CALL.search(c.source):
            text = text_of(c.outputs)
            if not re.search(r"^FAIL  \w+", text, re.M) or "Traceback" in text:
                found.append(f"{run.stem} cell {k}: the stub's check should report a clean FAIL, got:\n{text[-400:]}")
    return found


def solution_failures(run: LessonRun) -> list[str]:
    """Each exercise's solution, run through its check in strict mode: what did not PASS."""
    found = []
    for s in run.solutions:
        sol_out, check_out = (nbformat.from_dict(o) for o in s["outputs"])
        errors = [o for o in list(sol_out) + list(check_out) if o.get("output_type") == "error"]
        text = text_of(check_out)
        if errors or not re.search(r"^PASS  \w+", text, re.M) or re.search(r"^FAIL  ", text, re.M):
            err = f"{errors[0].get('ename')}: {errors[0].get('evalue')}" if errors else ""
            found.append(f"{run.stem}: with the solution of the exercise at cell {s['stub_cell']}, the check did not "
                         f"pass:\n{s['check']}\n{err}\n{text[-600:]}")
    return found
