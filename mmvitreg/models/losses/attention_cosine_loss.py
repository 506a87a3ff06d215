"""DeepViT's cosine-similarity regulariser between the attention maps of consecutive blocks."""

from typing import Dict, List, Tuple

import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import Tensor

from mmvitreg.registry import MODELS

from ..trace import TokenTrace, TraceRequest


@MODELS.register_module()
class AttentionCosineLoss(BaseModule):
    r"""Cosine similarity of consecutive blocks' attention maps, an auxiliary loss of DeepViT-32B.

    `DeepViT: Towards Deeper Vision Transformer <https://arxiv.org/abs/2103.11886>`_ motivates re-attention by
    *attention collapse*. The official 32B recipe (``cos_reg_component: 12``) penalises the similarity; the paper
    does not describe it, so this follows the official code (``SoftTargetCrossEntropyCosReg``):

    .. math::
        L_{cos} = \frac{w}{n} \operatorname{mean}_{b, i, j}
            \sum_{l=0}^{n-1} \cos\big(A^l_{b, :, i, j}, A^{l+1}_{b, :, i, j}\big)

    where ``A^l`` is block ``l``'s attention map ``(B, heads, N, N)`` (the one that multiplies ``V``: in
    re-attention blocks after the head transform and its norm), tapped through the trace, the cosine over the
    head axis (eps 1e-8), ``n = num_pairs`` pairs of the first ``n + 1`` blocks. Computed in float32.

    Args:
        num_pairs (int): ``n``, consecutive pairs from the first block. Defaults to 12 (official).
        loss_weight (float): ``w``. Defaults to 0.1 (official).
    """

    def __init__(self, num_pairs: int = 12, loss_weight: float = 0.1):
        super().__init__()
        if not isinstance(num_pairs, int) or num_pairs < 1:
            raise ValueError(f'num_pairs must be a positive int, got {num_pairs!r}')
        self.num_pairs = num_pairs
        self.loss_weight = loss_weight
        # 'isotropic': consecutive maps line up token for token only when every block keeps the embedding's
        # grid (not windowed, not down-sampling)
        self.trace_request = TraceRequest(attn_layers=tuple(range(num_pairs + 1)), facts={'isotropic'})

    def loss(self, feats: Tuple[Tensor], data_samples: List, trace: TokenTrace) -> Dict[str, Tensor]:
        """``{'loss_attn_cos': L_cos}`` from the trace's attention maps of blocks ``0 .. num_pairs``."""
        maps = [trace.attn[i] for i in range(self.num_pairs + 1)]
        if maps[0].dim() != 4:
            raise ValueError(f'AttentionCosineLoss compares (B, heads, N, N) maps, got {tuple(maps[0].shape)}')
        cos = sum(F.cosine_similarity(a.float(), b.float(), dim=1) for a, b in zip(maps[:-1], maps[1:]))
        return {'loss_attn_cos': self.loss_weight * cos.mean() / self.num_pairs}
