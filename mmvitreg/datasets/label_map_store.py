"""A packed, memory-mapped store of dense label maps: one array per data set instead of one file per image.

Reading a ``.pt`` map costs a file open, a zip and pickle parse and a validation per image (about
0.1-0.2 ms, some 4% of an ImageNet training pipeline); the store reads a map with one binary search
and one 6.5 KB copy from a memory map that every data-loader worker shares through the page cache.
Every map is validated once, when it is packed, and every error there names the map's file.

Layout of a store (a folder, written by :func:`pack_label_maps` /
``tools/dataset_converters/pack_label_maps.py``)::

    <store>/packed.json   {"format": "mmvitreg.label_maps", "version": 1, "count": N,
                           "map_shape": [2, k, h, w], "dtype": "float16", "max_class": C,
                           "source": "<the folder it was packed from>"}
    <store>/keys.npy      (N,) bytes, sorted: the map paths relative to the source folder, without
                          the ``.pt`` suffix, '/'-separated, UTF-8 ("n01440764/n01440764_10026")
    <store>/maps.npy      (N, 2, k, h, w) float16 or float32: row i is the map of keys[i], exactly as
                          the ``.pt`` file held it (format: :mod:`mmvitreg.datasets.label_maps`)

``keys`` are :func:`~mmvitreg.datasets.label_maps.label_map_key` of the image paths, so a store packed
from a folder answers the same images as the folder.
"""
import json
import os
import os.path as osp
import shutil
from typing import Optional

import numpy as np

from mmvitreg.datasets.label_maps import LabelMapError, label_map_key, load_label_map

FORMAT, VERSION = 'mmvitreg.label_maps', 1
INDEX = 'packed.json'


def is_label_map_store(path: str) -> bool:
    """Whether ``path`` is a packed store (a folder with ``packed.json``) rather than a folder of ``.pt`` maps."""
    return osp.isfile(osp.join(path, INDEX))


class LabelMapStore:
    """Read-only access to a packed store.

    The arrays are memory-mapped on first use in each process (data-loader workers open their own
    maps; pickling drops them), so opening costs nothing and the maps are shared through the page cache.

    The store's files are checked against ``packed.json`` when opened, and every map's class indices when it is
    read (one float16 min / max; the ``max_class`` of ``packed.json`` is the packer's word, not the file's).

    Args:
        root (str): The store folder.
        num_classes (int, optional): If given, class indices must be below it (and non-negative anyway).

    Attributes:
        meta (dict): The content of ``packed.json``.
    """

    def __init__(self, root: str, num_classes: Optional[int] = None):
        self.root, self.num_classes = root, num_classes
        try:
            with open(osp.join(root, INDEX)) as f:
                self.meta = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f'{root} is not a readable label-map store ({e}); pack one with '
                             'tools/dataset_converters/pack_label_maps.py') from e
        if self.meta.get('format') != FORMAT or self.meta.get('version') != VERSION:
            raise ValueError(f'{osp.join(root, INDEX)} is not a version-{VERSION} {FORMAT} store: '
                             f'format {self.meta.get("format")!r}, version {self.meta.get("version")!r}')
        self._keys = self._maps = None

    def _open(self):
        keys = np.load(osp.join(self.root, 'keys.npy'), mmap_mode='r')
        maps = np.load(osp.join(self.root, 'maps.npy'), mmap_mode='r')
        count, shape = self.meta['count'], tuple(self.meta['map_shape'])
        if (len(keys) != count or maps.shape != (count, ) + shape or str(maps.dtype) != self.meta['dtype']
                or maps.dtype not in (np.float16, np.float32) or len(shape) != 4 or shape[0] != 2):
            raise LabelMapError(f'label-map store {self.root} is inconsistent: packed.json says {count} maps '
                                f'of {shape} {self.meta["dtype"]}, keys.npy holds {len(keys)} keys and maps.npy '
                                f'{maps.shape} {maps.dtype} (maps are (2, k, h, w) float16 / float32); pack it again')
        self._keys, self._maps = keys.view(np.ndarray), maps.view(np.ndarray)  # plain views index faster

    def __len__(self) -> int:
        return self.meta['count']

    def get(self, key: str, img_path: Optional[str] = None) -> np.ndarray:
        """The map stored under ``key``.

        Args:
            key (str): :func:`~mmvitreg.datasets.label_maps.label_map_key` of the image.
            img_path (str, optional): The image, for the error message. Defaults to None.

        Returns:
            np.ndarray: ``(2, k, h, w)`` float16 or float32, a writable copy.
        """
        if self._maps is None:
            self._open()
        needle = key.encode()
        i = int(np.searchsorted(self._keys, needle))
        if i == len(self._keys) or self._keys[i] != needle:
            raise LookupError(f'the token label map of {img_path or key} ({key!r}) is not in the store '
                              f'{self.root}, packed from {self.meta["source"]} with {len(self)} maps; generate '
                              'the missing maps and pack the store again, or check img_prefix')
        label_map = np.array(self._maps[i])
        low, high = label_map[1].min(), label_map[1].max()
        if not (low >= 0 and (self.num_classes is None or high < self.num_classes)):  # NaN fails too
            raise LabelMapError(f'the token label map of {img_path or key} ({key!r}) in the store {self.root} holds '
                                f'class indices {low:g}..{high:g}, out of range for num_classes={self.num_classes}; '
                                'pack the store again from valid maps')
        return label_map

    def __getstate__(self):
        return dict(self.__dict__, _keys=None, _maps=None)


