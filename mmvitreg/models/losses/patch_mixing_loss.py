"""DiversePatch's patch-wise mixing loss, with the shared linear patch head."""

from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import Tensor, nn

from mmvitreg.registry import MODELS

from ..trace import TokenTrace
from .last_layer import last_layer_request, last_layer_tokens


@MODELS.register_module()
class PatchMixingLoss(BaseModule):
    r"""Patch-wise mixing loss of `DiversePatch <https://arxiv.org/abs/2104.12753>`_ (§4).

    The patches of two images are mixed CutMix-style (the plan of ``train_cfg.mix``, e.g. ``PatchCutMix``: sample
    ``b``'s own where the mask is 1, its partner ``index[b]``'s where 0) and a shared linear head ``g``
    (``patch_head``, ``nn.Linear(C, K)``) classifies the output patches by the image they came from.

    * ``form='paper'`` (default), every patch token classified:

      .. math::
          \mathcal{L}_{mixing} = \frac{\alpha_3}{n} \sum_i \mathcal{L}_{ce}(g(h_i^{[L]}), y_i),
          \qquad y_i = w_i \, y_b + (1 - w_i) \, y_{index[b]}

      with ``w_i`` the token's own share: the plan's mask, average-pooled to the last block's grid when that
      is coarser (a Swin's last stage).
    * ``form='official'`` (``deit/models.py`` ``patch_loss``): two region-pooled predictions, for
      the own region ``R = w`` and the partner region ``R = 1 - w``:

      .. math::
          f_R = \frac{\sum_i R_i h_i}{\sum_i R_i + 10^{-4}}, \quad
          \mathcal{L}_{mixing} = \alpha_3 \sum_R \frac{\sum_i R_i}{n}
              \mathrm{KL}\big(y_R \,\|\, \mathrm{softmax}(g(\mathrm{Dropout}(f_R))) + 10^{-8}\big)

      (``y_w = y_b``, ``y_{1-w} = y_{index[b]}``; the official ``KLDivLoss(batchmean)`` of ``softmax + 1e-8``).

    ``y_b`` is sample ``b``'s one-hot ``gt_label`` (the official targets also carry timm's label smoothing and
    pixel CutMix, a listed deviation). Without a mixing plan every token is its own image's. Shapes: ``h``
    ``(B, n, C)``, ``g(h)`` ``(B, n, K)``. Computed in float32.

    Args:
        num_classes (int): ``K``.
        in_channels (int): ``C`` of the last-layer tokens (a Swin's last-stage channels).
        loss_weight (float): ``alpha_3``. Defaults to 1 (paper and official).
        form (str): ``'paper'`` or ``'official'``. Defaults to ``'paper'``.
        tokens (str): ``'block'`` (paper's ``h^[L]``) or ``'final_norm'`` (official). Defaults to ``'block'``.
        drop_rate (float): Dropout before ``g``. Defaults to 0 (paper; official 0.2).
        ensemble (bool): The official evaluation ensemble (``t_acc``): the prediction averages the head's scores
            with :meth:`ensemble_scores` (the official code sums them: same ranking). Defaults to False.
        init_cfg (dict): Defaults to truncated normal 0.02 on ``g``, zero bias (official ``_init_weights``).
    """

    FORMS = ('paper', 'official')
    image_target = True  # every patch predicts its image's label

    def __init__(
        self,
        num_classes: int,
        in_channels: int,
        loss_weight: float = 1.0,
        form: str = 'paper',
        tokens: str = 'block',
        drop_rate: float = 0.0,
        ensemble: bool = False,
        init_cfg: Optional[dict] = dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
    ):
        super().__init__(init_cfg=init_cfg)
        if form not in self.FORMS:
            raise ValueError(f'form must be one of {self.FORMS}, got {form!r}')
        self.trace_request = last_layer_request(tokens, in_channels)
        self.loss_weight, self.form, self.tokens, self.ensemble = loss_weight, form, tokens, ensemble
        self.dropout = nn.Dropout(drop_rate)
        self.patch_head = nn.Linear(in_channels, num_classes)

    @staticmethod
    def own_share(trace: TokenTrace, h: Tensor) -> Tensor:
        """``(B, n)``: each last-layer token's share of its own image (1 without a mixing plan)."""
        grid = trace.last_grid
        if trace.mix is None:
            return h.new_ones(h.shape[:2])
        mask = trace.mix.mask.to(h)
        if tuple(mask.shape[-2:]) != tuple(grid):
            (mh, mw), (h, w) = mask.shape[-2:], grid
            if mh % h or mw % w:
                raise ValueError(f'mask grid {(mh, mw)} does not pool onto the last grid {tuple(grid)}: set patch_size')
            mask = F.avg_pool2d(mask.unsqueeze(1), (mh // h, mw // w)).squeeze(1)
        return mask.flatten(1)

    def loss(self, feats: Tuple[Tensor], data_samples: List, trace: TokenTrace) -> Dict[str, Tensor]:
        """``{'loss_patch_mixing': L}`` from the trace's last-layer tokens and the mixing plan.

        With one-hot ``y`` the token CE is ``-(w_i log p_i[y_b] + (1 - w_i) log p_i[y_index[b]])`` and the
        region KL is ``-log(p_R[y_R] + 1e-8)`` (``y log y = 0``), so both gather the two labels' scores."""
        h = last_layer_tokens(trace, self.tokens).float()
        if not data_samples or 'gt_label' not in data_samples[0]:
            raise ValueError("PatchMixingLoss needs gt_label in the data samples (mmpretrain's PackInputs sets it)")
        own = torch.cat([s.gt_label for s in data_samples]).to(h.device)
        partner = own[trace.mix.index] if trace.mix is not None else own
        w = self.own_share(trace, h)  # (B, n)
        if self.form == 'paper':
            logp = F.log_softmax(self.patch_head(self.dropout(h)).float(), dim=-1)  # (B, n, K)
            pick = lambda y: logp.gather(-1, y.view(-1, 1, 1).expand(-1, logp.shape[1], 1)).squeeze(-1)  # noqa: E731
            loss = -torch.lerp(pick(partner), pick(own), w).mean()  # w log p[y_b] + (1 - w) log p[y_index[b]]
        else:
            loss = h.new_zeros(())
            for region, label in ((w, own), (1 - w, partner)):
                pooled = (region.unsqueeze(-1) * h).sum(1) / (region.sum(1, keepdim=True) + 1e-4)
                prob = self.patch_head(self.dropout(pooled)).float().softmax(-1)  # (B, K)
                kl = -torch.log(prob.gather(-1, label.view(-1, 1)).squeeze(-1) + 1e-8)  # (B,)
                loss = loss + (region.mean(1) * kl).mean()
        return {'loss_patch_mixing': self.loss_weight * loss}

    def ensemble_scores(self, trace: TokenTrace) -> Tensor:
        """``(B, K)`` ``softmax(g(mean_i h_i))``, the patch head's prediction added at evaluation."""
        return self.patch_head(last_layer_tokens(trace, self.tokens).mean(1)).float().softmax(-1)
