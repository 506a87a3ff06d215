#!/usr/bin/env bash
# The GPU check (issue 30): the CUDA tests (tests/cuda) and the benchmark table, each step under its own timeout,
# everything written to a log as it runs, ending with ONE summary block (versions, pass/fail counts, the table)
# to paste into a bug report. Meant to take under 8 minutes on one H100.
#
#   bash tools/gpu_check.sh [--dry-run] [--only tests|bench] [--log FILE]
#
# --dry-run: the same steps on the CPU at toy size (the tests with MMVITREG_TEST_DEVICE=cpu, the cases with
# --tiny), to check a machine or a change before spending GPU minutes. No virtualenv is assumed: PYTHON (default
# python3) runs everything, with this checkout first on PYTHONPATH, so a GPU image's own torch with the rest
# installed from a wheelhouse (requirements/wheelhouse.txt, docs/gpu.md) works as `PYTHON=python3 bash
# tools/gpu_check.sh`. The tests need pytest; the timm cases need timm (requirements/bench.txt). Exit status 1 when a
# test or a case failed or a step could not run (each such step is an error in the summary), else 0.
set -u
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-python3}
DRY=0 ONLY=all LOG=
while [ $# -gt 0 ]; do
  case "$1" in
    --dry-run) DRY=1 ;;
    --only) ONLY=${2:?--only needs tests or bench}; shift ;;
    --log) LOG=${2:?--log needs a file}; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "gpu_check.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
  shift
done
case "$ONLY" in all|tests|bench) ;; *) echo "gpu_check.sh: --only takes tests or bench, not $ONLY" >&2; exit 2 ;; esac
LOG=${LOG:-$PWD/gpu_check_$(date -u +%Y%m%d-%H%M%S).log}
mkdir -p "$(dirname "$LOG")" && : > "$LOG"
export PYTHONPATH="$REPO${PYTHONPATH:+:$PYTHONPATH}"
export CUBLAS_WORKSPACE_CONFIG=${CUBLAS_WORKSPACE_CONFIG:-:4096:8}
cd "$REPO"

# the table of issue 30 (item 2): techniques off vs timm, each technique vs its baseline, compile and precision
CASES=(deit-s-vs-timm swin-t-vs-timm deit-s-tlalign-vs-cutmix swin-t-tlalign-vs-cutmix deit-s-diversepatch-vs-plain
       swin-t-drloc lvvit-tl-vs-ce deepvit-s-vs-msa deit-s-tlalign-compiled-vs-eager deit-s-tlalign-bf16-vs-fp32)
if [ "$DRY" = 1 ]; then
  MODE='dry run on the CPU (toy sizes: no figure means anything)'
  BENCH=(--device cpu --tiny --batch-size 2 --img-size 32 --repeats 1 --warmup 2 --threads 1 --amp bf16
         --memory spawn --count-ops)
  TEST_ENV=(MMVITREG_TEST_DEVICE=cpu) TEST_TIMEOUT=1500 CASE_TIMEOUT=300 COMPILE_TIMEOUT=600
else
  MODE='GPU'
  BENCH=(--device cuda --batch-size 128 --img-size 224 --repeats 10 --warmup 3 --amp bf16 --count-ops)
  TEST_ENV=() TEST_TIMEOUT=300 CASE_TIMEOUT=150 COMPILE_TIMEOUT=300
fi

log() { echo "$*" | tee -a "$LOG"; }
# step NAME SECONDS CMD...: runs CMD under `timeout`, its output appended to the log and to NAME's own file
step() {
  local name=$1 limit=$2 start rc; shift 2
  log "=== $name (timeout ${limit}s): $*"
  start=$(date +%s)
  timeout --kill-after=20 "$limit" "$@" > "$LOG.$name" 2>&1
  rc=$?
  cat "$LOG.$name" >> "$LOG"
  STEP_SECONDS=$(( $(date +%s) - start ))
  log "=== $name: exit $rc after ${STEP_SECONDS}s$([ $rc = 124 ] || [ $rc = 137 ] && echo ' (TIMED OUT)')"
  return $rc
}

