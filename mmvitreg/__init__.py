"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the workarounds the pinned stack needs on modern torch
(:mod:`mmvitreg.compat`) and makes mmengine's checkpoint reading convert official releases on load
(:func:`mmvitreg.engine.checkpoint.load_checkpoint_file`); components register themselves in
:mod:`mmvitreg.registry` and are reached from mmpretrain, mmseg and mmdet configs as ``type='mmvitreg.<Name>'``.
"""
from mmengine.runner.checkpoint import CheckpointLoader as _CheckpointLoader

from .compat import apply as _apply_compat

__version__ = '0.1.0'

_apply_compat()


def _load_checkpoint(cls, filename, map_location=None, logger='current'):
    """mmengine's ``CheckpointLoader.load_checkpoint``, through mmvitreg's reader and converters."""
    from .engine.checkpoint import load_checkpoint_file  # imported on use: the engine imports the models
    return load_checkpoint_file(filename, map_location, logger)


_CheckpointLoader.load_checkpoint = classmethod(_load_checkpoint)
