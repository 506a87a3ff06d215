#!/usr/bin/env bash
# The full test suite: set up the stack if needed (tools/setup_env.sh), check the formatting, lint and spelling
# (tools/lint.sh: a violation fails the run), then run pytest on tests/.
#   bash tools/run_tests.sh [--with-ops] [pytest args...]
# By default on mmcv-lite, with no compiler: mmvitreg serves the compiled ops that its segmentation and detection
# configs call from torchvision's kernels, so every test runs there (a fresh machine's set-up takes minutes, a
# later one seconds). --with-ops runs the same suite on mmcv built with its compiled ops, in an environment of its
# own (~/.cache/mmvitreg/venv-ops, MMVITREG_OPS_VENV; built once, ~16-20 min on 2 cores), where the tests that
# compare mmvitreg's ops with mmcv's run instead of skipping. The suite runs on MMVITREG_TEST_WORKERS processes
# (default 2; pytest-xdist, a test file each: a file's fixtures are built once); every other argument goes to pytest
# after them (`-n 0` runs it in one process).
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
SETUP=() PYTEST=()
for arg in "$@"; do
  if [ "$arg" = --with-ops ]; then SETUP=(--with-ops); else PYTEST+=("$arg"); fi
done
bash tools/setup_env.sh ${SETUP[@]+"${SETUP[@]}"}
VENV=$(bash tools/setup_env.sh --print-venv ${SETUP[@]+"${SETUP[@]}"})
export PATH="$VENV/bin:$PATH" PYTHON="$VENV/bin/python"
bash tools/lint.sh
exec "$VENV/bin/python" -m pytest tests -q -p no:cacheprovider -n "${MMVITREG_TEST_WORKERS:-2}" --dist loadfile \
  ${PYTEST[@]+"${PYTEST[@]}"}
