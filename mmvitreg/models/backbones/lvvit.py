"""LV-ViT presets and the converter of the official checkpoints."""

from typing import Dict, Union

from torch import Tensor

from mmvitreg.registry import MODELS

from ..converters import TIMM_VIT_KEYS, OfficialLayout, convert_timm_vit, converter_tool, register_layout
from .vision_transformer import VisionTransformer


def lvvit_arch(embed_dims: int, num_layers: int, num_heads: int, skip_lam: float, stem_channels: int = 64) -> dict:
    """An LV-ViT arch: MLP ratio 3, the 4-layer conv stem (3 convs + projection), residual ``/skip_lam``."""
    return dict(
        embed_dims=embed_dims,
        num_layers=num_layers,
        num_heads=num_heads,
        feedforward_channels=embed_dims * 3,
        stem=dict(channels=stem_channels, num_convs=3),
        skip_lam=skip_lam,
    )


@MODELS.register_module()
class LVViT(VisionTransformer):
    """LV-ViT: the ViT of Token Labeling, with a conv stem and scaled residual branches.

    `All Tokens Matter: Token Labeling for Training Better Vision Transformers
    <https://arxiv.org/abs/2104.10858>`_. Presets follow the official code (zihangJiang/TokenLabeling
    ``tlt/models/lvvit.py``): MLP ratio 3, no ``qkv`` bias, LayerNorm eps 1e-5, the 4-layer conv stem (64
    channels, 128 for ``l``), residual branches divided by ``skip_lam`` (paper Eq. 5 with ``α = 1 / skip_lam``):
    :attr:`arch_zoo`. Other arguments as :class:`VisionTransformer`.
    """

    arch_zoo = {
        't': lvvit_arch(240, 12, 4, 1.0),
        's': lvvit_arch(384, 16, 6, 2.0),
        'm': lvvit_arch(512, 20, 8, 2.0),
        'l': lvvit_arch(768, 24, 12, 3.0, stem_channels=128),
    }

    def __init__(
        self, arch: Union[str, dict] = 's', qkv_bias: bool = False, norm_cfg: dict = dict(type='LN', eps=1e-5), **kwargs
    ):
        super().__init__(arch=arch, qkv_bias=qkv_bias, norm_cfg=norm_cfg, **kwargs)


def convert_lvvit(state_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """Official LV-ViT state dict -> mmpretrain-style classifier state dict of :class:`LVViT`: timm's ViT layout,
    ``head`` and ``aux_head`` under the names of mmvitreg's token-label head."""
    return convert_timm_vit(state_dict, head_renames={'head.': 'head.layers.head.', 'aux_head.': 'head.aux_head.'})


register_layout(
    OfficialLayout(
        'official LV-ViT (zihangJiang/TokenLabeling)',
        convert_lvvit,
        converter_tool('lvvit'),
        'mmvitreg.LVViT with mmvitreg.TokenLabelHead',
        TIMM_VIT_KEYS | {r'^aux_head\.weight$'},
    )
)
