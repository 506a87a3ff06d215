#!/usr/bin/env bash
# Run mmvitreg's tests on another stack than the quick start's, in a virtual environment of its own.
#
#   bash tools/check_stack.sh [tests...] [pytest args...]   # default: the oldest stack claimed, all of tests/
#   PYTHON=python3.12 MMVITREG_VENV=/tmp/venv-mmvitreg-py312 \
#     MMVITREG_CONSTRAINTS=requirements/constraints-py312.txt bash tools/check_stack.sh [pytest args...]
#                                                   # Python 3.12 with the quick start's versions and mmcv-lite
#
# The stack is a constraints file (default requirements/constraints-oldest.txt: Python 3.10,
# torch 2.1.2 + torchvision 0.16.2, mmengine 0.10.3, mmcv-lite 2.1.0, mmpretrain 1.2.0,
# mmsegmentation 1.2.2, mmdet 3.3.0, numpy 1.26). The package's own requirements (with the extras `all`)
# and test requirements are installed under it. With mmcv-lite mmvitreg serves the compiled ops that its dense
# configs call from torchvision's kernels, so the mmseg / mmdet tests run too; only those comparing them with
# mmcv's compiled ops are skipped, with that reason. A constraints file that pins full mmcv instead builds it
# from source (~20 min on 2 cores).
# mmvitreg itself is tested from this checkout (PYTHONPATH), not installed.
# Not part of CI (installing torch takes minutes); the last results are in docs/stack.md (Tested stacks).
#
#   MMVITREG_VENV         the environment       (default: /tmp/venv-mmvitreg-oldest)
#   MMVITREG_CONSTRAINTS  the stack             (default: requirements/constraints-oldest.txt)
#   PYTHON                the interpreter       (default: python3.10)
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${MMVITREG_VENV:-/tmp/venv-mmvitreg-oldest}
CONSTRAINTS=${MMVITREG_CONSTRAINTS:-$REPO/requirements/constraints-oldest.txt}
PYTHON=${PYTHON:-$(command -v python3.10 || true)}
[ -n "$PYTHON" ] && "$PYTHON" --version >/dev/null 2>&1 \
  || { echo "set PYTHON=/path/to/python (the stack's interpreter; default python3.10)" >&2; exit 1; }

log() { printf '[check_stack %(%H:%M:%S)T] %s\n' -1 "$*"; }
start=$SECONDS

[ -x "$VENV/bin/python" ] || { log "creating $VENV with $("$PYTHON" --version 2>&1)"; "$PYTHON" -m venv "$VENV"; }
PY=$VENV/bin/python
PIP=("$PY" -m pip --disable-pip-version-check -q)

# mmcv or mmcv-lite, as the constraints say (the requirements files name neither: setup.py chooses one by what is
# installed; mmcv-lite is mmcv's pure-Python distribution, same `mmcv` module; pip cannot tell they are one)
MMCV_DIST=$(grep -oE '^mmcv(-lite)?==' "$CONSTRAINTS" | head -n1 | tr -d '=')
[ -n "$MMCV_DIST" ] || { echo "$CONSTRAINTS pins neither mmcv nor mmcv-lite" >&2; exit 1; }
reqs=$(mktemp)
{ cat "$REPO"/requirements/{runtime,seg,det}.txt; echo "$MMCV_DIST"; } >"$reqs"

log "installing the stack of $(basename "$CONSTRAINTS")"
"${PIP[@]}" install --upgrade pip
if [ "$MMCV_DIST" = mmcv ]; then
  # full mmcv is built against the installed torch (see tools/setup_env.sh)
  "${PIP[@]}" install -c "$CONSTRAINTS" torch torchvision mmengine numpy "setuptools<81" wheel ninja psutil
  MMCV_WITH_OPS=1 "${PIP[@]}" install -c "$CONSTRAINTS" --no-build-isolation mmcv
fi
"${PIP[@]}" install -c "$CONSTRAINTS" -r "$reqs" -r "$REPO/requirements/tests.txt"
rm -f "$reqs"

log "installed:"
"$PY" - <<'PYEOF'
import importlib.metadata as md, sys
print(f'  python {sys.version.split()[0]}')
for d in ('torch', 'torchvision', 'numpy', 'mmengine', 'mmcv', 'mmcv-lite', 'mmpretrain', 'mmsegmentation',
          'mmdet', 'setuptools', 'openmim'):
    try:
        print(f'  {d} {md.version(d)}')
    except md.PackageNotFoundError:
        pass
try:
    import mmcv._ext  # noqa: F401
    print('  mmcv compiled ops: yes')
except ImportError:
    print('  mmcv compiled ops: no (mmvitreg serves the ones its configs call; comparisons with mmcv skipped)')
PYEOF
PYTHONPATH=$REPO "$PY" -c 'from mmvitreg import compat
print("mmvitreg.compat: needed", compat.needed(), "applied", compat.applied())'

log "running the tests"
cd "$REPO"
status=0
# the arguments go to pytest; tests/ unless they start with the tests to run (e.g. tests/test_tools.py -k ...)
{ [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; } || set -- tests "$@"
PYTHONPATH=$REPO OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PATH="$VENV/bin:$PATH" \
  "$PY" -m pytest -q -p no:cacheprovider -rs "$@" || status=$?
log "done in $((SECONDS - start)) s (pytest exit $status)"
exit $status
