"""MixUp that hands its plan to the model: every token of a blended image starts with weight lam."""

from typing import Tuple

import torch
from torch import Tensor

from mmvitreg.registry import MODELS

from .batch_mix import BatchMix


@MODELS.register_module()
class PixelMixup(BatchMix):
    r"""MixUp (`Zhang et al. 2018 <https://arxiv.org/abs/1710.09412>`_) as a batch mix for
    :class:`~mmvitreg.models.target_transforms.TLAlign` (paper Table 7, "MixUp").

    The images are blended in pixel space, ``lam * x + (1 - lam) * x[index]``, one ``lam`` per batch, and every
    token starts with label weight ``lam`` (paper Sec. 3.3). The official code crashes on this branch
    (``tla.py``: ``len(None)``), so this follows the paper.

    Args:
        alpha (float): Beta parameter; positive. Defaults to 0.8 (DeiT's MixUp).
        patch_size (int): Token stride of the backbone in pixels. Defaults to 16.
        partner (str): ``'flip'`` or ``'permute'``. Defaults to ``'flip'``.
    """

    space = 'pixels'  # the data preprocessor blends the images

    def __init__(self, alpha: float = 0.8, patch_size: int = 16, partner: str = 'flip'):
        super().__init__(alpha=alpha, patch_size=patch_size, partner=partner)

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        """Token mask ``(B, Hg, Wg)`` and pixel mask ``(B, H, W)``, all ``lam``."""
        lam, (B, _, H, W) = self.draw_lam(), inputs.shape
        mask, pixels = (torch.full((1, *size), lam, device=inputs.device) for size in (grid, (H, W)))
        return mask.expand(B, -1, -1), pixels.expand(B, -1, -1)
