"""mmvitreg: OpenMMLab 2.x plugin for regularising and training deep ViTs.

``pyproject.toml`` declares the build (PEP 517: setuptools' backend) and the static metadata (PEP 621); this file
gives what is computed: the dependencies (``dynamic``), the ``build_py`` below and the editable mode.

Dependencies are the ranges the code supports, split as the OpenMMLab libraries split theirs:
``pip install /path/to/mmvitreg`` is classification (``requirements/runtime.txt``: mmpretrain and what the package
imports); the extras ``seg``, ``det`` and ``all`` add mmsegmentation and mmdet (``requirements/{seg,det,all}.txt``).
mmcv is chosen by what the environment holds (:func:`mmcv_requirement`): mmcv-lite, no compiler, unless an ``mmcv``
is installed, which is kept; its range is ``requirements/mminstall.txt``. The exact stack of the quick start is a
constraints file that ``tools/setup_env.sh`` installs with (``requirements/constraints-quickstart.txt``).

Like mmpretrain, mmseg and mmdet, the package carries its configs, tools and model index under
``mmvitreg/.mim/``, which is what ``_base_ = 'mmvitreg::<folder>/<file>.py'``, ``mim train mmvitreg``
and ``mim search mmvitreg`` read. In the repository ``mmvitreg/.mim/{configs,tools,model-index.yml}``
are symbolic links to the top-level folders (so ``mmvitreg::`` reads the working tree); the wheel gets
real copies, made by :class:`BuildPyWithMim`.

An editable install (``pip install -e .``, the quick start's) needs one more thing for ``mim``: mim
looks for ``<site-packages>/mmvitreg/.mim`` (the folder of the distribution's metadata, not of the
imported package), which a PEP 660 editable install does not have. :class:`BuildPyWithMim` therefore
puts into the editable wheel a ``mmvitreg/.mim`` whose every file points into this checkout: the model
index imports the checkout's, each config inherits its checkout twin, each tool runs its checkout
twin (the modules of ``tools/analysis_tools/studies/`` get none: the checkout's scripts import them
from the checkout). Edits in the checkout are seen at once; a config or tool *added* later is found by
mim only by its path until the next ``pip install -e .``. That folder has no ``__init__.py``, so the editable
install is made in setuptools' ``compat`` mode (the checkout on ``sys.path`` through a ``.pth``),
in which the checkout's package wins over it on import (in the default finder mode it would not).

Both wheels also get ``_mmvitreg_mmcv_ext.pth`` at the top of site-packages: at interpreter start it puts the finder
of the top-level module ``_mmvitreg_mmcv_ext`` on ``sys.meta_path`` (``mmcv._ext`` served where mmcv has no compiled
one, for mmseg's and mmdet's own tools: the module's docstring says what it reaches and costs).
"""

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
MIM_ITEMS = ('configs', 'tools', 'model-index.yml')
# silent where the module is gone (an editable install whose checkout moved): site would print a traceback at
# every start of that environment's Python, pip's included
STARTUP_HOOK = (
    '_mmvitreg_mmcv_ext.pth',
    "import importlib.util; importlib.util.find_spec('_mmvitreg_mmcv_ext') "
    "and __import__('_mmvitreg_mmcv_ext').install()\n",
)


def requirements(name):
    """The requirements of ``requirements/<name>``, with those of the files it includes (``-r other.txt``)."""
    found = []
    for line in ROOT.joinpath('requirements', name).read_text().splitlines():
        line = line.split('#')[0].strip()
        found += requirements(line[2:].strip()) if line.startswith('-r') else [line] if line else []
    return found


def mmcv_requirement():
    """The mmcv that mmvitreg asks for. mmcv and mmcv-lite are two distributions of one ``mmcv`` package that pip
    cannot tell apart: asking for mmcv-lite where a compiled mmcv is installed would write mmcv-lite's files over it,
    and asking for mmcv where it is not would build mmcv's ops from its sdist (a compiler, and no wheel for today's
    torch). So: ``mmcv`` as it is (any version: it is kept, never rebuilt; mmseg and mmdet check its range when
    imported) where an ``mmcv`` distribution is installed, else mmcv-lite in mmcv's range (requirements/mminstall.txt:
    mmvitreg serves the compiled ops its dense configs call from torchvision's kernels), as mmcv's own setup.py picks
    its OpenCV distribution by what is installed. The environment is the one of the interpreter that runs pip,
    asked in a subprocess: ``-E`` drops the variables of pip's isolated build, whose ``sys.path`` hides it."""
    probe = 'import importlib.metadata as md; md.distribution("mmcv")'
    if subprocess.run([sys.executable, '-E', '-c', probe], capture_output=True).returncode == 0:
        return 'mmcv'
    (mmcv,) = requirements('mminstall.txt')
    return 'mmcv-lite' + mmcv[len('mmcv') :]


