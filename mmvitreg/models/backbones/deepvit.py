"""DeepViT presets (re-attention) and the converter of the official checkpoints."""

from typing import Union

from mmvitreg.registry import MODELS

from ..converters import TIMM_VIT_KEYS, OfficialLayout, convert_timm_vit, converter_tool, register_layout
from .vision_transformer import VisionTransformer

# DeepViT's convolutional patch embedding (official ``PatchEmbed_CNN``): two convs + projection.
DEEPVIT_STEM = dict(channels=64, num_convs=2)


def deepvit_arch(embed_dims: int, num_layers: int, num_reattn: int, **options) -> dict:
    """A DeepViT arch: 12 heads, MLP ratio 3, re-attention in the last ``num_reattn`` blocks."""
    return dict(
        embed_dims=embed_dims,
        num_layers=num_layers,
        num_heads=12,
        feedforward_channels=embed_dims * 3,
        attn_types=['msa'] * (num_layers - num_reattn) + ['reattn'] * num_reattn,
        **options,
    )


@MODELS.register_module()
class DeepViT(VisionTransformer):
    """DeepViT: the ViT with Re-attention, and its plain ViT baselines.

    `DeepViT: Towards Deeper Vision Transformer <https://arxiv.org/abs/2103.11886>`_. Presets (``arch``) follow
    the official code (zhoudaquan/dvit_repo ``models/deep_vision_transformer.py``); all have 12 heads, MLP ratio 3,
    ``qkv_bias=True`` and LayerNorm eps 1e-6:

    * ``16b``, ``24b``, ``32b``: 384 dims, re-attention in every block, the linear 16×16 patch embedding;
      ``vit-16b``, ``vit-24b``, ``vit-32b`` the same with self-attention (the paper's Table 2 baselines);
    * ``s`` (396 dims, 16 blocks), ``l`` (420 dims, 32 blocks): the conv stem, ``a = 0.5``, re-attention in the
      last 5 / 12 blocks only (official; the paper puts it in all), ``s`` with ``transform_scale``;
    * ``l-408``: ``l`` at the paper's width (the official ``deepvit_L`` has 420 dims).

    Other arguments as :class:`VisionTransformer`.
    """

    arch_zoo = {
        **{f'{n}b': deepvit_arch(384, n, n) for n in (16, 24, 32)},
        **{f'vit-{n}b': deepvit_arch(384, n, 0) for n in (16, 24, 32)},
        's': deepvit_arch(
            396, 16, 5, stem=DEEPVIT_STEM, attn_cfgs=dict(reattn=dict(transform_scale=True)), scale_adjustment=0.5
        ),
        'l': deepvit_arch(420, 32, 12, stem=DEEPVIT_STEM, scale_adjustment=0.5),
        'l-408': deepvit_arch(408, 32, 12, stem=DEEPVIT_STEM, scale_adjustment=0.5),
    }

    def __init__(self, arch: Union[str, dict] = 's', **kwargs):
        super().__init__(arch=arch, **kwargs)


#: official DeepViT state dict -> mmpretrain ``ImageClassifier`` state dict of :class:`DeepViT`: timm's ViT layout
#: (``reatten_matrix`` / ``var_norm`` keep their names, ``head`` becomes ``head.layers.head``)
convert_deepvit = convert_timm_vit

register_layout(
    OfficialLayout(
        'official DeepViT (zhoudaquan/dvit_repo)',
        convert_deepvit,
        converter_tool('deepvit'),
        "mmvitreg.DeepViT with attn_types 'reattn' where the file has reatten_matrix",
        TIMM_VIT_KEYS | {r'\.attn\.reatten_matrix\.weight$'},
    )
)
