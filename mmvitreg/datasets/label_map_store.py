"""A packed, memory-mapped store of dense label maps: one array per data set instead of one file per image, read
with a binary search and a copy from a memory map that the data-loader workers share through the page cache.

Layout of a store (a folder, written by ``tools/dataset_converters/pack_label_maps.py``)::

    <store>/packed.json   {"format": "mmvitreg.label_maps", "version": 1, "count": N,
                           "map_shape": [2, k, h, w], "dtype": "float16", "max_class": C,
                           "source": "<the folder it was packed from>"}
    <store>/keys.npy      (N,) bytes, sorted: the map paths relative to the source folder, without
                          the suffix, '/'-separated, UTF-8 ("n01440764/n01440764_10026")
    <store>/maps.npy      (N, 2, k, h, w) float16 or float32: row i is the map of keys[i], exactly as
                          its file held it (format: :mod:`mmvitreg.datasets.label_maps`)

Both arrays are ``.npy`` files, memory-mapped once their headers match ``packed.json`` and the files' sizes; every
map is validated as it is read (:func:`~mmvitreg.datasets.label_maps.check_label_map`, as from a file).
"""

import json
import os
import os.path as osp
import shutil
from typing import Optional, Sequence

import numpy as np
from mmengine.utils import track_iter_progress

from mmvitreg.datasets.label_maps import (
    SUFFIXES,
    LabelMapError,
    check_label_map,
    label_map_key,
    load_label_map,
    read_npy_header,
)
from mmvitreg.fileio import open_regular_file

FORMAT, VERSION = 'mmvitreg.label_maps', 1
INDEX = 'packed.json'
REPACK = 'pack the store again from valid maps (tools/dataset_converters/pack_label_maps.py)'


def _memmap(path: str, shape: tuple, dtype: Optional[str] = None) -> np.ndarray:
    """The ``.npy`` array at ``path``, memory-mapped read-only once it is a regular file whose numpy header declares
    ``shape`` (and ``dtype`` if given) and exactly its size."""
    with open_regular_file(path, f'label-map store file {path}', (1, 1 << 62), LabelMapError, REPACK) as f:
        found, found_dtype, fortran = read_npy_header(f, path, os.fstat(f.fileno()).st_size)
        if found != shape or fortran or (dtype is not None and str(found_dtype) != dtype):
            raise LabelMapError(
                f'label-map store {osp.dirname(path)} is inconsistent: {INDEX} says {shape} '
                f'{dtype or ""}, {osp.basename(path)} holds {found} {found_dtype}; {REPACK}'
            )
        return np.memmap(f, found_dtype, 'r', offset=f.tell(), shape=found).view(np.ndarray)  # plain views index faster


class LabelMapStore:
    """Read-only access to a packed store, memory-mapped on first use in each process (pickling drops the maps, so
    every data-loader worker maps its own).

    Args:
        root (str): The store folder.
        num_classes (int, optional): If given, class indices must be below it.
        map_shape (Sequence[int], optional): ``(k, h, w)``: if given, the store's maps must have this shape.

    Attributes:
        meta (dict): The content of ``packed.json``.
    """

    def __init__(self, root: str, num_classes: Optional[int] = None, map_shape: Optional[Sequence[int]] = None):
        self.root, self.num_classes = root, num_classes
        index = osp.join(root, INDEX)
        try:
            with open_regular_file(index, f'label-map store index {index}', (1, 1 << 20), LabelMapError) as f:
                self.meta = json.loads(f.read(1 << 20))
        except (OSError, ValueError) as e:
            raise LabelMapError(
                f'{root} is not a readable label-map store ({e}); pack one with '
                'tools/dataset_converters/pack_label_maps.py'
            ) from None
        if not isinstance(self.meta, dict) or self.meta.get('format') != FORMAT or self.meta.get('version') != VERSION:
            raise LabelMapError(f'{index} is not a version-{VERSION} {FORMAT} store; {REPACK}')
        count, shape = self.meta.get('count'), self.meta.get('map_shape')
        if not (
            type(count) is int
            and count > 0
            and isinstance(shape, list)
            and len(shape) == 4
            and shape[0] == 2
            and all(type(n) is int and n > 0 for n in shape)
            and self.meta.get('dtype') in ('float16', 'float32')
        ):
            raise LabelMapError(
                f'{index} declares {count} maps of {shape} {self.meta.get("dtype")}, not N > 0 maps '
                f'of [2, k, h, w] float16 / float32; {REPACK}'
            )
        if map_shape is not None and tuple(shape[1:]) != tuple(map_shape):
            raise LabelMapError(
                f'label-map store {root} holds maps of {tuple(shape)}, not (2, k, h, w) = '
                f'(2, {", ".join(map(str, map_shape))}) as map_shape says'
            )
        self._keys = self._maps = None

    def _open(self):
        count, shape = self.meta['count'], tuple(self.meta['map_shape'])
        keys = _memmap(osp.join(self.root, 'keys.npy'), (count,))
        if keys.dtype.kind != 'S':
            raise LabelMapError(
                f'label-map store {self.root} is inconsistent: keys.npy holds {keys.dtype}, not bytes; {REPACK}'
            )
        self._maps = _memmap(osp.join(self.root, 'maps.npy'), (count,) + shape, self.meta['dtype'])
        self._keys = keys

    def __len__(self) -> int:
        return self.meta['count']

    def get(self, key: str, img_path: Optional[str] = None) -> np.ndarray:
        """The map stored under ``key`` (:func:`~mmvitreg.datasets.label_maps.label_map_key` of the image
        ``img_path``), validated: ``(2, k, h, w)`` float16 or float32, a writable copy. A missing key raises
        ``LookupError``, a map that fails the value check ``LabelMapError``, each naming the store, key and image."""
        if self._maps is None:
            self._open()
        needle = key.encode()
        i = int(self._keys.searchsorted(needle))
        if i == len(self._keys) or self._keys[i] != needle:
            raise LookupError(
                f'the token label map of {img_path or key} ({key!r}) is not in the store '
                f'{self.root}, packed from {self.meta["source"]} with {len(self)} maps; generate '
                'the missing maps and pack the store again, or check img_prefix'
            )
        name = f'{self.root}{os.sep}maps.npy[{key!r}]' + (f' (of {img_path})' if img_path else '')
        return check_label_map(np.array(self._maps[i]), name, self.num_classes, fix=REPACK)

    def __getstate__(self):
        return dict(self.__dict__, _keys=None, _maps=None)


