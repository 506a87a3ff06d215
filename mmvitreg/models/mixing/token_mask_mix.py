"""The shared part of the batch mixes that take whole tokens from a partner image (random, block-wise)."""
from typing import Tuple

import numpy as np
import torch
from torch import Tensor

from .batch_mix import BatchMix


class TokenMaskMix(BatchMix):
    """Base of the mixes that replace a ``1 - lam`` share of each image's tokens by its partner's.

    Per sample, ``lam ~ Beta(alpha, alpha)`` (drawn again while ``lam == 1``, as TL-Align's
    ``tla.py`` does for CutMix) gives ``round((1 - lam) * Hg * Wg)`` tokens to take from the partner;
    :meth:`draw` (the subclass) chooses which. The images are mixed in pixel space in whole patches,
    the token mask (1 own, 0 partner) is each token's initial label weight for
    :class:`~mmvitreg.models.target_transforms.TLAlign`, and ``lam`` is the true own share
    (:attr:`MixPlan.lam`). Give a subclass to :class:`~mmvitreg.models.classifiers.TokenClassifier`
    as ``train_cfg.mix``.

    Args:
        alpha (float): Beta parameter of ``lam``; positive. Defaults to 1.0 (CutMix's, TL-Align).
        patch_size (int): Token stride of the backbone in pixels (16 in the paper's Table 7). Defaults to 16.
        partner (str): ``'flip'`` (``x[B - 1 - i]``, TL-Align's official partner) or ``'permute'``.
            Defaults to ``'flip'``.
    """

    space = 'pixels'  # the data preprocessor mixes the images in whole patches

    def __init__(self, alpha: float = 1.0, patch_size: int = 16, partner: str = 'flip'):
        super().__init__(alpha=alpha, patch_size=patch_size, partner=partner)

    def draw(self, grid: Tuple[int, int], count: int) -> np.ndarray:
        """A ``(Hg, Wg)`` bool array with ``count`` True tokens (those taken from the partner)."""
        raise NotImplementedError

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        """Token mask ``(B, Hg, Wg)`` and pixel mask ``(B, H, W)``, a ``lam`` and a draw per sample."""
        taken = [self.draw(grid, int(round((1 - self.draw_lam()) * grid[0] * grid[1]))) for _ in range(len(inputs))]
        mask = torch.from_numpy(~np.stack(taken)).float().to(inputs.device)
        return mask, self.to_pixels(mask, tuple(inputs.shape[-2:]))
