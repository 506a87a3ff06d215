"""Build the bundled handwritten-digits data sets in the ImageNet, ADE20K, Cityscapes and COCO layouts.

    python tools/dataset_converters/digits.py {imagenet,ade20k,cityscapes,coco,all} [--out data/]
        [--seed 0] [--num-train N] [--num-val M] [--size S | --size H W] [--force]

Each set goes to ``<out>/digits_<layout>`` (the ``data_root`` of ``configs/_base_/datasets/digits_*.py``).
A set already complete with the same parameters is skipped; ``--force`` rebuilds it. The sets are
made from scikit-learn's bundled digit scans; the tests import the builders from here.

Everything is built from the 1797 handwritten digit scans bundled with scikit-learn
(:func:`sklearn.datasets.load_digits`: 8x8 scans with 17 grey levels, classes 0..9; UCI "Optical
Recognition of Handwritten Digits"), so no download is needed. The sets are written in the real
layouts and are read by the real dataset classes of the three libraries:

* :func:`build_imagenet`: ``train/<class>/<name>.JPEG``, ``val/<class>/<name>.JPEG`` and
  ``meta/{train,val}.txt`` ("path label" lines); mmpretrain's ``CustomDataset`` reads it in folder
  mode and in ann-file mode.
* :func:`build_ade20k`: ``images/{training,validation}/*.jpg`` and
  ``annotations/{training,validation}/*.png`` with ids 1..11 and 0 = "other"; mmseg's
  ``ADE20KDataset`` (``reduce_zero_label=True``).
* :func:`build_cityscapes`: ``leftImg8bit/{train,val}/<city>/*_leftImg8bit.png`` and
  ``gtFine/{train,val}/<city>/*_gtFine_labelTrainIds.png`` with trainIds 0..10 and 255 = ignore;
  mmseg's ``CityscapesDataset``.
* :func:`build_coco`: ``{train,val}2017/*.jpg`` and ``annotations/instances_{train,val}2017.json``;
  mmdet's ``CocoDataset`` and ``CocoMetric(metric=['bbox', 'segm'])``.

mmseg 1.2.2's ``ADE20KDataset`` and ``CityscapesDataset`` accept no class names outside their own
(``BaseSegDataset.get_label_map`` raises), so the base configs
``configs/_base_/datasets/digits_{ade20k,cityscapes}.py`` read these two sets through
``BaseSegDataset`` with the same file suffixes and ``reduce_zero_label``, and the digits class names.

Splits are disjoint at the level of the scans: one seeded permutation of the 1797 scans gives the
validation scans (the first ``num_val``, 297 by default) and the training scans (the rest); the
canvases of the segmentation and detection sets draw their digits from the pool of their split.
With one seed and the default ``num_val``, every set uses the same 297 validation scans.

The segmentation and detection canvases compose several digits on a textured background (ruled
coloured paper): each digit is a scan upscaled (bicubic) to a random square size, placed at a random
position (boxes kept apart), and painted in a random dark ink with the upscaled scan as its opacity
``alpha``. A digit's pixels are those with ``alpha >= 0.5``. In the segmentation sets a band of
``band_width`` pixels just outside each digit is unlabeled (ADE20K's "other" id 0, Cityscapes' 255),
so ignore handling is exercised.
The COCO instance masks are polygons (the COCO convention for ``iscrowd=0``): the outer contours of
the digit's pixels, traced exactly on the pixel edges; polygons have no holes, so the instance mask
of a 0, 6, 8 or 9 is the digit's silhouette with its loops filled.

Each builder writes a ``digits_build.json`` summary into its directory last: a directory holding
one for the same parameters is complete and is skipped (``force=True`` rebuilds). Builds are
deterministic: one seed and one set of parameters give the same bytes.
"""

import argparse
import functools
import json
import os.path as osp
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np

DIGIT_CLASSES = tuple(f'digit_{d}' for d in range(10))
"""The 10 classes of the classification and detection sets."""

