"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the gated workarounds of :mod:`mmvitreg.compat` (``compat.applied()`` lists
them), among them mmvitreg's checkpoint loading for models holding an mmvitreg module (the design:
:mod:`mmvitreg.engine.checkpoint`). Components register themselves in :mod:`mmvitreg.registry` and are reached
from mmpretrain, mmseg and mmdet configs as ``type='mmvitreg.<Name>'``. Where mmcv has no compiled ops
(mmcv-lite), ``mmcv._ext`` is served from torchvision's kernels (:mod:`mmvitreg.mmcv_ops`; the installed package
does it from interpreter start, for scripts that import mmseg's or mmdet's models first: ``_mmvitreg_mmcv_ext``).
"""
from _mmvitreg_mmcv_ext import install as _install_mmcv_ops

from .compat import apply as _apply_compat

__version__ = '0.1.0'

_install_mmcv_ops()  # before any host import: mmcv.cnn's transformer bricks look for mmcv.ops once, when imported
_apply_compat()
