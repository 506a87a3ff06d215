"""Block-wise mixing (TL-Align Table 7, "Block-wise"): BEiT's blockwise masking, filled from the partner."""

import math
from typing import Tuple

import numpy as np

from mmvitreg.registry import MODELS

from .token_mask_mix import TokenMaskMix


@MODELS.register_module()
class BlockMix(TokenMaskMix):
    """Block-wise mixing from `Token-Label Alignment for Vision Transformers
    <https://arxiv.org/abs/2210.06455>`_ (Table 7, appendix B, Fig. 7): `BEiT
    <https://arxiv.org/abs/2106.08254>`_'s blockwise masking (its Algorithm 1) with the masked
    patches replaced by the partner's patches.

    Per sample, rectangles of tokens are added until ``count = round((1 - lam) * Hg * Wg)`` tokens come
    from the partner (BEiT Algorithm 1):

    * with ``left = count - taken`` tokens still to take, a block size ``s ~ U[min(min_block, left), left]``,
      an aspect ratio ``log r ~ U[log aspect, -log aspect]``, sides ``h = round(sqrt(s r))``,
      ``w = round(sqrt(s / r))`` and a uniform position;
    * a block is kept when it adds tokens without overshooting ``count``; after ``max_attempts`` draws without
      progress the fill stops (as BEiT's generator), so ``lam`` (the mask mean) is the true own share.

    Other arguments as :class:`~mmvitreg.models.mixing.token_mask_mix.TokenMaskMix`.

    Args:
        min_block (int): Smallest block in tokens. Defaults to 16 (BEiT).
        aspect (float): Aspect-ratio bound, ``0 < aspect <= 1``. Defaults to 0.3 (BEiT).
        max_attempts (int): Draws without progress before the fill stops. Defaults to 10 (BEiT).
    """

    def __init__(self, min_block: int = 16, aspect: float = 0.3, max_attempts: int = 10, **kwargs):
        super().__init__(**kwargs)
        if not 0 < aspect <= 1:
            raise ValueError(f'aspect must be in (0, 1] (ratios from aspect to 1 / aspect), got {aspect}')
        if min_block < 1 or max_attempts < 1:
            raise ValueError(f'min_block and max_attempts must be positive, got {min_block}, {max_attempts}')
        self.min_block, self.max_attempts = int(min_block), int(max_attempts)
        self.log_aspect = (math.log(aspect), -math.log(aspect))

    def draw(self, grid: Tuple[int, int], count: int) -> np.ndarray:
        """BEiT's blockwise fill of the ``(Hg, Wg)`` grid up to ``count`` tokens."""
        Hg, Wg = grid
        taken = np.zeros(grid, dtype=bool)
        stalled = 0
        while taken.sum() < count and stalled < self.max_attempts:
            left = count - int(taken.sum())
            s = np.random.uniform(min(self.min_block, left), left)
            r = math.exp(np.random.uniform(*self.log_aspect))
            h, w = int(round(math.sqrt(s * r))), int(round(math.sqrt(s / r)))
            if not (1 <= h <= Hg and 1 <= w <= Wg):
                stalled += 1
                continue
            top, lft = np.random.randint(0, Hg - h + 1), np.random.randint(0, Wg - w + 1)
            new = h * w - int(taken[top : top + h, lft : lft + w].sum())
            if 0 < new <= left:
                taken[top : top + h, lft : lft + w] = True
                stalled = 0
            else:
                stalled += 1
        return taken
