"""MixUp or CutMix per batch, chosen with a switch probability (timm / DeiT style)."""

from typing import Optional, Tuple

import numpy as np
from torch import Tensor

from mmvitreg.registry import MODELS

from .batch_mix import BatchMix
from .patch_cutmix import PatchCutMix
from .pixel_mixup import PixelMixup


@MODELS.register_module()
class MixupCutMixSwitch(BatchMix):
    """Per batch CutMix with probability ``switch_prob``, else MixUp, as timm's ``Mixup`` with
    ``mixup_alpha > 0``, ``cutmix_alpha > 0`` and ``prob = 1`` (DeiT's recipe; TL-Align paper Table 7,
    "MixUp + CutMix"). The chosen augment draws the masks: :class:`PixelMixup` or :class:`PatchCutMix`
    (both mix the images in pixel space and give every token its initial label weight).

    Args:
        mixup_alpha (float): MixUp's Beta parameter. Defaults to 0.8 (DeiT).
        cutmix_alpha (float): CutMix's Beta parameter. Defaults to 1.0 (DeiT).
        switch_prob (float): Probability of CutMix per batch, in [0, 1]. Defaults to 0.5 (DeiT).
        patch_size (int): Token stride of the backbone in pixels. Defaults to 16.
        partner (str): ``'flip'`` or ``'permute'``. Defaults to ``'flip'``.
        box_on (str): CutMix's box on ``'tokens'`` or ``'pixels'`` (see :class:`PatchCutMix`).
            Defaults to ``'tokens'``.
    """

    space = 'pixels'  # both augments it switches between mix the images

    def __init__(
        self,
        mixup_alpha: float = 0.8,
        cutmix_alpha: float = 1.0,
        switch_prob: float = 0.5,
        patch_size: int = 16,
        partner: str = 'flip',
        box_on: str = 'tokens',
    ):
        if not 0 <= switch_prob <= 1:
            raise ValueError(f'switch_prob must be in [0, 1], got {switch_prob}')
        super().__init__(alpha=None, patch_size=patch_size, partner=partner)
        self.switch_prob = float(switch_prob)
        self.mixup = PixelMixup(alpha=mixup_alpha, patch_size=patch_size, partner=partner)
        self.cutmix = PatchCutMix(alpha=cutmix_alpha, patch_size=patch_size, partner=partner, box_on=box_on)

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, Optional[Tensor]]:
        """The masks of CutMix (probability ``switch_prob``) or MixUp."""
        return (self.cutmix if np.random.rand() < self.switch_prob else self.mixup).masks(inputs, grid)
