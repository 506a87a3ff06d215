"""MixUp that hands its plan to the model: every token of a blended image starts with weight lam."""
import numpy as np
import torch
from mmpretrain.models.utils.batch_augments import Mixup
from torch import Tensor

from mmvitreg.registry import BATCH_AUGMENTS
from ..trace import MixPlan, TraceRequest
from .plan_utils import partner_index, token_grid


@BATCH_AUGMENTS.register_module()
class PixelMixup(Mixup):
    r"""MixUp (`Zhang et al. 2018 <https://arxiv.org/abs/1710.09412>`_) as a mixing plan for
    :class:`~mmvitreg.models.target_transforms.TLAlign` (paper Table 7, "MixUp").

    The images are blended in pixel space, ``lam * x + (1 - lam) * x[index]``, and every token
    starts with label weight ``lam`` (paper Sec. 3.3: with MixUp every token is the same blend). The
    official code crashes on this branch (``tla.py``: ``len(None)``), so this follows the paper.
    ``lam ~ Beta(alpha, alpha)``, drawn again while ``lam == 1`` (official loop), one per batch;
    partner ``flip`` (official ``flip(0)``) or ``permute``. Give it to
    :class:`~mmvitreg.models.classifiers.TokenClassifier` as ``train_cfg.token_mix``.

    Args:
        alpha (float): Beta parameter; positive. Defaults to 0.8 (DeiT's MixUp).
        patch_size (int): Token stride of the backbone in pixels; the input must be a multiple. Defaults to 16.
        partner (str): ``'flip'`` or ``'permute'``. Defaults to ``'flip'``.
    """

    PARTNERS = ('flip', 'permute')
    trace_request = TraceRequest(needs={'grid'})  # the classifier hands the plan to the backbone in a trace

    def __init__(self, alpha: float = 0.8, patch_size: int = 16, partner: str = 'flip'):
        if not alpha > 0:
            raise ValueError(f'alpha must be positive, got {alpha}')
        super().__init__(alpha=float(alpha))
        if partner not in self.PARTNERS:
            raise ValueError(f'partner must be one of {self.PARTNERS}, got {partner!r}')
        if int(patch_size) != patch_size or patch_size < 1:
            raise ValueError(f'patch_size must be a positive integer, got {patch_size!r}')
        self.patch_size, self.partner = int(patch_size), partner

    def plan(self, inputs: Tensor) -> MixPlan:
        """One plan for images ``(B, 3, H, W)``: token mask and pixel mask all ``lam``."""
        B, _, H, W = inputs.shape
        grid = token_grid('PixelMixup', inputs, self.patch_size)
        lam = 1.
        while lam == 1.:
            lam = float(np.random.beta(self.alpha, self.alpha))
        mask = torch.full((1, *grid), lam, device=inputs.device)
        return MixPlan(index=partner_index(B, self.partner, inputs.device), mask=mask.expand(B, -1, -1),
                       pixel_mask=torch.full((1, H, W), lam, device=inputs.device).expand(B, -1, -1))

    def mix(self, batch_inputs: Tensor, batch_scores: Tensor):
        """Refuse to run as an mmpretrain batch augment (its plan must reach the model)."""
        raise TypeError('PixelMixup hands its plan to the model and cannot run among the image batch augments '
                        "(train_cfg.augments); use train_cfg=dict(token_mix=dict(type='mmvitreg.PixelMixup', ...)) "
                        'in a TokenClassifier')
