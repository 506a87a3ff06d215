"""mmvitreg: OpenMMLab 2.x plugin for regularising and training deep ViTs."""
from pathlib import Path

from setuptools import find_packages, setup


def requirements(name):
    lines = Path(__file__).with_name('requirements').joinpath(name).read_text().splitlines()
    return [ln.strip() for ln in lines if ln.strip() and not ln.startswith('#')]


setup(
    name='mmvitreg',
    version='0.1.0',
    description='Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x',
    long_description=Path(__file__).with_name('README.md').read_text(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['mmvitreg', 'mmvitreg.*']),
    python_requires='>=3.11,<3.12',
    install_requires=requirements('runtime.txt'),
    extras_require={'tests': requirements('tests.txt')},
    license='Apache-2.0',
)
