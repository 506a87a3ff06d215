"""CutMix with the box on the patch grid and the images mixed in pixel space (TL-Align's CutMix)."""

from typing import Tuple

import torch.nn.functional as F
from torch import Tensor

from mmvitreg.registry import MODELS

from .box_mix import BoxMix


@MODELS.register_module()
class PatchCutMix(BoxMix):
    r"""CutMix on patch-aligned boxes, as the official code of `Token-Label Alignment for Vision
    Transformers <https://arxiv.org/abs/2210.06455>`_ (TL-Align) draws it (``tla.py``, ``TL_AlignMix``).

    By default as the official code: one box (:class:`BoxMix`) on the ``(Hg, Wg)`` token grid for the batch,
    ``lam`` drawn again while 1, and the **images** mixed in pixel space in whole patches (the token mask
    upsampled by ``patch_size``), so every backbone serves it, conv stems included. ``box_on='pixels'`` draws
    the box in pixels (the paper's CutMix, Sec. 3.3): it may split patches, and each token starts with its
    patch's share of own pixels.

    The plan's token mask (1 own, 0 inside the box; the official mask is the opposite) is each token's initial
    label weight for :class:`~mmvitreg.models.target_transforms.TLAlign`; the data preprocessor mixes the images
    and the image targets (``lam * y + (1 - lam) * y[index]``). Without TL-Align it is token-aligned CutMix with
    the area target, TL-Align's baseline. Use it as ``train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix'))``.

    Args:
        alpha (float): Beta distribution parameter of ``lam``; must be positive. Defaults to 1.0
            (official ``--cutmix 1.0``).
        patch_size (int): Token stride of the backbone in input pixels (4 for Swin). Defaults to 16.
        partner (str): ``'flip'`` (official) or ``'permute'``. Defaults to ``'flip'``.
        box_on (str): ``'tokens'`` (official: whole patches) or ``'pixels'`` (paper: any pixel box).
            Defaults to ``'tokens'``.
    """

    space = 'pixels'  # the data preprocessor mixes the images: any backbone, conv stems included
    BOXES = ('tokens', 'pixels')

    def __init__(self, alpha: float = 1.0, patch_size: int = 16, partner: str = 'flip', box_on: str = 'tokens'):
        if box_on not in self.BOXES:
            raise ValueError(f'box_on must be one of {self.BOXES}, got {box_on!r}')
        super().__init__(alpha=alpha, patch_size=patch_size, partner=partner)
        self.box_on = box_on

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        """One box for the batch: token mask ``(B, Hg, Wg)`` (each token's share of own pixels) and pixel
        mask ``(B, H, W)`` (0 inside the box)."""
        B, _, H, W = inputs.shape
        if self.box_on == 'tokens':
            mask = self.box_mask(grid, inputs.device)
            pixels = self.to_pixels(mask, (H, W))
        else:
            pixels = self.box_mask((H, W), inputs.device)
            mask = F.avg_pool2d(pixels[None, None], self.patch_size, ceil_mode=True)[0, 0]
        return mask.expand(B, *grid), pixels.expand(B, H, W)
