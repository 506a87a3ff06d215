"""mmvitreg: Re-attention, token labeling, DiversePatch, DRLoc and TL-Align for OpenMMLab 2.x.

Importing the package applies the workarounds the pinned stack needs on modern torch
(:mod:`mmvitreg.compat`); components register themselves in :mod:`mmvitreg.registry` and are reached
from mmpretrain, mmseg and mmdet configs as ``type='mmvitreg.<Name>'``.
"""
from .compat import apply as _apply_compat

__version__ = '0.1.0'

_apply_compat()
