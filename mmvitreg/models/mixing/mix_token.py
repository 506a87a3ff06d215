"""MixToken: CutMix on the token grid, after patch embedding (token labeling, Eq. 8-10)."""
from typing import List, Optional

import numpy as np
import torch
from mmpretrain.models.utils.batch_augments import CutMix
from torch import Tensor

from mmvitreg.registry import BATCH_AUGMENTS
from ..trace import MixPlan, TraceRequest
from .plan_utils import partner_index, token_grid


@BATCH_AUGMENTS.register_module()
class MixToken(CutMix):
    r"""MixToken from `All Tokens Matter: Token Labeling for Training Better Vision Transformers
    <https://arxiv.org/abs/2104.10858>`_ (LV-ViT).

    CutMix moved from pixels to tokens: the box is drawn on the token grid and the *tokens* of
    two images are mixed after the patch embedding, so every token keeps clean content and a
    clean token label. This class only draws the plan; the backbone mixes its patch-token map
    with it (before the position embedding) and the head mixes the targets:

    .. math::

        \hat{T} = T_1 \odot M + T_2 \odot (1 - M) \quad (8) \qquad
        \hat{Y} = Y_1 \odot M + Y_2 \odot (1 - M) \quad (9) \qquad
        \hat{y}^{cls} = \bar{M} y_1^{cls} + (1 - \bar{M}) y_2^{cls} \quad (10)

    ``M`` is 1 on the sample's own tokens and 0 inside the box. The box is drawn "the same way
    as CutMix" (paper), with mmpretrain's :class:`CutMix` bounding-box code on the ``(Hg, Wg)``
    grid: ``lam ~ Beta(alpha, alpha)``, side ``int(Hg * sqrt(1 - lam))`` x
    ``int(Wg * sqrt(1 - lam))``, centre uniform on the grid, ``centre +- side // 2`` clipped to
    the grid. As in the official code one ``lam`` and one box serve the whole batch, and the
    mixing weight of Eq. 10 is the clipped box's share ``M_bar = 1 - box_area / (Hg * Wg)``
    (:attr:`MixPlan.lam`, the mask mean).

    The paper does not name the partner image. ``partner='flip'`` (default) is the official
    code's (sample ``i`` takes its box from sample ``B - 1 - i``); ``'permute'`` uses a random
    permutation like mmpretrain's CutMix.

    It is registered as a batch augment but cannot run as one (mmpretrain's batch augments only
    see ``(inputs, scores)``): give it to :class:`TokenClassifier` as
    ``train_cfg=dict(token_mix=dict(type='mmvitreg.MixToken'))``; its data preprocessor calls
    :meth:`plan` and the classifier hands the plan to the backbone.

    Args:
        alpha (float): Beta distribution parameter of ``lam``. Defaults to 1.0 (paper).
        patch_size (int): Token stride of the backbone in input pixels (16 for LV-ViT and
            DeepViT); the input size must be a multiple of it. Defaults to 16.
        partner (str): ``'flip'`` (official) or ``'permute'``. Defaults to ``'flip'``.
        cutmix_minmax (List[float], optional): Draw the box sides uniformly in this range of
            the grid sides instead of from ``lam`` (as mmpretrain's CutMix). Defaults to None.
    """

    PARTNERS = ('flip', 'permute')
    trace_request = TraceRequest(needs={'mix'})

    def __init__(self,
                 alpha: float = 1.0,
                 patch_size: int = 16,
                 partner: str = 'flip',
                 cutmix_minmax: Optional[List[float]] = None):
        super().__init__(alpha=float(alpha), cutmix_minmax=cutmix_minmax, correct_lam=True)
        if partner not in self.PARTNERS:
            raise ValueError(f'partner must be one of {self.PARTNERS}, got {partner!r}')
        if int(patch_size) != patch_size or patch_size < 1:
            raise ValueError(f'patch_size must be a positive integer, got {patch_size!r}')
        self.patch_size = int(patch_size)
        self.partner = partner

    def plan(self, inputs: Tensor) -> MixPlan:
        """Draw one mixing plan for a batch of images ``(B, 3, H, W)``.

        Returns:
            MixPlan: partner ``index`` ``(B,)`` and mask ``(B, H // patch_size, W // patch_size)``
            (0 inside the box), on the device of ``inputs``.
        """
        grid = token_grid('MixToken', inputs, self.patch_size)
        lam = np.random.beta(self.alpha, self.alpha)
        (y1, y2, x1, x2), _ = self.cutmix_bbox_and_lam(grid, lam)
        mask = torch.ones(grid, device=inputs.device)
        mask[y1:y2, x1:x2] = 0
        return MixPlan(index=partner_index(len(inputs), self.partner, inputs.device),
                       mask=mask.expand(len(inputs), *grid))

    def mix(self, batch_inputs: Tensor, batch_scores: Tensor):
        """Refuse to run as an image-level batch augment (the tokens are mixed in the backbone)."""
        raise TypeError('MixToken mixes tokens inside the backbone and cannot run among the image batch '
                        "augments (train_cfg.augments); use model=dict(type='mmvitreg.TokenClassifier', "
                        "train_cfg=dict(token_mix=dict(type='mmvitreg.MixToken', ...)))")
