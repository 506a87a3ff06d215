#!/usr/bin/env bash
# Set up the quick start's OpenMMLab stack for mmvitreg in a virtual environment.
#
#   bash tools/setup_env.sh                  # mmcv-lite (no compiler): creates/refreshes the environment
#   bash tools/setup_env.sh --with-ops       # mmcv built WITH its compiled ops, in an environment of its own
#   bash tools/setup_env.sh --print-venv [--with-ops]   # print that environment's path; change nothing
#
# The stack is requirements/constraints-quickstart.txt (exact pins: Python 3.11, torch 2.14.1 +
# torchvision 0.29.1, mmengine 0.10.7, mmcv-lite 2.1.0 or mmcv 2.1.0 built from the PyPI sdist with its ops,
# mmpretrain 1.2.0, mmsegmentation 1.2.2, mmdet 3.3.0, ...); mmvitreg's own requirements
# (requirements/runtime.txt, and the extras `all`: requirements/all.txt) are ranges, installed under those
# constraints. Why each pin:
# docs/stack.md and mmvitreg/compat.py (docs/workarounds.md). To use mmvitreg in an environment of your own,
# see docs/install.md instead.
#
# mmcv: by default mmcv-lite (pure Python, seconds): classification needs no compiled op, and mmvitreg serves the
# few that its segmentation and detection configs call from torchvision's kernels (mmvitreg/mmcv_ops.py). That is
# what tools/run_tests.sh, tools/quickstart.sh and CI use, and what a fresh machine gets. --with-ops builds mmcv
# with its ops once (~16-20 min on 2 cores; cached as a wheel) into a second environment, so that switching
# between the two never reinstalls; `tools/run_tests.sh --with-ops` runs the tests there, where those comparing
# mmvitreg's ops with mmcv's compiled ones run. mmcv and mmcv-lite are one `mmcv` package to pip, never installed
# together: an environment switched from one to the other loses the other first.
#
# Idempotent: the environments and the built mmcv wheel are cached, so a second run takes seconds.
#   MMVITREG_VENV      the environment with mmcv-lite  (default: ~/.cache/mmvitreg/venv)
#   MMVITREG_OPS_VENV  the one with --with-ops         (default: ~/.cache/mmvitreg/venv-ops)
#   MMVITREG_CACHE  the built mmcv wheels    (default: ~/.cache/mmvitreg/wheels)
#   PYTHON          the interpreter to use   (default: python3.11, else python3)
#   FORCE_CUDA      1: mmcv with CUDA ops, 0: CPU ops only; unset: CUDA ops when a GPU is visible
#   TORCH_CUDA_ARCH_LIST   GPU architectures to compile for (default: those of the visible GPUs)
#   MMCV_PREBUILT_URL      a pip --find-links page of prebuilt mmcv wheels to try before compiling
#                          (default on CUDA: OpenMMLab's page for the installed CUDA and torch)
#
# On a machine with CUDA, --with-ops needs mmcv's CUDA ops (mmseg/mmdet models run them on the GPU): the
# script first tries a prebuilt mmcv wheel matching torch and CUDA, else compiles mmcv with
# FORCE_CUDA=1 (needs nvcc: CUDA_HOME or nvcc on PATH), and says which it did. Without --with-ops a GPU
# machine gets mmcv-lite too: torchvision's CUDA kernels serve the ops there.
set -euo pipefail

WITH_OPS=0 PRINT_VENV=0
for arg in "$@"; do
  case $arg in
    --with-ops) WITH_OPS=1 ;;
    --print-venv) PRINT_VENV=1 ;;
    *) echo "tools/setup_env.sh: unknown argument '$arg' (it takes --with-ops and --print-venv)" >&2; exit 2 ;;
  esac
done
if [ "$WITH_OPS" = 1 ]; then VENV=${MMVITREG_OPS_VENV:-$HOME/.cache/mmvitreg/venv-ops}
else VENV=${MMVITREG_VENV:-$HOME/.cache/mmvitreg/venv}; fi
if [ "$PRINT_VENV" = 1 ]; then echo "$VENV"; exit 0; fi

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
CONSTRAINTS=$REPO/requirements/constraints-quickstart.txt
CACHE=${MMVITREG_CACHE:-$HOME/.cache/mmvitreg/wheels}
PYTHON=${PYTHON:-$(command -v python3.11 || command -v python3)}

pin() { grep -E "^$1==" "$CONSTRAINTS" | head -n1 | cut -d= -f3; }
TORCH=$(pin torch); TORCHVISION=$(pin torchvision); MMENGINE=$(pin mmengine); MMCV=$(pin mmcv)

