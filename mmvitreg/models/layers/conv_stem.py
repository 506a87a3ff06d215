"""Convolutional patch embedding (stem) of DeepViT and LV-ViT."""

from typing import Tuple

import torch.nn.functional as F
from torch import Tensor, nn

from .patch_embed import token_grid


class ConvStem(nn.Module):
    """Convolutional stem that replaces the linear patch embedding.

    DeepViT (`arXiv:2103.11886 <https://arxiv.org/abs/2103.11886>`_, official ``PatchEmbed_CNN``)
    and LV-ViT (`Token Labeling, arXiv:2104.10858 <https://arxiv.org/abs/2104.10858>`_, official
    ``PatchEmbed4_2`` / ``PatchEmbed4_2_128``)::

        conv1 7×7 stride 2 pad 3 (no bias) - bn1 - ReLU
        conv{i} 3×3 stride 1 pad 1 (no bias) - bn{i} - ReLU      for i = 2 .. num_convs
        projection  (p/2)×(p/2) stride p/2 (with bias)  -> C channels

    DeepViT uses ``num_convs=2`` (the paper's "three CNN layers" count the projection), LV-ViT ``num_convs=3``.
    Keys as the official code's, ``projection`` for its ``proj`` (the name in mmpretrain's patch embedding).

    Args:
        in_channels (int): Image channels. Defaults to 3.
        embed_dims (int): Token channels ``C``. Defaults to 768.
        channels (int): Channels of the convolutions. Defaults to 64.
        num_convs (int): Convolutions before the projection (>= 1). Defaults to 3.
        patch_size (int): Total stride ``p`` (even). Defaults to 16.
        img_size (int | Sequence[int]): Input size of ``init_out_size`` (read by mmpretrain). Defaults to 224.

    Shapes:
        ``(B, in_channels, H, W)``, padded bottom/right to multiples of ``p``, -> tokens ``(B, Hg * Wg, C)`` and
        the grid ``(Hg, Wg)``, as mmcv's ``PatchEmbed``.
    """

    def __init__(
        self,
        in_channels: int = 3,
        embed_dims: int = 768,
        channels: int = 64,
        num_convs: int = 3,
        patch_size: int = 16,
        img_size=224,
    ):
        super().__init__()
        if num_convs < 1 or patch_size % 2:
            raise ValueError(f'ConvStem needs num_convs >= 1 and an even patch_size, got {num_convs}, {patch_size}')
        self.num_convs = num_convs
        self.patch_size = patch_size
        self.conv1 = nn.Conv2d(in_channels, channels, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        for i in range(2, num_convs + 1):
            self.add_module(f'conv{i}', nn.Conv2d(channels, channels, kernel_size=3, padding=1, bias=False))
            self.add_module(f'bn{i}', nn.BatchNorm2d(channels))
        self.relu = nn.ReLU(inplace=True)
        self.projection = nn.Conv2d(channels, embed_dims, kernel_size=patch_size // 2, stride=patch_size // 2)
        self.init_out_size = token_grid(img_size, patch_size)

    def forward(self, x: Tensor) -> Tuple[Tensor, Tuple[int, int]]:
        p = self.patch_size
        x = F.pad(x, (0, -x.shape[-1] % p, 0, -x.shape[-2] % p))
        for i in range(1, self.num_convs + 1):
            x = self.relu(getattr(self, f'bn{i}')(getattr(self, f'conv{i}')(x)))
        x = self.projection(x)
        return x.flatten(2).transpose(1, 2), tuple(x.shape[-2:])
