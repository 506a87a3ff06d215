"""The base of every batch mix: the token grid, the partner of each image and the draw of ``lam``."""

from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from ..layers import token_grid
from ..trace import MixPlan, TraceRequest

#: what a mix mixes: the images (by the data preprocessor; any backbone) or the patch tokens (by the backbone)
SPACES = ('pixels', 'tokens')


class BatchMix:
    """A two-image batch mix: draws one :class:`~mmvitreg.models.trace.MixPlan` per training batch (which image
    mixes with which, and which of its tokens or pixels stay its own). Given to
    :class:`~mmvitreg.models.classifiers.TokenClassifier` as ``train_cfg.mix``, its data preprocessor calls
    :meth:`plan`. Not an mmpretrain batch augment: those map ``(inputs, scores)`` and cannot say which token
    came from which image. Shared by every mix:

    * the token grid of a batch ``(B, C, H, W)``: :func:`~mmvitreg.models.layers.token_grid`, the backbones' rule;
    * ``lam ~ Beta(alpha, alpha)``, drawn again while ``lam == 1`` (TL-Align's official ``while lam == 1.``)
      unless :attr:`REDRAW_FULL` is False (LV-ViT's MixToken draws once);
    * the partner: ``'flip'``, sample ``i`` mixes with ``B - 1 - i`` (the official codes' ``flip(0)``), or
      ``'permute'``, a random permutation (as mmpretrain's CutMix), drawn after the masks.

    A concrete mix declares its :attr:`space`, ``'pixels'`` (the data preprocessor mixes the images) or
    ``'tokens'`` (the backbone mixes its patch tokens), and draws a pixel mask exactly when it mixes pixels.

    Args:
        alpha (float, optional): Beta parameter of ``lam``; positive. None for a mix that draws no ``lam``
            of its own. Defaults to 1.0.
        patch_size (int): Token stride of the backbone in input pixels. Defaults to 16.
        partner (str): ``'flip'`` or ``'permute'``. Defaults to ``'flip'``.
    """

    PARTNERS = ('flip', 'permute')
    #: draw ``lam`` again while it is exactly 1 (an unmixed batch)
    REDRAW_FULL = True
    #: one of :data:`SPACES`, declared by every concrete mix
    space: Optional[str] = None
    image_target = True  # mixes the images' labels

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if cls.space is not None and cls.space not in SPACES:
            raise TypeError(f'{cls.__name__}.space must be one of {list(SPACES)}, got {cls.space!r}')

    @property
    def trace_request(self) -> TraceRequest:
        """Nothing for a mix in pixels; for one in tokens, the service ``'mix'`` on a grid of :attr:`patch_size`."""
        if self.space == 'tokens':
            return TraceRequest(services={'mix'}, patch_size=self.patch_size)
        return TraceRequest()

    def __init__(self, alpha: Optional[float] = 1.0, patch_size: int = 16, partner: str = 'flip'):
        if alpha is not None and not alpha > 0:
            raise ValueError(f'{type(self).__name__}: alpha must be positive (lam ~ Beta(alpha, alpha)), got {alpha}')
        if int(patch_size) != patch_size or patch_size < 1:
            raise ValueError(f'{type(self).__name__}: patch_size must be a positive integer, got {patch_size!r}')
        if partner not in self.PARTNERS:
            raise ValueError(f'{type(self).__name__}: partner must be one of {self.PARTNERS}, got {partner!r}')
        self.alpha = None if alpha is None else float(alpha)
        self.patch_size, self.partner = int(patch_size), partner

    def draw_lam(self) -> float:
        """One ``lam ~ Beta(alpha, alpha)`` (again while it is 1 when :attr:`REDRAW_FULL`)."""
        lam = np.random.beta(self.alpha, self.alpha)
        while self.REDRAW_FULL and lam == 1.0:
            lam = np.random.beta(self.alpha, self.alpha)
        return float(lam)

    def to_pixels(self, mask: Tensor, size: Tuple[int, int]) -> Tensor:
        """A token mask ``(..., Hg, Wg)`` in whole patches on the image ``(..., H, W)`` (padding cropped)."""
        p = self.patch_size
        return mask.repeat_interleave(p, -2).repeat_interleave(p, -1)[..., : size[0], : size[1]]

    def masks(self, inputs: Tensor, grid: Tuple[int, int]) -> Tuple[Tensor, Optional[Tensor]]:
        """The subclass's draw for images ``(B, C, H, W)``: the token mask ``(B, Hg, Wg)`` (1 own, 0 partner)
        and the pixel mask ``(B, H, W)`` when the images are mixed in pixel space (else None)."""
        raise NotImplementedError

    def plan(self, inputs: Tensor) -> MixPlan:
        """One :class:`~mmvitreg.models.trace.MixPlan` for images ``(B, C, H, W)``, on their device."""
        mask, pixel_mask = self.masks(inputs, token_grid(tuple(inputs.shape[-2:]), self.patch_size))
        if (pixel_mask is not None) != (self.space == 'pixels'):
            raise TypeError(
                f'{type(self).__name__} declares space={self.space!r} but its masks '
                f'{"have" if pixel_mask is not None else "lack"} a pixel mask: declare the space it mixes'
            )
        index = torch.arange(len(inputs) - 1, -1, -1, device=inputs.device)  # 'flip'
        if self.partner == 'permute':
            index = torch.randperm(len(inputs), device=inputs.device)
        return MixPlan(index=index, mask=mask, pixel_mask=pixel_mask)
