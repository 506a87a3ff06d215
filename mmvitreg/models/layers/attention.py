"""Multi-head self-attention of the ViT family; its core is :func:`~mmvitreg.models.layers.attend`."""
from typing import Optional, Tuple, Union

from torch import Tensor, nn

from .ride import Ride, attend, softmax_map


class MultiheadSelfAttention(nn.Module):
    """Multi-head self-attention (MHSA) of the Vision Transformer.

    `An Image is Worth 16x16 Words <https://arxiv.org/abs/2010.11929>`_. Per head ``h``,

    .. math::
        \\mathrm{Attention}(Q_h, K_h, V_h) = \\mathrm{Softmax}(Q_h K_h^\\top / \\sqrt{d}) V_h,

    with ``Q, K, V = x W_qkv`` split into ``H`` heads of ``d = C / H`` channels, the heads
    concatenated and projected by ``proj``. State-dict keys are those of mmpretrain's
    ``MultiheadAttention`` (``qkv``, ``proj``), so mmpretrain / timm ViT weights load unchanged.

    The core runs in :func:`~mmvitreg.models.layers.attend`, which picks the kernel: without
    ``need_attn`` PyTorch's fused ``F.scaled_dot_product_attention`` (the attention map is never
    materialised); with ``need_attn=True`` the explicit softmax map, returned too. Subclasses that change
    the map (re-attention, talking heads) override :meth:`attention_map` and set ``fused = False``: their
    map is always explicit. A :class:`~mmvitreg.models.layers.Ride` (``ride``, values ``(B, N, D)``) gets
    the head-mean map applied to its values: on the CPU in float32 by the same fused kernel call, else
    beside it, or, on the explicit path (and with attention dropout active in training), from the map
    before dropout.

    Args:
        embed_dims (int): Token channels ``C``.
        num_heads (int): Number of heads ``H``; must divide ``embed_dims``.
        qkv_bias (bool): Bias of the ``qkv`` projection. Defaults to True.
        qk_scale (float, optional): Overrides the scale ``d ** -0.5``. Defaults to None.
        attn_drop (float): Dropout on the attention map. Defaults to 0.
        proj_drop (float): Dropout after ``proj``. Defaults to 0.

    Shapes:
        ``x``: ``(B, N, C)`` -> ``(B, N, C)``; the attention map is ``(B, H, N, N)``.
    """

    fused = True

    def __init__(self,
                 embed_dims: int,
                 num_heads: int,
                 qkv_bias: bool = True,
                 qk_scale: Optional[float] = None,
                 attn_drop: float = 0.,
                 proj_drop: float = 0.):
        super().__init__()
        if embed_dims % num_heads:
            raise ValueError(f'embed_dims ({embed_dims}) must be divisible by num_heads ({num_heads})')
        self.embed_dims = embed_dims
        self.num_heads = num_heads
        self.head_dims = embed_dims // num_heads
        self.scale = qk_scale or self.head_dims**-0.5
        self.qkv = nn.Linear(embed_dims, embed_dims * 3, bias=qkv_bias)
        self.attn_drop = nn.Dropout(attn_drop)
        self.proj = nn.Linear(embed_dims, embed_dims)
        self.proj_drop = nn.Dropout(proj_drop)

    def attention_map(self, q: Tensor, k: Tensor) -> Tensor:
        """The ``(B, H, N, N)`` map that multiplies ``V`` for ``q, k`` ``(B, H, N, d)``: ``Softmax(Q K^T * scale)``,
        then dropout; the map of the kinds that are not ``fused`` (their subclasses build on or replace it)."""
        return self.attn_drop(softmax_map(q, k, self.scale))

    def forward(self, x: Tensor, need_attn: bool = False,
                ride: Optional[Ride] = None) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        """Attend ``x`` ``(B, N, C)``; with ``need_attn`` also return the ``(B, H, N, N)`` map (for plain
        MHSA the softmax before attention dropout; for subclasses the :meth:`attention_map`); fill
        ``ride.mixed`` when a ride is given."""
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dims).permute(2, 0, 3, 1, 4).unbind(0)
        x, attn = attend(q, k, v, self.scale, dropout_p=self.attn_drop.p if self.training else 0.,
                         need_attn=need_attn, ride=ride, attention_map=None if self.fused else self.attention_map)
        x = self.proj_drop(self.proj(x.transpose(1, 2).reshape(B, N, C)))
        return (x, attn) if need_attn else x
