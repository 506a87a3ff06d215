"""mmvitreg.SVHN reads the official {split}_32x32.mat layout (X: 32x32x3xN RGB, y: N x 1 with 10 for the
digit 0) into BGR images and labels 0..9, as mmpretrain's CIFAR datasets."""

import numpy as np
import pytest
from scipy.io import savemat

from mmvitreg.datasets.svhn import SVHN


def test_reads_the_official_mat_files(tmp_path):
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (32, 32, 3, 5), dtype=np.uint8)
    savemat(tmp_path / 'test_32x32.mat', {'X': x, 'y': np.array([[10], [1], [2], [9], [10]], dtype=np.uint8)})
    data = SVHN(str(tmp_path), split='test', pipeline=[])
    assert len(data) == 5 and [data[i]['gt_label'] for i in range(5)] == [0, 1, 2, 9, 0]
    np.testing.assert_array_equal(data[3]['img'], x[..., 3][..., ::-1])
    with pytest.raises(FileNotFoundError, match='train_32x32.mat'):
        SVHN(str(tmp_path), split='train')
    with pytest.raises(ValueError, match='split'):
        SVHN(str(tmp_path), split='val')
