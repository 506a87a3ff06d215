"""Random patch mixing (TL-Align Table 7, "Random"): tokens taken from the partner at random."""

from typing import Tuple

import numpy as np

from mmvitreg.registry import MODELS

from .token_mask_mix import TokenMaskMix


@MODELS.register_module()
class RandomPatchMix(TokenMaskMix):
    """Random patch mixing from `Token-Label Alignment for Vision Transformers
    <https://arxiv.org/abs/2210.06455>`_ (Table 7, appendix B, Fig. 7): MAE's random masking with the
    masked patches replaced by the partner's patches instead of dropped.

    Per sample, ``round((1 - lam) * Hg * Wg)`` tokens chosen uniformly without replacement come from the partner
    (:class:`~mmvitreg.models.mixing.token_mask_mix.TokenMaskMix`).
    """

    def draw(self, grid: Tuple[int, int], count: int) -> np.ndarray:
        """``count`` tokens of the ``(Hg, Wg)`` grid, uniformly without replacement."""
        taken = np.zeros(grid[0] * grid[1], dtype=bool)
        taken[np.random.permutation(taken.size)[:count]] = True
        return taken.reshape(grid)
