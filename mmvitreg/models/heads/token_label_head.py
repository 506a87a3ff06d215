"""Token labeling head: class-token classifier plus a dense per-token classifier (LV-ViT)."""

from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.models.heads import VisionTransformerClsHead
from mmpretrain.structures import DataSample
from torch import Tensor

from mmvitreg.registry import MODELS

from ..trace import MixPlan, TokenTrace, TraceRequest


@MODELS.register_module()
class TokenLabelHead(VisionTransformerClsHead):
    r"""Token labeling head from `All Tokens Matter: Token Labeling for Training Better Vision
    Transformers <https://arxiv.org/abs/2104.10858>`_ (LV-ViT).

    mmpretrain's :class:`VisionTransformerClsHead` on the class token (``layers.head``) plus a linear classifier
    shared by all patch tokens (``aux_head``), trained with

    .. math::

        L_{total} = H(X^{cls}, y^{cls}) + \beta L_{aux}, \quad
        L_{aux} = \frac{1}{N} \sum_{i=1}^{N} H(X^i, y^i) \qquad (6, 7)

    where ``H`` is the soft-target cross entropy, ``y^i`` the (label-smoothed) token label of token ``i`` and
    ``y^cls`` the class-token target (``cls_target``); a mixed batch's targets: :func:`mix_token_label_target`.
    The soft CE gathers each token's sparse classes, exact with the official reading's tail slots (class ``-1``,
    probability ``t`` of each unlisted class): ``H(X, y) = -sum_listed (y_c - t) log p_c - t sum_c log p_c``.
    Prediction (official): ``X^cls + aux_pred_weight * max_i X^i``. Paper vs official: configs/lvvit/README.md.

    Inputs: ``feats[-1]``, the backbone's ``out_type='raw'`` output ``(B, N, C)``, class token first, and the
    filled :class:`TokenTrace`. Each data sample carries ``token_label`` ``(2, K, S, S)`` (probabilities, class
    indices on the token grid) and, with the official reading, ``relabel_label`` ``(2, K')``.

    Args:
        num_classes (int): Number of classes ``C``.
        in_channels (int): Token dimension.
        beta (float): Weight of ``L_aux`` (Eq. 7); 0 for plain data. Defaults to 0.5 (paper; official 1.0).
        token_label_smooth_val (float): Label smoothing ``s`` of the token labels and ReLabel targets.
            Defaults to 0.1 (official ``--smoothing``).
        cls_target (str): ``y^cls``: ``'gt'`` (paper, the image label through ``loss``), ``'relabel'``
            (official: the crop's ReLabel target, ``relabel_label`` of the official reading or, with the
            ``'topk'`` reading, the mean of the crop's token labels) or ``'relabel_gt'`` (official
            ``--ground-truth``: ``ratio * y_relabel + (1 - ratio) * y_gt``, ``ratio = 0.9 - 0.4 [argmax
            y_relabel == argmax y_gt]``, both smoothed). Defaults to ``'gt'``.
        label_smooth_form (str): Smoothing of a soft target ``y``: ``'standard'`` ``(1 - s) y + s / C`` or
            ``'official'`` ``(1 - s + s / C) y + s / C`` (sums to ``1 + s / C``). Defaults to ``'standard'``.
        aux_pred_weight (float): Weight of the aux max in the prediction. Defaults to 0.5 (official).
        loss (dict): The class-token loss ``H(X^cls, y^cls)`` of ``cls_target='gt'``. Defaults to
            ``LabelSmoothLoss(label_smooth_val=0.1, mode='original')`` (official smoothing 0.1).
        init_cfg (dict): Defaults to truncated-normal std 0.02, bias 0, on both linears (official).
        **kwargs: ``hidden_dim``, ``act_cfg``, ``topk``, ``cal_acc`` of :class:`VisionTransformerClsHead`.
    """

    CLS_TARGETS = ('gt', 'relabel', 'relabel_gt')
    SMOOTH_FORMS = ('standard', 'official')
    # every token of the backbone's output, a cls token first; the trace gives their grid and the plan
    trace_request = TraceRequest(facts={'cls_token'}, out_type='raw')
    image_target = True  # the class token's loss

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        beta: float = 0.5,
        token_label_smooth_val: float = 0.1,
        cls_target: str = 'gt',
        label_smooth_form: str = 'standard',
        aux_pred_weight: float = 0.5,
        loss: dict = dict(type='mmpretrain.LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        init_cfg: dict = dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
        **kwargs,
    ):
        super().__init__(num_classes=num_classes, in_channels=in_channels, loss=loss, init_cfg=init_cfg, **kwargs)
        if cls_target not in self.CLS_TARGETS:
            raise ValueError(f'cls_target must be one of {self.CLS_TARGETS}, got {cls_target!r}')
        if label_smooth_form not in self.SMOOTH_FORMS:
            raise ValueError(f'label_smooth_form must be one of {self.SMOOTH_FORMS}, got {label_smooth_form!r}')
        if beta < 0:
            raise ValueError(f'beta must be >= 0, got {beta}')
        if not 0 <= token_label_smooth_val < 1:
            raise ValueError(f'token_label_smooth_val must be in [0, 1), got {token_label_smooth_val}')
        self.beta = beta
        self.token_label_smooth_val = token_label_smooth_val
        self.cls_target = cls_target
        self.label_smooth_form = label_smooth_form
        self.aux_pred_weight = aux_pred_weight
        self.aux_head = nn.Linear(in_channels, num_classes)

    def pre_logits(self, feats: Tuple[Tensor]) -> Tensor:
        """The class-token feature ``(B, C)`` (through the optional hidden layer)."""
        x = feats[-1]
        if x.dim() != 3:
            raise ValueError(f"TokenLabelHead reads all tokens: set backbone's out_type='raw' (got {tuple(x.shape)})")
        return super().pre_logits((x[:, 0],))

    def forward_logits(self, feats: Tuple[Tensor], trace: TokenTrace) -> Tuple[Tensor, Tensor]:
        """Class-token logits ``(B, C)`` and per-token aux logits ``(B, Hg * Wg, C)``."""
        if trace is None:
            raise ValueError("TokenLabelHead needs the token trace: build it in type='mmvitreg.TokenClassifier'")
        cls_score = self.layers.head(self.pre_logits(feats))
        patches, grid = feats[-1][:, trace.num_extra_tokens :], trace.last_grid
        if patches.shape[1] != grid[0] * grid[1]:
            raise ValueError(f'{patches.shape[1]} patch tokens do not fill the {grid} token grid')
        return cls_score, self.aux_head(patches)

    def forward(self, feats: Tuple[Tensor], trace: Optional[TokenTrace] = None) -> Tensor:
        """Prediction score ``(B, C)``: ``X^cls + aux_pred_weight * max_i X^i`` (official eval rule)."""
        cls_score, aux_score = self.forward_logits(feats, trace)
        if self.aux_pred_weight:
            cls_score = cls_score + self.aux_pred_weight * aux_score.max(1)[0]
        return cls_score

    def predict(
        self,
        feats: Tuple[Tensor],
        data_samples: Optional[List[Optional[DataSample]]] = None,
        trace: Optional[TokenTrace] = None,
    ) -> List[DataSample]:
        """Predictions with the official rule (see :meth:`forward`)."""
        return self._get_predictions(self(feats, trace), data_samples)

    def loss(self, feats: Tuple[Tensor], data_samples: List[DataSample], trace: TokenTrace) -> dict:
        """``loss_cls = H(X^cls, y^cls)`` and ``loss_token = beta * L_aux`` (Eq. 6-10)."""
        cls_score, aux_score = self.forward_logits(feats, trace)
        token_label = None
        if self.beta > 0 or self.cls_target != 'gt':
            token_label = self._token_labels(data_samples, trace.last_grid, cls_score.device)
        relabel = self._relabel_target(data_samples, token_label) if self.cls_target != 'gt' else None
        token_targets, relabel = mix_token_label_target(token_label, trace.mix, relabel)
        if relabel is not None:
            losses = dict(loss_cls=-(relabel * F.log_softmax(cls_score.float(), dim=-1)).sum(-1).mean())
        else:  # mmpretrain's loss (and cal_acc), the softmax over classes in float32, also under --amp
            losses = self._get_loss(cls_score.float(), data_samples)
            losses['loss_cls'] = losses.pop('loss')
        if self.beta > 0:
            losses['loss_token'] = self.beta * self._token_loss(aux_score, token_targets)
        return losses

    @property
    def _on_value(self) -> float:
        """Weight of a soft target in its smoothed form (``label_smooth_form``)."""
        s = self.token_label_smooth_val
        return 1 - s + (s / self.num_classes if self.label_smooth_form == 'official' else 0.0)

    @staticmethod
    def _token_labels(data_samples: List[DataSample], grid: Tuple[int, int], device) -> Tensor:
        if 'token_label' not in data_samples[0]:
            raise ValueError(
                "TokenLabelHead needs 'token_label' in the data samples (add mmvitreg.LoadTokenLabelMap "
                "to the pipeline; TokenClsDataPreprocessor reads it); plain data: beta=0, cls_target='gt'"
            )
        token_label = torch.stack([s.token_label for s in data_samples]).to(device)
        if token_label.dim() != 5 or token_label.shape[1] != 2 or tuple(token_label.shape[-2:]) != tuple(grid):
            raise ValueError(
                f'token_label must be (2, k, S, S) per sample with (S, S) the token grid {grid}; '
                f'got {tuple(token_label.shape[1:])} (set TokenLabelTarget.token_label_size)'
            )
        return token_label

    def _relabel_target(self, data_samples: List[DataSample], token_label: Tensor) -> Tensor:
        """Smoothed ReLabel image target ``(B, C)`` (``'relabel_gt'``: blended with the ground truth)."""
        C, s = self.num_classes, self.token_label_smooth_val
        if 'relabel_label' in data_samples[0]:  # the official 1 x 1 pool of the crop
            relabel = _dense(torch.stack([d.relabel_label for d in data_samples]).to(token_label.device), C)
        else:  # the topk reading: the mean of the crop's token labels
            B, _, k, S1, S2 = token_label.shape
            relabel = _dense(token_label.reshape(B, 2, k * S1 * S2), C) / (S1 * S2)
        target = self._on_value * relabel + s / C
        if self.cls_target == 'relabel_gt':
            gt = torch.cat([d.gt_label for d in data_samples]).to(target.device)
            gt_target = F.one_hot(gt, C).to(target.dtype) * (1 - s) + s / C
            ratio = 0.9 - 0.4 * (target.argmax(-1) == gt).to(target.dtype).unsqueeze(-1)
            target = ratio * target + (1 - ratio) * gt_target
        return target

    def _token_loss(self, aux_score: Tensor, token_targets: List[Tuple[Tensor, Tensor, Tensor]]) -> Tensor:
        """``L_aux``: mean over tokens of the soft CE to the (mixed, smoothed) token labels, the weighted
        parts of :func:`mix_token_label_target`."""
        log_p = F.log_softmax(aux_score.float(), dim=-1)  # (B, N, C)
        ce = sum(weight * _soft_ce(log_p, probs, index) for weight, probs, index in token_targets)  # (B, N)
        s = self.token_label_smooth_val
        if s:
            ce = self._on_value * ce - s * log_p.mean(-1)
        return ce.mean()


