"""The lessons: sources in sync with the built notebooks, their structure, and the solutions.

nbval itself runs the stored notebooks (pyproject's addopts: ``--nbval-lax`` over
notebooks/*.ipynb), which proves the stubs' checks report FAIL without raising and that the
``# NBVAL_CHECK_OUTPUT`` cells still give their stored outputs. Here:

- ``test_notebooks_in_sync``: every notebooks/NN_*.ipynb has the cells of notebooks/src/NN_*.py
  (scripts/build_notebooks.py --check).
- ``test_lesson_structure``: self-test first, at least three checked cells, each exercise stub
  followed by a check cell, hints, a glossary link; stored outputs have no errors, and every
  stored check output is a clean FAIL (the stubs as shipped).
- ``test_solutions_pass``: each lesson executed with every ``exercise-stub`` cell replaced by
  solutions/NN_*.py and KVLAB_CHECK_STRICT=1 (a failing check raises): all checks PASS.
"""
from __future__ import annotations

import importlib.util
import os
import re
import time
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("build_notebooks", ROOT / "scripts" / "build_notebooks.py")
bn = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bn)  # type: ignore[union-attr]

SOURCES = bn.lesson_sources()
IDS = [p.stem for p in SOURCES]
CHECK_CALL = re.compile(r"^\s*check\.\w+\(", re.M)


def _cells(path: Path) -> list[dict]:
    return bn.parse_source(path.read_text(), str(path))


def _check_cells(cells) -> list:
    return [c for c in cells if c["cell_type"] == "code" and CHECK_CALL.search(c["source"])]


def _text(outputs) -> str:
    parts = []
    for o in outputs:
        if o.get("output_type") == "stream":
            parts.append(o.get("text", ""))
        elif "data" in o:
            parts.append(str(o["data"].get("text/plain", "")))
        elif o.get("output_type") == "error":
            parts.append(f"{o.get('ename')}: {o.get('evalue')}")
    return "".join(parts)


def test_there_are_lessons():
    assert any(p.stem == "00_start_here" for p in SOURCES), f"no lesson 00 in {bn.SRC}"


def test_notebooks_in_sync(capsys):
    problems = bn.check_sync()
    assert not problems, "\n".join(problems)
    assert bn.main(["--check"]) == 0 and "notebooks in sync" in capsys.readouterr().out


def test_parser_rejects_bad_sources():
    with pytest.raises(ValueError, match="markdown line"):
        bn.parse_source("# %% [markdown]\n# ok\nnot a comment\n")
    with pytest.raises(ValueError, match="bad cell header"):
        bn.parse_source("# %%markdown\n")
    with pytest.raises(ValueError, match="empty cell"):
        bn.parse_source("# %%\n\n# %%\nx = 1\n")
    cells = bn.parse_source('header line\n# %% tags=["exercise-stub"]\ndef f():\n    return 1\n\n\n# %% [markdown]\n# a\n#\n# b\n')
    assert [(c["cell_type"], c["source"], c["tags"]) for c in cells] == [
        ("code", "def f():\n    return 1", ["exercise-stub"]),
        ("markdown", "a\n\nb", []),
    ]


