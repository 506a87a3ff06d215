"""DeepViT presets (re-attention) and the converter of the official checkpoints."""
from typing import Dict, Union

from torch import Tensor

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
        **options)


@MODELS.register_module()
class DeepViT(VisionTransformer):
    """DeepViT: the ViT with Re-attention, and its plain ViT baselines.

    `DeepViT: Towards Deeper Vision Transformer <https://arxiv.org/abs/2103.11886>`_. Presets
    (``arch``) follow the official code (zhoudaquan/dvit_repo ``models/deep_vision_transformer.py``);
    parameter counts with a 1000-class linear head on the cls token:

    ============  =====  ======  =====================  ===========================================  =======
    arch          dims   blocks  re-attention blocks    extras                                       params
    ============  =====  ======  =====================  ===========================================  =======
    ``16b``       384    16      all                    linear 16×16 patch embedding                 24.43M
    ``24b``       384    24      all                                                                 36.26M
    ``32b``       384    32      all                                                                 48.10M
    ``vit-16b``   384    16      none (paper Table 2)                                                24.42M
    ``vit-24b``   384    24      none                                                                36.26M
    ``vit-32b``   384    32      none                                                                48.09M
    ``s``         396    16      last 5                 conv stem, ``transform_scale``, ``a = 0.5``  27.31M
    ``l``         420    32      last 12                conv stem, ``a = 0.5``                       58.88M
    ``l-408``     408    32      last 12                ``l`` at the paper's width                   55.64M
    ============  =====  ======  =====================  ===========================================  =======

    The plain ``vit-*b`` baselines match the paper's Table 2 for 24 and 32 blocks (36.26M, 48.09M);
    for 16 blocks the table says 24.46M where the same architecture counts 24.42M (24,423,784).
    All: 12 heads, MLP ratio 3, ``qkv_bias=True``, LayerNorm eps 1e-6. The paper gives DeepViT-L
    as 408 dims / 55M; the official ``deepvit_L`` (and its checkpoint) has 420 dims, so ``l`` is
    the official one and ``l-408`` the paper's width. The paper says DeepViT-S/L use
    re-attention in place of self-attention; the official models use it in the last 5 / 12 blocks
    only, which ``s`` / ``l`` follow. The official models normalise inputs with mean = std = 0.5
    (a config matter). Other arguments as :class:`VisionTransformer`.
    """

    arch_zoo = {
        **{f'{n}b': deepvit_arch(384, n, n) for n in (16, 24, 32)},
        **{f'vit-{n}b': deepvit_arch(384, n, 0) for n in (16, 24, 32)},
        's': deepvit_arch(396, 16, 5, stem=DEEPVIT_STEM, attn_cfgs=dict(reattn=dict(transform_scale=True)),
                          scale_adjustment=0.5),
        'l': deepvit_arch(420, 32, 12, stem=DEEPVIT_STEM, scale_adjustment=0.5),
        'l-408': deepvit_arch(408, 32, 12, stem=DEEPVIT_STEM, scale_adjustment=0.5),
    }

    def __init__(self, arch: Union[str, dict] = 's', **kwargs):
        super().__init__(arch=arch, **kwargs)


def convert_deepvit(state_dict: Dict[str, Tensor]) -> Dict[str, Tensor]:
    """Official DeepViT state dict -> mmpretrain ``ImageClassifier`` state dict of :class:`DeepViT`.

    ``backbone.*`` for the backbone (``reatten_matrix`` / ``var_norm`` keep their names) and
    ``head.layers.head.*`` (mmpretrain's ``VisionTransformerClsHead``) for ``head``.
    """
    return convert_timm_vit(state_dict)


register_layout(OfficialLayout(
    'official DeepViT (zhoudaquan/dvit_repo)', convert_deepvit, converter_tool('deepvit'),
    "mmvitreg.DeepViT with attn_types 'reattn' where the file has reatten_matrix",
    TIMM_VIT_KEYS | {r'\.attn\.reatten_matrix\.weight$'}))
