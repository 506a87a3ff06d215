"""What every mixing plan of this package draws alike: the token grid of a batch and the partner of each image."""
from typing import Tuple

import torch
from torch import Tensor


def token_grid(owner: str, inputs: Tensor, patch_size: int) -> Tuple[int, int]:
    """``(H // patch_size, W // patch_size)`` of images ``(B, C, H, W)``.

    Raises:
        ValueError: naming ``owner``, when ``H`` or ``W`` is not a multiple of ``patch_size``.
    """
    H, W = inputs.shape[-2:]
    if H % patch_size or W % patch_size:
        raise ValueError(f'{owner} needs a whole token grid: input {H}x{W} is not a multiple of '
                         f'patch_size={patch_size}')
    return H // patch_size, W // patch_size


def partner_index(batch: int, partner: str, device=None) -> Tensor:
    """``(B,)`` long: the partner of every image, ``B - 1 - i`` for ``'flip'`` (the official codes' ``flip(0)``)
    or a random permutation for ``'permute'``."""
    if partner == 'flip':
        return torch.arange(batch - 1, -1, -1, device=device)
    return torch.randperm(batch, device=device)
