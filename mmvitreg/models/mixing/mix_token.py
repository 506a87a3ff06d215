"""MixToken: CutMix on the token grid, after patch embedding (token labeling, Eq. 8-10)."""

from typing import Tuple

from torch import Tensor

from mmvitreg.registry import MODELS

from .box_mix import BoxMix


@MODELS.register_module()
class MixToken(BoxMix):
    """MixToken from `All Tokens Matter: Token Labeling for Training Better Vision Transformers
    <https://arxiv.org/abs/2104.10858>`_ (LV-ViT).

    CutMix moved from pixels to tokens: one box (:class:`BoxMix`) on the ``(Hg, Wg)`` token grid for the batch,
    ``lam ~ Beta(alpha, alpha)`` drawn once (official), and the backbone mixes the patch tokens of two images
    after the patch embedding (before the position embedding), so every token keeps clean content and a clean
    token label. The plan's mask ``M`` is 1 on the sample's own tokens and 0 inside the box; the targets follow
    it in :func:`~mmvitreg.models.heads.token_label_head.mix_token_label_target` (Eq. 8-10). Use it as
    ``train_cfg=dict(mix=dict(type='mmvitreg.MixToken'))`` of :class:`TokenClassifier`.

    Args:
        alpha (float): Beta distribution parameter of ``lam``. Defaults to 1.0 (paper).
        patch_size (int): Token stride of the backbone in input pixels. Defaults to 16 (LV-ViT, DeepViT).
        partner (str): ``'flip'`` (official; the paper names none) or ``'permute'``. Defaults to ``'flip'``.
        cutmix_minmax (List[float], optional): See :class:`BoxMix`. Defaults to None.
    """

    space = 'tokens'  # the backbone mixes its patch tokens (service 'mix')
    REDRAW_FULL = False  # the official code draws lam once

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, None]:
        """One box on the grid for the batch: mask ``(B, Hg, Wg)``, 0 inside the box; no pixel mask."""
        return self.box_mask(grid, inputs.device).expand(len(inputs), *grid), None
