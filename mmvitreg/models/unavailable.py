"""Components built on a library's models that cannot be imported here.

mmseg's and mmdet's model packages import mmcv's compiled ops, which mmcv-lite (the oldest stack checked,
``tools/check_stack.sh``) lacks. mmvitreg's classes built on them (:class:`~mmvitreg.models.segmentors.TokenSegmentor`,
the detectors of :mod:`mmvitreg.models.detectors`) are then registered as builders that raise the import error
with their name: every other component still imports, and a config that uses one of them stops saying why.
"""
from typing import Iterable

from mmvitreg.registry import MODELS


def register_unavailable(names: Iterable[str], library: str, error: ImportError) -> None:
    """Register each of ``names`` as a builder that raises ``ImportError`` naming it, ``library`` and ``error``."""
    fix = "; build mmcv's compiled ops once: bash tools/setup_env.sh --with-ops" if 'mmcv._ext' in str(error) else ''
    for name in names:
        def unavailable(*args, _name=name, **kwargs):
            raise ImportError(f"mmvitreg.{_name} is built on {library}'s models, which do not import here: "
                              f'{error}{fix}')
        unavailable.__name__ = unavailable.__qualname__ = name
        MODELS.register_module(name=name, module=unavailable)
