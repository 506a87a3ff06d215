"""Window multi-head self-attention of Swin."""

from typing import Optional, Tuple, Union

import torch
from mmengine.model.weight_init import trunc_normal_
from torch import Tensor, nn

from .attention import MultiheadSelfAttention
from .ride import Ride


class WindowAttention(MultiheadSelfAttention):
    """Window multi-head self-attention (W-MSA / SW-MSA) with a relative position bias.

    `Swin Transformer <https://arxiv.org/abs/2103.14030>`_ Eq. 4: inside each window of
    ``N = Wh * Ww`` tokens, per head,

    .. math::
        \\mathrm{Attention}(Q, K, V) = \\mathrm{SoftMax}(Q K^\\top / \\sqrt{d} + B + M) V,

    with ``B`` gathered from a learnable ``(2Wh - 1)(2Ww - 1) x heads`` table by the relative offset of the two
    tokens, and ``M`` the shifted-window mask (:meth:`~mmvitreg.models.layers.WindowLayout.attn_mask`). Keys and
    initialisation are those of mmpretrain's ``WindowMSA``: mmpretrain's ``ShiftWindowMSA`` builds it as its
    ``window_msa``. The core is :class:`~mmvitreg.models.layers.MultiheadSelfAttention`'s with ``B + M`` as its
    bias; with ``need_attn`` the map is the softmax before attention dropout, as mmpretrain computes it.

    Args:
        embed_dims (int): Token channels ``C``.
        window_size (Tuple[int, int]): Window ``(Wh, Ww)``.
        num_heads (int): Heads; must divide ``embed_dims`` (checked at run time, as mmpretrain's).
        **kwargs: ``qkv_bias``, ``qk_scale``, ``attn_drop``, ``proj_drop``, ``init_cfg`` of
            :class:`~mmvitreg.models.layers.MultiheadSelfAttention`.

    Shapes:
        ``x``: ``(B * nW, N, C)`` or per image ``(B, nW, N, C)`` -> the same; ``mask``: ``(nW, N, N)``; the map is
        ``(B * nW, heads, N, N)``.
    """

    def __init__(self, embed_dims: int, window_size: Tuple[int, int], num_heads: int, **kwargs):
        super().__init__(embed_dims, num_heads, **kwargs)
        self.window_size = tuple(window_size)
        Wh, Ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * Wh - 1) * (2 * Ww - 1), num_heads))
        # (N, N) table row of every token pair: (dh + Wh - 1) * (2Ww - 1) + (dw + Ww - 1)
        h, w = (i.flatten() for i in torch.meshgrid(torch.arange(Wh), torch.arange(Ww), indexing='ij'))
        index = (h[:, None] - h[None, :] + Wh - 1) * (2 * Ww - 1) + (w[:, None] - w[None, :] + Ww - 1)
        self.register_buffer('relative_position_index', index)

    def init_weights(self):
        super().init_weights()
        trunc_normal_(self.relative_position_bias_table, std=0.02)

    def position_bias(self) -> Tensor:
        """``(heads, N, N)`` relative position bias ``B``."""
        N = self.relative_position_index.shape[0]
        return self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1).permute(2, 0, 1)

    def forward(
        self, x: Tensor, mask: Optional[Tensor] = None, need_attn: bool = False, ride: Optional[Ride] = None
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """Attend inside every window of ``x`` ``(B * nW, N, C)`` or ``(B, nW, N, C)``; ``mask`` ``(nW, N, N)`` or
        None; fill ``ride.mixed`` when a ride is given."""
        bias = self.position_bias().unsqueeze(0)  # (1, heads, N, N)
        if mask is not None:
            bias = bias + mask.unsqueeze(1).to(bias.dtype)  # (nW, heads, N, N)
        return super().forward(x, need_attn, ride, bias)
