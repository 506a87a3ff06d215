"""Dense label maps for token labeling: the on-disk format, its reader and writer, and the geometry
that ties a map to an augmented image.

Paper: `Token Labeling: Training an 85.4% Top-1 Accuracy Vision Transformer with 56M Parameters on
ImageNet <https://arxiv.org/abs/2104.10858>`_ (§3.2 and §4.1 "Re-labeling"): a teacher annotates
every training image once, offline, with a dense ``K``-class score map; training reads the part of
the map under the random crop and gives each token the score of its own region.

On-disk format (the format of the official NFNet-F6 maps, read unchanged)
-------------------------------------------------------------------------
* One ``.pt`` file per image, written with ``torch.save``, holding one tensor of shape
  ``(2, k, H, W)``: ``[0]`` the teacher's top-``k`` **logits** at every map cell, ``[1]`` their
  **class indices** (integers stored as floats), sorted by decreasing logit. ``H x W`` is the
  teacher's output grid, row ``i`` from the top, column ``j`` from the left of the image.
* dtype float16 (the official maps: ``k = 5``, ``18 x 18`` for NFNet-F6 at 576 px). float16 holds
  integers exactly up to 2048, so :func:`save_label_map` falls back to float32 for data sets with
  more than 2048 classes; the reader accepts both.
* Path: the image path relative to the data prefix, with the image suffix replaced by ``.pt``,
  under ``label_root``: ``train/n01440764/n01440764_10026.JPEG`` with data prefix ``train`` has its
  map at ``<label_root>/n01440764/n01440764_10026.pt``. The official generator writes
  ``<label_root>/<class_dir>/<image_basename>.pt``; both agree on the ImageNet layout, and
  :func:`label_map_path` without a prefix uses that ``<class_dir>/<image>`` rule.
* Packed: a folder of maps can be packed once into a memory-mapped store
  (:mod:`mmvitreg.datasets.label_map_store`, ``tools/dataset_converters/pack_label_maps.py``) that
  holds the same arrays under the same names (:func:`label_map_key`) and loads 3-4x faster inside a training pipeline.
* Region: the map covers the whole image (``region='full'``, ``tools/generate_label_maps.py``'s
  default) or its central square (``region='center_square'``, the official maps; configs/lvvit/README.md).

Geometry
--------
The map is never resampled during augmentation. :class:`TokenLabelMap` keeps it untouched together
with one 3x3 affine matrix from the current (augmented) image's pixel coordinates to the original
image's pixel coordinates; every geometric transform composes its own output-to-input matrix onto
it; :class:`~mmvitreg.datasets.token_label_target.TokenLabelTarget` packs the map with the matrix and
the batch reads it once under every token
(:func:`~mmvitreg.datasets.token_label_target.token_label_targets`). Coordinates are continuous:
pixel ``(row i, col j)`` covers ``[j, j+1) x [i, i+1)``, so its centre is ``(j + 0.5, i + 0.5)``;
cv2's resize uses the same convention, and cv2's warp matrices (index coordinates, pixel centre
``(j, i)``) are converted by :func:`warp_to_affine`.
"""
import collections
import io
import math
import os
import os.path as osp
import pickle
import zipfile
from typing import Optional, Tuple

import numpy as np
import torch
from mmengine.fileio import get as read_bytes
from torch import Tensor

from mmvitreg.fileio import atomic_write, load_checkpoint

REGIONS = ('full', 'center_square')
_FP16_MAX_EXACT_INT = 2048


def label_map_key(img_path: str, img_prefix: Optional[str] = None) -> str:
    """The name of an image's map: its path relative to the image prefix, without suffix.

    Args:
        img_path (str): Path of the image (as in the data set's ``img_path``).
        img_prefix (str, optional): The data set's image prefix; the key is the image path relative
            to it. None: the official ``<class_dir>/<image>`` rule (the last two path components).
            Defaults to None.

    Returns:
        str: ``'/'``-separated, e.g. ``'n01440764/n01440764_10026'``.
    """
    if img_prefix is None:
        rel = '/'.join(os.path.normpath(img_path).split(os.sep)[-2:])
    elif img_path.startswith(img_prefix.rstrip(os.sep) + os.sep):  # the usual case, without relpath's cost
        rel = img_path[len(img_prefix.rstrip(os.sep)) + 1:]
    else:
        rel = osp.relpath(img_path, img_prefix)
        if rel.startswith('..'):
            raise ValueError(f'image {img_path} is not under the image prefix {img_prefix}')
    return osp.splitext(rel)[0].replace(os.sep, '/')


def label_map_path(label_root: str, img_path: str, img_prefix: Optional[str] = None) -> str:
    """Where the map of ``img_path`` lives: ``<label_root>/<label_map_key(img_path, img_prefix)>.pt``.

    Args:
        label_root (str): Root folder of the label maps.
        img_path (str): Path of the image (as in the data set's ``img_path``).
        img_prefix (str, optional): See :func:`label_map_key`. Defaults to None.
    """
    return osp.join(label_root, label_map_key(img_path, img_prefix) + '.pt')


class LabelMapError(ValueError):
    """A token label map that cannot be used; the message (one line) names the file and what is wrong."""


def check_label_map(label_map, path: str, num_classes: Optional[int] = None) -> np.ndarray:
    """Validate a loaded map; every error names the file.

    Args:
        label_map: What the ``.pt`` file held (a tensor or, from the fast reader, an array).
        path (str): The file, for the messages.
        num_classes (int, optional): If given, class indices must be below it.

    Returns:
        np.ndarray: the map, ``(2, k, H, W)`` float16 or float32.
    """
    expect = 'a (2, k, H, W) float16/float32 tensor of top-k teacher logits and class indices'
    if isinstance(label_map, Tensor):
        if label_map.dtype not in (torch.float16, torch.float32):
            raise LabelMapError(f'malformed token label map {path}: expected {expect}, '
                             f'got dtype {label_map.dtype}')
        label_map = label_map.numpy()
    if not isinstance(label_map, np.ndarray):
        raise LabelMapError(f'malformed token label map {path}: expected {expect}, '
                         f'got a {type(label_map).__name__}')
    if label_map.ndim != 4 or label_map.shape[0] != 2 or label_map.size == 0:
        raise LabelMapError(f'malformed token label map {path}: expected {expect}, '
                         f'got shape {tuple(label_map.shape)}')
    if label_map.dtype not in (np.float16, np.float32):
        raise LabelMapError(f'malformed token label map {path}: expected {expect}, got dtype {label_map.dtype}')
    # few numpy calls (numpy's float16 arithmetic is slow): a sum is finite iff every value is
    if not np.isfinite(label_map.sum(dtype=np.float64)):
        raise LabelMapError(f'malformed token label map {path}: it holds NaN or infinite values')
    index = label_map[1]
    classes = index.astype(np.int64)
    if classes.min() < 0 or (classes != index).any():
        raise LabelMapError(f'malformed token label map {path}: [1] must hold class indices '
                         '(non-negative integers)')
    if num_classes is not None and classes.max() >= num_classes:
        raise LabelMapError(f'malformed token label map {path}: class index {int(classes.max())} '
                         f'is out of range for num_classes={num_classes}')
    return label_map


_STORAGE_DTYPES = {'HalfStorage': np.dtype(np.float16), 'FloatStorage': np.dtype(np.float32)}


class _TensorUnpickler(pickle.Unpickler):
    """The ``data.pkl`` of a ``torch.save`` archive, unpickled with the standard library's restricted
    ``find_class`` (Python docs, "Restricting Globals"): float16/float32 tensors come back as numpy arrays
    over the archive's ``data/<key>`` entries.

    Only the globals a label map needs are allowed (fewer than ``torch.load(weights_only=True)``); anything
    else raises ``pickle.UnpicklingError`` before it runs, and :func:`_read_tensor` hands the file to
    :func:`mmvitreg.fileio.load_checkpoint`. The file's numbers are untrusted: a storage's member must hold
    exactly the bytes its persistent id declares, and a tensor's size, stride and offset must end exactly at its
    storage's end (:meth:`rebuild`), both checked before the member is read, so no view reaches past what was read
    and nothing is read beyond what the tensor needs (:class:`LabelMapError` otherwise).
    """

    def __init__(self, archive: zipfile.ZipFile, prefix: str, path: str):
        super().__init__(io.BytesIO(archive.read(prefix + 'data.pkl')))
        self.archive, self.prefix, self.path, self.storages = archive, prefix, path, {}

    def find_class(self, module, name):
        if (module, name) == ('torch._utils', '_rebuild_tensor_v2'):
            return self.rebuild
        if (module, name) == ('collections', 'OrderedDict'):
            return collections.OrderedDict
        if module == 'torch' and name in _STORAGE_DTYPES:
            return name
        raise pickle.UnpicklingError(f'{module}.{name} is not part of a label map')

    def persistent_load(self, pid):
        if len(pid) != 5 or pid[0] != 'storage' or pid[1] not in _STORAGE_DTYPES:
            raise pickle.UnpicklingError(f'unexpected storage {pid}')
        member, numel = self.archive.getinfo(f'{self.prefix}data/{pid[2]}'), pid[4]
        if member.file_size != numel * _STORAGE_DTYPES[pid[1]].itemsize:
            raise LabelMapError(f'malformed token label map {self.path}: its storage {pid[2]} declares {numel} '
                                f'values, its member holds {member.file_size} bytes')
        return member, _STORAGE_DTYPES[pid[1]], numel

    def rebuild(self, storage, offset, size, stride, *_):
        """``torch._utils._rebuild_tensor_v2`` on a numpy storage: the (strided) view of it that the tensor is, once
        its geometry is inside the storage, ends at its end and has no more elements than it (no expanded or
        overlapping view: the element count stays bounded by the file); each member is read once."""
        (member, dtype, numel), size, stride = storage, tuple(size), tuple(stride)
        if (len(size) != len(stride) or not all(type(n) is int and n >= 0 for n in (offset, *size, *stride))
                or not 0 < math.prod(size) <= numel - offset):
            raise LabelMapError(f'malformed token label map {self.path}: size {size}, stride {stride} and offset '
                                f'{offset} do not make a tensor of distinct values of its {numel}-value storage')
        end = offset + sum((n - 1) * s for n, s in zip(size, stride)) + 1
        if end != numel:
            raise LabelMapError(f'malformed token label map {self.path}: its tensor (size {size}, stride {stride}, '
                                f'offset {offset}) ends at value {end} of its {numel}-value storage')
        if member.filename not in self.storages:  # writable: the maps become tensors
            self.storages[member.filename] = np.frombuffer(bytearray(self.archive.read(member)), dtype)
        values = self.storages[member.filename][offset:]
        if stride == tuple(math.prod(size[i + 1:]) for i in range(len(size))):  # a plain view, cheaper
            return values.reshape(size)
        return np.lib.stride_tricks.as_strided(values, size, tuple(s * dtype.itemsize for s in stride))


def _read_tensor(data: bytes, path: str):
    """The content of a ``torch.save`` file: a float tensor read with ``zipfile`` and :class:`_TensorUnpickler`
    as a numpy array; anything else (another object, a big-endian archive, torch's pre-1.6 format) through
    :func:`mmvitreg.fileio.load_checkpoint` (``weights_only=True`` and its allow-list, as for checkpoints). An
    archive with a compressed member (``torch.save`` never compresses) is refused before anything is read: a
    stored member cannot hold more than the file, so neither reader decompresses a bomb."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile:  # torch's pre-1.6 format: the storages lie in the file as they are
        return load_checkpoint(io.BytesIO(data), map_location='cpu', name=path)
    with archive:
        packed = [m.filename for m in archive.infolist() if m.compress_type != zipfile.ZIP_STORED]
        if packed:
            raise LabelMapError(f'malformed token label map {path}: its member {packed[0]} is compressed, which '
                                'torch.save never does; regenerate it with tools/generate_label_maps.py')
        try:
            prefix = next(n for n in archive.namelist() if n.endswith('/data.pkl'))[:-len('data.pkl')]
            if prefix + 'byteorder' in archive.NameToInfo and archive.read(prefix + 'byteorder') != b'little':
                raise ValueError('big-endian archive')
            return _TensorUnpickler(archive, prefix, path).load()
        except LabelMapError:
            raise
        except Exception:  # not one float tensor: let torch decide
            return load_checkpoint(io.BytesIO(data), map_location='cpu', name=path)


def load_label_map(path: str, num_classes: Optional[int] = None,
                   backend_args: Optional[dict] = None) -> np.ndarray:
    """Read one map file (ours or an official one) and validate it.

    A ``torch.save`` file holding one float tensor is read with ``zipfile`` and a restricted
    ``pickle.Unpickler`` (faster than ``torch.load``: ``tests/test_label_map_bounds.py`` measures it, and no global
    outside the tensor's own runs), every size, stride, offset and member length checked before it is read;
    anything else goes through :func:`mmvitreg.fileio.load_checkpoint` (``weights_only=True`` and its allow-list).

    Args:
        path (str): The ``.pt`` file.
        num_classes (int, optional): If given, class indices must be below it.
        backend_args (dict, optional): mmengine file backend arguments. Defaults to None.

    Returns:
        np.ndarray: ``(2, k, H, W)`` float16 or float32, as stored.

    Raises:
        LabelMapError: the file is not a valid map (one line naming it, also from a DataLoader worker).
    """
    try:
        data = read_bytes(path, backend_args=backend_args)
    except FileNotFoundError:
        raise FileNotFoundError(f'token label map {path} does not exist; generate the maps with '
                                'tools/generate_label_maps.py or check label_root') from None
    try:
        label_map = _read_tensor(data, path)
    except LabelMapError:
        raise
    except Exception as e:
        raise LabelMapError(f'malformed token label map {path}: torch.load failed ({type(e).__name__}: '
                            f'{(str(e).strip().splitlines() or [""])[0]})') from e
    return check_label_map(label_map, path, num_classes)


def save_label_map(path: str, logits: Tensor, indices: Tensor) -> None:
    """Write one map atomically (:func:`mmvitreg.fileio.atomic_write`), in the official format.

    Args:
        path (str): Destination ``.pt`` file; parent folders are created.
        logits (Tensor): ``(k, H, W)`` top-k teacher logits, sorted by decreasing value.
        indices (Tensor): ``(k, H, W)`` their class indices.
    """
    if logits.shape != indices.shape or logits.dim() != 3:
        raise ValueError(f'logits and indices must both be (k, H, W), got {tuple(logits.shape)} '
                         f'and {tuple(indices.shape)}')
    dtype = torch.float16 if int(indices.max()) <= _FP16_MAX_EXACT_INT else torch.float32
    label_map = torch.stack([logits.detach().to('cpu', dtype), indices.detach().to('cpu', dtype)])
    atomic_write(path, lambda f: torch.save(label_map.contiguous(), f))


def translation_matrix(tx: float, ty: float) -> np.ndarray:
    """``(3, 3)`` homogeneous translation by ``(tx, ty)``."""
    return np.array([[1., 0., tx], [0., 1., ty], [0., 0., 1.]])


def warp_to_affine(warp: np.ndarray) -> np.ndarray:
    """Turn a cv2 ``warpAffine`` matrix into the output-to-input matrix of continuous coordinates.

    With ``warp = [L | t]`` (index coordinates, pixel centres at integers), continuous coordinates
    (pixel centres at ``+0.5``) map forward by ``x' = L x + t'`` with ``t' = t + (I - L) (0.5, 0.5)``;
    the result is its inverse ``[L^-1 | -L^-1 t']``, written out (a general 3x3 inverse costs
    several times more, once per spatial op and image).

    Args:
        warp (np.ndarray): ``(2, 3)`` matrix as passed to ``cv2.warpAffine`` (no
            ``WARP_INVERSE_MAP``): it maps input pixel indices to output pixel indices.

    Returns:
        np.ndarray: ``(3, 3)`` matrix from output to input continuous pixel coordinates.
    """
    (a, b, c), (d, e, f) = np.asarray(warp, np.float64).tolist()
    tx, ty = c + .5 - .5 * (a + b), f + .5 - .5 * (d + e)
    det = a * e - b * d
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    return np.array([[ia, ib, -(ia * tx + ib * ty)], [id_, ie, -(id_ * tx + ie * ty)], [0., 0., 1.]])


class TokenLabelMap:
    """A dense label map travelling through an augmentation pipeline with its geometry.

    Args:
        label_map (np.ndarray): ``(2, k, h, w)`` top-k logits and class indices, as stored.
        ori_shape (tuple[int, int]): ``(H0, W0)`` of the original image.
        region (str): The part of the original image the map covers, one of ``'full'`` and
            ``'center_square'`` (see the module docstring).

    Attributes:
        affine (np.ndarray): ``(3, 3)`` from the current image's continuous pixel coordinates
            ``(x, y, 1)`` to the original image's.
        img_shape (tuple[int, int]): ``(H, W)`` of the image ``affine`` starts from.
    """

    def __init__(self, label_map: np.ndarray, ori_shape: Tuple[int, int], region: str = 'full'):
        if region not in REGIONS:
            raise ValueError(f'region must be one of {REGIONS}, got {region!r}')
        self.label_map = label_map
        self.ori_shape = tuple(ori_shape)
        self.region = region
        self.affine = np.eye(3)
        self.img_shape = tuple(ori_shape)

    def check_shape(self, img_shape: Tuple[int, int]) -> None:
        """Fail if the image is no longer the one the geometry describes (a transform that does not
        track the map moved it)."""
        if tuple(img_shape) != self.img_shape:
            raise RuntimeError(
                f'the image is {tuple(img_shape)} but the label-map geometry was last updated for '
                f'{self.img_shape}: a transform moved the image without the map; use '
                'mmvitreg.RandomResizedCropWithLabelMap / RandomFlipWithLabelMap / RandAugmentWithLabelMap '
                'for geometric augmentation')

    def compose(self, matrix: np.ndarray, src_shape: Tuple[int, int], dst_shape: Tuple[int, int]) -> None:
        """Record a geometric transform of the image.

        Args:
            matrix (np.ndarray): ``(3, 3)`` from the new image's continuous pixel coordinates to
                those of the image before the transform.
            src_shape (tuple[int, int]): ``(H, W)`` of the image before the transform.
            dst_shape (tuple[int, int]): ``(H, W)`` of the new image.
        """
        self.check_shape(src_shape)
        self.affine = self.affine @ matrix
        self.img_shape = tuple(dst_shape)

    def image_on_map(self) -> Tuple[float, float, float, float]:
        """``(x0, y0, x1, y1)``: the original image in continuous map coordinates (the whole map
        for ``region='full'``, wider than the map for ``'center_square'``)."""
        h0, w0 = self.ori_shape
        h, w = self.label_map.shape[-2:]
        if self.region == 'full':
            return 0., 0., float(w), float(h)
        side = min(h0, w0)
        x0, y0 = (side - w0) / 2 * w / side, (side - h0) / 2 * h / side
        return x0, y0, x0 + w0 * w / side, y0 + h0 * h / side

    def map_matrix(self) -> np.ndarray:
        """``(3, 3)`` from the current image's continuous pixel coordinates to continuous map
        coordinates ``(column, row)`` (map cell ``(i, j)`` covers ``[j, j+1) x [i, i+1)``)."""
        x0, y0, x1, y1 = self.image_on_map()
        h0, w0 = self.ori_shape
        return translation_matrix(x0, y0) @ np.diag([(x1 - x0) / w0, (y1 - y0) / h0, 1.]) @ self.affine