SEG_CLASSES = ('background',) + DIGIT_CLASSES
"""The 11 classes of the segmentation sets."""

SEG_PALETTE = [
    [0, 0, 0],
    [31, 119, 180],
    [255, 127, 14],
    [44, 160, 44],
    [214, 39, 40],
    [148, 103, 189],
    [140, 86, 75],
    [227, 119, 194],
    [127, 127, 127],
    [188, 189, 34],
    [23, 190, 207],
]
"""RGB colour of each class of :data:`SEG_CLASSES` (black background, matplotlib's tab10 digits)."""

NUM_DIGITS = 1797
NUM_VAL_DIGITS = 297
SUMMARY_FILE = 'digits_build.json'
JPEG_QUALITY = 95  # 8x8 scans upscaled to 32x32: mean error 0.6 grey levels, max 7 (of 255)

# one random stream per (layout, split, canvas), so that e.g. more training canvases leave the
# validation canvases unchanged
_STREAMS = dict(split=0, ade20k=1, cityscapes=2, coco=3)
_CITIES = dict(train=('inkburg', 'penford', 'quillstadt'), val=('scanton',))
_BACKGROUND_RANGE = (140.0, 240.0)  # light textured paper
_INK_RANGE = (0.0, 90.0)  # dark ink


@functools.lru_cache(maxsize=1)
def load_digit_scans() -> Tuple[np.ndarray, np.ndarray]:
    """The scikit-learn digits, loaded once (read-only arrays).

    Returns:
        tuple: ``scans`` (1797, 8, 8) float64 ink in [0, 1] and ``labels`` (1797,) int64 in 0..9.
    """
    try:
        from sklearn.datasets import load_digits  # imported here: 1.4 s, needed only to build
    except ImportError as error:  # no requirement of the package: the builder's alone (tests.txt, wheelhouse.txt)
        raise ImportError(f"{error}: the digits are scikit-learn's bundled scans; pip install scikit-learn") from None

    digits = load_digits()
    scans, labels = digits.images / 16.0, digits.target.astype(np.int64)
    scans.flags.writeable = labels.flags.writeable = False
    return scans, labels


def split_digits(seed: int = 0, num_val: int = NUM_VAL_DIGITS) -> Tuple[np.ndarray, np.ndarray]:
    """Disjoint training and validation scan indices from one seeded permutation of the 1797 scans.

    Args:
        seed (int): Seed of the permutation. Defaults to 0.
        num_val (int): Number of validation scans. Defaults to 297.

    Returns:
        tuple: ``train`` (1797 - num_val,) and ``val`` (num_val,) int64 indices, in permutation order.
    """
    if not 0 < num_val < NUM_DIGITS:
        raise ValueError(f'num_val must be in 1..{NUM_DIGITS - 1}, got {num_val}')
    order = np.random.default_rng([seed, _STREAMS['split']]).permutation(NUM_DIGITS)
    return order[num_val:], order[:num_val]


def upscale_scan(scan: np.ndarray, size: int) -> np.ndarray:
    """Bicubic upscaling of an (8, 8) ink scan to ``(size, size)``, clipped to [0, 1]."""
    return np.clip(cv2.resize(scan, (size, size), interpolation=cv2.INTER_CUBIC), 0.0, 1.0)


