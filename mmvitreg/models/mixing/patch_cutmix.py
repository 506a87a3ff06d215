"""CutMix with the box on the patch grid and the images mixed in pixel space (TL-Align's CutMix)."""
import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from mmvitreg.registry import BATCH_AUGMENTS
from ..trace import MixPlan, TraceRequest
from .mix_token import MixToken
from .plan_utils import partner_index, token_grid


@BATCH_AUGMENTS.register_module()
class PatchCutMix(MixToken):
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
      token mask upsampled by ``patch_size``), so it works for every backbone, conv stems included.

    ``box_on='pixels'`` draws the box in pixels instead (the paper's CutMix, not the official code):
    it may split patches, and each token starts with its patch's share of own pixels (paper Sec. 3.3),
    ``lam`` is the pixel area share.

    The plan carries the token mask (1 = own token, 0 = inside the box; the official code's mask is
    the opposite) as each token's initial label weight for :class:`~mmvitreg.models.target_transforms.TLAlign`,
    and the pixel mask (:attr:`MixPlan.pixel_mask`) so the backbone does not mix its tokens again.
    The data preprocessor (:class:`~mmvitreg.models.data_preprocessors.TokenClsDataPreprocessor`) mixes
    the images and the image-level targets (``lam * y + (1 - lam) * y[index]``, plain CutMix); give it
    as ``train_cfg=dict(token_mix=dict(type='mmvitreg.PatchCutMix', patch_size=16))``. Without TL-Align
    it is token-aligned CutMix with the area target, the fair baseline of TL-Align.

    Args:
        alpha (float): Beta distribution parameter of ``lam``; must be positive. Defaults to 1.0
            (official ``--cutmix 1.0``).
        patch_size (int): Token stride of the backbone in input pixels (16 for DeiT, 4 for Swin's
            first stage); the input size must be a multiple of it. Defaults to 16.
        partner (str): ``'flip'`` (official) or ``'permute'``. Defaults to ``'flip'``.
        box_on (str): ``'tokens'`` (official: whole patches) or ``'pixels'`` (paper: any pixel box).
            Defaults to ``'tokens'``.
    """

    BOXES = ('tokens', 'pixels')

    trace_request = TraceRequest(needs={'grid'})  # the classifier hands the plan to the backbone in a trace

    def __init__(self, alpha: float = 1.0, patch_size: int = 16, partner: str = 'flip', box_on: str = 'tokens'):
        if not alpha > 0:
            raise ValueError(f'alpha must be positive (lam ~ Beta(alpha, alpha) is drawn until lam < 1), got {alpha}')
        if box_on not in self.BOXES:
            raise ValueError(f'box_on must be one of {self.BOXES}, got {box_on!r}')
        super().__init__(alpha=alpha, patch_size=patch_size, partner=partner)
        self.box_on = box_on

    def plan(self, inputs: Tensor) -> MixPlan:
        """Draw one plan for images ``(B, 3, H, W)``: partner ``index`` ``(B,)``, token mask
        ``(B, H // patch_size, W // patch_size)`` (each token's share of own pixels) and pixel mask
        ``(B, H, W)`` (0 inside the box)."""
        B, _, H, W = inputs.shape
        p = self.patch_size
        grid = token_grid('PatchCutMix', inputs, p)
        lam = 1.
        while lam == 1.:
            lam = np.random.beta(self.alpha, self.alpha)
        if self.box_on == 'tokens':
            (y1, y2, x1, x2), _ = self.cutmix_bbox_and_lam(grid, lam)
            mask = torch.ones(grid, device=inputs.device)
            mask[y1:y2, x1:x2] = 0
            pixels = mask.repeat_interleave(p, 0).repeat_interleave(p, 1)
        else:
            (y1, y2, x1, x2), _ = self.cutmix_bbox_and_lam((H, W), lam)
            pixels = torch.ones(H, W, device=inputs.device)
            pixels[y1:y2, x1:x2] = 0
            mask = F.avg_pool2d(pixels[None, None], p)[0, 0]
        return MixPlan(index=partner_index(B, self.partner, inputs.device), mask=mask.expand(B, *grid),
                       pixel_mask=pixels.expand(B, H, W))

    def mix(self, batch_inputs: Tensor, batch_scores: Tensor):
        """Refuse to run as an mmpretrain batch augment (its plan must reach the model)."""
        raise TypeError('PatchCutMix hands its plan to the model and cannot run among the image batch augments '
                        "(train_cfg.augments); use model=dict(type='mmvitreg.TokenClassifier', "
                        "train_cfg=dict(token_mix=dict(type='mmvitreg.PatchCutMix', ...)))")
