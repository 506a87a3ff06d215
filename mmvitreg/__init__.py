"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the workarounds the pinned stack needs on modern torch
(:mod:`mmvitreg.compat`) and makes ``init_cfg=dict(type='Pretrained')`` load official releases (converted on
load) and refuse a checkpoint that leaves the model random (:func:`mmvitreg.engine.checkpoint.load_pretrained`);
components register themselves in :mod:`mmvitreg.registry` and are reached from mmpretrain, mmseg and mmdet
configs as ``type='mmvitreg.<Name>'``.
"""
from mmengine.model.weight_init import PretrainedInit as _PretrainedInit
from mmengine.model.weight_init import update_init_info as _update_init_info

from .compat import apply as _apply_compat

__version__ = '0.1.0'

_apply_compat()


def _pretrained_init(self, module):
    """mmengine's ``PretrainedInit.__call__``, loading with mmvitreg's converters and checks."""
    from .engine.checkpoint import load_pretrained  # on use: the engine imports the models, `import mmvitreg` does not
    load_pretrained(module, self.checkpoint, self.prefix, self.map_location)
    if hasattr(module, '_params_init_info'):
        _update_init_info(module, init_info=self._get_init_info())


_PretrainedInit.__call__ = _pretrained_init