log "mmvitreg GPU check: $MODE; log $LOG"
VERSIONS=$("$PYTHON" - <<'PY' 2>&1
import importlib.metadata as md
import platform
def version(*names):
    for name in names:
        try:
            return f'{name} {md.version(name)}'
        except md.PackageNotFoundError:
            pass
    return f'{names[0]} not installed'
try:
    import torch
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none visible'
    line = f'torch {torch.__version__} (CUDA {torch.version.cuda}) | GPU: {gpu}'
except Exception as exc:  # the summary must say what is broken, not stop
    line = f'torch not importable: {exc}'
print(f'python {platform.python_version()} | {line} | ' + ' | '.join(
    version(*n) for n in (('mmengine',), ('mmcv', 'mmcv-lite'), ('mmpretrain',), ('timm',))))
PY
)
[ -n "$VERSIONS" ] || VERSIONS="$PYTHON printed no versions (is it a Python with torch?)"
log "$VERSIONS"
STATUS=0 ERRORS=0  # ERRORS: steps that could not run, crashed or timed out

TESTS='not run (--only bench)'
if [ "$ONLY" != bench ]; then
  if "$PYTHON" -c 'import pytest' 2>/dev/null; then
    step tests "$TEST_TIMEOUT" env ${TEST_ENV[@]+"${TEST_ENV[@]}"} \
      "$PYTHON" -m pytest tests/cuda -q -rs -p no:cacheprovider
    rc=$?
    counts=$(tail -n 3 "$LOG.tests" | grep -Eo '[0-9]+ (passed|failed|skipped|errors?|xfailed|xpassed)' |
      paste -sd, - | sed 's/,/, /g')
    TESTS="${counts:-no result} (exit $rc, ${STEP_SECONDS}s)"
    [ $rc = 0 ] || STATUS=1
    # pytest's exit 1 is failed tests; anything else (a timeout, an internal or usage error) is a broken step
    [ $rc = 0 ] || [ $rc = 1 ] || { ERRORS=$((ERRORS + 1)); TESTS="ERROR: $TESTS"; }
  else
    TESTS='ERROR: not run: pytest is not importable by PYTHON (install its wheel with the others)'
    log "tests/cuda: $TESTS"
    ERRORS=$((ERRORS + 1))
  fi
fi

ROWS=() PASS=0 FAIL=0 BROKEN=0
if [ "$ONLY" != tests ]; then
  for case in "${CASES[@]}"; do
    limit=$CASE_TIMEOUT
    [ "$case" = deit-s-tlalign-compiled-vs-eager ] && limit=$COMPILE_TIMEOUT
    step "case-$case" "$limit" "$PYTHON" tools/analysis_tools/benchmark_train_step.py --case "$case" "${BENCH[@]}"
    rc=$?
    row=$(grep -E "^\| $case \|" "$LOG.case-$case" | tail -n 1)
    if [ -n "$row" ] && { [ $rc = 0 ] || [ $rc = 1 ]; }; then
      ROWS+=("$row")
      case "$row" in *'| PASS |') PASS=$((PASS + 1)) ;; *'| FAIL |') FAIL=$((FAIL + 1)) ;; esac
    else
      why=$(grep -v '^\s*$' "$LOG.case-$case" | tail -n 1 | cut -c1-160)
      ROWS+=("| $case | ERROR (exit $rc$([ $rc = 124 ] && echo ": timed out after ${limit}s")): ${why//|/\/} |")
      BROKEN=$((BROKEN + 1)) ERRORS=$((ERRORS + 1))
    fi
  done
fi

{
  echo
  echo '===== mmvitreg GPU check: summary ====='
  echo "mode: $MODE; $(date -u '+%Y-%m-%d %H:%M UTC');" \
    "commit $(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)"
  echo "$VERSIONS"
  echo "tests/cuda: $TESTS"
  if [ "$ONLY" != tests ]; then
    echo "benchmark (${BENCH[*]}): $PASS PASS, $FAIL FAIL, $BROKEN errors or timeouts$([ "$DRY" = 1 ] &&
      echo ' (a dry run judges nothing)')"
    "$PYTHON" -c 'import sys; sys.path.insert(0, "tools/analysis_tools")
from studies.train_step_benchmark import SUMMARY_HEADER; print(SUMMARY_HEADER)' 2>/dev/null ||
      echo '| case | (table header unavailable) |'
    printf '%s\n' "${ROWS[@]}"
  fi
  echo "errors: $ERRORS (steps that could not run, crashed or timed out); exit status $(
    [ $((STATUS + FAIL + ERRORS)) = 0 ] && echo 0 || echo 1)"
  echo "full log: $LOG"
  echo '======================================='
} | tee -a "$LOG"
rm -f "$LOG".tests "$LOG".case-*
[ $((FAIL + ERRORS)) = 0 ] || STATUS=1
exit $STATUS
