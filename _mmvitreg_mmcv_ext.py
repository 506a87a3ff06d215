"""The finder that serves ``mmcv._ext`` from mmvitreg's ops where mmcv has no compiled one (mmcv-lite).

mmseg's and mmdet's models import ``mmcv.ops``, which loads the compiled ``mmcv._ext``; mmcv-lite has none. A
script that imports them before mmvitreg (mmseg's and mmdet's own ``tools/train.py``, whose registry imports
mmvitreg only when it builds a ``type='mmvitreg.<Name>'``) would stop with ``No module named 'mmcv._ext'``. So the
installed package puts :class:`StandIn` on ``sys.meta_path`` at interpreter start: the wheel holds
``_mmvitreg_mmcv_ext.pth`` beside this module, whose one line calls :func:`install` in every Python of that
environment (``import mmvitreg`` calls it too, for a checkout on ``PYTHONPATH``). Cheap: this file imports
nothing but ``sys`` (no torch, nothing of mmvitreg), and the finder answers one name. It goes last, after the path
finder, so a compiled ``mmcv._ext`` is always the one used; only a process that imports ``mmcv._ext`` where there
is none (which would fail without it) imports mmvitreg, whose :mod:`mmvitreg.mmcv_ops` fills the module.
A top-level module, as the hook of a ``.pth`` must be importable without running ``mmvitreg/__init__.py``.
"""

import sys


class StandIn:
    """Finder and loader of ``mmcv._ext``, reached when no finder before it on ``sys.meta_path`` has it."""

    def find_spec(self, name, path=None, target=None):
        if name != 'mmcv._ext':
            return None
        from importlib.machinery import ModuleSpec

        return ModuleSpec(name, self)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        from mmvitreg.mmcv_ops import serve

        serve(module)


def install() -> None:
    """Append :class:`StandIn` to ``sys.meta_path`` once."""
    if not any(isinstance(finder, StandIn) for finder in sys.meta_path):
        sys.meta_path.append(StandIn())
