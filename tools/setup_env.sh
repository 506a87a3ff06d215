#!/usr/bin/env bash
# Set up the pinned OpenMMLab stack for mmvitreg in a virtual environment.
#
#   bash tools/setup_env.sh            # creates/refreshes the environment, prints its path
#
# Stack: Python 3.11, torch 2.14.1 + torchvision 0.29.1, mmengine 0.10.7, mmcv 2.1.0 built from the
# PyPI sdist WITH its C++ ops, mmpretrain 1.2.0, mmsegmentation 1.2.2 (+ ftfy, regex), mmdet 3.3.0.
# Why each pin: ../shared/notes/openmmlab-stack.md and mmvitreg/compat.py.
#
# Idempotent: the environment and the built mmcv wheel are cached, so a second run takes seconds.
#   MMVITREG_VENV   the environment          (default: ~/.cache/mmvitreg/venv)
#   MMVITREG_CACHE  the built mmcv wheel     (default: ~/.cache/mmvitreg/wheels)
#   PYTHON          the interpreter to use   (default: python3.11, else python3)
#
# GPU machines: export FORCE_CUDA=1 (and TORCH_CUDA_ARCH_LIST, e.g. "8.0;9.0") before the first run,
# with nvcc on PATH, and mmcv's CUDA ops are compiled too. The wheel is cached per flavour (cpu/cuda).
# This path cannot be exercised on the CPU-only development machines.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CACHE=${MMVITREG_CACHE:-$HOME/.cache/mmvitreg/wheels}
VENV=${MMVITREG_VENV:-$HOME/.cache/mmvitreg/venv}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}
FLAVOUR=$([ "${FORCE_CUDA:-0}" = 1 ] && echo cuda || echo cpu)
MMCV_WHEEL_DIR=$CACHE/mmcv-2.1.0-torch2.14.1-$FLAVOUR
STAMP=$VENV/.mmvitreg-stack
STACK_ID="torch2.14.1|tv0.29.1|mmengine0.10.7|mmcv2.1.0-$FLAVOUR|mmpretrain1.2.0|mmseg1.2.2|mmdet3.3.0|$(cat "$REPO/requirements/runtime.txt" "$REPO/requirements/tests.txt" | sha1sum | cut -c1-12)"

log() { printf '[setup %(%H:%M:%S)T] %s\n' -1 "$*"; }
start=$SECONDS

"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null \
  || { echo "mmvitreg needs Python 3.11 (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PY=$VENV/bin/python
PIP=("$PY" -m pip --disable-pip-version-check -q)

if [ "$(cat "$STAMP" 2>/dev/null)" = "$STACK_ID" ] \
   && "$PY" -c 'import mmcv.ops, mmdet, mmseg, mmpretrain' 2>/dev/null; then
  log "stack already installed in $VENV"
else
  log "installing torch 2.14.1 + torchvision 0.29.1 and the build tools"
  "${PIP[@]}" install --upgrade pip
  # setuptools<81: mmcv's setup.py and mmengine 0.10.7 at run time import pkg_resources.
  "${PIP[@]}" install "torch==2.14.1" "torchvision==0.29.1" "setuptools>=77,<81" wheel ninja psutil \
    "numpy>=2" "mmengine==0.10.7"

  if ! ls "$MMCV_WHEEL_DIR"/mmcv-2.1.0-*.whl >/dev/null 2>&1; then
    log "building mmcv 2.1.0 with its C++ ops ($FLAVOUR; ~16-20 min on 2 cores, cached afterwards)"
    # mmcv's setup.py hard-codes -std=c++17 while torch 2.14's headers require C++20: a compiler
    # wrapper rewrites the flag, so mmcv itself stays unpatched.
    wrap=$(mktemp -d)
    for cc in g++ gcc; do
      real=$(command -v "$cc")
      cat >"$wrap/$cc" <<EOF
#!/usr/bin/env bash
args=()
for a in "\$@"; do [ "\$a" = -std=c++17 ] && a=-std=c++20; args+=("\$a"); done
exec "$real" "\${args[@]}"
EOF
      chmod +x "$wrap/$cc"
    done
    mkdir -p "$MMCV_WHEEL_DIR"
    build=$(mktemp -d)
    PATH="$wrap:$PATH" CC="$wrap/gcc" CXX="$wrap/g++" MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      "${PIP[@]}" wheel --no-build-isolation --no-deps --no-binary mmcv "mmcv==2.1.0" -w "$build"
    mv "$build"/mmcv-2.1.0-*.whl "$MMCV_WHEEL_DIR"/
    rm -rf "$wrap" "$build"
  else
    log "reusing the cached mmcv wheel in $MMCV_WHEEL_DIR"
  fi
  "${PIP[@]}" install --no-deps --force-reinstall "$MMCV_WHEEL_DIR"/mmcv-2.1.0-*.whl

  log "installing mmpretrain, mmsegmentation, mmdet and the runtime/test requirements"
  "${PIP[@]}" install -r "$REPO/requirements/runtime.txt" -r "$REPO/requirements/tests.txt"
  "$PY" -c 'from mmcv.ops import nms, RoIAlign; import mmdet, mmseg, mmpretrain' \
    || { echo "the stack does not import; see the messages above" >&2; exit 1; }
  echo "$STACK_ID" >"$STAMP"
fi

# The package itself: always (re)installed from this checkout, so a fresh clone tests its own code.
# (-P: the working directory must not count as an install)
installed=$("$PY" -P -c 'import importlib.util as u, os; s = u.find_spec("mmvitreg")
print(os.path.dirname(s.submodule_search_locations[0]) if s else "")')
if [ "$installed" != "$REPO" ]; then
  log "installing mmvitreg from $REPO (editable)"
  "${PIP[@]}" install --no-deps --no-build-isolation -e "$REPO"
fi
log "ready in $((SECONDS - start)) s: $VENV"
