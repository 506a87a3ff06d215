"""Loading of the dense label map of each training image (token labeling)."""

import os.path as osp
from typing import Optional, Sequence

from mmcv.transforms import BaseTransform

from mmvitreg.datasets.label_map_store import INDEX, LabelMapStore
from mmvitreg.datasets.label_maps import REGIONS, TokenLabelMap, label_map_key, label_map_path, load_label_map
from mmvitreg.registry import TRANSFORMS


@TRANSFORMS.register_module()
class LoadTokenLabelMap(BaseTransform):
    """Load the teacher's dense label map of ``results['img_path']`` (token labeling, `Jiang et al. 2021
    <https://arxiv.org/abs/2104.10858>`_, §3.2) and start tracking the image geometry.

    Place it right after ``LoadImageFromFile``, use the label-aware geometric transforms
    (``mmvitreg.RandomResizedCropWithLabelMap``, ``RandomFlipWithLabelMap``, ``RandAugmentWithLabelMap``) and end
    with ``mmvitreg.TokenLabelTarget``. The maps come from a folder of files (format:
    :mod:`mmvitreg.datasets.label_maps`) or a store packed from one (:mod:`mmvitreg.datasets.label_map_store`);
    each is validated as it is read, and a missing or malformed map raises an error naming the file (or the store):
    an image never silently trains with an empty label.

    **Required keys:** ``img``, ``img_path``. **Added key:** ``token_label_map``
    (:class:`~mmvitreg.datasets.label_maps.TokenLabelMap`).

    Args:
        label_root (str): Folder of the ``.npy`` / ``.pt`` maps, or a packed store (a folder with ``packed.json``).
        img_prefix (str, optional): The data set's image prefix (``data_root`` joined with ``data_prefix``); map
            paths mirror image paths relative to it. None: the official ``<class_dir>/<image>`` rule.
        region (str): Part of the image the maps cover, ``'full'`` (the generator's; what the official training
            code assumes) or ``'center_square'`` (what the official generator fed its teacher). Defaults to 'full'.
        num_classes (int, optional): If given, every class index is checked to be below it. Defaults to None.
        map_shape (Sequence[int], optional): ``(k, H, W)``, the maps' top-k and grid (official: ``(5, 18, 18)``):
            every map must have it, and a file's size is bounded by it before it is read. Defaults to None (any
            shape; files up to :data:`~mmvitreg.datasets.label_maps.MAX_BYTES`).
    """

    def __init__(
        self,
        label_root: str,
        img_prefix: Optional[str] = None,
        region: str = 'full',
        num_classes: Optional[int] = None,
        map_shape: Optional[Sequence[int]] = None,
    ):
        if region not in REGIONS:
            raise ValueError(f'region must be one of {REGIONS}, got {region!r}')
        self.label_root = label_root
        self.img_prefix = img_prefix
        self.region = region
        self.num_classes = num_classes
        self.map_shape = None if map_shape is None else tuple(map_shape)
        is_store = osp.lexists(osp.join(label_root, INDEX))  # a packed store, not a folder of map files
        self.store = LabelMapStore(label_root, num_classes, map_shape) if is_store else None

    def transform(self, results: dict) -> dict:
        img_shape = results['img'].shape[:2]
        if 'ori_shape' in results and tuple(results['ori_shape'][:2]) != tuple(img_shape):
            raise RuntimeError(
                f'LoadTokenLabelMap must come right after LoadImageFromFile: the image '
                f'was already resized from {results["ori_shape"]} to {img_shape}'
            )
        if self.store is not None:
            key = label_map_key(results['img_path'], self.img_prefix)
            label_map = self.store.get(key, results['img_path'])
        else:
            path = label_map_path(self.label_root, results['img_path'], self.img_prefix)
            if not osp.lexists(path):  # the generator's .npy (a dangling link is refused by name), else the .pt
                path = path[: -len('.npy')] + '.pt'
            label_map = load_label_map(path, self.num_classes, self.map_shape)
        results['token_label_map'] = TokenLabelMap(label_map, img_shape, self.region)
        return results

    def __repr__(self):
        return (
            f'{self.__class__.__name__}(label_root={self.label_root!r}, img_prefix={self.img_prefix!r}, '
            f'region={self.region!r}, num_classes={self.num_classes}, map_shape={self.map_shape})'
        )
