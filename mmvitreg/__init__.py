"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the workarounds the pinned stack needs on modern torch
(:mod:`mmvitreg.compat`) and makes mmengine's checkpoint reading convert official releases on load
(:func:`mmvitreg.engine.checkpoint.load_checkpoint_file`) and ``init_cfg=dict(type='Pretrained')`` refuse a
checkpoint that leaves the model random (:func:`mmvitreg.engine.checkpoint.load_pretrained`); components register
themselves in
:mod:`mmvitreg.registry` and are reached from mmpretrain, mmseg and mmdet configs as ``type='mmvitreg.<Name>'``.
"""
from mmengine.model.weight_init import PretrainedInit as _PretrainedInit
from mmengine.model.weight_init import update_init_info as _update_init_info
from mmengine.runner.checkpoint import CheckpointLoader as _CheckpointLoader

from .compat import apply as _apply_compat

__version__ = '0.1.0'

_apply_compat()


# the engine is imported on use: it imports the models, which `import mmvitreg` alone does not need
def _load_checkpoint(cls, filename, map_location=None, logger='current'):
    """mmengine's ``CheckpointLoader.load_checkpoint``, through mmvitreg's reader and converters."""
    from .engine.checkpoint import load_checkpoint_file
    return load_checkpoint_file(filename, map_location, logger)


def _pretrained_init(self, module):
    """mmengine's ``PretrainedInit.__call__``, loading with mmvitreg's checks."""
    from .engine.checkpoint import load_pretrained
    load_pretrained(module, self.checkpoint, self.prefix, self.map_location)
    if hasattr(module, '_params_init_info'):
        _update_init_info(module, init_info=self._get_init_info())


_CheckpointLoader.load_checkpoint = classmethod(_load_checkpoint)
_PretrainedInit.__call__ = _pretrained_init
