#!/usr/bin/env bash
# `make test` (and CI): set up (idempotent, with Chromium for the browser test), then
# run the whole suite: unit, property, kernels in the Triton interpreter, doctests, and the
# lessons once each, in the browser (that run also gives nbval's checked cells, the solutions'
# checks and the site's executed copies: tests/lesson_runs.py). Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
export PYTHONHASHSEED=0 MPLBACKEND=Agg
# Byte-code caches for kvlab and the tests (in __pycache__/, git-ignored): a machine that sets
# PYTHONDONTWRITEBYTECODE makes every process (each worker, each lesson's kernel, each test's
# subprocess) compile kvlab's modules and rewrite the test modules' asserts anew.
unset PYTHONDONTWRITEBYTECODE
# One CPU thread per torch process (the lessons' kernels and the tests' subprocesses inherit it):
# the bundled model is tiny, so extra threads only add overhead and fight over the cores
# (measured: 64 greedy tokens 0.56 s with 1 thread, 25 s with 2 on a busy 2-core machine).
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}" MKL_NUM_THREADS="${MKL_NUM_THREADS:-1}"
start=$(date +%s)
set +e
# Parallel workers (pytest-xdist, --dist loadscope): tests/conftest.py makes the lessons two work
# units (half the lessons each, one JupyterLab apiece, the headless checks after the browser's),
# every other test file one (its fixtures built once), and hands out the lessons first.
# KVLAB_TEST_WORKERS=1 runs everything in this process.
WORKERS="${KVLAB_TEST_WORKERS:-$(.venv/bin/python -c 'import os; print(min(4, len(os.sched_getaffinity(0))))')}"
PARALLEL=()
[[ "$WORKERS" -gt 1 ]] && PARALLEL=(-n "$WORKERS" --dist loadscope --no-loadscope-reorder)
# --durations=15: the 15 slowest items at the end of every run, so the next slow test shows.
.venv/bin/python -m pytest "${PARALLEL[@]}" --durations=15 "$@"
rc=$?
set -e
echo "[kvlab test] pytest exit code $rc after $(( $(date +%s) - start )) s"
exit $rc
