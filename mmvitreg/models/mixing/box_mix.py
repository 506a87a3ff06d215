"""The shared part of the mixes that cut one CutMix box for the whole batch (MixToken, PatchCutMix)."""

from typing import List, Optional, Tuple

import torch
from mmpretrain.models.utils.batch_augments import CutMix
from torch import Tensor

from .batch_mix import BatchMix


class BoxMix(BatchMix):
    """Base of the mixes that take one box of the partner for the whole batch (as the official MixToken and
    TL-Align codes), drawn with mmpretrain's :class:`CutMix` box code: sides ``int(h * sqrt(1 - lam))`` x
    ``int(w * sqrt(1 - lam))``, centre uniform, ``centre +- side // 2`` clipped. The mask mean
    (:attr:`MixPlan.lam`) is the clipped box's true share; an empty box leaves the batch unmixed (official).

    Args:
        cutmix_minmax (List[float], optional): Draw the box sides uniformly in this range of the grid sides
            instead of from ``lam`` (as mmpretrain's CutMix). Defaults to None.
        **kwargs: ``alpha``, ``patch_size``, ``partner`` of :class:`BatchMix`.
    """

    def __init__(self, cutmix_minmax: Optional[List[float]] = None, **kwargs):
        super().__init__(**kwargs)
        self.cutmix_box = CutMix(alpha=self.alpha, cutmix_minmax=cutmix_minmax, correct_lam=True)  # its box code

    def box_mask(self, shape: Tuple[int, int], device) -> Tensor:
        """``(h, w)`` ones with a CutMix box of zeros, for a ``lam`` drawn here."""
        (y1, y2, x1, x2), _ = self.cutmix_box.cutmix_bbox_and_lam(shape, self.draw_lam())
        mask = torch.ones(shape, device=device)
        mask[y1:y2, x1:x2] = 0
        return mask
