"""SVHN (cropped digits, format 2), read from the official ``.mat`` files."""

import os.path as osp
from typing import List

import numpy as np
from mmpretrain.datasets import BaseDataset

from mmvitreg.registry import DATASETS


@DATASETS.register_module()
class SVHN(BaseDataset):
    """`The Street View House Numbers <http://ufldl.stanford.edu/housenumbers/>`_ cropped-digit set.

    Reads ``{split}_32x32.mat`` under ``data_root`` (``X``: ``(32, 32, 3, N)`` uint8 RGB, ``y``: ``(N, 1)``
    with 10 for the digit 0) and yields ``img`` ``(32, 32, 3)`` in BGR (as mmcv's image loading) with
    ``gt_label`` 0..9, like mmpretrain's ``CIFAR10``: the pipeline starts after image loading. ``train``
    has 73,257 images and ``test`` 26,032 (DRLoc Table 1; the official code uses torchvision's ``train`` /
    ``test`` splits, not ``extra``).

    Args:
        data_root (str): Folder of the ``.mat`` files.
        split (str): ``'train'``, ``'test'`` or ``'extra'``. Defaults to 'train'.
        **kwargs: As :class:`mmpretrain.datasets.BaseDataset`.
    """

    METAINFO = {'classes': tuple(str(i) for i in range(10))}
    SPLITS = ('train', 'test', 'extra')

    def __init__(self, data_root: str, split: str = 'train', **kwargs):
        if split not in self.SPLITS:
            raise ValueError(f'SVHN split must be one of {self.SPLITS}, got {split!r}')
        self.split = split
        super().__init__(ann_file='', data_root=data_root, test_mode=split == 'test', **kwargs)

    def load_data_list(self) -> List[dict]:
        from scipy.io import loadmat

        path = osp.join(self.data_root, f'{self.split}_32x32.mat')
        if not osp.isfile(path):
            raise FileNotFoundError(
                f'SVHN: {path} not found; download {self.split}_32x32.mat from '
                'http://ufldl.stanford.edu/housenumbers/ into data_root'
            )
        mat = loadmat(path)
        images = np.ascontiguousarray(mat['X'].transpose(3, 0, 1, 2)[..., ::-1])  # (N, 32, 32, 3) BGR
        labels = mat['y'].reshape(-1).astype(np.int64) % 10
        return [dict(img=img, gt_label=int(label)) for img, label in zip(images, labels)]
