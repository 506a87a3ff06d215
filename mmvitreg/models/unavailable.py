"""Components built on a library's models that cannot be imported here, and the one line that says why.

mmseg and mmdet are extras (:func:`extra_command`), and their models import mmcv's compiled ops (a compiled
``mmcv._ext`` built for another torch does not load). Where they do not import, mmvitreg's classes built on them
(``TokenSegmentor``, the ``Token*`` detectors) are registered as builders that raise the import error with their
name and its fix: every other component still imports.
"""

from pathlib import Path
from typing import Iterable

from mmvitreg.registry import MODELS

EXTRAS = {'mmseg': 'seg', 'mmdet': 'det'}
"""The extra of the package that installs each library (``requirements/{seg,det}.txt``)."""

EXTRA_MODULES = {'mmseg': ('mmseg', 'ftfy', 'regex'), 'mmdet': ('mmdet', 'pycocotools')}
"""The top-level modules each extra brings: one of them missing is fixed by installing the extra."""


def extra_command(library: str) -> str:
    """The pip command that installs ``library``'s extra (``'mmseg'`` or ``'mmdet'``): from the checkout this
    package runs from, else from one the user names (mmvitreg is not on PyPI)."""
    checkout = Path(__file__).resolve().parents[2]
    source = checkout if (checkout / 'setup.py').is_file() else '/path/to/mmvitreg'
    return f'pip install "{source}[{EXTRAS[library]}]"'


def register_unavailable(names: Iterable[str], library: str, error: ImportError) -> None:
    """Register each of ``names`` as a builder that raises ``ImportError`` naming it, ``library``, ``error`` and
    the fix: the extra that installs the library, or a rebuild of mmcv's compiled ops."""
    fix = ''
    if (getattr(error, 'name', None) or '').split('.')[0] in EXTRA_MODULES[library]:
        fix = f'; {extra_command(library)}'
    elif 'mmcv/_ext' in str(error):  # a compiled mmcv._ext that does not load (built for another torch)
        from mmvitreg.mmcv_ops import build_hint

        fix = f"; rebuild mmcv's compiled ops here: {build_hint()}"
    for name in names:

        def unavailable(*args, _name=name, **kwargs):
            raise ImportError(
                f"mmvitreg.{_name} is built on {library}'s models, which do not import here: {error}{fix}"
            )

        unavailable.__name__ = unavailable.__qualname__ = name
        MODELS.register_module(name=name, module=unavailable)
