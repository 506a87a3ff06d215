#!/usr/bin/env bash
# The main job, from a fresh clone: set up the stack, build the bundled digits data,
# train the default classification config and evaluate it.
#   bash tools/quickstart.sh [CONFIG]      (default: configs/demo/deit-tiny_1xb64_digits.py)
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash tools/setup_env.sh
VENV=$(bash tools/setup_env.sh --print-venv)
PY=$VENV/bin/python
CONFIG=${1:-configs/demo/deit-tiny_1xb64_digits.py}
WORK=work_dirs/quickstart
# one intra-op thread: the two data-loading workers take the other core of a small machine, and
# OpenMP threads competing for busy cores slow a step down many times over
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
start=$SECONDS

"$PY" tools/dataset_converters/digits.py imagenet --out data
"$PY" tools/train.py "$CONFIG" --work-dir "$WORK"
"$PY" tools/test.py "$CONFIG" "$(cat "$WORK/last_checkpoint")" --work-dir "$WORK" \
  | tee "$WORK/test.log"
echo "quick start: trained and evaluated $CONFIG in $((SECONDS - start)) s; $(grep '^metrics:' "$WORK/test.log")"
