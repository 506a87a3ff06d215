"""The shared part of the batch mixes that take whole tokens from a partner image (random, block-wise)."""

from typing import Tuple

import numpy as np
import torch
from torch import Tensor

from .batch_mix import BatchMix


class TokenMaskMix(BatchMix):
    """Base of the mixes that replace a ``1 - lam`` share of each image's tokens by its partner's.

    Per sample, ``lam ~ Beta(alpha, alpha)`` (the paper gives no distribution for these strategies; this follows
    its CutMix, ``Beta(1, 1)``) gives ``round((1 - lam) * Hg * Wg)`` tokens to take from the partner;
    :meth:`draw` (the subclass) chooses which. The images are mixed in pixel space in whole patches, the token
    mask (1 own, 0 partner) is each token's initial label weight for
    :class:`~mmvitreg.models.target_transforms.TLAlign`. No official code. Arguments as :class:`BatchMix`.
    """

    space = 'pixels'  # the data preprocessor mixes the images in whole patches

    def draw(self, grid: Tuple[int, int], count: int) -> np.ndarray:
        """A ``(Hg, Wg)`` bool array with ``count`` True tokens (those taken from the partner)."""
        raise NotImplementedError

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, Tensor]:
        """Token mask ``(B, Hg, Wg)`` and pixel mask ``(B, H, W)``, a ``lam`` and a draw per sample."""
        taken = [self.draw(grid, int(round((1 - self.draw_lam()) * grid[0] * grid[1]))) for _ in range(len(inputs))]
        mask = torch.from_numpy(~np.stack(taken)).float().to(inputs.device)
        return mask, self.to_pixels(mask, tuple(inputs.shape[-2:]))