def build_imagenet(
    out_dir: str,
    seed: int = 0,
    num_train: int = NUM_DIGITS - NUM_VAL_DIGITS,
    num_val: int = NUM_VAL_DIGITS,
    size: int = 32,
    force: bool = False,
) -> dict:
    """Write the digits in the ImageNet layout of mmpretrain.

    ``train/digit_<d>/digit_<d>_<scan>.JPEG`` and ``val/digit_<d>/...`` (dark ink on white, RGB,
    ``size x size``, JPEG quality 95), plus ``meta/train.txt`` and ``meta/val.txt`` with one
    ``digit_<d>/<name>.JPEG <d>`` line per image, as mmpretrain's ImageNet annotation files.

    Args:
        out_dir (str): Directory of the set (e.g. ``data/digits_imagenet``).
        seed (int): Seed of the train/val split. Defaults to 0.
        num_train (int): Number of training images, at most ``1797 - num_val``. Defaults to 1500.
        num_val (int): Number of validation images (= validation scans). Defaults to 297.
        size (int): Side of the square images in pixels. Defaults to 32.
        force (bool): Rebuild even if ``out_dir`` already holds this build. Defaults to False.

    Returns:
        dict: The build summary (see :func:`_build`).
    """
    if not 0 < num_train <= NUM_DIGITS - num_val:
        raise ValueError(
            f'num_train must be in 1..{NUM_DIGITS - num_val} (1797 scans minus num_val={num_val}), got {num_train}'
        )
    if size < 8:
        raise ValueError(f'size must be at least 8 (the scans are 8x8), got {size}')
    params = dict(seed=seed, num_train=num_train, num_val=num_val, size=size)

    def write(root: Path) -> dict:
        scans, labels = load_digit_scans()
        train, val = split_digits(seed, num_val)
        counts = {}
        for split, indices in (('train', train[:num_train]), ('val', val)):
            for name in DIGIT_CLASSES:  # all 10, also empty ones: folder mode takes classes from them
                (root / split / name).mkdir(parents=True, exist_ok=True)
            lines = []
            for index in sorted(indices):
                label = int(labels[index])
                name = f'{DIGIT_CLASSES[label]}/{DIGIT_CLASSES[label]}_{index:04d}.JPEG'
                grey = np.round(255.0 * (1.0 - upscale_scan(scans[index], size))).astype(np.uint8)
                _write_image(root / split / name, np.repeat(grey[..., None], 3, axis=2))
                lines.append(f'{name} {label}')
            _write_text(root / 'meta' / f'{split}.txt', '\n'.join(lines) + '\n')
            counts[split] = len(lines)
        return dict(classes=list(DIGIT_CLASSES), images=counts)

    return _build('imagenet', out_dir, params, write, force)


def build_ade20k(
    out_dir: str,
    seed: int = 0,
    num_train: int = 200,
    num_val: int = 50,
    size: Sequence[int] = (128, 128),
    digits_per_image: Sequence[int] = (2, 5),
    digit_size: Sequence[int] = (20, 48),
    band_width: int = 1,
    force: bool = False,
) -> dict:
    """Write digit canvases in the ADE20K layout of mmseg (``ADEChallengeData2016``).

    ``images/{training,validation}/ADE_{train,val}_<8 digits>.jpg`` (RGB, JPEG quality 95) and
    ``annotations/{training,validation}/<same name>.png`` (8-bit, one channel). Label ids:
    1 = background, ``2 + d`` = digit ``d`` (classes :data:`SEG_CLASSES` stored as 1..11), and 0 =
    "other" in a ``band_width``-pixel band around every digit. mmseg's ``ADE20KDataset`` loads it
    with ``reduce_zero_label=True``: 0 becomes 255 (ignored) and 1..11 become classes 0..10.

    Args:
        out_dir (str): Directory of the set (e.g. ``data/digits_ade20k``).
        seed (int): Seed of the split and of the canvases. Defaults to 0.
        num_train (int): Number of training canvases. Defaults to 200.
        num_val (int): Number of validation canvases. Defaults to 50.
        size (Sequence[int]): Canvas ``(height, width)``. Defaults to (128, 128).
        digits_per_image (Sequence[int]): Inclusive range of the number of digits drawn for a
            canvas (fewer when no free place is found). Defaults to (2, 5).
        digit_size (Sequence[int]): Inclusive range of the digit side in pixels. Defaults to (20, 48).
        band_width (int): Width of the unlabeled band around each digit. Defaults to 1.
        force (bool): Rebuild even if ``out_dir`` already holds this build. Defaults to False.

    Returns:
        dict: The build summary (see :func:`_build`).
    """
    canvas = _CanvasSpec(seed, num_train, num_val, size, digits_per_image, digit_size, band_width)

    def paths(split: str, k: int) -> Tuple[str, str]:
        folder, prefix = dict(train=('training', 'ADE_train'), val=('validation', 'ADE_val'))[split]
        name = f'{prefix}_{k + 1:08d}'
        return f'images/{folder}/{name}.jpg', f'annotations/{folder}/{name}.png'

    def write(root: Path) -> dict:
        return _write_semantic_set(root, canvas, 'ade20k', paths, background=1, band_id=0)

    return _build('ade20k', out_dir, canvas.params, write, force)


