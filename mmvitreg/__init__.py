"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the gated workarounds of :mod:`mmvitreg.compat` and, where mmcv has no compiled
ops, serves ``mmcv._ext`` from torchvision's kernels (:mod:`mmvitreg.mmcv_ops`). Components are reached from
mmpretrain, mmseg and mmdet configs as ``type='mmvitreg.<Name>'`` (:mod:`mmvitreg.registry`).
"""

from _mmvitreg_mmcv_ext import install as _install_mmcv_ops

from .compat import apply as _apply_compat

__version__ = '0.1.0'

_install_mmcv_ops()  # before any host import: mmcv.cnn's transformer bricks look for mmcv.ops once, when imported
_apply_compat()