def _map_files(label_root: str):
    """``[(key, path)]`` of every map file under ``label_root`` (``.npy``, or ``.pt`` where no ``.npy`` of that
    name is), sorted by key."""
    found = {}
    for folder, _, files in os.walk(label_root):
        for name in files:
            stem, suffix = osp.splitext(name)
            if suffix in SUFFIXES:
                key = label_map_key(osp.join(folder, stem), label_root)
                if key not in found or suffix == SUFFIXES[0]:
                    found[key] = osp.join(folder, name)
    return sorted(found.items())


def pack_label_maps(label_root: str, store: str, num_classes=None, progress: bool = True, map_shape=None) -> dict:
    """Pack a folder of label maps (``.npy`` or ``.pt`` files) into a store, written to ``<store>.tmp<pid>`` and
    renamed into place (an interrupted run leaves no half store). Every map is read and validated
    (:func:`~mmvitreg.datasets.label_maps.load_label_map`); one whose shape or dtype differs from the first map's is
    an error naming its file.

    Args:
        label_root (str): Folder of maps (``tools/generate_label_maps.py`` or the official ones).
        store (str): The store folder to create; it must not exist.
        num_classes (int, optional): If given, class indices must be below it. Defaults to None.
        progress (bool): Show a progress bar. Defaults to True.
        map_shape (Sequence[int], optional): ``(k, h, w)``: if given, every map must have it (and each file's
            size is bounded by it). Defaults to None: the first map's shape.

    Returns:
        dict: The store's ``packed.json``.
    """
    if osp.exists(store):
        raise FileExistsError(f'{store} already exists; remove it to pack again')
    files = _map_files(label_root)
    if not files:
        raise FileNotFoundError(f'no .npy or .pt label maps under {label_root}')
    first = load_label_map(files[0][1], num_classes, map_shape)
    tmp = f'{store.rstrip(os.sep)}.tmp{os.getpid()}'
    os.makedirs(tmp)
    try:
        maps = np.lib.format.open_memmap(osp.join(tmp, 'maps.npy'), 'w+', first.dtype, (len(files),) + first.shape)
        max_class = 0
        for i, (_, path) in enumerate(track_iter_progress(files) if progress else files):
            label_map = first if i == 0 else load_label_map(path, num_classes, first.shape[1:])
            if label_map.dtype != first.dtype:
                raise LabelMapError(
                    f'token label map {path} is {label_map.dtype} but {files[0][1]} is {first.dtype}:'
                    ' a store holds maps of one shape and dtype'
                )
            maps[i] = label_map
            max_class = max(max_class, int(label_map[1].max()))
        maps.flush()
        del maps
        np.save(osp.join(tmp, 'keys.npy'), np.array([key.encode() for key, _ in files]), allow_pickle=False)
        meta = dict(
            format=FORMAT,
            version=VERSION,
            count=len(files),
            map_shape=list(first.shape),
            dtype=str(first.dtype),
            max_class=max_class,
            source=osp.abspath(label_root),
        )
        with open(osp.join(tmp, INDEX), 'w') as f:
            json.dump(meta, f, indent=1)
        os.replace(tmp, store)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return meta
