"""Check, before a run builds anything, that the data its config points at exists and holds images.

Without it a wrong ``data_root`` surfaces as a ``FileNotFoundError`` from deep inside a dataset
constructor after the model was built, and an empty annotation file trains zero iterations per epoch
and "finishes" without a word.
"""
import os
import os.path as osp
from typing import Iterable, Iterator, Tuple

from mmvitreg.utils import ConfigError

IMAGE_SUFFIXES = ('.jpg', '.jpeg', '.png', '.ppm', '.bmp', '.pgm', '.tif', '.tiff', '.webp')


def _datasets(node, where: str) -> Iterator[Tuple[dict, str]]:
    """Every leaf dataset config under ``node`` (through ``RepeatDataset`` / ``ConcatDataset`` wrappers)."""
    if not isinstance(node, dict):
        return
    if isinstance(node.get('dataset'), dict):
        yield from _datasets(node['dataset'], f'{where}.dataset')
    elif isinstance(node.get('datasets'), (list, tuple)):
        for i, child in enumerate(node['datasets']):
            yield from _datasets(child, f'{where}.datasets[{i}]')
    else:
        yield node, where


def _has_image(folder: str) -> bool:
    for _, _, files in os.walk(folder, followlinks=True):
        if any(f.lower().endswith(IMAGE_SUFFIXES) for f in files):
            return True
    return False


def check_data(cfg, splits: Iterable[str] = ('train', 'val', 'test')) -> None:
    """Fail with one line naming the config key and the path when the data of ``<split>_dataloader``
    is missing: a ``data_root`` that does not exist, an annotation file that does not exist or (a
    text list) names no image, or - without an annotation file - an image folder with no image.

    Raises:
        ConfigError: naming the key (``train_dataloader.dataset.data_root``) and the path.
    """
    for split in splits:
        loader = cfg.get(f'{split}_dataloader')
        if not loader:
            continue
        for dataset, where in _datasets(loader.get('dataset'), f'{split}_dataloader.dataset'):
            root = dataset.get('data_root') or ''
            if root and not osp.isdir(root):
                raise ConfigError(f'{where}.data_root {root!r} does not exist (working directory {os.getcwd()}); '
                                  'build the data set or set --cfg-options '
                                  f'{where}.data_root=<folder>')
            ann = dataset.get('ann_file') or ''
            if ann:
                path = ann if osp.isabs(ann) else osp.join(root, ann)
                if not osp.isfile(path):
                    raise ConfigError(f'{where}.ann_file {path!r} does not exist')
                if path.endswith('.txt'):
                    with open(path) as f:
                        if not any(line.strip() for line in f):
                            raise ConfigError(f'{where}.ann_file {path!r} holds no images (the file is empty)')
                continue
            prefix = dataset.get('data_prefix') or ''
            prefix = prefix.get('img_path', prefix.get('img', '')) if isinstance(prefix, dict) else prefix
            folder = prefix if osp.isabs(prefix) else osp.join(root, prefix)
            if root and osp.isdir(folder) and not _has_image(folder):
                raise ConfigError(f'{where}: the image folder {folder!r} holds no images ({", ".join(IMAGE_SUFFIXES)})')
