"""Window multi-head self-attention of Swin; its core is :func:`~mmvitreg.models.layers.attend`."""
from typing import Optional, Tuple, Union

import torch
from mmengine.model import BaseModule
from mmengine.model.weight_init import trunc_normal_
from torch import Tensor, nn

from .attention import attend
from .ride import Ride


class WindowAttention(BaseModule):
    """Window multi-head self-attention (W-MSA / SW-MSA) with a relative position bias.

    `Swin Transformer <https://arxiv.org/abs/2103.14030>`_ Eq. 4: inside each window of
    ``N = Wh * Ww`` tokens, per head,

    .. math::
        \\mathrm{Attention}(Q, K, V) = \\mathrm{SoftMax}(Q K^\\top / \\sqrt{d} + B + M) V,

    with ``B`` gathered from a learnable ``(2Wh - 1)(2Ww - 1) x heads`` table by the relative
    offset of the two tokens, and ``M`` the shifted-window mask (0 / -100, see
    :meth:`~mmvitreg.models.layers.WindowLayout.attn_mask`). Keys and initialisation are those of
    mmpretrain's ``WindowMSA`` (``relative_position_bias_table``, ``relative_position_index``,
    ``qkv``, ``proj``): it is built by mmpretrain's ``ShiftWindowMSA`` as its ``window_msa``, so
    mmpretrain / mmseg / mmdet Swin weights load unchanged.

    The core runs in :func:`~mmvitreg.models.layers.attend` with ``B + M`` as its bias (the windows
    of one image folded into the head axis): without ``need_attn`` ``F.scaled_dot_product_attention``
    with the bias as additive mask (the map is never returned); with ``need_attn=True`` the map
    explicitly, as mmpretrain computes it, returned too (the softmax, before attention dropout). A
    :class:`~mmvitreg.models.layers.Ride` (values ``(B * nW, N, D)`` in windows) rides in the same fused
    call as extra value channels, or, on the explicit path (a wide ride, attention dropout active in
    training), takes the map before dropout.

    Args:
        embed_dims (int): Token channels ``C``.
        window_size (Tuple[int, int]): Window ``(Wh, Ww)``.
        num_heads (int): Heads; must divide ``embed_dims``.
        qkv_bias (bool): Bias of ``qkv``. Defaults to True.
        qk_scale (float, optional): Overrides ``d ** -0.5``. Defaults to None.
        attn_drop (float): Dropout on the map. Defaults to 0.
        proj_drop (float): Dropout after ``proj``. Defaults to 0.
        init_cfg (dict, optional): Defaults to None.

    Shapes:
        ``x``: ``(B * nW, N, C)`` or per image ``(B, nW, N, C)`` -> the same; ``mask``: ``(nW, N, N)``; the map is
        ``(B * nW, heads, N, N)``.
    """

    def __init__(self, embed_dims: int, window_size: Tuple[int, int], num_heads: int, qkv_bias: bool = True,
                 qk_scale: Optional[float] = None, attn_drop: float = 0., proj_drop: float = 0.,
                 init_cfg: Optional[dict] = None):
        super().__init__(init_cfg)
        self.embed_dims = embed_dims
        self.window_size = tuple(window_size)
        self.num_heads = num_heads
        self.scale = qk_scale or (embed_dims // num_heads)**-0.5
        Wh, Ww = self.window_size
        self.relative_position_bias_table = nn.Parameter(torch.zeros((2 * Wh - 1) * (2 * Ww - 1), num_heads))
        self.register_buffer('relative_position_index', self.relative_index(Wh, Ww))
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    @staticmethod
    def relative_index(Wh: int, Ww: int) -> Tensor:
        """``(N, N)`` table row of every token pair: ``(dh + Wh - 1) * (2Ww - 1) + (dw + Ww - 1)``."""
        h, w = torch.meshgrid(torch.arange(Wh), torch.arange(Ww), indexing='ij')
        h, w = h.flatten(), w.flatten()
        return (h[:, None] - h[None, :] + Wh - 1) * (2 * Ww - 1) + (w[:, None] - w[None, :] + Ww - 1)

    def init_weights(self):
        super().init_weights()
        trunc_normal_(self.relative_position_bias_table, std=0.02)

    def position_bias(self) -> Tensor:
        """``(heads, N, N)`` relative position bias ``B``."""
        N = self.relative_position_index.shape[0]
        return self.relative_position_bias_table[self.relative_position_index.view(-1)].view(N, N, -1).permute(2, 0, 1)

    def forward(self, x: Tensor, mask: Optional[Tensor] = None, need_attn: bool = False,
                ride: Optional[Ride] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """Attend inside every window of ``x`` ``(B * nW, N, C)`` or ``(B, nW, N, C)``; ``mask`` ``(nW, N, N)`` or
        None; fill ``ride.mixed`` when a ride is given."""
        *lead, N, C = x.shape
        if C % self.num_heads:  # checked here, not when built: mmpretrain's WindowMSA builds such an arch too
            raise ValueError(f'embed_dims ({C}) must be divisible by num_heads ({self.num_heads}): '
                             'give every stage a number of heads that divides its channels')
        qkv = self.qkv(x).reshape(-1, N, 3, self.num_heads, C // self.num_heads)
        bias = self.position_bias().unsqueeze(0)  # (1, heads, N, N)
        if mask is not None:
            bias = bias + mask.unsqueeze(1).to(bias.dtype)  # (nW, heads, N, N)
        x, attn = attend(qkv, self.scale, bias=bias,
                         dropout_p=self.attn_drop.p if self.training else 0., need_attn=need_attn, ride=ride)
        x = self.proj_drop(self.proj(x.transpose(1, 2).reshape(*lead, N, C)))
        return (x, attn) if need_attn else x
