"""Loading of the dense label map of each training image (token labeling)."""
from typing import Optional

from mmcv.transforms import BaseTransform

from mmvitreg.datasets.label_map_store import LabelMapStore, is_label_map_store
from mmvitreg.datasets.label_maps import REGIONS, TokenLabelMap, label_map_key, label_map_path, load_label_map
from mmvitreg.registry import TRANSFORMS


@TRANSFORMS.register_module()
class LoadTokenLabelMap(BaseTransform):
    """Load the teacher's dense label map of ``results['img_path']``.

    Token labeling (`Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, §3.2) supervises every
    token with the score of its region in a dense score map made offline by a teacher. This
    transform reads that map (format: :mod:`mmvitreg.datasets.label_maps`) and starts tracking the
    image geometry; place it right after ``LoadImageFromFile``, use the label-aware geometric
    transforms (``mmvitreg.RandomResizedCropWithLabelMap``, ``mmvitreg.RandomFlipWithLabelMap``,
    ``mmvitreg.RandAugmentWithLabelMap``) and end with ``mmvitreg.TokenLabelTarget`` (the batch's
    ``TokenClsDataPreprocessor`` reads the map under the tokens).

    The maps come from a folder of ``.pt`` files (one per image, validated as they are read) or from
    a store packed from such a folder by ``tools/dataset_converters/pack_label_maps.py`` (validated
    when packed; about 0.06 ms per image instead of 0.2 ms inside the ImageNet pipeline,
    ``tools/analysis_tools/benchmark_data_pipeline.py``); ``label_root`` may name either. A missing
    or malformed map raises an error naming the file (or the store): an image never silently
    trains with an empty label.

    **Required keys:** ``img``, ``img_path``. **Added key:** ``token_label_map``
    (:class:`~mmvitreg.datasets.label_maps.TokenLabelMap`).

    Args:
        label_root (str): Folder of the ``.pt`` maps, or a packed store (a folder with
            ``packed.json``, :mod:`mmvitreg.datasets.label_map_store`).
        img_prefix (str, optional): The data set's image prefix (``data_root`` joined with
            ``data_prefix``); map paths mirror image paths relative to it. None: the official
            ``<class_dir>/<image>`` rule. Defaults to None.
        region (str): Part of the image the maps cover, ``'full'`` (maps from
            ``tools/generate_label_maps.py``; what the official training code assumes) or
            ``'center_square'`` (what the official generator actually fed its teacher).
            Defaults to ``'full'``.
        num_classes (int, optional): If given, every class index is checked to be below it as its map
            is read (from a file or the store; negative indices are refused anyway). Defaults to None.
        backend_args (dict, optional): mmengine file backend arguments for ``.pt`` maps (a store
            is memory-mapped from a local or mounted file system). Defaults to None.
    """

    def __init__(self, label_root: str, img_prefix: Optional[str] = None, region: str = 'full',
                 num_classes: Optional[int] = None, backend_args: Optional[dict] = None):
        if region not in REGIONS:
            raise ValueError(f'region must be one of {REGIONS}, got {region!r}')
        self.label_root = label_root
        self.img_prefix = img_prefix
        self.region = region
        self.num_classes = num_classes
        self.backend_args = backend_args
        self.store = LabelMapStore(label_root, num_classes) if is_label_map_store(label_root) else None
        if self.store is not None and backend_args is not None:
            raise ValueError(f'{label_root} is a packed label-map store, read with memory maps: '
                             f'backend_args={backend_args} cannot apply; copy it to a local file system')

    def transform(self, results: dict) -> dict:
        img_shape = results['img'].shape[:2]
        if 'ori_shape' in results and tuple(results['ori_shape'][:2]) != tuple(img_shape):
            raise RuntimeError(f'LoadTokenLabelMap must come right after LoadImageFromFile: the image '
                               f'was already resized from {results["ori_shape"]} to {img_shape}')
        if self.store is not None:
            key = label_map_key(results['img_path'], self.img_prefix)
            label_map = self.store.get(key, results['img_path'])
        else:
            path = label_map_path(self.label_root, results['img_path'], self.img_prefix)
            label_map = load_label_map(path, self.num_classes, self.backend_args)
        results['token_label_map'] = TokenLabelMap(label_map, img_shape, self.region)
        return results

    def __repr__(self):
        return (f'{self.__class__.__name__}(label_root={self.label_root!r}, img_prefix={self.img_prefix!r}, '
                f'region={self.region!r}, num_classes={self.num_classes})')
