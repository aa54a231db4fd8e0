#!/usr/bin/env bash
# `make test` (and CI): set up (idempotent, with Chromium for the browser test), then
# run the whole suite: unit, property, kernels in the Triton interpreter, doctests,
# the lessons under nbval, and the browser test. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh --browser
export PYTHONHASHSEED=0 MPLBACKEND=Agg
start=$(date +%s)
set +e
.venv/bin/python -m pytest "$@"
rc=$?
set -e
echo "[kvlab test] pytest exit code $rc after $(( $(date +%s) - start )) s"
exit $rc