class BuildPyWithMim(build_py):
    """``build_py`` that also copies ``configs/``, ``tools/`` and ``model-index.yml`` into
    ``<build>/mmvitreg/.mim/`` (the links of the working tree become files in the wheel), and writes
    :data:`STARTUP_HOOK` at the wheel's top."""

    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            self.write_editable_mim()
            return
        Path(self.build_lib, STARTUP_HOOK[0]).write_text(STARTUP_HOOK[1])
        mim = Path(self.build_lib, 'mmvitreg', '.mim')
        if mim.is_symlink() or mim.is_file():
            mim.unlink()
        elif mim.exists():
            shutil.rmtree(mim)
        mim.mkdir(parents=True)
        for item in MIM_ITEMS:
            src = ROOT / item
            if not src.exists():
                raise FileNotFoundError(f'{src} is missing: the wheel would lack mmvitreg/.mim/{item}')
            if src.is_dir():
                shutil.copytree(src, mim / item, ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
            else:
                shutil.copyfile(src, mim / item)

    def write_editable_mim(self):
        """Write ``mmvitreg/.mim`` of pointers into this checkout where the editable wheel is assembled
        (setuptools points the ``install`` command's ``install_lib`` there while it builds one)."""
        wheel_root = self.distribution.get_command_obj('install').install_lib
        mode = self.distribution.get_command_obj('editable_wheel').mode
        if not wheel_root or str(mode).lower() == 'lenient':
            # (lenient: a mmvitreg/ folder in site-packages would hide the checkout's package from import)
            warnings.warn(
                f'editable install without mmvitreg/.mim (setuptools: wheel folder {wheel_root!r}, mode '
                f'{mode!r}): `mim train/test/search mmvitreg` will not find it; install in compat mode '
                '(the default here) or not editable for mim'
            )
            return
        Path(wheel_root, STARTUP_HOOK[0]).write_text(STARTUP_HOOK[1])
        mim = Path(wheel_root, 'mmvitreg', '.mim')
        for name, text in editable_mim_files().items():
            path = mim / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)


def editable_mim_files():
    """``{path under .mim: text}`` of the editable install's ``mmvitreg/.mim``, each pointing into ROOT."""
    head = f'# mmvitreg installed in editable mode from {ROOT}: this file stands for its twin there.\n'
    files = {'model-index.yml': f'{head}Import:\n  - {json.dumps(str(ROOT / "model-index.yml"))}\n'}
    for config in sorted(ROOT.glob('configs/**/*.py')):
        files[config.relative_to(ROOT).as_posix()] = f'{head}_base_ = {str(config)!r}\n'
    for tool in sorted(ROOT.glob('tools/**/*.py')):
        if any((ROOT / folder / '__init__.py').is_file() for folder in tool.relative_to(ROOT).parents):
            continue  # a module of a package beside the tools (studies/): the checkout's scripts import it there
        files[tool.relative_to(ROOT).as_posix()] = (
            f'{head}import runpy\nimport sys\n\nsys.path[0] = {str(tool.parent)!r}\n'
            f'runpy.run_path({str(tool)!r}, run_name=\'__main__\')\n'
        )
    return files


setup(
    install_requires=requirements('runtime.txt') + [mmcv_requirement()],
    extras_require={
        'seg': requirements('seg.txt'),
        'det': requirements('det.txt'),
        'all': requirements('all.txt'),
        'mim': requirements('mim.txt'),
        'tests': requirements('tests.txt'),
    },
    cmdclass={'build_py': BuildPyWithMim},
    options={'editable_wheel': {'mode': 'compat'}},  # see the module's docstring
    # here, not in pyproject.toml, whose string form needs setuptools >= 77 and whose table form is deprecated
    license='Apache-2.0',
)
