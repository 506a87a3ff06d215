"""The shared part of the mixing plans that take whole tokens from a partner image (random, block-wise)."""
import numpy as np
import torch
from torch import Tensor

from ..trace import MixPlan, TraceRequest
from .plan_utils import partner_index, token_grid


class TokenMaskMix:
    """Base of the plans that replace a ``1 - lam`` share of each image's tokens by its partner's.

    Per sample, ``lam ~ Beta(alpha, alpha)`` (drawn again while ``lam == 1``, as TL-Align's
    ``tla.py`` does for CutMix) gives ``round((1 - lam) * Hg * Wg)`` tokens to take from the partner;
    :meth:`draw` (the subclass) chooses which. The images are mixed in pixel space in whole patches,
    the token mask (1 own, 0 partner) is each token's initial label weight for
    :class:`~mmvitreg.models.target_transforms.TLAlign`, and ``lam`` is the true own share
    (:attr:`MixPlan.lam`). Give a subclass to :class:`~mmvitreg.models.classifiers.TokenClassifier`
    as ``train_cfg.token_mix``.

    Args:
        alpha (float): Beta parameter of ``lam``; positive. Defaults to 1.0 (CutMix's, TL-Align).
        patch_size (int): Token stride of the backbone in pixels (16 in the paper's Table 7); the input
            must be a multiple of it. Defaults to 16.
        partner (str): ``'flip'`` (``x[B - 1 - i]``, TL-Align's official partner) or ``'permute'``.
            Defaults to ``'flip'``.
    """

    PARTNERS = ('flip', 'permute')
    trace_request = TraceRequest(needs={'grid'})  # the classifier hands the plan to the backbone in a trace

    def __init__(self, alpha: float = 1.0, patch_size: int = 16, partner: str = 'flip'):
        if not alpha > 0:
            raise ValueError(f'alpha must be positive, got {alpha}')
        if int(patch_size) != patch_size or patch_size < 1:
            raise ValueError(f'patch_size must be a positive integer, got {patch_size!r}')
        if partner not in self.PARTNERS:
            raise ValueError(f'partner must be one of {self.PARTNERS}, got {partner!r}')
        self.alpha, self.patch_size, self.partner = float(alpha), int(patch_size), partner

    def draw(self, grid, count: int) -> np.ndarray:
        """A ``(Hg, Wg)`` bool array with ``count`` True tokens (those taken from the partner)."""
        raise NotImplementedError

    def plan(self, inputs: Tensor) -> MixPlan:
        """Draw one plan for images ``(B, 3, H, W)``: partner ``index`` ``(B,)``, token mask
        ``(B, H // patch_size, W // patch_size)`` and pixel mask ``(B, H, W)`` (0 on partner tokens)."""
        B, p = len(inputs), self.patch_size
        grid = token_grid(type(self).__name__, inputs, p)
        masks = []
        for _ in range(B):
            lam = 1.
            while lam == 1.:
                lam = np.random.beta(self.alpha, self.alpha)
            masks.append(~self.draw(grid, int(round((1 - lam) * grid[0] * grid[1]))))
        mask = torch.from_numpy(np.stack(masks)).float().to(inputs.device)
        return MixPlan(index=partner_index(B, self.partner, inputs.device), mask=mask, pixel_mask=mask.repeat_interleave(p, 1).repeat_interleave(p, 2))

    def mix(self, batch_inputs: Tensor, batch_scores: Tensor):
        """Refuse to run as an mmpretrain batch augment (its plan must reach the model)."""
        name = type(self).__name__
        raise TypeError(f'{name} hands its plan to the model and cannot run among the image batch augments '
                        f"(train_cfg.augments); use train_cfg=dict(token_mix=dict(type='mmvitreg.{name}', ...)) "
                        'in a TokenClassifier')
