"""Token labeling head: class-token classifier plus a dense per-token classifier (LV-ViT)."""
from typing import List, Optional, Tuple

import torch
import torch.nn as nn
import torch.nn.functional as F
from mmpretrain.models.heads import VisionTransformerClsHead
from mmpretrain.structures import DataSample
from torch import Tensor

from mmvitreg.registry import MODELS
from ..trace import TokenTrace, TraceRequest


@MODELS.register_module()
class TokenLabelHead(VisionTransformerClsHead):
    r"""Token labeling head from `All Tokens Matter: Token Labeling for Training Better Vision
    Transformers <https://arxiv.org/abs/2104.10858>`_ (LV-ViT).

    A linear classifier on the class token (``layers.head``, as mmpretrain's
    :class:`VisionTransformerClsHead`) and an auxiliary linear classifier shared by all patch
    tokens (``aux_head``), trained with

    .. math::

        L_{total} = H(X^{cls}, y^{cls}) + \beta L_{aux}, \quad
        L_{aux} = \frac{1}{N} \sum_{i=1}^{N} H(X^i, y^i) \qquad (6, 7)

    where ``H`` is the soft-target cross entropy, ``y^i`` the token label of token ``i`` (a
    teacher's dense score map, label-smoothed: ``(1 - s) y^i + s / C``) and ``y^cls`` the image
    label (``loss``, label-smoothed one-hot; or mixed ``gt_score``). With MixToken the trace's plan
    mixes the token labels with the same mask, ``Y_hat = Y_1 * M + Y_2 * (1 - M)`` (Eq. 9), and the
    preprocessor mixes ``y^cls`` by the mask mean (Eq. 10). Since ``H`` is linear in its target,
    ``H(X, m y_1 + (1 - m) y_2) = m H(X, y_1) + (1 - m) H(X, y_2)``: the head computes the soft CE
    against each image's sparse token labels by gathering log-probabilities, never building
    ``(B, N, C)`` targets. The official code un-mixes the aux outputs instead, which gives the
    same loss (a permutation of the same (output, target) pairs).

    Paper vs official code (notes §2.3, §2.6): ``beta=0.5`` is the paper's; the official code
    weights both terms 1.0 (``beta=1.0``). The class-token target ``y^cls`` (``cls_target``):

    * ``'gt'`` (paper: "the label for the whole image"): the image label through ``loss``;
    * ``'relabel'`` (official): the ReLabel target of the crop. With maps read
      ``TokenLabelTarget(reading='official')`` it is the official one, the crop's logit map pooled to
      ``1 x 1`` and soft-maxed over all classes (``relabel_label`` of the data samples); with the
      ``'topk'`` reading, the mean of the crop's token labels;
    * ``'relabel_gt'`` (official ``--ground-truth``): ``ratio * y_relabel + (1 - ratio) * y_gt`` with
      ``ratio = 0.9 - 0.4 [argmax y_relabel == argmax y_gt]`` (both smoothed first), i.e. the
      ground truth weighs 0.5 where the teacher agrees with it and 0.1 where it does not.

    The ReLabel targets are mixed by Eq. 10 like ``y^cls`` and trained with the soft cross entropy
    (float32 log-softmax), smoothed as the token labels. Label smoothing (``label_smooth_form``)
    of a soft target ``y``: ``'standard'`` ``(1 - s) y + s / C`` (sums to 1); ``'official'``
    ``(1 - s + s / C) y + s / C``, the official code's ``on_value``/``off_value`` applied to soft
    targets (sums to ``1 + s / C``; for one-hot targets both forms agree).

    Token labels of the official reading carry, besides the listed classes, tail slots (class
    index ``-1``) whose probabilities sum to the probability of each unlisted class; the loss
    is then exact over all ``C`` classes: ``H(X, y) = -sum_listed (y_c - t) log p_c - t sum_c log p_c``.

    Prediction (official ``forward`` at eval): ``score = X^cls + aux_pred_weight * max_i X^i``,
    the per-class max over the tokens' aux logits; ``aux_pred_weight=0`` predicts from the class
    token alone.

    Inputs: ``feats[-1]`` is the backbone's ``out_type='raw'`` output ``(B, N, C)`` after the final
    norm, extra (class) tokens first, and ``trace`` the filled :class:`TokenTrace` (for
    ``num_extra_tokens``, the tokens' grid ``last_grid`` and the plan), both given by :class:`TokenClassifier`. Each
    data sample carries ``token_label`` (read per batch by ``TokenClsDataPreprocessor``):
    ``(2, K, S, S)`` float, ``[0]`` token-label probabilities and ``[1]`` their class indices
    (``-1``: the tail slots of the official reading), ``(S, S)`` the token grid; with the official
    reading also ``relabel_label`` ``(2, K')`` in the same format. Without ``token_label`` in the data (plain data) set
    ``beta=0`` (the official transfer setting ``--dense-weight 0``): the head then trains the class
    token only; with ``beta > 0`` missing labels raise an error rather than train silently without
    the dense term.

    Args:
        num_classes (int): Number of classes ``C``.
        in_channels (int): Token dimension.
        beta (float): Weight of ``L_aux`` (Eq. 7). Defaults to 0.5 (paper; official 1.0).
        token_label_smooth_val (float): Label smoothing ``s`` of the token labels. Defaults to 0.1
            (official ``--smoothing``).
        cls_target (str): ``'gt'`` (paper), ``'relabel'`` (official) or ``'relabel_gt'`` (official
            ``--ground-truth``). Defaults to ``'gt'``.
        label_smooth_form (str): ``'standard'`` or ``'official'`` smoothing of the soft (token and
            ReLabel) targets, see above. Defaults to ``'standard'``.
        aux_pred_weight (float): Weight of the aux max in the prediction. Defaults to 0.5
            (official).
        loss (dict): The class-token loss ``H(X^cls, y^cls)`` of ``cls_target='gt'``. Defaults to
            ``LabelSmoothLoss(label_smooth_val=0.1, mode='original')`` (official smoothing 0.1).
        init_cfg (dict): Defaults to truncated-normal std 0.02, bias 0, on both linears (official).
        **kwargs: ``hidden_dim``, ``act_cfg``, ``topk``, ``cal_acc`` of
            :class:`VisionTransformerClsHead`.
    """

    CLS_TARGETS = ('gt', 'relabel', 'relabel_gt')
    SMOOTH_FORMS = ('standard', 'official')
    # every token of the backbone's output, a cls token first; the trace gives their grid and the plan
    trace_request = TraceRequest(facts={'cls_token'}, out_type='raw')
    image_target = True  # the class token's loss

    def __init__(self,
                 num_classes: int,
                 in_channels: int,
                 beta: float = 0.5,
                 token_label_smooth_val: float = 0.1,
                 cls_target: str = 'gt',
                 label_smooth_form: str = 'standard',
                 aux_pred_weight: float = 0.5,
                 loss: dict = dict(type='mmpretrain.LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
                 init_cfg: dict = dict(type='TruncNormal', layer='Linear', std=.02, bias=0.),
                 **kwargs):
        super().__init__(num_classes=num_classes, in_channels=in_channels, loss=loss, init_cfg=init_cfg,
                         **kwargs)
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
        return super().pre_logits((self._tokens(feats)[:, 0], ))

    def _tokens(self, feats: Tuple[Tensor]) -> Tensor:
        x = feats[-1]
        if x.dim() != 3:
            raise ValueError('TokenLabelHead reads every token: build the backbone with '
                             f"out_type='raw' (got a feature of shape {tuple(x.shape)})")
        return x

    def forward_logits(self, feats: Tuple[Tensor], trace: TokenTrace) -> Tuple[Tensor, Tensor]:
        """Class-token logits ``(B, C)`` and per-token aux logits ``(B, Hg * Wg, C)``."""
        if trace is None:
            raise ValueError('TokenLabelHead needs the token trace (patch-token count and grid): build it '
                             "inside type='mmvitreg.TokenClassifier'")
        x = self._tokens(feats)
        patches, grid = x[:, trace.num_extra_tokens:], trace.last_grid
        if patches.shape[1] != grid[0] * grid[1]:
            raise ValueError(f'{patches.shape[1]} patch tokens do not fill the {grid} token grid')
        return self.layers.head(self.pre_logits(feats)), self.aux_head(patches)

    def forward(self, feats: Tuple[Tensor], trace: Optional[TokenTrace] = None) -> Tensor:
        """Prediction score ``(B, C)``: ``X^cls + aux_pred_weight * max_i X^i`` (official eval rule)."""
        cls_score, aux_score = self.forward_logits(feats, trace)
        if self.aux_pred_weight:
            cls_score = cls_score + self.aux_pred_weight * aux_score.max(1)[0]
        return cls_score

    def predict(self, feats: Tuple[Tensor], data_samples: Optional[List[Optional[DataSample]]] = None,
                trace: Optional[TokenTrace] = None) -> List[DataSample]:
        """Predictions with the official rule (see :meth:`forward`)."""
        return self._get_predictions(self(feats, trace), data_samples)

    def loss(self, feats: Tuple[Tensor], data_samples: List[DataSample], trace: TokenTrace) -> dict:
        """``loss_cls = H(X^cls, y^cls)`` and ``loss_token = beta * L_aux`` (Eq. 6-10)."""
        cls_score, aux_score = self.forward_logits(feats, trace)
        plan = trace.mix
        token_label = None
        if self.beta > 0 or self.cls_target != 'gt':
            token_label = self._token_labels(data_samples, trace.last_grid, cls_score.device)
        losses = dict()
        if self.cls_target != 'gt':
            target = self._relabel_target(data_samples, token_label)
            if plan is not None:
                target = plan.mix_labels(target)
            log_p = F.log_softmax(cls_score.float(), dim=-1)
            losses['loss_cls'] = -(target * log_p).sum(-1).mean()
        else:
            if 'gt_score' in data_samples[0]:
                target = torch.stack([s.gt_score for s in data_samples])
            else:
                target = torch.cat([s.gt_label for s in data_samples])
            # the softmax over classes in float32, also under --amp
            losses['loss_cls'] = self.loss_module(cls_score.float(), target, avg_factor=cls_score.size(0))
        if self.beta > 0:
            losses['loss_token'] = self.beta * self._token_loss(aux_score, token_label, plan)
        return losses

    @property
    def _on_value(self) -> float:
        """Weight of a soft target in its smoothed form (``label_smooth_form``)."""
        s = self.token_label_smooth_val
        return 1 - s + (s / self.num_classes if self.label_smooth_form == 'official' else 0.)

    @staticmethod
    def _token_labels(data_samples: List[DataSample], grid: Tuple[int, int], device) -> Tensor:
        if 'token_label' not in data_samples[0]:
            if 'token_label_map' in data_samples[0]:
                raise ValueError("the data samples carry packed label maps ('token_label_map') but no "
                                 "'token_label': use type='mmvitreg.TokenClsDataPreprocessor' (the default "
                                 'of mmvitreg.TokenClassifier), which reads them per batch')
            raise ValueError("TokenLabelHead needs 'token_label' in the data samples (pipeline: "
                             "mmvitreg.LoadTokenLabelMap ... mmvitreg.TokenLabelTarget, "
                             "PackInputs(algorithm_keys=['token_label_map']), read per batch by "
                             "mmvitreg.TokenClsDataPreprocessor); for plain data set beta=0 and cls_target='gt'")
        token_label = torch.stack([s.token_label for s in data_samples]).to(device)
        if token_label.dim() != 5 or token_label.shape[1] != 2 or tuple(token_label.shape[-2:]) != tuple(grid):
            raise ValueError(f'token_label must be (2, k, S, S) per sample with (S, S) the token grid {grid}; '
                             f'got {tuple(token_label.shape[1:])} (set TokenLabelTarget.token_label_size)')
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

    def _token_loss(self, aux_score: Tensor, token_label: Tensor, plan) -> Tensor:
        """``L_aux``: mean over tokens of the soft CE to the (mixed, smoothed) token labels."""
        log_p = F.log_softmax(aux_score.float(), dim=-1)  # (B, N, C)
        probs = token_label[:, 0].flatten(2).transpose(1, 2)  # (B, N, K)
        index = token_label[:, 1].flatten(2).transpose(1, 2).long()
        ce = _soft_ce(log_p, probs, index)  # (B, N), against the own labels
        if plan is not None:
            ce_partner = _soft_ce(log_p, probs[plan.index], index[plan.index])
            m = plan.mask.flatten(1).to(ce.dtype)
            ce = m * ce + (1 - m) * ce_partner  # Eq. 9 by linearity of H in the target
        s = self.token_label_smooth_val
        if s:
            ce = self._on_value * ce - s * log_p.mean(-1)
        return ce.mean()


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