def build_cityscapes(
    out_dir: str,
    seed: int = 0,
    num_train: int = 200,
    num_val: int = 50,
    size: Sequence[int] = (128, 256),
    digits_per_image: Sequence[int] = (3, 8),
    digit_size: Sequence[int] = (20, 48),
    band_width: int = 1,
    force: bool = False,
) -> dict:
    """Write digit canvases in the Cityscapes layout of mmseg.

    ``leftImg8bit/{train,val}/<city>/<city>_<seq>_000019_leftImg8bit.png`` (RGB PNG) and
    ``gtFine/{train,val}/<city>/<city>_<seq>_000019_gtFine_labelTrainIds.png`` (8-bit, one channel),
    as produced by mmseg's ``tools/dataset_converters/cityscapes.py``. trainIds: 0 = background,
    ``1 + d`` = digit ``d`` (classes :data:`SEG_CLASSES`), 255 (ignored) in a ``band_width``-pixel
    band around every digit. Made-up cities: three for training, another for validation, as the
    real splits have disjoint cities.

    Args:
        out_dir (str): Directory of the set (e.g. ``data/digits_cityscapes``).
        seed (int): Seed of the split and of the canvases. Defaults to 0.
        num_train (int): Number of training canvases. Defaults to 200.
        num_val (int): Number of validation canvases. Defaults to 50.
        size (Sequence[int]): Canvas ``(height, width)``, 1:2 as Cityscapes. Defaults to (128, 256).
        digits_per_image (Sequence[int]): Inclusive range of the number of digits drawn for a
            canvas (fewer when no free place is found). Defaults to (3, 8).
        digit_size (Sequence[int]): Inclusive range of the digit side in pixels. Defaults to (20, 48).
        band_width (int): Width of the ignored band around each digit. Defaults to 1.
        force (bool): Rebuild even if ``out_dir`` already holds this build. Defaults to False.

    Returns:
        dict: The build summary (see :func:`_build`).
    """
    canvas = _CanvasSpec(seed, num_train, num_val, size, digits_per_image, digit_size, band_width)

    def paths(split: str, k: int) -> Tuple[str, str]:
        cities = _CITIES[split]
        city = cities[k % len(cities)]
        stem = f'{city}/{city}_{k // len(cities):06d}_000019'
        return (f'leftImg8bit/{split}/{stem}_leftImg8bit.png', f'gtFine/{split}/{stem}_gtFine_labelTrainIds.png')

    def write(root: Path) -> dict:
        return _write_semantic_set(root, canvas, 'cityscapes', paths, background=0, band_id=255)

    return _build('cityscapes', out_dir, canvas.params, write, force)


