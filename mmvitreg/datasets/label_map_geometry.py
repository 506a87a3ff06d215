"""Geometric augmentations that move the dense label map exactly as they move the image.

Token labeling (`Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, §4.2): "since augmentations like rotation,
shear, and translation change the spatial information of the image, we need to make corresponding changes in the
dense score map". Each transform is its host's (mmpretrain's ``RandomResizedCrop`` and ``RandAugment``, mmcv's
``RandomFlip``) for the image; it reads back the random draw the image used (mmcv's ``cache_randomness``) and
composes the matching output-to-input matrix onto ``results['token_label_map']``
(:class:`~mmvitreg.datasets.label_maps.TokenLabelMap`); without that key it is its host. One composed matrix gives
the official geometry (``scipy.ndimage`` on the map, then ``roi_align``) without resampling the map at every step,
and reads the crop untransposed (configs/lvvit/README.md: the official transposed crop).
"""

from contextlib import contextmanager

import cv2
import numpy as np
from mmcv.transforms import RandomFlip
from mmpretrain.datasets.transforms import RandAugment, RandomResizedCrop
from mmpretrain.datasets.transforms.auto_augment import (
    AutoContrast,
    Brightness,
    ColorTransform,
    Contrast,
    Cutout,
    Equalize,
    GaussianBlur,
    Invert,
    Posterize,
    Rotate,
    Sharpness,
    Shear,
    Solarize,
    SolarizeAdd,
    Translate,
)

from mmvitreg.datasets.label_maps import warp_to_affine
from mmvitreg.registry import TRANSFORMS

# RandAugment ops that leave the geometry alone: colour ops, plus Cutout, which erases pixels
# without moving them (like RandomErasing, not reflected in the labels, as in the official code).
PHOTOMETRIC_OPS = (
    AutoContrast,
    Brightness,
    ColorTransform,
    Contrast,
    Cutout,
    Equalize,
    GaussianBlur,
    Invert,
    Posterize,
    Sharpness,
    Solarize,
    SolarizeAdd,
)
SPATIAL_OPS = (Rotate, Shear, Translate)


@contextmanager
def same_random_draws(transform):
    """Within the block, every ``@cache_randomness`` method of ``transform`` returns its first draw.

    This is the cache flag of mmcv's ``cache_randomness`` (``_cache_enabled`` / ``_cache``) without
    ``mmcv.transforms.utils.cache_random_params``, which in mmcv 2.1.0 leaves one more wrapper of
    ``RandomResizedCrop.rand_crop_params`` behind on every use (``EfficientNetRandomCrop`` lists that name a second
    time in the list shared with its parent) until the recursion limit is hit.
    """
    if getattr(transform, '_cache_enabled', False):  # already inside a caching context
        yield
        return
    transform._cache_enabled = True
    try:
        yield
    finally:
        del transform._cache_enabled
        transform.__dict__.pop('_cache', None)


@TRANSFORMS.register_module()
class RandomResizedCropWithLabelMap(RandomResizedCrop):
    """mmpretrain's ``RandomResizedCrop`` that also crops the dense label map.

    A crop ``(offset_w, offset_h, target_w, target_h)`` resized to ``(W, H)`` maps output point
    ``(x, y)`` to input point ``(offset_w + x * target_w / W, offset_h + y * target_h / H)``.

    Args: those of mmpretrain's ``RandomResizedCrop``.
    """

    def transform(self, results: dict) -> dict:
        if 'token_label_map' not in results:
            return super().transform(results)
        src_shape = results['img'].shape[:2]
        with same_random_draws(self):
            results = super().transform(results)
            offset_h, offset_w, target_h, target_w = self.rand_crop_params(None)
        out_h, out_w = results['img'].shape[:2]
        matrix = np.array([[target_w / out_w, 0.0, offset_w], [0.0, target_h / out_h, offset_h], [0.0, 0.0, 1.0]])
        results['token_label_map'].compose(matrix, src_shape, (out_h, out_w))
        return results


