"""The one entry point of every attention layer's core, :func:`attend`, and multi-head self-attention, the base of
every attention layer with a packed ``qkv`` projection (re-attention, talking heads, window attention)."""

from typing import Callable, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from mmengine.model import BaseModule
from torch import Tensor, nn

from .ride import RIDE_CHANNELS, Ride, attend_widened, mix_map


def head_logits(q: Tensor, k: Tensor, scale: float, num_heads: int) -> Tensor:
    """``q k^T * scale`` ``(B, H, n, n)`` for ``q, k`` ``(B H, n, d)`` (the heads of each batch entry consecutive),
    as one batched matmul: the one form of the logits of every map the fused kernel does not make."""
    n = q.shape[1]
    return torch.bmm(q * scale, k.transpose(1, 2)).view(-1, num_heads, n, n)


def attend(
    qkv: Tensor,
    scale: float,
    *,
    bias: Optional[Tensor] = None,
    dropout_p: float = 0.0,
    need_attn: bool = False,
    ride: Optional[Ride] = None,
    attention_map: Optional[Callable[[Tensor, Tensor], Tensor]] = None,
) -> Tuple[Tensor, Optional[Tensor]]:
    """The core of every attention layer: ``A v`` with ``A = Softmax(q k^T * scale + bias)`` after dropout, or
    ``A = attention_map(q, k)``; fills ``ride.mixed`` from ``A`` before dropout.

    One switch, the same on every device and dtype (timm's ``fused_attn``):

    * **explicit** where a map is needed: ``attention_map`` is given (re-attention, talking heads), ``need_attn``,
      or a ride that needs the map itself (values wider than ``RIDE_CHANNELS``, or attention dropout active).
      ``q, k, v`` go to batched matmuls as ``(B' H, n, d)`` and ``A`` is materialised.
    * **fused** otherwise: ``F.scaled_dot_product_attention`` with ``bias`` as its additive mask; a ride rides in
      the same call as extra value channels (:func:`~mmvitreg.models.layers.ride.attend_widened`).

    Windows: the ``G > 1`` groups of a ``bias`` (Swin's windows of one image) are folded into the head axis,
    ``(B' / G, G * H, n, ...)``, so that the kernel broadcasts the bias over the images without a copy.

    Args:
        qkv (Tensor): The qkv projection ``(B', n, 3, H, d)``.
        scale (float): Multiplies ``q k^T``.
        bias (Tensor, optional): Additive logits ``(G, H, n, n)``, batch entry ``b`` taking group ``b % G``
            (Swin's position bias plus shift mask). Not with ``attention_map``.
        dropout_p (float): Dropout on the softmax map (0 outside training). Defaults to 0.
        need_attn (bool): Return the map. Defaults to False.
        ride (Ride, optional): Values ``(B', n, D)`` to mix with the head-mean map; ``ride.mixed`` is set.
        attention_map (Callable, optional): ``(q, k) -> A`` ``(B', H, n, n)`` for ``q, k`` ``(B' H, n, d)``,
            dropout included, in place of the softmax map.

    Returns:
        Tuple[Tensor, Optional[Tensor]]: ``x`` ``(B', H, n, d)`` and, with ``need_attn``, the map
        ``(B', H, n, n)`` (the softmax before dropout, or ``attention_map``'s), else None.
    """
    if bias is not None and attention_map is not None:
        raise ValueError('attend takes a bias or an attention_map, not both')
    B, n, _, H = qkv.shape[:4]
    # windows: decided on the bias's groups (which jit tracing may freeze), never on B
    G = 1 if bias is None else bias.shape[0]
    if bias is not None:
        bias = bias.reshape(1, G * H, n, n)
    ride_needs_map = ride is not None and (dropout_p > 0 or ride.values.shape[-1] > RIDE_CHANNELS)
    if attention_map is not None or need_attn or ride_needs_map:
        q, k, v = qkv.permute(2, 0, 3, 1, 4).reshape(3, B * H, n, -1).unbind(0)
        if attention_map is None:
            logits = head_logits(q, k, scale, G * H)
            attn = (logits if bias is None else logits + bias).softmax(-1)
            dropped = F.dropout(attn, dropout_p) if dropout_p > 0 else attn
        else:
            attn = dropped = attention_map(q, k)
        x = torch.bmm(dropped.reshape(B * H, n, n), v).view(B, H, n, -1)
        attn = attn.view(B, H, n, n) if G > 1 else attn
        if ride is not None:
            mix_map(ride, attn)
        return x, attn if need_attn else None
    mask = None if bias is None else bias.to(qkv.dtype)
    if ride is not None:
        x = attend_widened(qkv, ride, scale, mask)
    else:
        qkv = qkv.permute(2, 0, 3, 1, 4)  # (3, B', H, n, d)
        q, k, v = (qkv.reshape(3, B // G, G * H, n, -1) if G > 1 else qkv).unbind(0)
        x = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale)
    return x.reshape(B, H, n, -1) if G > 1 else x, None


class MultiheadSelfAttention(BaseModule):
    """Multi-head self-attention (MHSA) of the Vision Transformer.

    `An Image is Worth 16x16 Words <https://arxiv.org/abs/2010.11929>`_. Per head ``h``,

    .. math::
        \\mathrm{Attention}(Q_h, K_h, V_h) = \\mathrm{Softmax}(Q_h K_h^\\top / \\sqrt{d} + B) V_h,

    with ``Q, K, V = x W_qkv`` split into ``H`` heads of ``d = C / H`` channels, the heads concatenated and
    projected by ``proj``, and ``B`` an optional additive bias (:class:`~mmvitreg.models.layers.WindowAttention`'s).
    Keys are those of mmpretrain's ``MultiheadAttention``. The core runs in :func:`attend`; subclasses that set
    ``fused = False`` override :meth:`attention_map` (re-attention, talking heads).

    Args:
        embed_dims (int): Token channels ``C``.
        num_heads (int): Number of heads ``H``; must divide the channels, checked at run time as mmpretrain's
            attention builds such an arch too.
        qkv_bias (bool): Bias of the ``qkv`` projection. Defaults to True.
        qk_scale (float, optional): Overrides the scale ``d ** -0.5``. Defaults to None.
        attn_drop (float): Dropout on the attention map. Defaults to 0.
        proj_drop (float): Dropout after ``proj``. Defaults to 0.
        init_cfg (dict, optional): Defaults to None.

    Shapes:
        ``x``: ``(*lead, N, C)`` -> ``(*lead, N, C)``; the map is ``(prod(lead), H, N, N)``.
    """

    fused = True

    def __init__(
        self,
        embed_dims: int,
        num_heads: int,
        qkv_bias: bool = True,
        qk_scale: Optional[float] = None,
        attn_drop: float = 0.0,
        proj_drop: float = 0.0,
        init_cfg: Optional[dict] = None,
    ):
        super().__init__(init_cfg)
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.scale = qk_scale or (embed_dims // num_heads) ** -0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def attention_map(self, q: Tensor, k: Tensor) -> Tensor:
        """The ``(B, H, N, N)`` map that multiplies ``V`` for ``q, k`` ``(B H, N, d)``: ``Softmax(Q K^T * scale)``,
        then dropout; the map of the kinds that are not ``fused`` (their subclasses build on or replace it)."""
        return self.attn_drop(head_logits(q, k, self.scale, self.num_heads).softmax(-1))

    def forward(
        self, x: Tensor, need_attn: bool = False, ride: Optional[Ride] = None, bias: Optional[Tensor] = None
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """Attend ``x`` ``(*lead, N, C)``, with ``bias`` ``(G, H, N, N)`` as in :func:`attend`; with ``need_attn``
        also return the map; fill ``ride.mixed`` when a ride is given."""
        *lead, N, C = x.shape
        if C % self.num_heads:
            raise ValueError(
                f'embed_dims ({C}) must be divisible by num_heads ({self.num_heads}): '
                'give every block a number of heads that divides its channels'
            )
        qkv = self.qkv(x).reshape(-1, N, 3, self.num_heads, C // self.num_heads)
        x, attn = attend(
            qkv,
            self.scale,
            bias=bias,
            dropout_p=self.attn_drop.p if self.training else 0.0,
            need_attn=need_attn,
            ride=ride,
            attention_map=None if self.fused else self.attention_map,
        )
        x = self.proj_drop(self.proj(x.transpose(1, 2).reshape(*lead, N, C)))
        return (x, attn) if need_attn else x