def build_coco(
    out_dir: str,
    seed: int = 0,
    num_train: int = 200,
    num_val: int = 50,
    size: Sequence[int] = (128, 128),
    digits_per_image: Sequence[int] = (2, 5),
    digit_size: Sequence[int] = (20, 48),
    force: bool = False,
) -> dict:
    """Write digit canvases in the COCO 2017 instance segmentation layout of mmdet.

    ``train2017/<12-digit id>.jpg``, ``val2017/...`` (RGB, JPEG quality 95) and
    ``annotations/instances_{train,val}2017.json`` with ``images`` (id, file_name, height, width),
    ``annotations`` (id, image_id, category_id, ``bbox`` [x, y, w, h], ``area``, ``iscrowd`` 0,
    ``segmentation`` polygons) and ``categories`` ``digit_0..digit_9`` with ids 1..10. ``area`` and
    ``bbox`` are those of the polygons as pycocotools rasterises them, so they agree with the masks
    mmdet loads. Image ids: 1.. for train2017, 1000001.. for val2017 (unique across splits, as COCO).

    Args:
        out_dir (str): Directory of the set (e.g. ``data/digits_coco``).
        seed (int): Seed of the split and of the canvases. Defaults to 0.
        num_train (int): Number of training images, below 1000000. Defaults to 200.
        num_val (int): Number of validation images. Defaults to 50.
        size (Sequence[int]): Canvas ``(height, width)``. Defaults to (128, 128).
        digits_per_image (Sequence[int]): Inclusive range of the number of digits drawn for an
            image (fewer when no free place is found). Defaults to (2, 5).
        digit_size (Sequence[int]): Inclusive range of the digit side in pixels. Defaults to (20, 48).
        force (bool): Rebuild even if ``out_dir`` already holds this build. Defaults to False.

    Returns:
        dict: The build summary (see :func:`_build`).
    """
    if num_train >= 1000000:
        raise ValueError(f'num_train must be below 1000000 (val2017 ids start there), got {num_train}')
    canvas = _CanvasSpec(seed, num_train, num_val, size, digits_per_image, digit_size, band_width=0)
    categories = [dict(id=d + 1, name=name, supercategory='digit') for d, name in enumerate(DIGIT_CLASSES)]

    def write(root: Path) -> dict:
        instances = {}
        for split, first_id in (('train', 1), ('val', 1000001)):
            images, annotations = [], []
            for k, (image, digits) in enumerate(canvas.draw('coco', split)):
                image_id = first_id + k
                file_name = f'{image_id:012d}.jpg'
                _write_image(root / f'{split}2017' / file_name, image)
                images.append(dict(id=image_id, file_name=file_name, height=image.shape[0], width=image.shape[1]))
                for label, mask in digits:
                    annotations.append(
                        dict(
                            id=len(annotations) + 1,
                            image_id=image_id,
                            category_id=label + 1,
                            iscrowd=0,
                            **_polygon_annotation(mask),
                        )
                    )
            coco = dict(
                info=dict(
                    description='scikit-learn handwritten digits in the COCO layout',
                    version='1.0',
                    contributor='mmvitreg',
                ),
                licenses=[],
                images=images,
                annotations=annotations,
                categories=categories,
            )
            _write_text(root / 'annotations' / f'instances_{split}2017.json', json.dumps(coco))
            instances[split] = len(annotations)
        return dict(classes=list(DIGIT_CLASSES), images=canvas.counts, instances=instances)

    return _build('coco', out_dir, canvas.params, write, force)


BUILDERS: Dict[str, Callable[..., dict]] = dict(
    imagenet=build_imagenet, ade20k=build_ade20k, cityscapes=build_cityscapes, coco=build_coco
)
"""The builder of each layout, by name."""


def _build(layout: str, out_dir: str, params: dict, write: Callable[[Path], dict], force: bool = False) -> dict:
    """Run a builder's ``write`` into ``out_dir`` unless that directory already holds the same build.

    ``out_dir`` must be missing, empty, or a previous digits build (it holds a
    ``digits_build.json``); a previous build with other parameters, an unfinished one, or any with
    ``force=True`` is removed and rebuilt. The summary is written last, so it marks a complete build.

    Args:
        layout (str): Name of the layout, one of :data:`BUILDERS`.
        out_dir (str): Directory of the set.
        params (dict): The builder's parameters (JSON-serialisable); they identify the build.
        write (Callable[[Path], dict]): Writes the files under the given root and returns the
            ``classes`` and counts of the summary.
        force (bool): Rebuild even if the same build is there. Defaults to False.

    Returns:
        dict: ``layout``, ``params``, ``classes``, ``images`` (``{'train': n, 'val': m}``),
        ``instances`` for the canvas sets, and ``skipped`` (True when the build was already there).
    """
    root = Path(out_dir)
    params = json.loads(json.dumps(params))
    summary_path = root / SUMMARY_FILE
    if summary_path.exists():
        previous = json.loads(summary_path.read_text())
        if (
            not force
            and previous.get('layout') == layout
            and previous.get('params') == params
            and previous.get('complete')
        ):
            return dict(previous, skipped=True)
        shutil.rmtree(root)
    elif root.exists() and any(root.iterdir()):
        raise FileExistsError(
            f'{root} is not empty and holds no {SUMMARY_FILE}, so it is not a '
            'digits build: remove it or choose another directory'
        )
    root.mkdir(parents=True, exist_ok=True)
    _write_text(summary_path, json.dumps(dict(layout=layout, params=params, complete=False)))
    summary = dict(layout=layout, params=params, **write(root))
    _write_text(summary_path, json.dumps(dict(summary, complete=True), indent=2, sort_keys=True) + '\n')
    return dict(summary, complete=True, skipped=False)


