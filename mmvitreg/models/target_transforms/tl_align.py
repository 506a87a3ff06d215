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

NO_PLAN = ("TLAlign aligns the labels of mixed images but the batch has no mixing plan: set "
           "train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix', patch_size=...)) in the TokenClassifier")


@MODELS.register_module()
class TLAlign(BaseModule):
    r"""Token-label alignment from `Token-Label Alignment for Vision Transformers
    <https://arxiv.org/abs/2210.06455>`_ (Xiao et al., ICCV 2023).

    A target transform of :class:`~mmvitreg.models.classifiers.TokenClassifier`: after the backbone
    ran on a batch mixed by a two-image plan (e.g. :class:`~mmvitreg.models.mixing.PatchCutMix`),
    every token's label has been propagated through the blocks as the tokens are, and the image
    target becomes the aligned label instead of the area-mixed one. Per block ``l`` (paper Eq. 9, 11
    and Table 10; official ``timm/models/vision_transformer.py``):

    .. math::

        \hat{Y}^{l} = \mathrm{Norm}\big(\tfrac{1}{H}\textstyle\sum_h A_h^{l}\big)\, Y^{l-1}, \qquad
        Y^{l} = \tfrac{1}{2}\big(\hat{Y}^{l} + Y^{l-1}\big)

    * ``A_h^l``: the attention map of head ``h``, detached, taken before attention dropout
      (re-attention: after ``Θ`` and its norm, whose dropout comes first), cls row and column
      included; the mean over heads (Eq. 9);
    * ``Norm`` (Table 10) scales each row to sum 1. A softmax row already does, so where the map is a
      softmax over real tokens (ViT/DeiT, Swin windows without padding) the stream skips it: the official
      code's ``A Y`` (:meth:`step`, ``stochastic``). A **re-attention** map is not
      row-stochastic (``Θ``, its bias and the BatchNorm make entries negative): negative weights are
      set to 0 before the row is scaled, because a negative weight would take label mass away and
      leave the simplex; a row with no positive weight keeps the token's label;
    * residual connections average (``Norm`` = simple average, Eq. 11); the MLP, LayerNorms and drop
      path leave labels unchanged (as the official code, also when drop path drops the branch);
    * Swin: labels follow the tokens' padding, cyclic shift and window partition (the block's
      :class:`~mmvitreg.models.layers.WindowLayout`); padding tokens carry no label, so a row is
      normalised over the real tokens it attends; patch merging sums the labels of the 2x2 merged
      tokens (real ones only) and normalises (Table 10; the mean where all four are real);
    * stop-gradient (Eq. 12): labels ride on detached values and never enter autograd.

    **How the labels travel.** TLAlign is a :class:`~mmvitreg.models.trace.TokenStream`: the backbone
    carries the labels block by block (see :class:`~mmvitreg.models.layers.Ride`). Blocks keep their
    fused attention kernel and no ``(B, heads, N, N)`` map is kept for the backward: the 2 label
    channels ride as extra value channels of the block's own public fused call
    (``F.scaled_dot_product_attention``, on every device, windows included), so the map is computed once;
    the C-dimensional labels (``representation='labels'``) and blocks whose map is explicit anyway
    (re-attention, attention dropout) multiply the labels by the explicit map, as the official code, which
    records every map in the autograd graph and multiplies ``(B, N, C)`` labels. Labels are kept in float32
    between blocks; inside a fused call under AMP they are mixed in the autocast dtype, as the official AMP
    training mixes them with its fp16 maps.

    **Representation.** Two-image mixing starts every token at ``w y_own + (1 - w) y_partner`` and
    each step above is a convex combination, so labels keep that form. ``representation='weights'``
    (default) carries the 2-dimensional label ``(w, 1 - w)`` over (own, partner) per token;
    ``'labels'`` carries the official ``(B, N, C)`` labels (same target, ``tests/test_tl_align.py``
    checks it to 1e-6). Initial labels: the plan's
    token mask (1 own, 0 partner, in between for split patches) and, for extra tokens (cls), the
    plan's area ``lam`` (official ``tla.py``). Target: the label of the cls token (ViT/DeiT/DeepViT)
    or the mean label of the last block's tokens (backbones without a cls token: Swin), as each
    sample's ``gt_score`` ``w * onehot(gt_label) + (1 - w) * onehot(gt_label[index])``. Label
    smoothing belongs to the head's loss (``LabelSmoothLoss(mode='original')``: smoothing commutes
    with the mix, so this equals the official smoothing of each one-hot).

    Training only: inference builds no trace and costs nothing. Every training iteration logs
    ``tla_shift``, the mean distance between the aligned and the area target (:meth:`transform`).

    Args:
        num_layers (int, optional): Blocks of the backbone (``sum(depths)`` for Swin); labels go through
            all. None (default): the backbone's depth, from the trace. When given, the
            :class:`~mmvitreg.models.classifiers.TokenClassifier` checks it against the backbone at build
            time (:func:`~mmvitreg.models.trace.check_trace_user`).
        representation (str): ``'weights'`` (default) or ``'labels'`` (the official C-dimensional
            stream, for comparisons).
        num_classes (int, optional): ``C``, needed by ``representation='labels'``.

    Raises:
        TraceUserError (ValueError): (when the model is built) a backbone with another
            number of blocks than a given ``num_layers``; a mixing plan of another ``patch_size`` than the
            backbone's token stride.
        ValueError: (at the first step) no mixing plan, or samples without ``gt_label``.
    """

    REPRESENTATIONS = ('weights', 'labels')
    image_target = True  # rewrites each image's label

    def __init__(self, num_layers: Optional[int] = None, representation: str = 'weights',
                 num_classes: Optional[int] = None):
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
        """Initial labels ``(B, N, D)`` (``D = 2`` own/partner, or ``C``), extra tokens first. The trace has
        checked the depth (``num_layers``) and the plan's grid against the backbone before."""
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
            raise ValueError("TLAlign(representation='labels') starts from the labels, but the trace carries no "
                             'data samples with gt_label (the TokenClassifier hands it the batch\'s samples)')
        own = _one_hot(trace.samples, self.num_classes, w.device).unsqueeze(1)
        return w * own + (1 - w) * own[plan.index]

    @staticmethod
    def step(trace: TokenTrace, layer: int, labels: Tensor, mixed: Tensor, stochastic: bool = False) -> Tensor:
        """Eq. 9 + 11: ``(Norm(A) Y + Y) / 2`` from ``Y`` and ``mixed = max(0, mean_h A) Y``, ``(B, N, D)``.

        Norm divides each row by its label mass (the real tokens it attends, Table 10); a row with
        no mass keeps the token's label (its ``0 / 0`` is never selected; labels carry no gradient). With
        ``stochastic`` (a softmax map without padding tokens: every label sums to 1 and every row of the map
        too) each row's mass is already 1 and Norm is the identity, as in the official code, which mixes
        ``A Y`` unnormalised: one operator."""
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
        """Replace every sample's ``gt_score`` ``(C,)`` by its aligned target; return what the log shows.

        Returns:
            dict: ``{'tla_shift': s}``, how far alignment moved the targets: the batch mean of
            ``0.5 * |aligned target - area target|_1`` (the total-variation distance; ``|w - lam|``
            for a pair of two classes, 0 for a pair of one class). 0 means alignment changed nothing
            (e.g. no attention between the mixed regions); a detached scalar, logged, not trained on.
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
        """``(B, D)``: the cls token's label after the last block, or the mean over tokens without a cls
        token (``D = 2``: each sample's own and partner share)."""
        if trace.num_layers - 1 not in trace.streamed:
            raise ValueError('the trace carries no TLAlign labels: run the backbone with '
                             'TokenTrace.for_request(tl_align.trace_request, mix=plan)')
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
    corner = (torch.arange(H // 2, device=device).view(-1, 1) * 2 * W + torch.arange(W // 2, device=device) * 2)
    return corner.view(-1, 1) + torch.tensor([0, 1, W, W + 1], device=device)


def _one_hot(data_samples, num_classes: int, device) -> Tensor:
    """``(B, num_classes)`` float one-hot rows of the samples' ``gt_label`` (a scatter: unlike ``F.one_hot`` on
    the CPU, no range check that reads the labels on the host)."""
    labels = torch.stack([s.gt_label for s in data_samples]).to(device)  # (B, 1)
    return torch.zeros(len(labels), num_classes, device=device).scatter_(1, labels, 1.)
