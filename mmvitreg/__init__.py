"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the gated workarounds of :mod:`mmvitreg.compat` (``compat.applied()`` lists
them), among them ``mmvitreg_model_loading``: mmvitreg's models load official releases (converted on load)
and refuse a checkpoint that leaves them random, through ``init_cfg=dict(type='Pretrained')``, mmengine's
``load_checkpoint`` and mmpretrain's ``get_model``; any other model loads as its library loads it. Components
register themselves in :mod:`mmvitreg.registry` and are reached from mmpretrain, mmseg and mmdet configs as
``type='mmvitreg.<Name>'`` (``init_cfg=dict(type='Pretrained', _scope_='mmvitreg', ...)`` asks for
mmvitreg's loading on any model). Where mmcv has no compiled ops (mmcv-lite), ``mmcv._ext`` is served from
torchvision's kernels (:mod:`mmvitreg.mmcv_ops`).
"""
from .compat import apply as _apply_compat
from .mmcv_ops import install as _install_mmcv_ops

__version__ = '0.1.0'

_install_mmcv_ops()  # before any host import: mmcv.cnn's transformer bricks look for mmcv.ops once, when imported
_apply_compat()