class _CanvasSpec:
    """Validated canvas parameters, and the canvases of one split of one layout."""

    def __init__(
        self,
        seed: int,
        num_train: int,
        num_val: int,
        size: Sequence[int],
        digits_per_image: Sequence[int],
        digit_size: Sequence[int],
        band_width: int,
    ):
        height, width = _pair('size', size)
        low, high = _pair('digits_per_image', digits_per_image)
        smallest, largest = _pair('digit_size', digit_size)
        if num_train < 1 or num_val < 1:
            raise ValueError(f'num_train and num_val must be positive, got {num_train} and {num_val}')
        if not 1 <= low <= high:
            raise ValueError(
                f'digits_per_image must be a range (low, high) with 1 <= low <= high, got {tuple(digits_per_image)}'
            )
        if not 12 <= smallest <= largest <= min(height, width):
            raise ValueError(
                f'digit_size must be a range (low, high) with 12 <= low <= high <= '
                f'min(size)={min(height, width)}, got {tuple(digit_size)}'
            )
        if band_width < 0:
            raise ValueError(f'band_width must be non-negative, got {band_width}')
        self.seed, self.height, self.width = seed, height, width
        self.counts = dict(train=num_train, val=num_val)
        self.digits_per_image = (low, high)
        self.digit_size = (smallest, largest)
        self.band_width = band_width
        self.gap = 2 * band_width + 1  # bands of neighbouring digits never touch a digit
        self.params = dict(
            seed=seed,
            num_train=num_train,
            num_val=num_val,
            size=[height, width],
            digits_per_image=[low, high],
            digit_size=[smallest, largest],
        )
        if band_width:
            self.params['band_width'] = band_width

    def draw(self, layout: str, split: str):
        """Yield the ``(image (H, W, 3) uint8 RGB, [(label, mask (H, W) bool), ...])`` of a split."""
        scans, labels = load_digit_scans()
        pool = dict(zip(('train', 'val'), split_digits(self.seed)))[split]
        for k in range(self.counts[split]):
            rng = np.random.default_rng([self.seed, _STREAMS[layout], ('train', 'val').index(split), k])
            yield self._compose(rng, scans, labels, pool)

    def _compose(
        self, rng: np.random.Generator, scans: np.ndarray, labels: np.ndarray, pool: np.ndarray
    ) -> Tuple[np.ndarray, List[Tuple[int, np.ndarray]]]:
        image = _texture(rng, self.height, self.width)
        boxes, digits = [], []
        for _ in range(rng.integers(self.digits_per_image[0], self.digits_per_image[1] + 1)):
            box = self._free_box(rng, boxes)
            if box is None:
                continue
            boxes.append(box)
            y, x, side = box
            index = rng.choice(pool)
            alpha = np.zeros((self.height, self.width))
            alpha[y : y + side, x : x + side] = upscale_scan(scans[index], side)
            mask = alpha >= 0.5
            if not mask.any():
                continue
            ink = rng.uniform(*_INK_RANGE, size=3)
            image = image * (1.0 - alpha[..., None]) + ink * alpha[..., None]
            digits.append((int(labels[index]), mask))
        return np.clip(np.round(image), 0, 255).astype(np.uint8), digits

    def _free_box(self, rng: np.random.Generator, boxes: list, tries: int = 50) -> Optional[Tuple[int, int, int]]:
        """A random square ``(top, left, side)`` at least ``gap`` pixels away from all ``boxes``."""
        for _ in range(tries):
            side = int(rng.integers(self.digit_size[0], self.digit_size[1] + 1))
            y = int(rng.integers(0, self.height - side + 1))
            x = int(rng.integers(0, self.width - side + 1))
            if all(
                y >= by + bs + self.gap
                or by >= y + side + self.gap
                or x >= bx + bs + self.gap
                or bx >= x + side + self.gap
                for by, bx, bs in boxes
            ):
                return y, x, side
        return None


