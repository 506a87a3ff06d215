#!/usr/bin/env bash
# The full test suite: set up the stack if needed (with mmcv's compiled ops, which the mmseg and mmdet tests
# need: built once, ~16-20 min on 2 cores, then cached), then run pytest on tests/.
#   bash tools/run_tests.sh [pytest args...]
set -euo pipefail
REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$REPO"
bash tools/setup_env.sh --with-ops
VENV=${MMVITREG_VENV:-$HOME/.cache/mmvitreg/venv}
export PATH="$VENV/bin:$PATH" PYTHON="$VENV/bin/python"
exec "$VENV/bin/python" -m pytest tests -q -p no:cacheprovider "$@"
