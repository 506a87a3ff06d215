"""TL-Align: token-label alignment, the training target of a mixed image carried along with the tokens."""

import functools
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from mmpretrain.structures import DataSample
from torch import Tensor

from mmvitreg.registry import MODELS

from ..trace import TokenTrace, TraceRequest

NO_PLAN = "TLAlign needs a mixing plan: set the TokenClassifier's train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix'))"


@MODELS.register_module()
class TLAlign(BaseModule):
    r"""Token-label alignment from `Token-Label Alignment for Vision Transformers
    <https://arxiv.org/abs/2210.06455>`_ (Xiao et al., ICCV 2023).

    A target transform of :class:`~mmvitreg.models.classifiers.TokenClassifier`: after the backbone ran on a
    batch mixed by a two-image plan (e.g. :class:`~mmvitreg.models.mixing.PatchCutMix`), every token's label has
    been propagated through the blocks as the tokens are, and the image target becomes the aligned label
    instead of the area-mixed one. Per block ``l`` (paper Eq. 9, 11 and Table 10; official
    ``timm/models/vision_transformer.py``):

    .. math::

        \hat{Y}^{l} = \mathrm{Norm}\big(\tfrac{1}{H}\textstyle\sum_h A_h^{l}\big)\, Y^{l-1}, \qquad
        Y^{l} = \tfrac{1}{2}\big(\hat{Y}^{l} + Y^{l-1}\big)

    * ``A_h^l``: head ``h``'s attention map, detached, before attention dropout (re-attention: after ``Θ`` and
      its norm), cls row and column included;
    * ``Norm`` (Table 10) scales each row to sum 1; a softmax row already does, so the official ``A Y`` is kept
      there (:meth:`step`). A re-attention map has negative entries: they are set to 0 before the row is
      scaled, so labels stay on the simplex; a row with no positive weight keeps the token's label;
    * residual connections average (Eq. 11); the MLP, norms and drop path leave labels unchanged (official);
    * Swin: labels follow the padding (no label), cyclic shift, windows and patch merging (:meth:`resize`);
    * stop-gradient (Eq. 12): labels ride on detached values and never enter autograd.

    TLAlign is a :class:`~mmvitreg.models.trace.TokenStream`: the backbone carries the labels block by block
    (:class:`~mmvitreg.models.layers.Ride`), as extra value channels of the block's fused attention, so no
    ``(B, heads, N, N)`` map is kept; labels are float32 between blocks (under AMP, the autocast dtype inside a
    fused call, as the official fp16 maps).

    **Representation.** Two-image mixing starts every token at ``w y_own + (1 - w) y_partner`` and each step
    is a convex combination, so ``representation='weights'`` (default) carries ``(w, 1 - w)`` per token;
    ``'labels'`` carries the official ``(B, N, C)`` labels (the same target). Initial labels: the plan's token
    mask and, for extra tokens, the plan's area ``lam`` (official ``tla.py``). Target: the cls token's label,
    or the mean label of the last block's tokens without a cls token (Swin), as each sample's ``gt_score``.
    Label smoothing belongs to the head's loss (it commutes with the mix). Training only; every training
    iteration logs ``tla_shift`` (:meth:`transform`).

    Args:
        num_layers (int, optional): Blocks of the backbone (``sum(depths)`` for Swin), checked against it when
            the model is built. None (default): the backbone's depth.
        representation (str): ``'weights'`` (default) or ``'labels'`` (the official C-dimensional stream).
        num_classes (int, optional): ``C``, needed by ``representation='labels'``.
    """

    REPRESENTATIONS = ('weights', 'labels')
    image_target = True  # rewrites each image's label

    def __init__(
        self, num_layers: Optional[int] = None, representation: str = 'weights', num_classes: Optional[int] = None
    ):
        super().__init__()
        if num_layers is not None and (int(num_layers) != num_layers or num_layers < 1):
            raise ValueError(f'num_layers must be a positive integer (the backbone\'s blocks), got {num_layers!r}')
        if representation not in self.REPRESENTATIONS:
            raise ValueError(f'representation must be one of {self.REPRESENTATIONS}, got {representation!r}')
        if representation == 'labels' and not num_classes:
            raise ValueError("representation='labels' carries (B, N, num_classes) labels: set num_classes")
        self.num_layers = None if num_layers is None else int(num_layers)
        self.representation = representation
        self.num_classes = num_classes
        self.trace_request = TraceRequest(stream=self)  # the labels ride as this instance's stream

    # ------------------------------------------------------------------ the stream (called by the backbone)
    def start(self, trace: TokenTrace) -> Tensor:
        """Initial labels ``(B, N, D)`` (``D = 2`` own/partner, or ``C``), extra tokens first."""
        plan = trace.mix
        if plan is None:
            raise ValueError(NO_PLAN)
        mask = plan.mask.float()  # (B, Hg, Wg)
        extra = trace.num_extra_tokens
        w = mask.view(len(mask), -1, 1)  # (B, Hg * Wg, 1)
        if extra:  # the extra tokens' share is the area lam, the mean of the mask
            w = torch.cat([w.mean(1, keepdim=True)] * extra + [w], 1)
        if self.representation == 'weights':
            return torch.cat([w, 1 - w], -1)
        if not trace.samples or any('gt_label' not in s for s in trace.samples):
            raise ValueError("TLAlign(representation='labels') needs the data samples' gt_label in the trace")
        own = _one_hot(trace.samples, self.num_classes, w.device).unsqueeze(1)
        return w * own + (1 - w) * own[plan.index]

    @staticmethod
    def step(trace: TokenTrace, layer: int, labels: Tensor, mixed: Tensor, stochastic: bool = False) -> Tensor:
        """Eq. 9 + 11: ``(Norm(A) Y + Y) / 2`` from ``Y`` and ``mixed = max(0, mean_h A) Y``, ``(B, N, D)``.

        Norm divides each row by its label mass (the real tokens it attends); a row with no mass keeps the
        token's label. ``stochastic`` (a softmax map without padding): every row's mass is 1, Norm is skipped
        (the official unnormalised ``A Y``)."""
        if not stochastic:
            mass = mixed.sum(-1, keepdim=True)
            mixed = torch.where(mass > 0, mixed / mass, labels)
        return labels.lerp(mixed, 0.5)  # (aligned + labels) / 2 in one operator

    @staticmethod
    def resize(labels: Tensor, grid: Tuple[int, int], merged: Tuple[int, int]) -> Tensor:
        """Patch merging: ``(B, H * W, D)`` -> ``(B, ceil(H / 2) * ceil(W / 2), D)``, the sum of the real
        tokens' labels of each 2x2 group, normalised (padding bottom/right as Swin's)."""
        (H, W), (H2, W2) = grid, merged
        if (H2, W2) != (-(-H // 2), -(-W // 2)):
            raise ValueError(f'TLAlign follows 2x2 patch merging, but the grid changes from {grid} to {merged}')
        D = labels.shape[-1]
        if (2 * H2, 2 * W2) == (H, W):  # four real tokens, each of mass 1: normalising is the mean
            return labels[:, _merged_tokens(grid, labels.device)].mean(2)
        x = F.pad(labels.view(-1, H, W, D), (0, 0, 0, 2 * W2 - W, 0, 2 * H2 - H))
        x = x.view(-1, H2, 2, W2, 2, D).sum((2, 4)).flatten(1, 2)
        return x / x.sum(-1, keepdim=True)

    # ------------------------------------------------------------------ the target (called by the classifier)
    def transform(self, trace: Optional[TokenTrace], data_samples: List[DataSample]) -> Dict[str, Tensor]:
        """Replace every sample's ``gt_score`` ``(C,)`` by its aligned target.

        Returns:
            dict: ``{'tla_shift': s}``, logged, not trained on: the batch mean of the total-variation distance
            ``0.5 * |aligned target - area target|_1`` (``|w - lam|`` for a pair of two classes).
        """
        if trace is None or trace.mix is None:
            raise ValueError(NO_PLAN)
        if any('gt_label' not in s for s in data_samples):
            raise ValueError('TLAlign builds the targets from gt_label, which the data samples lack')
        labels = self.aligned_labels(trace)  # carries no gradient (the stream never enters autograd)
        num_classes = data_samples[0].gt_score.shape[-1]
        own = _one_hot(data_samples, num_classes, labels.device)
        partner = own[trace.mix.index]
        if self.representation == 'weights':
            labels = partner.lerp(own, labels[:, :1])  # w * own + (1 - w) * partner
        area = partner.lerp(own, trace.mix.lam.float().unsqueeze(1))
        for sample, target in zip(data_samples, labels):
            sample.set_gt_score(target)
        return {'tla_shift': torch.dist(labels, area, 1) * (0.5 / len(labels))}  # the batch mean of 0.5 |.|_1

    def aligned_labels(self, trace: TokenTrace) -> Tensor:
        """``(B, D)``: the cls token's label after the last block, or the mean over tokens without a cls token."""
        if trace.num_layers - 1 not in trace.streamed:
            raise ValueError('no TLAlign labels in the trace: run the backbone with tl_align.trace_request and a plan')
        labels = trace.streamed[trace.num_layers - 1]
        return labels[:, 0] if trace.num_extra_tokens else labels.mean(1)

    def aligned_weights(self, trace: TokenTrace) -> Tensor:
        """``(B,)`` share of each sample's own label in its aligned target (``representation='weights'``)."""
        if self.representation != 'weights':
            raise ValueError("aligned_weights reads the weight stream: build TLAlign(representation='weights')")
        return self.aligned_labels(trace)[:, 0]


@functools.lru_cache(maxsize=16)
def _merged_tokens(grid: Tuple[int, int], device: torch.device) -> Tensor:
    """``(H / 2 * W / 2, 4)`` long: the grid tokens of every 2x2 group of an even ``grid`` ``(H, W)``, merged
    tokens row-major (cached per grid and device)."""
    H, W = grid
    corner = torch.arange(H // 2, device=device).view(-1, 1) * 2 * W + torch.arange(W // 2, device=device) * 2
    return corner.view(-1, 1) + torch.tensor([0, 1, W, W + 1], device=device)


def _one_hot(data_samples, num_classes: int, device) -> Tensor:
    """``(B, num_classes)`` float one-hot rows of the samples' ``gt_label`` (a scatter: unlike ``F.one_hot`` on
    the CPU, no range check that reads the labels on the host)."""
    labels = torch.stack([s.gt_label for s in data_samples]).to(device)  # (B, 1)
    return torch.zeros(len(labels), num_classes, device=device).scatter_(1, labels, 1.0)