if [ -n "${FORCE_CUDA:-}" ]; then
  FLAVOUR=$([ "$FORCE_CUDA" = 1 ] && echo cuda || echo cpu)
elif command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  FLAVOUR=cuda
else
  FLAVOUR=cpu
fi
MMCV_KIND=$([ "$WITH_OPS" = 1 ] && echo ops || echo lite)
STAMP=$VENV/.mmvitreg-stack
HASH=$(cat "$CONSTRAINTS" "$REPO"/requirements/{runtime,seg,det,all,mminstall,tests,bench,lint}.txt | sha1sum | cut -c1-12)
STACK_ID="$FLAVOUR|mmcv-$MMCV_KIND|$HASH"

log() { printf '[setup %(%H:%M:%S)T] %s\n' -1 "$*"; }
start=$SECONDS

"$PYTHON" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' 2>/dev/null \
  || { echo "the quick start's stack needs Python 3.11 (found $("$PYTHON" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2; exit 1; }

[ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
PY=$VENV/bin/python
PIP=("$PY" -m pip --disable-pip-version-check -q)

# mmcv's setup.py hard-codes -std=c++17 (also for nvcc) while torch 2.14's headers require C++20:
# wrappers around the compilers rewrite the flag, so mmcv itself stays unpatched.
make_compiler_wrappers() {
  local dir=$1 cc real
  for cc in g++ gcc nvcc; do
    if [ "$cc" = nvcc ]; then real=${CUDA_HOME:+$CUDA_HOME/bin/nvcc}; real=${real:-$(command -v nvcc || true)}
    else real=$(command -v "$cc"); fi
    [ -n "$real" ] && [ -x "$real" ] || continue
    cat >"$dir/$cc" <<WRAP
#!/usr/bin/env bash
args=()
for a in "\$@"; do [ "\$a" = -std=c++17 ] && a=-std=c++20; args+=("\$a"); done
exec "$real" "\${args[@]}"
WRAP
    chmod +x "$dir/$cc"
  done
}

# Install mmcv with its ops for this flavour: a cached wheel, a prebuilt wheel (CUDA), or a build.
install_mmcv() {
  local key wheel_dir build wrap cuda arch
  if [ "$FLAVOUR" = cuda ]; then
    cuda=$("$PY" -c 'import torch; print(torch.version.cuda or "")')
    [ -n "$cuda" ] || { echo "FLAVOUR=cuda but torch $TORCH has no CUDA build here; set FORCE_CUDA=0" >&2; exit 1; }
    arch=${TORCH_CUDA_ARCH_LIST:-$("$PY" -c 'import torch
caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
print(";".join(f"{a}.{b}" for a, b in caps))')}
    [ -n "$arch" ] || { echo "no GPU visible to torch: set TORCH_CUDA_ARCH_LIST (e.g. \"8.0;9.0\") or FORCE_CUDA=0" >&2; exit 1; }
    key=mmcv-$MMCV-torch$TORCH-cuda$cuda-sm${arch//[^0-9]/_}
  else
    key=mmcv-$MMCV-torch$TORCH-cpu
  fi
  wheel_dir=$CACHE/$key
  if ls "$wheel_dir"/mmcv-"$MMCV"-*.whl >/dev/null 2>&1; then
    log "mmcv: reusing the cached wheel $key"
    "${PIP[@]}" install --no-deps --force-reinstall "$wheel_dir"/mmcv-"$MMCV"-*.whl
    return
  fi
  if [ "$FLAVOUR" = cuda ]; then
    local tmm=${TORCH%.*} url
    url=${MMCV_PREBUILT_URL:-https://download.openmmlab.com/mmcv/dist/cu${cuda//./}/torch$tmm/index.html}
    if "${PIP[@]}" install --no-deps --only-binary mmcv --timeout 30 -f "$url" "mmcv==$MMCV" 2>/dev/null \
       && "$PY" -c 'import mmcv._ext' 2>/dev/null; then
      log "mmcv: installed the PREBUILT mmcv $MMCV wheel with CUDA ops (CUDA $cuda, torch $tmm) from $url"
      return
    fi
    command -v nvcc >/dev/null 2>&1 || [ -x "${CUDA_HOME:-/nonexistent}/bin/nvcc" ] \
      || { echo "no prebuilt mmcv $MMCV for CUDA $cuda + torch $tmm, and no nvcc to build one: install the CUDA toolkit (CUDA_HOME) or set FORCE_CUDA=0" >&2; exit 1; }
    log "mmcv: no prebuilt wheel for CUDA $cuda + torch $tmm; BUILDING mmcv $MMCV with CUDA ops for sm $arch (long)"
  else
    log "mmcv: BUILDING mmcv $MMCV with its C++ ops (CPU only; ~16-20 min on 2 cores, cached afterwards)"
  fi
  wrap=$(mktemp -d); build=$(mktemp -d)
  make_compiler_wrappers "$wrap"
  local cuda_env=(FORCE_CUDA=0)
  [ "$FLAVOUR" = cuda ] && cuda_env=(FORCE_CUDA=1 "TORCH_CUDA_ARCH_LIST=$arch" "PYTORCH_NVCC=$wrap/nvcc")
  env PATH="$wrap:$PATH" CC="$wrap/gcc" CXX="$wrap/g++" MMCV_WITH_OPS=1 MAX_JOBS="${MAX_JOBS:-$(nproc)}" "${cuda_env[@]}" \
    "${PIP[@]}" wheel --no-build-isolation --no-deps --no-binary mmcv "mmcv==$MMCV" -w "$build"
  mkdir -p "$wheel_dir"
  mv "$build"/mmcv-"$MMCV"-*.whl "$wheel_dir"/
  rm -rf "$wrap" "$build"
  "${PIP[@]}" install --no-deps --force-reinstall "$wheel_dir"/mmcv-"$MMCV"-*.whl
}

# what the stack must import: mmcv with its compiled ops, or mmcv-lite's `mmcv` without them
if [ "$MMCV_KIND" = ops ]; then IMPORTS='from mmcv.ops import nms, RoIAlign; import mmdet, mmseg, mmpretrain'
# (mmcv-lite: no compiled mmcv._ext on disk; mmvitreg's startup finder, once installed, serves one in memory)
else IMPORTS='import importlib.machinery as m, mmcv, mmdet, mmseg, mmpretrain
assert not m.PathFinder.find_spec("mmcv._ext", mmcv.__path__)'; fi
stamp=$(cat "$STAMP" 2>/dev/null || true)
stack_ready() {  # the stamped stack is this one, and it imports
  [ "$stamp" = "$STACK_ID" ] && "$PY" -c "$IMPORTS" 2>/dev/null
}
if stack_ready; then
  log "stack already installed in $VENV ($(cut -d'|' -f2 <<<"$stamp"))"
else
  log "installing torch $TORCH + torchvision $TORCHVISION and the build tools ($FLAVOUR)"
  "${PIP[@]}" install --upgrade pip
  # setuptools<81: mmcv's setup.py imports pkg_resources (pinned in the constraints file)
  "${PIP[@]}" install -c "$CONSTRAINTS" torch torchvision setuptools wheel ninja psutil numpy mmengine
  reqs=$(mktemp)
  if [ "$MMCV_KIND" = ops ]; then
    "$PY" -m pip uninstall -y -q mmcv-lite 2>/dev/null || true  # the same `mmcv` package: never both
    install_mmcv
    cp "$REPO/requirements/runtime.txt" "$reqs"
  else
    "$PY" -m pip uninstall -y -q mmcv 2>/dev/null || true  # the same `mmcv` package: never both
    log "mmcv: installing mmcv-lite $MMCV (no compiled ops: mmvitreg serves those its configs call; --with-ops builds mmcv's)"
    # as setup.py asks for it where no mmcv is installed (mmcv_requirement)
    { cat "$REPO/requirements/runtime.txt"; echo mmcv-lite; } >"$reqs"
  fi

  log "installing mmpretrain, mmsegmentation, mmdet and the runtime/test requirements"
  # the whole stack: classification (runtime.txt) and the extras `all` (mmseg, mmdet: requirements/all.txt)
  "${PIP[@]}" install -c "$CONSTRAINTS" -r "$reqs" -r "$REPO/requirements/all.txt" -r "$REPO/requirements/tests.txt"
  rm -f "$reqs"
  "$PY" -c "$IMPORTS" || { echo "the stack does not import; see the messages above" >&2; exit 1; }
  if [ "$FLAVOUR" = cuda ] && [ "$MMCV_KIND" = ops ]; then
    "$PY" -c 'import torch; from mmcv.ops import nms
b = torch.tensor([[0., 0., 10., 10.], [1., 1., 10., 10.]], device="cuda"); s = torch.tensor([.9, .8], device="cuda")
assert nms(b, s, 0.5)[1].tolist() == [0]' \
      || { echo "mmcv's CUDA ops do not run on this GPU; see the messages above" >&2; exit 1; }
    log "mmcv's CUDA ops run on $("$PY" -c 'import torch; print(torch.cuda.get_device_name(0))')"
  fi
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
