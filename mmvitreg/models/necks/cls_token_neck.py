"""Pick the class token out of a backbone's raw token sequence."""

from typing import Tuple

from mmengine.model import BaseModule
from torch import Tensor

from mmvitreg.registry import MODELS


@MODELS.register_module()
class ClsTokenNeck(BaseModule):
    """``(B, E + N, C)`` raw tokens -> the ``(B, C)`` class token (the first), per output.

    For a backbone without a trace whose raw tokens feed both a cls-token head and a user of the
    patch tokens: e.g. mmpretrain's ``T2T_ViT(out_type='raw')`` with
    :class:`~mmvitreg.models.losses.DRLoc`, which reads the patch tokens of the backbone output (before
    the neck) while the head keeps T2T-ViT's own classifier input, the normed class token.
    """

    def forward(self, feats: Tuple[Tensor, ...]) -> Tuple[Tensor, ...]:
        bad = [tuple(f.shape) for f in feats if f.dim() != 3]
        if bad:
            raise ValueError(f'ClsTokenNeck takes raw (B, E + N, C) token sequences (out_type="raw"), got {bad}')
        return tuple(f[:, 0] for f in feats)
