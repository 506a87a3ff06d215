"""DiversePatch's patch-wise contrastive loss."""

from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import Tensor

from mmvitreg.registry import MODELS

from ..trace import TokenTrace, TraceRequest


@MODELS.register_module()
class PatchContrastiveLoss(BaseModule):
    r"""Patch-wise contrastive loss of `DiversePatch <https://arxiv.org/abs/2104.12753>`_ (§4).

    Each last-layer patch ``h_i^[L]`` should stay like its own first-layer representation
    ``h_i^[1]`` (the anchor, gradient stopped) and unlike the mean of the other patches:

    .. math::
        \mathcal{L}_{contrastive} = -\frac{\alpha_2}{n} \sum_i \log
            \frac{e^{a_i^\top h_i}}{e^{a_i^\top h_i} + e^{a_i^\top g_i} \,[+\, e^{a_i^\top l_i}]},
        \qquad g_i = \frac{1}{n-1} \sum_{j \neq i} h_j

    with raw dot products (no normalisation, no temperature), averaged over the batch; ``a``, ``h`` ``(B, n, C)``
    on the ``(H, W)`` patch grid (class token ignored; any grid, square or not). Computed in float32. Isotropic
    backbones only: the paper does not define it across a Swin's down-sampling (Table 5: "N/A").

    * ``form='paper'`` (default): ``a = h^[1]``, the first block's output, and ``h = h^[L]``, the last block's.
    * ``form='official'`` (``deit/models.py: similarity``): ``a`` = the patch-embedding output before the
      position embedding (``trace.embed``), ``h`` = the last block's tokens after the final norm, and a second
      negative ``l_i``, the 7×7 neighbourhood's mean without ``i`` as the official code computes it,
      ``(49 * avg_pool2d(h, 7, 1, 3) - h_i) / 48`` (zero padding counted); the loss is
      ``-log(softmax(...)[0] + 1e-8)``.

    Args:
        loss_weight (float): ``alpha_2``. Defaults to 1 (paper and official).
        form (str): ``'paper'`` or ``'official'``. Defaults to ``'paper'``.
    """

    FORMS = ('paper', 'official')

    def __init__(self, loss_weight: float = 1.0, form: str = 'paper'):
        super().__init__()
        if form not in self.FORMS:
            raise ValueError(f'form must be one of {self.FORMS}, got {form!r}')
        self.loss_weight, self.form = loss_weight, form
        if form == 'paper':
            self.trace_request = TraceRequest(token_layers=(0, -1), facts={'isotropic'})
        else:
            self.trace_request = TraceRequest(points={'embed', 'final'}, facts={'isotropic'})

    def loss(self, feats: Tuple[Tensor], data_samples: List, trace: TokenTrace) -> Dict[str, Tensor]:
        """``{'loss_patch_contrastive': L}`` from the trace."""
        if self.form == 'paper':
            anchor, h = trace.patch_tokens(0), trace.patch_tokens(-1)
        else:
            anchor, h = trace.embed, trace.final_patch_tokens()
        anchor, h = anchor.detach().float(), h.float()
        n = h.shape[1]
        if n < 2:
            raise ValueError(f'the patch-wise contrastive loss needs at least 2 patch tokens, got {n}')
        values = [h, (h.sum(1, keepdim=True) - h) / (n - 1)]  # the positive and the mean of the others
        if self.form == 'official':  # the 7x7 neighbourhood's mean without i: (49 * avgpool7(h) - h) / 48
            hmap = h.transpose(1, 2).reshape(*h.shape[::2], *trace.last_grid)
            values.append((49 * F.avg_pool2d(hmap, 7, stride=1, padding=3) - hmap).flatten(2).transpose(1, 2) / 48)
        logits = torch.stack([(anchor * v).sum(-1) for v in values], dim=-1)  # (B, n, 2 or 3)
        if self.form == 'paper':
            nll = -logits.log_softmax(-1)[..., 0]
        else:
            nll = -torch.log(logits.softmax(-1)[..., 0] + 1e-8)
        return {'loss_patch_contrastive': self.loss_weight * nll.mean()}
