"""MixToken: CutMix on the token grid, after patch embedding (token labeling, Eq. 8-10)."""
from typing import List, Optional, Tuple

from torch import Tensor

from mmvitreg.registry import MODELS
from .box_mix import BoxMix


@MODELS.register_module()
class MixToken(BoxMix):
    r"""MixToken from `All Tokens Matter: Token Labeling for Training Better Vision Transformers
    <https://arxiv.org/abs/2104.10858>`_ (LV-ViT).

    CutMix moved from pixels to tokens: the box is drawn on the token grid and the *tokens* of
    two images are mixed after the patch embedding, so every token keeps clean content and a
    clean token label. This class only draws the plan; the backbone mixes its patch-token map
    with it (before the position embedding) and the head the targets
    (:func:`~mmvitreg.models.heads.token_label_head.mix_token_label_target`):

    .. math::

        \hat{T} = T_1 \odot M + T_2 \odot (1 - M) \quad (8) \qquad
        \hat{Y} = Y_1 \odot M + Y_2 \odot (1 - M) \quad (9) \qquad
        \hat{y}^{cls} = \bar{M} y_1^{cls} + (1 - \bar{M}) y_2^{cls} \quad (10)

    ``M`` is 1 on the sample's own tokens and 0 inside the box. The box is drawn "the same way
    as CutMix" (paper), with mmpretrain's :class:`CutMix` bounding-box code on the ``(Hg, Wg)``
    grid: ``lam ~ Beta(alpha, alpha)`` (drawn once, as the official code), side
    ``int(Hg * sqrt(1 - lam))`` x ``int(Wg * sqrt(1 - lam))``, centre uniform on the grid,
    ``centre +- side // 2`` clipped to the grid. As in the official code one ``lam`` and one box serve
    the whole batch, and the mixing weight of Eq. 10 is the clipped box's share
    ``M_bar = 1 - box_area / (Hg * Wg)`` (:attr:`MixPlan.lam`, the mask mean).

    The paper does not name the partner image. ``partner='flip'`` (default) is the official
    code's (sample ``i`` takes its box from sample ``B - 1 - i``); ``'permute'`` uses a random
    permutation like mmpretrain's CutMix.

    A batch mix, not an mmpretrain batch augment (those only see ``(inputs, scores)``): give it to
    :class:`TokenClassifier` as ``train_cfg=dict(mix=dict(type='mmvitreg.MixToken'))``; its data
    preprocessor calls :meth:`plan` and the classifier hands the plan to the backbone.

    Args:
        alpha (float): Beta distribution parameter of ``lam``. Defaults to 1.0 (paper).
        patch_size (int): Token stride of the backbone in input pixels (16 for LV-ViT and
            DeepViT). Defaults to 16.
        partner (str): ``'flip'`` (official) or ``'permute'``. Defaults to ``'flip'``.
        cutmix_minmax (List[float], optional): Draw the box sides uniformly in this range of
            the grid sides instead of from ``lam`` (as mmpretrain's CutMix). Defaults to None.
    """

    space = 'tokens'  # the backbone mixes its patch tokens (service 'mix')
    REDRAW_FULL = False  # the official code draws lam once

    def __init__(self, alpha: float = 1.0, patch_size: int = 16, partner: str = 'flip',
                 cutmix_minmax: Optional[List[float]] = None):
        super().__init__(alpha=alpha, patch_size=patch_size, partner=partner, cutmix_minmax=cutmix_minmax)

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, None]:
        """One box on the grid for the batch: mask ``(B, Hg, Wg)``, 0 inside the box; the tokens are mixed
        in the backbone (no pixel mask)."""
        return self.box_mask(grid, inputs.device).expand(len(inputs), *grid), None