def _pair(name: str, value: Sequence[int]) -> Tuple[int, int]:
    if len(value) != 2:
        raise ValueError(f'{name} must be a pair of ints, got {value!r}')
    return int(value[0]), int(value[1])


def _texture(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Light ruled paper, (H, W, 3) float: smooth colour blotches posterised to steps of 8 grey levels,
    crossed by thin dark lines at a random angle and spacing (flat areas keep the PNGs small)."""
    blotches = rng.uniform(*_BACKGROUND_RANGE, size=(4, 4, 3)).astype(np.float32)
    image = cv2.resize(blotches, (width, height), interpolation=cv2.INTER_CUBIC).astype(np.float64)
    image = 8.0 * np.round(image / 8.0)
    angle, spacing, phase = rng.uniform(0, np.pi), rng.uniform(8, 20), rng.uniform(0, 1)
    yy, xx = np.mgrid[0:height, 0:width]
    position = ((xx * np.cos(angle) + yy * np.sin(angle)) / spacing + phase) % 1.0
    return image - 40.0 * (position < 1.5 / spacing)[..., None]


def _write_semantic_set(
    root: Path,
    canvas: '_CanvasSpec',
    layout: str,
    paths: Callable[[str, int], Tuple[str, str]],
    background: int,
    band_id: int,
) -> dict:
    """Write the canvases of both splits and their label maps (see :func:`_semantic_map`) at the
    ``(image, label map)`` paths that ``paths(split, k)`` gives for canvas ``k``; return the counts."""
    instances = {}
    for split in ('train', 'val'):
        instances[split] = 0
        for k, (image, digits) in enumerate(canvas.draw(layout, split)):
            image_path, label_path = paths(split, k)
            _write_image(root / image_path, image)
            _write_image(
                root / label_path, _semantic_map(digits, image.shape[:2], background, band_id, canvas.band_width)
            )
            instances[split] += len(digits)
    return dict(classes=list(SEG_CLASSES), images=canvas.counts, instances=instances)


def _semantic_map(
    digits: List[Tuple[int, np.ndarray]], shape: Tuple[int, int], background: int, band_id: int, band_width: int
) -> np.ndarray:
    """Label map (H, W) uint8: ``background``, ``background + 1 + d`` on digit ``d``, ``band_id`` in
    the ``band_width`` band around each digit."""
    label = np.full(shape, background, dtype=np.uint8)
    kernel = cv2.getStructuringElement(cv2.MORPH_ELLIPSE, (2 * band_width + 1, 2 * band_width + 1))
    for _, mask in digits:
        label[cv2.dilate(mask.astype(np.uint8), kernel) > 0] = band_id
    for digit, mask in digits:
        label[mask] = background + 1 + digit
    return label


def _polygon_annotation(mask: np.ndarray) -> dict:
    """COCO ``segmentation`` (outer contours on the pixel edges), ``area`` and ``bbox`` of a (H, W) bool mask.

    The contours are traced on the mask upsampled twice (nearest), whose boundary pixel centres
    divided by 2 lie on the edges of the original pixels, so pycocotools rasterises the polygons
    back to the mask with its holes filled.
    """
    try:
        from pycocotools import mask as mask_utils  # here: only the COCO set needs pycocotools
    except ImportError as error:
        raise ImportError(
            f'{error}: the COCO masks are written with pycocotools; pip install pycocotools '
            '(or mmvitreg\'s extra: pip install "/path/to/mmvitreg[det]")'
        ) from None
    double = cv2.resize(mask.astype(np.uint8), None, fx=2, fy=2, interpolation=cv2.INTER_NEAREST)
    contours, _ = cv2.findContours(double, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
    polygons = [(c.reshape(-1) / 2.0).tolist() for c in contours if len(c) >= 3]
    rle = mask_utils.merge(mask_utils.frPyObjects(polygons, *mask.shape))
    return dict(segmentation=polygons, area=float(mask_utils.area(rle)), bbox=mask_utils.toBbox(rle).tolist())


def _write_image(path: Path, image: np.ndarray) -> None:
    """Write an RGB (H, W, 3) or label (H, W) uint8 array; the suffix picks JPEG (quality 95) or PNG."""
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = image[..., ::-1] if image.ndim == 3 else image
    params = [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY] if path.suffix.lower() in ('.jpg', '.jpeg') else []
    ok, data = cv2.imencode(path.suffix, pixels, params)
    if not ok:
        raise RuntimeError(f'OpenCV could not encode {path}')
    path.write_bytes(data.tobytes())


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description='Build the digits data sets (scikit-learn scans) in the '
        'ImageNet, ADE20K, Cityscapes and COCO layouts'
    )
    parser.add_argument('layout', choices=[*BUILDERS, 'all'], help='which set to build')
    parser.add_argument('--out', default='data', help='parent directory of digits_<layout>/ (default: data)')
    parser.add_argument('--seed', type=int, default=0, help='seed of the split and of the canvases')
    parser.add_argument('--num-train', type=int, help='training images (default: 1500 imagenet, 200 others)')
    parser.add_argument('--num-val', type=int, help='validation images (default: 297 imagenet, 50 others)')
    parser.add_argument(
        '--size',
        type=int,
        nargs='+',
        metavar='PIXELS',
        help='image side (imagenet, default 32) or canvas H [W] (default 128 128 for ade20k '
        'and coco, 128 256 for cityscapes); only with a single layout',
    )
    parser.add_argument('--force', action='store_true', help='rebuild sets that are already complete')
    args = parser.parse_args(argv)
    if args.size is not None:
        if args.layout == 'all':
            parser.error('--size differs between layouts: give it with a single layout')
        if len(args.size) > (1 if args.layout == 'imagenet' else 2):
            parser.error(
                f'--size takes {"one value" if args.layout == "imagenet" else "one or two values"} '
                f'for {args.layout}, got {args.size}'
            )
    return args


def main(argv=None):
    args = parse_args(argv)
    options = dict(seed=args.seed, force=args.force)
    if args.num_train is not None:
        options['num_train'] = args.num_train
    if args.num_val is not None:
        options['num_val'] = args.num_val
    if args.size is not None:
        options['size'] = args.size[0] if args.layout == 'imagenet' else (args.size * 2)[:2]
    for layout in BUILDERS if args.layout == 'all' else [args.layout]:
        out_dir = osp.join(args.out, f'digits_{layout}')
        try:
            summary = BUILDERS[layout](out_dir, **options)
        except (ValueError, FileExistsError, ImportError) as error:
            sys.exit(f'{layout}: {error}')
        counts = ', '.join(f'{split} {n}' for split, n in summary['images'].items()) + ' images'
        if 'instances' in summary:
            counts += '; digits ' + ', '.join(f'{s} {n}' for s, n in summary['instances'].items())
        state = 'complete, skipped' if summary['skipped'] else 'wrote'
        print(
            f'{layout}: {state} {out_dir} ({counts}; {len(summary["classes"])} classes; '
            f'seed {summary["params"]["seed"]})'
        )


if __name__ == '__main__':
    main()
