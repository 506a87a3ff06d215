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

    Follows the official code, not the paper's pixel box (paper Sec. 3.3 allows split patches):

    * ``lam ~ Beta(alpha, alpha)``, drawn again while ``lam == 1`` (official ``while lam == 1.``);
    * the box is drawn on the ``(H / patch_size, W / patch_size)`` token grid with CutMix's rule
      (sides ``int(Hg * sqrt(1 - lam))`` x ``int(Wg * sqrt(1 - lam))``, centre uniform on the grid,
      ``centre +- side // 2`` clipped), one box for the whole batch;
    * ``lam`` is corrected to the box's true share of the grid, ``1 - box_area / (Hg * Wg)``
      (:attr:`MixPlan.lam`); the box can still be empty after clipping (then the batch is unmixed,
      as in the official code);
    * partner ``flip``: sample ``i`` takes the box from sample ``B - 1 - i`` (official ``flip(0)``);
    * the **images** are mixed in pixel space in whole patches (``m * x + (1 - m) * x[index]``, the
      token mask upsampled by ``patch_size``), so it works for every backbone, conv stems included
      (:attr:`~mmvitreg.models.mixing.BatchMix.space` ``'pixels'``: it asks nothing of the backbone).

    ``box_on='pixels'`` draws the box in pixels instead (the paper's CutMix, not the official code):
    it may split patches, and each token starts with its patch's share of own pixels (paper Sec. 3.3),
    ``lam`` is the pixel area share.

    The plan carries the token mask (1 = own token, 0 = inside the box; the official code's mask is
    the opposite) as each token's initial label weight for :class:`~mmvitreg.models.target_transforms.TLAlign`,
    and the pixel mask (:attr:`MixPlan.pixel_mask`) so the backbone does not mix its tokens again.
    The data preprocessor (:class:`~mmvitreg.models.data_preprocessors.TokenClsDataPreprocessor`) mixes
    the images and the image-level targets (``lam * y + (1 - lam) * y[index]``, plain CutMix); give it
    as ``train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix', patch_size=16))``. Without TL-Align
    it is token-aligned CutMix with the area target, the fair baseline of TL-Align.

    Args:
        alpha (float): Beta distribution parameter of ``lam``; must be positive. Defaults to 1.0
            (official ``--cutmix 1.0``).
        patch_size (int): Token stride of the backbone in input pixels (16 for DeiT, 4 for Swin's
            first stage). Defaults to 16.
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
