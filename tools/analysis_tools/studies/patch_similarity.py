"""Patch-wise absolute cosine similarity per layer (DiversePatch §3, Figures 1b and 3), for any backbone.

Forward hooks read the patch representations of every layer the paper plots:

* ViT family (mmpretrain's and mmvitreg's ``VisionTransformer``, ``DeepViT``, ``LVViT``): every block's
  output ``(B, N, C)``, the extra (class) tokens dropped;
* Swin (mmpretrain's and mmvitreg's): the input of every down-sampling (patch merging) layer and the last
  stage's output (the input of its output norm), ``(B, H * W, C)``: "the input representation to each
  down-sampling layer" (paper §3);
* ResNet (mmpretrain's ``ResNet`` family): every residual stage's output ``(B, C, H, W)``, each spatial
  location a patch.

For each layer the similarity ``P(h)`` (:func:`~mmvitreg.models.losses.patch_cosine_similarity`) of every
image is averaged over the images.
"""

from typing import Callable, Iterable, List, Tuple

import torch
from torch import Tensor, nn

from mmvitreg.models.losses import patch_cosine_similarity

#: (layer name, module, 'output' or 'input', patch tokens (B, n, C) from the hooked tensor)
Tap = Tuple[str, nn.Module, str, Callable[[Tensor], Tensor]]


def _channels_last(x: Tensor) -> Tensor:
    return x.flatten(2).transpose(1, 2)


def patch_taps(backbone: nn.Module) -> List[Tap]:
    """The layers whose patch representations :func:`patch_cosine_per_layer` reads (see the module docstring).

    Raises:
        TypeError: a backbone of none of the three families.
    """
    if hasattr(backbone, 'layers') and hasattr(backbone, 'num_extra_tokens'):
        extra = backbone.num_extra_tokens
        return [
            (f'block {i + 1}', layer, 'output', lambda t, e=extra: t[:, e:]) for i, layer in enumerate(backbone.layers)
        ]
    if hasattr(backbone, 'stages') and all(hasattr(s, 'downsample') for s in backbone.stages):
        last = len(backbone.stages) - 1
        if not hasattr(backbone, f'norm{last}'):
            raise TypeError(
                f'{type(backbone).__name__}: the last stage ({last}) must be an output (out_indices) '
                'so that its output is read'
            )
        taps = [
            (f'stage {i + 1}', s.downsample, 'input', lambda t: t)
            for i, s in enumerate(backbone.stages)
            if s.downsample is not None
        ]
        return taps + [(f'stage {last + 1}', getattr(backbone, f'norm{last}'), 'input', lambda t: t)]
    if hasattr(backbone, 'res_layers'):
        return [
            (f'stage {i + 1}', getattr(backbone, name), 'output', _channels_last)
            for i, name in enumerate(backbone.res_layers)
        ]
    raise TypeError(
        f'patch_cosine_per_layer reads ViT-family, Swin and ResNet backbones; got {type(backbone).__name__}'
    )


@torch.no_grad()
def patch_cosine_per_layer(backbone: nn.Module, batches: Iterable[Tensor]) -> Tuple[List[str], List[float]]:
    """Layer names and the mean patch-wise absolute cosine similarity of each over the images of ``batches``
    (preprocessed inputs ``(B, 3, H, W)``)."""
    taps = patch_taps(backbone)
    sums = [0.0] * len(taps)

    def record(i, patches):
        def hook(module, args, output=None):
            tokens = args[0] if output is None else output
            sums[i] += float(patch_cosine_similarity(patches(tokens)).sum())

        return hook

    handles = [
        module.register_forward_pre_hook(record(i, f))
        if kind == 'input'
        else module.register_forward_hook(record(i, f))
        for i, (_, module, kind, f) in enumerate(taps)
    ]
    count = 0
    try:
        for inputs in batches:
            backbone(inputs)
            count += inputs.shape[0]
    finally:
        for h in handles:
            h.remove()
    if not count:
        raise ValueError('no images to measure')
    return [t[0] for t in taps], [s / count for s in sums]