@TRANSFORMS.register_module()
class RandomFlipWithLabelMap(RandomFlip):
    """mmcv's ``RandomFlip`` that also flips the dense label map.

    A horizontal flip of a width-``W`` image maps ``x`` to ``W - x``; vertical: ``y`` to ``H - y``;
    diagonal: both.

    Args: those of mmcv's ``RandomFlip``.
    """

    def transform(self, results: dict) -> dict:
        results = super().transform(results)
        if 'token_label_map' in results and results['flip']:
            h, w = results['img'].shape[:2]
            direction = results['flip_direction']
            sx = -1.0 if direction in ('horizontal', 'diagonal') else 1.0
            sy = -1.0 if direction in ('vertical', 'diagonal') else 1.0
            matrix = np.array([[sx, 0.0, w if sx < 0 else 0.0], [0.0, sy, h if sy < 0 else 0.0], [0.0, 0.0, 1.0]])
            results['token_label_map'].compose(matrix, (h, w), (h, w))
        return results


def _spatial_op_warp(op, h: int, w: int) -> np.ndarray:
    """The ``cv2.warpAffine`` matrix the op just applied (its cached random draw), as mmcv builds it.

    mmcv conventions: ``Rotate`` angles are clockwise in degrees about ``center`` (default
    ``((w - 1) / 2, (h - 1) / 2)``) and go to ``cv2.getRotationMatrix2D(center, -angle, scale)``;
    ``Shear`` uses ``[[1, m, 0], [0, 1, 0]]`` (horizontal) or ``[[1, 0, 0], [m, 1, 0]]``;
    ``Translate`` moves by ``magnitude * width`` (or height) pixels.
    """
    value = op.random_negative(None)  # cached: the signed magnitude/angle the image used
    if isinstance(op, Rotate):
        center = op.center if op.center is not None else ((w - 1) * 0.5, (h - 1) * 0.5)
        return cv2.getRotationMatrix2D(center, -value, op.scale)
    if isinstance(op, Shear):
        warp = (
            [[1.0, value, 0.0], [0.0, 1.0, 0.0]]
            if op.direction == 'horizontal'
            else [[1.0, 0.0, 0.0], [value, 1.0, 0.0]]
        )
        return np.array(warp)
    if op.direction == 'horizontal':
        return np.array([[1.0, 0.0, value * w], [0.0, 1.0, 0.0]])
    return np.array([[1.0, 0.0, 0.0], [0.0, 1.0, value * h]])


@TRANSFORMS.register_module()
class RandAugmentWithLabelMap(RandAugment):
    """mmpretrain's ``RandAugment`` whose ``Rotate``, ``Shear`` and ``Translate`` also move the dense label map
    (colour ops and ``Cutout`` leave it); the areas filled with ``pad_val`` are outside the image for the token
    labels. Any other op in ``policies`` is refused at construction: it could move pixels without the labels.

    Args: those of mmpretrain's ``RandAugment``.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for op in self.transforms:
            if not isinstance(op, SPATIAL_OPS + PHOTOMETRIC_OPS):
                known = sorted(t.__name__ for t in SPATIAL_OPS + PHOTOMETRIC_OPS)
                raise ValueError(
                    f'RandAugmentWithLabelMap cannot keep the label map aligned through '
                    f'{type(op).__name__}; supported policies: {known}'
                )

    def transform(self, results: dict) -> dict:
        if 'token_label_map' not in results:
            return super().transform(results)
        for i in self.random_policy_indices():
            op = self.transforms[i]
            if not isinstance(op, SPATIAL_OPS):
                results = op(results)
                continue
            with same_random_draws(op):
                results = op.transform(results)
                if op.random_disable():
                    continue
                h, w = results['img'].shape[:2]
                warp = _spatial_op_warp(op, h, w)
            results['token_label_map'].compose(warp_to_affine(warp), (h, w), (h, w))
        return results
