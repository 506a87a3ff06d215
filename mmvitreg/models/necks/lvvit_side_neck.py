"""The official LV-ViT segmentation "side layers": four stride-16 token maps to a 4-scale pyramid."""

from typing import Sequence, Tuple

import torch.nn as nn
from mmcv.cnn import build_norm_layer
from mmengine.model import BaseModule
from torch import Tensor

from mmvitreg.registry import MODELS


@MODELS.register_module()
class LVViTSideNeck(BaseModule):
    """Side layers of the official LV-ViT UperNet (TokenLabeling ``seg/mmseg/models/backbones/vit.py``,
    ``use_side_layer=True``), as a neck of a plain ViT backbone with ``out_type='featmap'``.

    `Token Labeling / LV-ViT <https://arxiv.org/abs/2104.10858>`_ (§4.4, ADE20K): the four tapped
    blocks' patch tokens, each ``(B, C, H/16, W/16)``, become

    ==========  =========================================================  ====================
    level        layers (conv biases off, each norm followed by ReLU)         output
    ==========  =========================================================  ====================
    0            ConvTranspose 4x4 stride 4, norm; Conv 1x1, norm              ``(B, C, H/4, W/4)``
    1            ConvTranspose 2x2 stride 2, norm; Conv 1x1, norm              ``(B, C, H/8, W/8)``
    2            Conv 1x1, norm                                                ``(B, C, H/16, W/16)``
    3            Conv 1x1 to ``out_channels``, norm                            ``(B, 2048, H/16, W/16)``
    ==========  =========================================================  ====================

    so UPerHead takes ``in_channels=[C, C, C, 2048]``. This follows the official code (the paper only says
    UperNet); mmseg's ``MultiLevelNeck`` is the other choice (the ``*_mln_*`` configs).

    Args:
        in_channels (int): ``C``, the backbone's token dimension.
        out_channels (int): Channels of level 3. Defaults to 2048 (official).
        norm_cfg (dict): Norm after every conv. Defaults to ``dict(type='SyncBN')`` (official).
        init_cfg (dict, optional): Defaults to None (PyTorch's default init, as the official code).
    """

    def __init__(self, in_channels: int, out_channels: int = 2048, norm_cfg: dict = dict(type='SyncBN'), init_cfg=None):
        super().__init__(init_cfg=init_cfg)
        C = in_channels

        def conv(layer: nn.Module, channels: int) -> list:  # a bias-free conv, its norm and ReLU
            return [layer, build_norm_layer(norm_cfg, channels)[1], nn.ReLU(inplace=True)]

        up4 = conv(nn.ConvTranspose2d(C, C, 4, stride=4, bias=False), C) + conv(nn.Conv2d(C, C, 1, bias=False), C)
        up2 = conv(nn.ConvTranspose2d(C, C, 2, stride=2, bias=False), C) + conv(nn.Conv2d(C, C, 1, bias=False), C)
        same = conv(nn.Conv2d(C, C, 1, bias=False), C)
        wide = conv(nn.Conv2d(C, out_channels, 1, bias=False), out_channels)
        self.side_layers = nn.ModuleList(nn.Sequential(*layers) for layers in (up4, up2, same, wide))
        self.in_channels = in_channels

    def forward(self, inputs: Sequence[Tensor]) -> Tuple[Tensor, ...]:
        """Four ``(B, C, h, w)`` maps (stride 16) -> the pyramid above (strides 4, 8, 16, 16)."""
        if len(inputs) != 4:
            raise ValueError(f'LVViTSideNeck takes the maps of 4 tapped blocks, got {len(inputs)}')
        for x in inputs:
            if x.dim() != 4 or x.shape[1] != self.in_channels:
                raise ValueError(f"LVViTSideNeck takes out_type='featmap' maps of in_channels, got {tuple(x.shape)}")
        return tuple(layer(x) for layer, x in zip(self.side_layers, inputs))