def test_inject_solutions(tmp_path):
    sol = tmp_path / "sol.py"
    sol.write_text("import math\n\n\ndef f(x):\n    return math.floor(x)\n\n\ndef g():\n    return 2\n")
    cells = bn.parse_source('# %% tags=["exercise-stub"]\ndef f(x):\n    raise NotImplementedError\n\n# %%\nf(1.5)\n')
    out = bn.inject_solutions(cells, sol)
    assert "import math" in out[0]["source"] and "return math.floor(x)" in out[0]["source"]
    assert "def g" not in out[0]["source"] and out[1] == cells[1]
    sol.write_text("def other():\n    pass\n")
    with pytest.raises(KeyError, match="f"):
        bn.inject_solutions(cells, sol)


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_lesson_structure(path: Path):
    cells = _cells(path)
    assert cells[0]["cell_type"] == "markdown" and cells[0]["source"].startswith("# "), "first cell: a title"
    first_code = next(c for c in cells if c["cell_type"] == "code")
    assert "self_test()" in first_code["source"], "the first code cell must run kvlab.check.self_test()"
    assert "NBVAL_CHECK_OUTPUT" not in first_code["source"], "the self-test prints versions: never NBVAL_CHECK it"
    checked = [c for c in cells if c["cell_type"] == "code" and c["source"].startswith("# NBVAL_CHECK_OUTPUT")]
    assert len(checked) >= 3, f"{path.name}: {len(checked)} cells start with '# NBVAL_CHECK_OUTPUT', want >= 3"
    md = "\n".join(c["source"] for c in cells if c["cell_type"] == "markdown")
    assert "glossary.md" in md, "link the glossary"
    stubs = [i for i, c in enumerate(cells) if "exercise-stub" in c["tags"]]
    if path.stem != "00_start_here":
        assert 2 <= len(stubs) <= 4, f"{path.name}: {len(stubs)} exercises, want 2 to 4"
    for i in stubs:
        after = [c for c in cells[i + 1 :] if c["cell_type"] == "code"]
        assert after and CHECK_CALL.search(after[0]["source"]), f"exercise stub at cell {i} is not followed by a check.<name>(...) cell"
        assert "<details><summary>Hint" in "\n".join(c["source"] for c in cells[i + 1 : i + 4]), f"no hints after exercise cell {i}"


@pytest.mark.parametrize("path", SOURCES, ids=IDS)
def test_stored_outputs_are_clean(path: Path):
    nb_path = bn.NB_DIR / (path.stem + ".ipynb")
    nb = nbformat.read(nb_path, as_version=4)
    for i, c in enumerate(nb.cells):
        if c.cell_type != "code":
            continue
        errors = [o for o in c.outputs if o.get("output_type") == "error"]
        assert not errors, f"{nb_path.name} cell {i} stored an error: {errors[0].get('ename')}: {errors[0].get('evalue')}"
        text = _text(c.outputs)
        assert "Traceback" not in text, f"{nb_path.name} cell {i} stored a traceback"
        if CHECK_CALL.search(c.source):
            assert re.search(r"^FAIL  \w+", text, re.M), f"{nb_path.name} cell {i}: the stub's check should report a clean FAIL, got:\n{text[-400:]}"


def _solution_path(stem: str) -> Path:
    return ROOT / "solutions" / f"{stem}.py"


@pytest.mark.notebooks
@pytest.mark.slow
@pytest.mark.parametrize("path", [p for p in SOURCES if any("exercise-stub" in c["tags"] for c in _cells(p))],
                         ids=[p.stem for p in SOURCES if any("exercise-stub" in c["tags"] for c in _cells(p))])
def test_solutions_pass(path: Path):
    sol = _solution_path(path.stem)
    assert sol.exists(), f"{path.name} has exercises but {sol.relative_to(ROOT)} is missing"
    cells = bn.inject_solutions(_cells(path), sol)
    nb = bn.to_notebook(cells)
    env = bn.kernel_env()
    env["KVLAB_CHECK_STRICT"] = "1"
    t0 = time.perf_counter()
    bn.execute(nb, env=env, timeout=120)  # a FAIL raises AssertionError in strict mode -> CellExecutionError
    seconds = time.perf_counter() - t0
    checks = _check_cells(nb.cells)
    assert checks, "no check cells ran"
    for c in checks:
        text = _text(c.outputs)
        assert re.search(r"^PASS  \w+", text, re.M) and not re.search(r"^FAIL  ", text, re.M), (
            f"{path.name}: with the solution injected, this check did not pass:\n{c.source}\n{text[-600:]}"
        )
    assert seconds < 60, f"{path.name} took {seconds:.0f} s with solutions (target 30 s, hard limit 60 s)"