def _map_files(label_root: str):
    """``[(key, path)]`` of every ``.pt`` file under ``label_root``, sorted by key."""
    paths = (osp.join(folder, name) for folder, _, files in os.walk(label_root) for name in files
             if name.endswith('.pt'))
    return sorted((label_map_key(path, label_root), path) for path in paths)


def pack_label_maps(label_root: str, store: str, num_classes: Optional[int] = None, progress: bool = True) -> dict:
    """Pack a folder of ``.pt`` label maps into a store.

    Every map is read and validated (:func:`~mmvitreg.datasets.label_maps.load_label_map`); a
    malformed map, or one whose shape or dtype differs from the first map's, is an error naming its
    file. The store is written to ``<store>.tmp<pid>`` and renamed into place, so an interrupted run
    leaves no half store.

    Args:
        label_root (str): Folder of ``.pt`` maps (``tools/generate_label_maps.py`` or the official ones).
        store (str): The store folder to create; it must not exist.
        num_classes (int, optional): If given, class indices must be below it. Defaults to None.
        progress (bool): Show a progress bar. Defaults to True.

    Returns:
        dict: The store's ``packed.json``.
    """
    if osp.exists(store):
        raise FileExistsError(f'{store} already exists; remove it to pack again')
    files = _map_files(label_root)
    if not files:
        raise FileNotFoundError(f'no .pt label maps under {label_root}')
    first = load_label_map(files[0][1], num_classes)
    tmp = f'{store.rstrip(os.sep)}.tmp{os.getpid()}'
    os.makedirs(tmp)
    try:
        maps = np.lib.format.open_memmap(osp.join(tmp, 'maps.npy'), 'w+', first.dtype, (len(files), ) + first.shape)
        max_class = 0
        if progress:
            from mmengine.utils import ProgressBar
            bar = ProgressBar(len(files))
        for i, (_, path) in enumerate(files):
            label_map = first if i == 0 else load_label_map(path, num_classes)
            if label_map.shape != first.shape or label_map.dtype != first.dtype:
                raise ValueError(f'token label map {path} is {label_map.shape} {label_map.dtype} but '
                                 f'{files[0][1]} is {first.shape} {first.dtype}: a store holds maps of one '
                                 'shape and dtype')
            maps[i] = label_map
            max_class = max(max_class, int(label_map[1].max()))
            if progress:
                bar.update()
        maps.flush()
        del maps
        np.save(osp.join(tmp, 'keys.npy'), np.array([key.encode() for key, _ in files]))
        meta = dict(format=FORMAT, version=VERSION, count=len(files), map_shape=list(first.shape),
                    dtype=str(first.dtype), max_class=max_class, source=osp.abspath(label_root))
        with open(osp.join(tmp, INDEX), 'w') as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp, store)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta
