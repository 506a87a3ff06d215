"""Dense label maps for token labeling: the on-disk format, its reader and writer, and the geometry that ties a map
to an augmented image.

Paper: `Token Labeling <https://arxiv.org/abs/2104.10858>`_ (§3.2, §4.1 "Re-labeling"): a teacher annotates every
training image once, offline, with a dense score map; training gives each token the score of its own region.

Format
------
One map per image, an array ``(2, k, H, W)``: ``[0]`` the teacher's top-``k`` logits at every cell of its output
grid (row ``i`` from the top), ``[1]`` their class indices (integers stored as floats), sorted by decreasing logit;
float16 (the official maps: ``k = 5``, ``18 x 18``), or float32 where a class index passes 2048, which float16
does not hold exactly. It covers the whole image (``region='full'``, the generator's default) or its central
square (``'center_square'``, the official maps; configs/lvvit/README.md).

* ``.npy`` (``tools/generate_label_maps.py``): numpy's header reader, its declared size checked against the file's
  before ``np.frombuffer`` takes the data; no pickle, no new dependency, and the packed store
  (:mod:`mmvitreg.datasets.label_map_store`) memory-maps the same format.
* ``.pt`` (the official maps): ``torch.load(weights_only=True)``, no global added, once ``zipfile`` found no
  compressed member (torch would inflate a zip bomb; ``torch.save`` never compresses).
* Path: ``<label_root>/<image path relative to the image prefix, suffix .npy or .pt>`` (:func:`label_map_key`;
  without a prefix, the official ``<class_dir>/<image>``).

Every file is untrusted (:func:`load_label_map`): a regular file (:func:`~mmvitreg.fileio.open_regular_file`) of a
size the expected shape bounds, whose values pass :func:`check_label_map`, the one value check of every reader;
each refusal is one :class:`LabelMapError` line naming the file.

Geometry
--------
The map is never resampled during augmentation: :class:`TokenLabelMap` keeps it with one 3x3 matrix from the
augmented image's pixel coordinates to the original's, onto which every geometric transform composes its own
(:mod:`mmvitreg.datasets.label_map_geometry`); the batch reads the map once under every token
(:func:`~mmvitreg.datasets.token_label_target.token_label_targets`). Coordinates are continuous: pixel ``(i, j)``
covers ``[j, j+1) x [i, i+1)`` (cv2's resize convention); cv2's warp matrices are converted by
:func:`warp_to_affine`.
"""

import io
import math
import os
import os.path as osp
import zipfile
from typing import Optional, Tuple

import numpy as np
import torch
from torch import Tensor

from mmvitreg.fileio import atomic_write, first_line, open_regular_file

REGIONS = ('full', 'center_square')
SUFFIXES = ('.npy', '.pt')  # the generator's format first, then the official one
_DTYPES = (np.dtype(np.float16), np.dtype(np.float32))
#: bytes a map file may hold when its shape is not given: a float32 top-10 map of 200 x 200 cells is 3.2 MB
MAX_BYTES = 16 << 20
#: what a file holds beyond its values: torch.save's zip records (~1.5 KB) or an .npy header (128 B), with room
_OVERHEAD = 64 << 10


def label_map_key(img_path: str, img_prefix: Optional[str] = None) -> str:
    """The name of an image's map, ``'/'``-separated (``'n01440764/n01440764_10026'``): ``img_path`` relative to
    the data set's ``img_prefix``, without suffix; without a prefix, the official ``<class_dir>/<image>`` rule."""
    if img_prefix is None:
        rel = '/'.join(os.path.normpath(img_path).split(os.sep)[-2:])
    elif img_path.startswith(img_prefix.rstrip(os.sep) + os.sep):  # the usual case, without relpath's cost
        rel = img_path[len(img_prefix.rstrip(os.sep)) + 1 :]
    else:
        rel = osp.relpath(img_path, img_prefix)
        if rel.startswith('..'):
            raise ValueError(f'image {img_path} is not under the image prefix {img_prefix}')
    return osp.splitext(rel)[0].replace(os.sep, '/')


def label_map_path(label_root: str, img_path: str, img_prefix: Optional[str] = None, suffix: str = '.npy') -> str:
    """Where the map of ``img_path`` is written: ``<label_root>/<label_map_key(img_path, img_prefix)><suffix>``,
    ``suffix`` ``'.npy'`` (the generator's format) or ``'.pt'`` (the official one)."""
    return osp.join(label_root, label_map_key(img_path, img_prefix) + suffix)


class LabelMapError(ValueError):
    """A token label map that cannot be used; the message (one line) names the file and what is wrong."""


REGENERATE = 'regenerate it with tools/generate_label_maps.py'
FIND = 'generate the maps with tools/generate_label_maps.py or check label_root and map_shape'


def _malformed(path: str, problem: str, fix: str = REGENERATE) -> LabelMapError:
    return LabelMapError(f'malformed token label map {path}: {problem}; {fix}')


def check_label_map(label_map, path: str, num_classes=None, map_shape=None, fix: str = REGENERATE) -> np.ndarray:
    """The one value check of every reader (``.npy``, ``.pt``, the packed store): ``label_map`` (a tensor or an
    array) as a ``(2, k, H, W)`` float16 / float32 array of finite logits and class indices that are integers in
    ``[0, num_classes)`` (if given), of shape ``(2, *map_shape)`` (if given); refusals name ``path`` and ``fix``."""

    def refuse(problem):
        return _malformed(path, problem, fix)

    expect = 'a (2, k, H, W) float16/float32 array of top-k teacher logits and class indices'
    if isinstance(label_map, Tensor):
        if label_map.layout != torch.strided or label_map.dtype not in (torch.float16, torch.float32):
            raise refuse(f'expected {expect}, got a {label_map.layout} {label_map.dtype} tensor')
        label_map = label_map.detach().numpy()
    if not isinstance(label_map, np.ndarray):
        raise refuse(f'expected {expect}, got a {type(label_map).__name__}')
    if label_map.dtype not in _DTYPES:
        raise refuse(f'expected {expect}, got dtype {label_map.dtype}')
    if label_map.ndim != 4 or label_map.shape[0] != 2 or label_map.size == 0:
        raise refuse(f'expected {expect}, got shape {tuple(label_map.shape)}')
    if map_shape is not None and label_map.shape[1:] != tuple(map_shape):
        raise refuse(f'its shape {tuple(label_map.shape)} is not (2, k, H, W) = (2, {", ".join(map(str, map_shape))})')
    # few numpy calls, on float64 (numpy's float16 arithmetic is slow): a sum is finite iff every value is
    values = label_map.astype(np.float64)
    if not math.isfinite(values.sum()):
        raise refuse('it holds NaN or infinite values')
    index = values[1]
    if np.count_nonzero(np.trunc(index) != index):
        raise refuse('[1] holds class indices that are not integers')
    low, high = int(index.min()), int(index.max())
    if low < 0 or (num_classes is not None and high >= num_classes):
        raise refuse(f'its class indices {low}..{high} are out of range for num_classes={num_classes}')
    return label_map


def read_npy_header(f, path: str, size: int) -> Tuple[tuple, np.dtype, bool]:
    """``(shape, dtype, fortran_order)`` of the ``.npy`` file ``f`` (positioned at its start, left at its data),
    parsed by numpy's own header reader, once the data it declares is exactly the rest of the file's ``size``
    bytes, so that nothing larger than the file is ever allocated or mapped. Object and structured dtypes (pickles,
    offsets) are refused; the caller checks the dtype it needs."""
    try:
        version = np.lib.format.read_magic(f)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
        if version not in read_header:  # 3.0 only differs for the names of structured dtypes, refused below
            raise ValueError(f'format version {version} is not 1.0 or 2.0')
        shape, fortran, dtype = read_header[version](f)
    except Exception as e:
        raise _malformed(path, f'numpy cannot read its .npy header ({first_line(e)})') from None
    if dtype.hasobject or dtype.fields is not None or dtype.subdtype is not None:
        raise _malformed(path, f'its dtype {dtype} is not a plain number or bytes dtype')
    if size != f.tell() + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise _malformed(path, f'its header declares {shape} {dtype}, its data is {size - f.tell()} bytes')
    return shape, dtype, fortran


def _refuse_compressed(buffer: io.BytesIO, path: str) -> None:
    """Refuse a zip archive (torch.save's format) with a compressed member before torch.load inflates it (a 1 MB zip
    bomb makes a 1 GiB storage): torch.save never compresses. ``zipfile`` reads the central directory only."""
    if zipfile.is_zipfile(buffer):
        try:
            with zipfile.ZipFile(buffer) as archive:
                packed = next((m.filename for m in archive.infolist() if m.compress_type != zipfile.ZIP_STORED), None)
        except Exception as e:
            raise _malformed(path, f'its zip directory is unreadable ({first_line(e)})') from None
        if packed is not None:
            raise _malformed(path, f'its member {packed} is compressed, which torch.save never does')
    buffer.seek(0)


def load_label_map(path: str, num_classes: Optional[int] = None, map_shape=None) -> np.ndarray:
    """Read one map file (``.npy``, or an official ``.pt``) and validate it.

    The file must be regular and its size within the bounds of ``map_shape`` before it is read
    (:func:`~mmvitreg.fileio.open_regular_file`); a ``.npy`` file is read by numpy without pickle
    (:func:`read_npy_header`, then ``np.frombuffer``), anything else by ``torch.load(weights_only=True)``; the
    result passes :func:`check_label_map`.

    Args:
        path (str): The ``.npy`` or ``.pt`` file.
        num_classes (int, optional): If given, class indices must be below it.
        map_shape (Sequence[int], optional): ``(k, H, W)``, the maps' top-k and grid: bounds the file's size
            and must be the map's shape. Defaults to None (any shape, files up to :data:`MAX_BYTES`).

    Returns:
        np.ndarray: ``(2, k, H, W)`` float16 or float32, as stored, writable.

    Raises:
        FileNotFoundError | LabelMapError: no such file | not a valid map (one line naming it, also from a worker).
    """
    values = 2 * int(np.prod(map_shape or ()))  # a (2, *map_shape) map: float16 values at least, float32 at most
    bounds = (1, MAX_BYTES) if map_shape is None else (2 * values, 4 * values + _OVERHEAD)
    with open_regular_file(path, f'token label map {path}', bounds, LabelMapError, FIND, FileNotFoundError) as f:
        data = bytearray(os.fstat(f.fileno()).st_size)  # writable: the map is a view of it
        del data[f.readinto(data) :]
    buffer = io.BytesIO(data)
    if path.endswith('.npy'):
        shape, dtype, fortran = read_npy_header(buffer, path, len(data))
        if dtype.itemsize == 0:  # numpy cannot view bytes as a zero-size dtype
            raise _malformed(path, f'its dtype {dtype} holds no bytes')
        label_map = np.frombuffer(data, dtype, offset=buffer.tell()).reshape(shape, order='F' if fortran else 'C')
    else:
        _refuse_compressed(buffer, path)
        try:
            label_map = torch.load(buffer, map_location='cpu', weights_only=True)
        except Exception as e:
            raise _malformed(path, f'torch.load(weights_only=True) refused it ({first_line(e)})') from None
    return check_label_map(label_map, path, num_classes, map_shape)


def save_label_map(path: str, logits: Tensor, indices: Tensor) -> None:
    """Write one map atomically (:func:`mmvitreg.fileio.atomic_write`): ``np.save`` for a ``.npy`` path (the
    generator's format), ``torch.save`` for a ``.pt`` path (the official format).

    Args:
        path (str): Destination ``.npy`` or ``.pt`` file; parent folders are created.
        logits (Tensor): ``(k, H, W)`` top-k teacher logits, sorted by decreasing value.
        indices (Tensor): ``(k, H, W)`` their class indices.
    """
    if logits.shape != indices.shape or logits.dim() != 3:
        raise ValueError(f'logits and indices must both be (k, H, W), got {logits.shape} and {indices.shape}')
    if not path.endswith(SUFFIXES):
        raise ValueError(f'a label map is a .npy or .pt file, not {path}')
    dtype = torch.float16 if int(indices.max()) <= 2048 else torch.float32  # float16 integers are exact up to 2048
    label_map = torch.stack([logits.detach().to('cpu', dtype), indices.detach().to('cpu', dtype)]).contiguous()
    if path.endswith('.npy'):
        atomic_write(path, lambda f: np.save(f, label_map.numpy(), allow_pickle=False))
    else:
        atomic_write(path, lambda f: torch.save(label_map, f))


