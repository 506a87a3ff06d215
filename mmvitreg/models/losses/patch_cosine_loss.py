"""DiversePatch's patch-wise cosine loss."""

from typing import Dict, List, Tuple

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import Tensor

from mmvitreg.registry import MODELS

from ..trace import TokenTrace
from .last_layer import last_layer_request, last_layer_tokens


def patch_cosine_similarity(h: Tensor, eps: float = 1e-8) -> Tensor:
    r"""Patch-wise absolute cosine similarity ``P(h)`` of every sample (paper §3), ``(B, n, C)`` -> ``(B,)``:

    .. math::
        \mathcal{P}(\mathbf{h}) = \frac{1}{n(n-1)} \sum_{i \neq j}
            \frac{|h_i^\top h_j|}{\|h_i\|_2 \|h_j\|_2}

    over the ``n`` patch tokens (pass them without the class token). Computed in float32, also under
    autocast; a zero token has cosine 0 with every other (``eps`` in the norm).
    """
    n = h.shape[1]
    if n < 2:
        raise ValueError(f'the patch-wise cosine similarity needs at least 2 patch tokens, got {n}')
    with torch.autocast(h.device.type, enabled=False):
        hn = F.normalize(h.float(), dim=-1, eps=eps)
        gram = torch.bmm(hn, hn.transpose(1, 2)).abs()
    return (gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(1)) / (n * (n - 1))


@MODELS.register_module()
class PatchCosineLoss(BaseModule):
    r"""Patch-wise cosine loss of `DiversePatch / Improve Vision Transformers Training by Suppressing
    Over-smoothing <https://arxiv.org/abs/2104.12753>`_ (§4, "Patch-wise cosine loss"):

    .. math::
        \mathcal{L}_{cos}(\mathbf{x}) = \alpha_1 \, \mathcal{P}(\mathbf{h}^{[L]})

    the mean absolute cosine similarity over pairs ``i != j`` of the last-layer patch tokens ``h^[L]``
    ``(B, n, C)`` (:func:`patch_cosine_similarity`; a Swin's last stage, any grid), averaged over the batch.
    Follows the paper: the official code has no cosine loss at any commit.

    Args:
        loss_weight (float): ``alpha_1``. Defaults to 1 (paper).
        tokens (str): ``'block'`` (paper) or ``'final_norm'`` (the tokens the official code's other two losses
            read); see :mod:`~mmvitreg.models.losses.last_layer`. Defaults to ``'block'``.
    """

    def __init__(self, loss_weight: float = 1.0, tokens: str = 'block'):
        super().__init__()
        self.trace_request = last_layer_request(tokens)
        self.loss_weight, self.tokens = loss_weight, tokens

    def loss(self, feats: Tuple[Tensor], data_samples: List, trace: TokenTrace) -> Dict[str, Tensor]:
        """``{'loss_patch_cos': alpha_1 * mean_b P(h_b^[L])}``."""
        h = last_layer_tokens(trace, self.tokens)
        return {'loss_patch_cos': self.loss_weight * patch_cosine_similarity(h).mean()}