def mix_token_label_target(
    token_label: Optional[Tensor], plan: Optional[MixPlan], relabel: Optional[Tensor] = None
) -> Tuple[list, Optional[Tensor]]:
    r"""The LV-ViT token-label target of a batch mixed by a plan (MixToken): the one place it is mixed.

    The backbone mixes the patch tokens with the plan's mask ``M`` (``(B, Hg, Wg)``, 1 on a sample's own
    tokens, 0 on those of its partner ``index``), and the targets follow it (paper Eq. 8-10, as official):

    .. math::

        \hat{T} = T_1 \odot M + T_2 \odot (1 - M) \quad (8) \qquad
        \hat{Y} = Y_1 \odot M + Y_2 \odot (1 - M) \quad (9) \qquad
        \hat{y}^{cls} = \bar{M} y_1^{cls} + (1 - \bar{M}) y_2^{cls} \quad (10)

    with ``M_bar`` the mask mean (:attr:`MixPlan.lam`). Eq. 9 is returned unsummed, as the weighted sparse
    parts ``[(M, Y_1), (1 - M, Y_2)]``: the soft cross entropy is linear in its target, so the loss never builds
    ``(B, N, C)`` targets (the official code un-mixes the aux outputs instead: the same loss). Eq. 10 mixes the
    ReLabel target here; the image label (``cls_target='gt'``) gets it in ``TokenClsDataPreprocessor``.

    Args:
        token_label (Tensor, optional): ``(B, 2, K, S, S)`` per-image token labels (``[0]`` probabilities,
            ``[1]`` class indices, ``-1`` the official reading's tail slots), ``(S, S)`` the token grid.
            None: no token labels (``beta=0``).
        plan (MixPlan, optional): The batch's plan (``trace.mix``); None: an unmixed batch.
        relabel (Tensor, optional): ``(B, C)`` class-token ReLabel target of each image. Defaults to None.

    Returns:
        tuple: ``[(weight, probs, index)]``, the parts of ``Y_hat`` with ``weight`` ``(B, N)`` (or ``1.``),
        ``probs`` and ``index`` (long) ``(B, N, K)``, ``N = S * S``; and ``y_hat^cls`` ``(B, C)`` or None.
    """
    parts = []
    if token_label is not None:
        probs = token_label[:, 0].flatten(2).transpose(1, 2)  # (B, N, K)
        index = token_label[:, 1].flatten(2).transpose(1, 2).long()
        parts = [(1.0, probs, index)]
        if plan is not None:  # Eq. 9
            m = plan.mask.flatten(1).float()  # the loss computes in float32
            parts = [(m, probs, index), (1 - m, probs[plan.index], index[plan.index])]
    if relabel is not None and plan is not None:  # Eq. 10
        relabel = plan.mix_labels(relabel)
    return parts, relabel


def _soft_ce(log_p: Tensor, probs: Tensor, index: Tensor) -> Tensor:
    """``-sum_c y_c log p_c`` ``(B, N)`` for sparse targets ``probs``/``index`` ``(B, N, K)``;
    slots of class ``-1`` hold the probability of every unlisted class (summed)."""
    listed = index >= 0
    tail = (probs * ~listed).sum(-1, keepdim=True)
    ce = -((probs - tail) * listed * log_p.gather(-1, index.clamp(min=0))).sum(-1)
    return ce - tail[..., 0] * log_p.sum(-1)


def _dense(sparse: Tensor, num_classes: int) -> Tensor:
    """``(B, C)`` from ``(B, 2, K)`` (probabilities, classes): probabilities of a class listed more than
    once are summed; the class ``-1`` slots (the official reading, whose listed classes are distinct)
    give every unlisted class their sum."""
    probs, index = sparse[:, 0], sparse[:, 1].long()
    listed = index >= 0
    tail = (probs * ~listed).sum(-1, keepdim=True)
    out = tail.expand(-1, num_classes).contiguous()
    return out.scatter_add(1, index.clamp(min=0), (probs - tail) * listed)
