"""Every lesson's run checked (tests/lesson_runs.py): what nbval and the solutions run checked.

One run per lesson per session, shared with the static site (tests/test_site.py builds the site from
its copy): the browser test's run when there is one (the lesson live in JupyterLab, the site's
outputs recorded in forks of its kernel, then each exercise's solution and its check in the same
kernel, strict), else a headless run made here (KVLAB_STATIC=frames, then the solutions and their
checks in the same kernel, strict). Checked here:

- ``test_cells_run_clean``: no cell of the lesson raised (nbval failed a cell that raised), nor
  any recorded site output;
- ``test_checked_outputs_match``: every ``# NBVAL_CHECK_OUTPUT`` cell gives its stored outputs,
  compared by nbval's ``--nbval-lax`` rules (was: pytest-nbval over notebooks/*.ipynb);
- ``test_stub_checks_fail_cleanly``: the stubs' checks report a clean FAIL without raising;
- ``test_solutions_pass``: with solutions/NN_*.py, every check reports PASS and nothing raised
  (was: tests/test_notebooks.py, a second full run of the lesson).

Under pytest-xdist a lesson's items run in its browser work unit, after the browser items
(tests/conftest.py), so they read the browser's run; each prints which run it read.
"""
from __future__ import annotations

import pytest
from lesson_runs import (
    cell_errors, executed, lesson_stems, nbval_differences, solution_cells, solution_failures, stub_check_problems,
)

pytestmark = [pytest.mark.notebooks, pytest.mark.slow]
STEMS = lesson_stems()


_RUNS: dict[str, object] = {}


def _run(stem: str):
    """This session's run of the lesson; a run that raised (a cell past its time-out, a dead
    kernel) fails every item of the lesson without running it again."""
    if stem not in _RUNS:
        try:
            _RUNS[stem] = executed(stem)
        except Exception as e:  # noqa: BLE001 - reported by each item of the lesson
            _RUNS[stem] = e
    run = _RUNS[stem]
    if isinstance(run, Exception):
        pytest.fail(f"{stem}: the headless run did not finish: {type(run).__name__}: {run}")
    return run


@pytest.mark.parametrize("stem", STEMS)
def test_cells_run_clean(stem):
    """Runs the lesson (or takes this session's run of it); no cell raised."""
    run = _run(stem)
    assert run.notebook.cells, f"{stem}: no cells"
    errors = cell_errors(run)
    assert not errors, "\n\n".join(errors)
    print(f"{stem}: {run.seconds:.0f} s, run by the {run.made_by} test, {len(run.solutions)} solution checks included")


@pytest.mark.parametrize("stem", STEMS)
def test_checked_outputs_match(stem):
    differences = nbval_differences(_run(stem))
    assert not differences, "\n\n".join(differences)


@pytest.mark.parametrize("stem", STEMS)
def test_stub_checks_fail_cleanly(stem):
    problems = stub_check_problems(_run(stem))
    assert not problems, "\n\n".join(problems)


@pytest.mark.parametrize("stem", STEMS)
def test_solutions_pass(stem):
    run = _run(stem)
    wanted = [i for i, _sol, _check in solution_cells(run.stored, stem)]
    assert [s["stub_cell"] for s in run.solutions] == wanted, f"{stem}: not every solution was checked"
    if stem != "00_start_here" and not stem.endswith("_appendix"):  # an appendix is reading, no exercise
        assert wanted, f"{stem}: no exercise"
    failures = solution_failures(run)
    assert not failures, "\n\n".join(failures)
