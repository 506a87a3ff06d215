"""TL-Align: token-label alignment, the training target of a mixed image read from the attention maps."""
from typing import List, Optional

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmpretrain.structures import DataSample
from torch import Tensor

from mmvitreg.registry import MODELS
from ..trace import TokenTrace, TraceRequest, WindowLayout


@MODELS.register_module()
class TLAlign(BaseModule):
    r"""Token-label alignment from `Token-Label Alignment for Vision Transformers
    <https://arxiv.org/abs/2210.06455>`_ (Xiao et al., ICCV 2023).

    A target transform of :class:`~mmvitreg.models.classifiers.TokenClassifier`: after the backbone
    ran on a batch mixed by a two-image plan (e.g. :class:`~mmvitreg.models.mixing.PatchCutMix`),
    every token's label is propagated through the blocks as the tokens are, and the image target
    becomes the aligned label instead of the area-mixed one. Per block ``l`` (paper Eq. 9, 11 and
    Table 10; official ``timm/models/vision_transformer.py``):

    .. math::

        \hat{Y}^{l} = \mathrm{Norm}\big(\tfrac{1}{H}\textstyle\sum_h A_h^{l}\big)\, Y^{l-1}, \qquad
        Y^{l} = \tfrac{1}{2}\big(\hat{Y}^{l} + Y^{l-1}\big)

    * ``A_h^l``: the attention map of head ``h`` (``trace.attn``), detached, taken before attention
      dropout (re-attention: after ``Θ`` and its norm, whose dropout comes first), cls row and column
      included; the mean over heads (Eq. 9);
    * ``Norm`` (Table 10) scales each row to sum 1. A softmax row already does, so for ViT/DeiT this
      is the official code's ``A Y`` (up to float rounding). A **re-attention** map is not
      row-stochastic (``Θ``, its bias and the BatchNorm make entries negative): negative weights are
      set to 0 before the row is scaled, because a negative weight would take label mass away and
      leave the simplex; a row with no positive weight keeps the token's label;
    * residual connections average (``Norm`` = simple average, Eq. 11); the MLP, LayerNorms and drop
      path leave labels unchanged (as the official code, also when drop path drops the branch);
    * Swin: labels follow the tokens' padding, cyclic shift and window partition (the block's
      :class:`~mmvitreg.models.trace.WindowLayout`); padding tokens carry no label, so a row is
      normalised over the real tokens it attends; patch merging sums the labels of the 2x2 merged
      tokens (real ones only) and normalises (Table 10);
    * stop-gradient (Eq. 12): everything runs on detached maps without autograd, in float32.

    **Representation.** Two-image mixing starts every token at ``w y_own + (1 - w) y_partner`` and
    each step above is a convex combination, so labels keep that form: only the weight ``w``
    ``(B, N)`` is carried, not ``(B, N, C)`` labels (the official code's C-dimensional stream gives the
    same target; ``tests/test_tl_align.py`` checks it to 1e-6). Initial ``w``: the plan's token mask
    (1 own, 0 partner, in between for split patches) and, for extra tokens (cls), the plan's area
    ``lam`` (official ``tla.py``). Target: ``w`` of the cls token (ViT/DeiT/DeepViT) or the mean ``w``
    of the last block's tokens (backbones without a cls token: Swin), turned into
    ``w * onehot(gt_label) + (1 - w) * onehot(gt_label[index])`` as each sample's ``gt_score``. Label
    smoothing belongs to the head's loss (``LabelSmoothLoss(mode='original')``: smoothing commutes
    with the mix, so this equals the official smoothing of each one-hot).

    Training only: inference builds no trace and costs nothing.

    Args:
        num_layers (int): Blocks of the backbone (``sum(depths)`` for Swin); the maps of all of them
            are read.

    Raises:
        ValueError: (at the first step) no mixing plan, a plan on another grid, a backbone with a
            different number of blocks, or samples without ``gt_label``.
    """

    def __init__(self, num_layers: int):
        super().__init__()
        if int(num_layers) != num_layers or num_layers < 1:
            raise ValueError(f'num_layers must be a positive integer (the backbone\'s blocks), got {num_layers!r}')
        self.num_layers = int(num_layers)
        self.trace_request = TraceRequest(attn_layers=tuple(range(self.num_layers)), needs={'grid'})

    def transform(self, trace: Optional[TokenTrace], data_samples: List[DataSample]) -> None:
        """Replace every sample's ``gt_score`` ``(C,)`` by its aligned target."""
        if trace is None or trace.mix is None:
            raise ValueError("TLAlign aligns the labels of mixed images but the batch has no mixing plan: set "
                             "train_cfg=dict(token_mix=dict(type='mmvitreg.PatchCutMix', patch_size=...)) "
                             'in the TokenClassifier')
        if any('gt_label' not in s for s in data_samples):
            raise ValueError('TLAlign builds the targets from gt_label, which the data samples lack')
        w = self.aligned_weights(trace)
        num_classes = data_samples[0].gt_score.shape[-1]
        own = F.one_hot(torch.cat([s.gt_label for s in data_samples]).to(w.device), num_classes).float()
        targets = w.unsqueeze(1) * own + (1 - w.unsqueeze(1)) * own[trace.mix.index]
        for sample, target in zip(data_samples, targets):
            sample.set_gt_score(target)

    @torch.no_grad()
    def aligned_weights(self, trace: TokenTrace) -> Tensor:
        """``(B,)`` share of each sample's own label in its aligned target."""
        plan = trace.mix
        if tuple(plan.mask.shape[-2:]) != tuple(trace.grid):
            raise ValueError(f'the mixing plan covers a {tuple(plan.mask.shape[-2:])} token grid but the backbone '
                             f'has {tuple(trace.grid)}: set the plan\'s patch_size to the backbone\'s token stride')
        if trace.num_layers != self.num_layers:
            raise ValueError(f'TLAlign(num_layers={self.num_layers}) but the backbone has {trace.num_layers} blocks: '
                             'set num_layers to the backbone\'s number of blocks')
        with torch.autocast(plan.mask.device.type, enabled=False):
            w = plan.mask.flatten(1).float()  # (B, Hg * Wg)
            extra = trace.num_extra_tokens
            if extra:
                w = torch.cat([plan.lam.float().unsqueeze(1).expand(-1, extra), w], 1)
            grid = tuple(trace.grid)
            for i in range(self.num_layers):
                if grid != tuple(trace.grids[i]):
                    w, grid = self.merge(w, grid, tuple(trace.grids[i])), tuple(trace.grids[i])
                w = 0.5 * (self.spatial_mix(trace.attn[i], w, trace.windows.get(i)) + w)
            return w[:, 0] if extra else w.mean(1)

    @staticmethod
    def spatial_mix(attn: Tensor, w: Tensor, layout: Optional[WindowLayout] = None) -> Tensor:
        """``Norm(mean_h A) w``: one block's spatial mixing of the weights ``w`` ``(B, N)``.

        ``attn`` is ``(B, heads, N, N)``, or ``(B * nW, heads, n, n)`` per window of ``layout``.
        ``Norm`` drops negative weights and scales each row to sum 1 over real (non-padding) tokens.
        """
        a = attn.detach().float().mean(1).clamp_(min=0)
        x = torch.stack([w, torch.ones_like(w)], -1)  # (B, N, 2): own weight, label mass
        if layout is not None:
            x = layout.partition(x)  # padding: weight 0, mass 0
        num, den = (a @ x).unbind(-1)
        out = torch.where(den > 0, num / den.clamp(min=torch.finfo(den.dtype).tiny), x[..., 0])
        return out if layout is None else layout.reverse(out)

    @staticmethod
    def merge(w: Tensor, grid, merged) -> Tensor:
        """Patch merging: ``(B, H * W)`` -> ``(B, ceil(H / 2) * ceil(W / 2))``, the mean of the real
        tokens of each 2x2 group (sum of labels, normalised; padding bottom/right as Swin's)."""
        (H, W), (H2, W2) = grid, merged
        if (H2, W2) != (-(-H // 2), -(-W // 2)):
            raise ValueError(f'TLAlign follows 2x2 patch merging, but the grid changes from {grid} to {merged}')
        x = torch.stack([w.view(-1, H, W), torch.ones_like(w).view(-1, H, W)], 1)
        x = F.pad(x, (0, 2 * W2 - W, 0, 2 * H2 - H))
        num, den = x.view(-1, 2, H2, 2, W2, 2).sum((3, 5)).flatten(2).unbind(1)
        return num / den