def warp_to_affine(warp: np.ndarray) -> np.ndarray:
    """The ``(3, 3)`` output-to-input matrix of continuous pixel coordinates of a ``(2, 3)`` ``cv2.warpAffine``
    matrix (no ``WARP_INVERSE_MAP``: input pixel indices to output pixel indices).

    With ``warp = [L | t]`` (index coordinates, pixel centres at integers), continuous coordinates (pixel centres at
    ``+0.5``) map forward by ``x' = L x + t'`` with ``t' = t + (I - L) (0.5, 0.5)``; the result is its inverse
    ``[L^-1 | -L^-1 t']``, written out.
    """
    (a, b, c), (d, e, f) = np.asarray(warp, np.float64).tolist()
    tx, ty = c + 0.5 - 0.5 * (a + b), f + 0.5 - 0.5 * (d + e)
    det = a * e - b * d
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    return np.array([[ia, ib, -(ia * tx + ib * ty)], [id_, ie, -(id_ * tx + ie * ty)], [0.0, 0.0, 1.0]])


class TokenLabelMap:
    """A dense label map travelling through an augmentation pipeline with its geometry.

    Args:
        label_map (np.ndarray): ``(2, k, h, w)`` top-k logits and class indices, as stored.
        ori_shape (tuple[int, int]): ``(H0, W0)`` of the original image.
        region (str): The part of the original image the map covers, one of :data:`REGIONS` (checked by
            ``LoadTokenLabelMap``).

    Attributes:
        affine (np.ndarray): ``(3, 3)`` from the current image's continuous pixel coordinates ``(x, y, 1)`` to the
            original image's.
        img_shape (tuple[int, int]): ``(H, W)`` of the image ``affine`` starts from.
    """

    def __init__(self, label_map: np.ndarray, ori_shape: Tuple[int, int], region: str = 'full'):
        self.label_map = label_map
        self.ori_shape = tuple(ori_shape)
        self.region = region
        self.affine = np.eye(3)
        self.img_shape = tuple(ori_shape)

    def check_shape(self, img_shape: Tuple[int, int]) -> None:
        """Fail if a transform that does not track the map moved the image."""
        if tuple(img_shape) != self.img_shape:
            raise RuntimeError(
                f'the image is {tuple(img_shape)} but the label-map geometry was last updated for '
                f'{self.img_shape}: a transform moved the image without the map; use '
                'mmvitreg.RandomResizedCropWithLabelMap / RandomFlipWithLabelMap / RandAugmentWithLabelMap '
                'for geometric augmentation'
            )

    def compose(self, matrix: np.ndarray, src_shape: Tuple[int, int], dst_shape: Tuple[int, int]) -> None:
        """Record a geometric transform of the image from ``src_shape`` to ``dst_shape`` (``(H, W)``): ``matrix``
        ``(3, 3)`` maps the new image's continuous pixel coordinates to those of the image before it."""
        self.check_shape(src_shape)
        self.affine = self.affine @ matrix
        self.img_shape = tuple(dst_shape)

    def image_on_map(self) -> Tuple[float, float, float, float]:
        """``(x0, y0, x1, y1)``: the original image in continuous map coordinates (the whole map
        for ``region='full'``, wider than the map for ``'center_square'``)."""
        h0, w0 = self.ori_shape
        h, w = self.label_map.shape[-2:]
        if self.region == 'full':
            return 0.0, 0.0, float(w), float(h)
        side = min(h0, w0)
        x0, y0 = (side - w0) / 2 * w / side, (side - h0) / 2 * h / side
        return x0, y0, x0 + w0 * w / side, y0 + h0 * h / side

    def map_matrix(self) -> np.ndarray:
        """``(3, 3)`` from the current image's continuous pixel coordinates to continuous map
        coordinates ``(column, row)`` (map cell ``(i, j)`` covers ``[j, j+1) x [i, i+1)``)."""
        x0, y0, x1, y1 = self.image_on_map()
        h0, w0 = self.ori_shape
        return np.array([[(x1 - x0) / w0, 0.0, x0], [0.0, (y1 - y0) / h0, y0], [0.0, 0.0, 1.0]]) @ self.affine
