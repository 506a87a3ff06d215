"""Linear patch embedding of ViT."""
from typing import Sequence, Tuple

from torch import Tensor, nn


def token_grid(input_size, stride: int) -> Tuple[int, int]:
    """Token grid ``(Hg, Wg)`` of an input of ``input_size`` (int or ``(H, W)``) for a patch stride.

    Inputs are padded bottom/right to a multiple of the stride, so ``Hg = ceil(H / stride)``.
    """
    h, w = (input_size, input_size) if not isinstance(input_size, Sequence) else input_size
    return (h + stride - 1) // stride, (w + stride - 1) // stride  # not -(-h // s): ONNX truncates it


class PatchEmbed(nn.Module):
    """Linear patch embedding: every non-overlapping ``p×p`` patch is projected to ``C`` channels.

    `An Image is Worth 16x16 Words <https://arxiv.org/abs/2010.11929>`_: implemented as a
    convolution with kernel = stride = ``p``, key ``projection`` as in mmpretrain's
    ``VisionTransformer`` (``patch_embed.projection``). The backbone pads inputs to a multiple of
    :attr:`stride` first (bottom/right, as mmcv's ``PatchEmbed`` with ``padding='corner'``).

    Args:
        in_channels (int): Image channels. Defaults to 3.
        embed_dims (int): Token channels ``C``. Defaults to 768.
        patch_size (int): Patch side ``p``. Defaults to 16.
        img_size (int | Sequence[int]): Input size the position embedding is made for. Defaults to 224.

    Shapes:
        ``(B, in_channels, H, W)`` -> ``(B, C, H / p, W / p)``.
    """

    def __init__(self, in_channels: int = 3, embed_dims: int = 768, patch_size: int = 16, img_size=224):
        super().__init__()
        self.stride = patch_size
        self.projection = nn.Conv2d(in_channels, embed_dims, kernel_size=patch_size, stride=patch_size)
        self.init_out_size = token_grid(img_size, patch_size)

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(x)
