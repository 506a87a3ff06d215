"""mmvitreg: OpenMMLab 2.x plugin for regularising and training deep ViTs.

Dependencies are the ranges the code supports (``requirements/runtime.txt``); the exact stack of the
quick start is a constraints file that ``tools/setup_env.sh`` installs with
(``requirements/constraints-quickstart.txt``).

Like mmpretrain, mmseg and mmdet, the package carries its configs, tools and model index under
``mmvitreg/.mim/``, which is what ``_base_ = 'mmvitreg::<folder>/<file>.py'``, ``mim train mmvitreg``
and ``mim search mmvitreg`` read. In the repository ``mmvitreg/.mim/{configs,tools,model-index.yml}``
are symbolic links to the top-level folders (so an editable install sees the working tree); the
wheel gets real copies, made by :class:`BuildPyWithMim`.
"""
import shutil
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
MIM_ITEMS = ('configs', 'tools', 'model-index.yml')


def requirements(name):
    lines = ROOT.joinpath('requirements', name).read_text().splitlines()
    return [ln.split('#')[0].strip() for ln in lines if ln.split('#')[0].strip()]


class BuildPyWithMim(build_py):
    """``build_py`` that also copies ``configs/``, ``tools/`` and ``model-index.yml`` into
    ``<build>/mmvitreg/.mim/`` (the links of the working tree become files in the wheel)."""

    def run(self):
        super().run()
        if getattr(self, 'editable_mode', False):
            return  # an editable install reads the checkout, whose .mim links to the real folders
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


setup(
    name='mmvitreg',
    version='0.1.0',
    description='Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x',
    long_description=ROOT.joinpath('README.md').read_text(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['mmvitreg', 'mmvitreg.*']),
    python_requires='>=3.10',
    install_requires=requirements('runtime.txt'),
    extras_require={'tests': requirements('tests.txt')},
    cmdclass={'build_py': BuildPyWithMim},
    license='Apache-2.0',
    classifiers=[
        'Programming Language :: Python :: 3.10',
        'Programming Language :: Python :: 3.11',
    ],
)
