"""Shared fixtures: the repository paths, a runner for the tools, the bundled digits data sets, and the mark of
the tests that need mmcv's compiled ops (skipped on mmcv-lite, where mmvitreg/mmcv_ops.py serves the others).
"""

import importlib.machinery
import importlib.util
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

import mmvitreg  # noqa: F401  (first, as every tool: on mmcv-lite it serves mmcv._ext before a test imports a host)

if os.environ.get('PYTEST_XDIST_WORKER_COUNT'):  # tools/run_tests.sh's workers share the cores between them
    import torch

    torch.set_num_threads(max(1, torch.get_num_threads() // int(os.environ['PYTEST_XDIST_WORKER_COUNT'])))

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / 'tools'
CONFIGS = REPO / 'configs'
# modules of the tools, imported as the tools import them (a script's folder is first on sys.path): the studies
# behind the analysis tools (``studies``), the digits builders (``digits``), the troubleshooting catalogue,
# the converters' command line (``checkpoint_converter``)
for _folder in ('analysis_tools', 'dataset_converters', 'misc', 'model_converters'):
    sys.path.insert(0, str(TOOLS / _folder))


def tool_env():
    env = dict(
        os.environ,
        PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        PYTHON=sys.executable,
        OMP_NUM_THREADS='1',
        MKL_NUM_THREADS='1',
    )
    return env


def free_port():
    """A TCP port nothing listens on now (for a torchrun rendezvous)."""
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


def run_tool(args, cwd, check=True, timeout=600, env=None):
    """Run ``tools/<args[0]>`` (a .py with this interpreter, a .sh with bash) in ``cwd``."""
    tool = TOOLS / args[0]
    cmd = (['bash', str(tool)] if tool.suffix == '.sh' else [sys.executable, str(tool)]) + [str(a) for a in args[1:]]
    proc = subprocess.run(
        cmd, cwd=cwd, env={**tool_env(), **(env or {})}, capture_output=True, text=True, timeout=timeout
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f'{" ".join(cmd)} exited {proc.returncode}\n--- stdout\n{proc.stdout[-6000:]}'
            f'\n--- stderr\n{proc.stderr[-6000:]}'
        )
    return proc


@pytest.fixture(autouse=True)
def restore_default_scope():
    """Each test starts with the default scopes the one before it found: tests that ``init_default_scope('mmdet')``
    (or build an mmdet Runner) leave that scope current for the process, and mmpretrain's inferencer then builds
    its pipeline from mmdet's registry. One xdist worker runs many files, so without this the result depends
    on the order."""
    from mmengine.registry import DefaultScope

    scopes = DefaultScope._instance_dict.copy()
    yield
    DefaultScope._instance_dict.clear()
    DefaultScope._instance_dict.update(scopes)


@pytest.fixture(scope='session')
def digits_workspace(tmp_path_factory):
    """A working directory whose ``data/`` holds the four bundled digits sets (built once)."""
    ws = tmp_path_factory.mktemp('ws')
    run_tool(['dataset_converters/digits.py', 'all', '--out', ws / 'data'], cwd=ws)
    return ws


def _compiled_mmcv_ops() -> bool:
    """Whether mmcv's compiled ``mmcv._ext`` is installed (the path finder's answer: mmvitreg's stand-in aside)."""
    mmcv = importlib.util.find_spec('mmcv')
    return bool(mmcv and importlib.machinery.PathFinder.find_spec('mmcv._ext', mmcv.submodule_search_locations))


#: mark of the compiled tier: the tests that need mmcv's compiled ops (the stand-in compared with them; a host
#: import before mmvitreg's)
needs_compiled_ops = pytest.mark.skipif(
    not _compiled_mmcv_ops(),
    reason="needs mmcv's compiled ops, which this mmcv lacks (mmcv-lite): bash tools/run_tests.sh --with-ops",
)
