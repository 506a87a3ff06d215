"""Pre-norm transformer encoder block with a choice of attention and residual scaling."""

from typing import Optional, Tuple, Union

import torch.utils.checkpoint as cp
from mmcv.cnn import build_norm_layer
from mmcv.cnn.bricks.drop import build_dropout
from torch import Tensor, nn

from .attention import MultiheadSelfAttention
from .drop_path import FFN, drop_path
from .re_attention import ReAttention
from .ride import Ride
from .talking_heads import TalkingHeadsAttention

ATTENTION_TYPES = {
    'msa': MultiheadSelfAttention,
    'reattn': ReAttention,
    'talking_heads': TalkingHeadsAttention,
}


def run_block(block: nn.Module, x: Tensor, *args, need_attn: bool, ride: Optional[Ride]):
    """``block._forward(x, *args, need_attn, ride)``, with ``block.with_cp`` its activations recomputed in the
    backward: by torch's reentrant checkpoint, as mmpretrain's Swin and mmseg's ViT, or the non-reentrant one when
    a trace taps the block, as the reentrant forward runs without autograd and would cut a ride's mixed values
    from the graph."""
    if not (block.with_cp and x.requires_grad):
        return block._forward(x, *args, need_attn, ride)
    tapped = need_attn or ride is not None
    return cp.checkpoint(block._forward, x, *args, need_attn, ride, use_reentrant=not tapped)


class TransformerBlock(nn.Module):
    """Pre-norm ViT encoder block with DeepViT's and LV-ViT's residual scalings.

    .. math::
        x \\leftarrow x + \\mathrm{DropPath}(\\mathrm{Attn}(\\mathrm{LN}_1(a x))) / (a \\lambda), \\qquad
        x \\leftarrow x + \\mathrm{DropPath}(\\mathrm{FFN}(\\mathrm{LN}_2(a x))) / (a \\lambda)

    * ``a = 1, λ = 1``: the ViT block (mmpretrain's ``TransformerEncoderLayer``).
    * ``λ = skip_lam``: LV-ViT's residual scaling (`Token Labeling <https://arxiv.org/abs/2104.10858>`_ Eq. 5
      with ``α = 1 / skip_lam``).
    * ``a = scale_adjustment``: DeepViT's official ``x + drop_path(f(norm(x * a)) / a)`` (not in the paper).

    Keys and layout are mmpretrain's ``TransformerEncoderLayer``'s; each branch's stochastic depth sits where
    mmpretrain keeps it, ``attn.out_drop`` and ``ffn.dropout_layer``.

    Args:
        embed_dims (int): Token channels ``C``.
        num_heads (int): Attention heads.
        feedforward_channels (int): Hidden channels of the FFN.
        attn_type (str): A key of :data:`ATTENTION_TYPES`. Defaults to ``'msa'``.
        attn_cfg (dict, optional): Extra arguments of the attention. Defaults to None.
        qkv_bias (bool): Bias of the ``qkv`` projection. Defaults to True.
        drop_rate (float): Dropout after the attention projection and in the FFN. Defaults to 0.
        attn_drop_rate (float): Attention-map dropout. Defaults to 0.
        drop_path_rate (float): Stochastic depth of both branches. Defaults to 0.
        norm_cfg (dict): Norm layer config. Defaults to ``dict(type='LN', eps=1e-6)``.
        scale_adjustment (float): DeepViT's ``a``. Defaults to 1.
        skip_lam (float): LV-ViT's ``λ``. Defaults to 1.
        with_cp (bool): Activation checkpointing (:func:`run_block`). Defaults to False.

    Shapes:
        ``(B, N, C)`` -> ``(B, N, C)``; with ``need_attn`` also the ``(B, heads, N, N)`` map.
    """

    def __init__(
        self,
        embed_dims: int,
        num_heads: int,
        feedforward_channels: int,
        attn_type: str = 'msa',
        attn_cfg: Optional[dict] = None,
        qkv_bias: bool = True,
        drop_rate: float = 0.0,
        attn_drop_rate: float = 0.0,
        drop_path_rate: float = 0.0,
        norm_cfg: dict = dict(type='LN', eps=1e-6),
        scale_adjustment: float = 1.0,
        skip_lam: float = 1.0,
        with_cp: bool = False,
    ):
        super().__init__()
        self.with_cp = with_cp
        if attn_type not in ATTENTION_TYPES:
            raise ValueError(f'unknown attention type {attn_type!r}; choose from {sorted(ATTENTION_TYPES)}')
        self.scale_adjustment = scale_adjustment
        self.branch_divisor = scale_adjustment * skip_lam
        self.ln1 = build_norm_layer(norm_cfg, embed_dims)[1]
        self.attn = ATTENTION_TYPES[attn_type](
            embed_dims, num_heads, qkv_bias=qkv_bias, attn_drop=attn_drop_rate, proj_drop=drop_rate, **(attn_cfg or {})
        )
        self.ln2 = build_norm_layer(norm_cfg, embed_dims)[1]
        drop_path = dict(type='DropPath', drop_prob=drop_path_rate)
        self.attn.out_drop = build_dropout(drop_path)
        self.ffn = FFN(
            embed_dims=embed_dims,
            feedforward_channels=feedforward_channels,
            num_fcs=2,
            ffn_drop=drop_rate,
            dropout_layer=drop_path,
            act_cfg=dict(type='GELU'),
            add_identity=False,
        )

    def forward(
        self, x: Tensor, need_attn: bool = False, ride: Optional[Ride] = None
    ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        return run_block(self, x, need_attn=need_attn, ride=ride)

    def _forward(self, x: Tensor, need_attn: bool, ride: Optional[Ride]) -> Union[Tensor, Tuple[Tensor, Tensor]]:
        a, d = self.scale_adjustment, self.branch_divisor
        h = self.attn(self.ln1(x * a if a != 1 else x), need_attn=need_attn, ride=ride)
        if need_attn:
            h, attn = h
        h = drop_path(h, self.attn.out_drop)
        x = x + (h / d if d != 1 else h)
        h = self.ffn(self.ln2(x * a if a != 1 else x))
        x = x + (h / d if d != 1 else h)
        return (x, attn) if need_attn else x
