#!/usr/bin/env bash
# One prepared GPU check (issue 14), in under 8 minutes, every step under a timeout:
#   1. measure       bench/gpu_summary.py measure: decode at batch 64 x 4k with real models' kernel
#                    shapes (fp16, bf16: Llama-3 8B's 32 q / 8 KV heads x 128; fp16: SmolLM2's 9 q /
#                    3 KV heads x 64), split-K at batch 1 x 32k, each against contiguous SDPA. The engine
#                    run (step 5) uses the bundled model: nothing over 64 MiB travels, no registry.
#   2. kernel_tests  pytest tests/test_kernels_*.py natively (bf16 and the no-sync test included; not the
#                    sm_90 compile check or this script's own dry-run test, which CI runs on a CPU)
#   3. bench_kernels bench/bench_kernels.py --skip-ref (the full kernel table)
#   4. bench_decode  bench/bench_decode.py --backend triton   (fail soft: another module's benchmark)
#   5. bench_engine  bench/bench_engine.py --backend triton   (fail soft)
#   6. summary       bench/gpu_summary.py assemble -> OUT/summary.json, the one summary (printed too);
#                    logs and the steps' own outputs go to OUT/work/
#
# Usage:  bash bench/gpu_check.sh [--dry-run] [--out DIR]      (default DIR: bench/out/gpu_check)
# On the lent GPU machine (Python 3.12, torch, triton 3.6, no network): nothing to install; it
# runs with PYTHONPATH=. and `python3` (or $PYTHON). --dry-run runs the same steps on a CPU in
# seconds: tiny shapes in the Triton interpreter, one quick kernel test, the two other benchmarks'
# --help; CI runs it (tests/test_kernels_gpu_check.py). Exit status: 0 when the summary is written
# and the measurements and kernel tests passed; the other benchmarks only report.
set -uo pipefail
cd "$(dirname "$0")/.."

DRY=""
OUT=bench/out/gpu_check
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=--dry-run ;;
        --out) OUT=${2:?--out needs a folder}; shift ;;
        *) echo "gpu_check.sh: unknown argument $1 (use --dry-run, --out DIR)" >&2; exit 2 ;;
    esac
    shift
done
PY=${PYTHON:-}
if [ -z "$PY" ]; then
    if [ -x .venv/bin/python ]; then PY=.venv/bin/python; else PY=python3; fi
fi
export PYTHONPATH=".${PYTHONPATH:+:$PYTHONPATH}" PYTHONHASHSEED=0
BUDGET=${GPU_CHECK_BUDGET_S:-450}    # seconds for all steps: 7.5 minutes, so the whole check stays under 8
WORK=$OUT/work
rm -rf "$WORK" "$OUT/summary.json"
mkdir -p "$WORK/logs"
: > "$WORK/steps.tsv"

step() {  # step NAME TIMEOUT_S CMD...: run under a timeout capped by the budget left; log; record rc and seconds
    local name=$1 limit=$2
    shift 2
    local left=$(( BUDGET - SECONDS - 20 ))   # keep 20 s for the summary
    if [ "$left" -lt 5 ]; then
        printf '%s\tskipped\t0\t%s\n' "$name" "$limit" >> "$WORK/steps.tsv"
        echo "[gpu_check] $name: skipped (time budget of $BUDGET s spent)"
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    local start=$SECONDS
    echo "[gpu_check] $name (timeout ${limit} s): $*"
    timeout -k 5 "$limit" "$@" > "$WORK/logs/$name.log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\t%s\n' "$name" "$rc" "$(( SECONDS - start ))" "$limit" >> "$WORK/steps.tsv"
    echo "[gpu_check] $name: exit $rc after $(( SECONDS - start )) s (log: $WORK/logs/$name.log)"
    [ "$rc" -eq 0 ] || tail -n 5 "$WORK/logs/$name.log" | sed 's/^/    /'
}

# pytest without the project's addopts (doctests of the visualizer: not on the GPU machine) and
# without nbval's plugin (where installed it imports nbformat and jsonschema: 1.7 s of CPU).
PYTEST=("$PY" -m pytest -p no:cacheprovider -p no:nbval -q -o addopts= --junitxml="$WORK/kernel_tests.xml")
if [ -n "$DRY" ]; then
    # Each dry step is 2 to 5 s of CPU (mostly importing torch and triton), about 25 s in all on 2
    # quiet cores; on the same machine at load 12 to 19 a step took up to 32 s, so the time-outs
    # are 120 s (30 s for a --help): hangs are still caught, a busy machine does not fail the check.
    step measure 120 "$PY" bench/gpu_summary.py measure --out "$WORK/measure.json" --dry-run
    step kernel_tests 120 "${PYTEST[@]}" tests/test_kernels_mode.py -k "self_test_passes"
    step bench_kernels 120 "$PY" bench/bench_kernels.py --dry-run --skip-ref --out "$WORK"
    step bench_decode 30 "$PY" bench/bench_decode.py --help
    step bench_engine 30 "$PY" bench/bench_engine.py --help
else
    step measure 120 "$PY" bench/gpu_summary.py measure --out "$WORK/measure.json"
    step kernel_tests 200 "${PYTEST[@]}" --ignore=tests/test_kernels_gpu_check.py \
        --ignore=tests/test_kernels_compile.py tests/test_kernels_*.py
    step bench_kernels 150 "$PY" bench/bench_kernels.py --skip-ref --out "$WORK"
    step bench_decode 45 "$PY" bench/bench_decode.py --backend triton
    step bench_engine 45 "$PY" bench/bench_engine.py --backend triton
fi
"$PY" bench/gpu_summary.py assemble --dir "$WORK" --out "$OUT/summary.json" $DRY
rc=$?
[ -f "$OUT/summary.json" ] || { echo "[gpu_check] no summary written" >&2; exit 1; }
for name in measure kernel_tests; do
    grep -q "^$name	0	" "$WORK/steps.tsv" || { echo "[gpu_check] $name did not pass: see $WORK/logs/$name.log"; rc=1; }
done
echo "[gpu_check] done in $SECONDS s: $OUT/summary.json"
exit $rc
