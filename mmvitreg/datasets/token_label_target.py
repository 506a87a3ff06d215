"""Per-token targets from a dense label map (token labeling, Eq. 6)."""
from typing import Dict, Optional, Tuple

import cv2
import numpy as np
import torch
from mmcv.transforms import BaseTransform

from mmvitreg.datasets.label_maps import translation_matrix
from mmvitreg.registry import TRANSFORMS

_CV_MAX_CHANNELS = 128  # the most channels cv2.warpAffine (opencv 5) takes at once


def _token_sums(grid: np.ndarray, n: int) -> np.ndarray:
    """Sums of the ``n x n`` blocks of a ``(S*n, S*n, ...)`` sample grid: ``(S, S, ...)``."""
    rows = sum(grid[i::n] for i in range(n))
    return sum(rows[:, i::n] for i in range(n))


@TRANSFORMS.register_module()
class TokenLabelTarget(BaseTransform):
    r"""Sample the dense label map under every token of the augmented image.

    Token labeling (`Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, Eq. 6) gives token
    ``i`` of an ``S x S`` grid the teacher's score ``y^i`` of the image region under it:

    .. math::
        L_{aux} = \frac{1}{N} \sum_{i=1}^{N} H(X^i, y^i)

    The augmented image is cut into ``S x S`` token cells; each cell gets ``n x n`` evenly spaced
    sample points (``samples_per_token=2``: 4 points, at 1/4 and 3/4 of the cell on each axis),
    each point is carried back through the recorded geometry onto the map
    (:class:`~mmvitreg.datasets.label_maps.TokenLabelMap`) and read with bilinear interpolation
    between the four nearest map cells (cell centres at ``(j + .5, i + .5)``, borders clamped; the
    official code reads the map with ``roi_align``, also bilinear). Points that fall inside the
    image but outside a ``'center_square'`` map take the nearest map border. The reading is one
    ``cv2.warpAffine`` of the map cells under the image, as a dense stack over the classes they
    hold (bilinear weights at cv2's 1/32-cell precision).

    Two readings of a top-k map:

    * ``logit_fill=None`` (default, the paper): each map cell's score is the teacher's softmax,
      computed over the stored top-k logits (renormalised over those k); a token's score is the
      mean of the scores at its in-image sample points. Sample points outside the image (areas that
      rotate/shear/translate filled with ``pad_val``) are left out of the mean; a token with none
      inside the image gets all-zero probabilities (no token label). The token keeps its ``topk``
      most probable classes, renormalised to sum 1.
    * ``logit_fill=0.`` (the official code, ``get_featuremaps`` + ``roi_align`` + ``softmax``): the
      stored logits are scattered into all ``num_classes`` classes, the others set to
      ``logit_fill``; the token's logits are the mean over its sample points (outside the image
      every class has logit ``logit_fill``, as the official map's constant fill), then a softmax
      over all ``num_classes`` classes. The output keeps the ``topk`` largest probabilities
      unnormalised: ``1 - sum`` is the mass of the other classes, each of which has probability
      ``exp(logit_fill) / Z`` when no sample point of the token stored it.

    **Required keys:** ``img``, ``token_label_map``. **Added key:** ``token_label``, a float32
    tensor ``(2, topk, S, S)``: ``[0]`` the per-token probabilities of its top-k classes (sorted,
    largest first), ``[1]`` their class indices (integers stored as float). **Removed key:**
    ``token_label_map``. Pack it with ``PackInputs(algorithm_keys=['token_label'])``.

    Cost: about 0.4-0.6 ms of one CPU core per image (5 x 18 x 18 maps, ``S = 14``, ``n = 2``; see
    ``tools/analysis_tools/benchmark_data_pipeline.py``).

    Args:
        token_label_size (int): ``S``, tokens per side (14 for 224 px and patch 16). Defaults to 14.
        topk (int): Classes kept per token. Defaults to 5.
        samples_per_token (int): ``n``, sample points per token side. Defaults to 2.
        logit_fill (float, optional): None for the paper's reading, a number (the official code
            uses 0) for the official one. Defaults to None.
        num_classes (int, optional): Number of classes; required with ``logit_fill``.
            Defaults to None.
    """

    def __init__(self, token_label_size: int = 14, topk: int = 5, samples_per_token: int = 2,
                 logit_fill: Optional[float] = None, num_classes: Optional[int] = None):
        for name, value in (('token_label_size', token_label_size), ('topk', topk),
                            ('samples_per_token', samples_per_token)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        if logit_fill is not None and (num_classes is None or num_classes < topk):
            raise ValueError(f'logit_fill={logit_fill} (the official softmax over all classes) needs '
                             f'num_classes >= topk, got num_classes={num_classes}')
        self.token_label_size = token_label_size
        self.topk = topk
        self.samples_per_token = samples_per_token
        self.logit_fill = logit_fill
        self.num_classes = num_classes
        self._grids: Dict[Tuple[int, int], Tuple[np.ndarray, np.ndarray]] = {}

    def _sample_grid(self, img_shape: Tuple[int, int]) -> Tuple[np.ndarray, np.ndarray]:
        """The ``(P, 2)`` sample points (x, y) of an image, rows of the ``S*n x S*n`` grid first,
        and the ``(3, 3)`` matrix from grid indices ``(column, row)`` to those points."""
        if img_shape not in self._grids:
            side = self.token_label_size * self.samples_per_token
            step_y, step_x = img_shape[0] / side, img_shape[1] / side
            to_image = np.array([[step_x, 0., step_x / 2], [0., step_y, step_y / 2], [0., 0., 1.]])
            centres = np.arange(side) + 0.5
            ys, xs = np.meshgrid(centres * step_y, centres * step_x, indexing='ij')
            self._grids[img_shape] = np.stack([xs.ravel(), ys.ravel()], 1), to_image
        return self._grids[img_shape]

    def transform(self, results: dict) -> dict:
        if 'token_label_map' not in results:
            raise KeyError('TokenLabelTarget needs a label map: put mmvitreg.LoadTokenLabelMap right after '
                           'LoadImageFromFile')
        label_map = results.pop('token_label_map')
        img_shape = tuple(results['img'].shape[:2])
        label_map.check_shape(img_shape)
        results['token_label'] = self.token_targets(label_map, img_shape)
        return results

    def token_targets(self, label_map, img_shape: Tuple[int, int]) -> torch.Tensor:
        """The ``(2, topk, S, S)`` target of a :class:`TokenLabelMap` for an image of ``img_shape``."""
        _, k, h, w = label_map.label_map.shape
        s, n = self.token_label_size, self.samples_per_token
        points, grid_to_image = self._sample_grid(img_shape)

        # weight of every sample point in its token
        inside = label_map.inside(points).reshape(s * n, s * n).astype(np.float32)
        if self.logit_fill is None:  # mean over the token's in-image points
            point_weight = inside / np.maximum(_token_sums(inside, n), 1).repeat(n, 0).repeat(n, 1)
        else:  # mean over all the token's points; outside ones hold logit_fill for every class
            point_weight = inside / n ** 2

        # grid index -> map cell index (cell centres at integers); the window of cells it reads
        grid_to_cells = translation_matrix(-0.5, -0.5) @ label_map.map_matrix() @ grid_to_image
        last = n * s - 1
        corners = grid_to_cells[:2, :2] @ np.array([[0, last, 0, last], [0, 0, last, last]])
        corners += grid_to_cells[:2, 2:]
        x0, y0 = np.clip(np.floor(corners.min(1)), 0, (w - 1, h - 1)).astype(int)
        x1, y1 = np.clip(np.floor(corners.max(1)) + 2, 1, (w, h)).astype(int)

        # the window as a dense (rows, cols, U) stack over the U classes it holds
        window = label_map.label_map[:, :, y0:y1, x0:x1].reshape(2, k, -1)
        classes = window[1].astype(np.int64)
        present = np.zeros(classes.max() + 1, bool)
        present[classes] = True
        vocab = np.flatnonzero(present)
        n_vocab = max(len(vocab), self.topk)  # fewer classes than asked for: pad with unread ones
        logits = window[0].astype(np.float32)
        if self.logit_fill is None:  # the teacher's softmax, over the stored top-k
            values = np.exp(logits - logits.max(0))
            values /= values.sum(0)
        else:  # logits relative to the fill value of the unstored classes
            values = logits - self.logit_fill
        dense = np.zeros((logits.shape[1], n_vocab), np.float32)
        dense[np.arange(logits.shape[1]), (np.cumsum(present) - 1)[classes]] = values
        dense = dense.reshape(y1 - y0, x1 - x0, n_vocab)

        # bilinear reading at every sample point (borders replicated), then the mean per token
        warp = (translation_matrix(-x0, -y0) @ grid_to_cells)[:2]
        sampled = np.concatenate([
            cv2.warpAffine(np.ascontiguousarray(dense[..., c:c + _CV_MAX_CHANNELS]), warp, (n * s, n * s),
                           flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP,
                           borderMode=cv2.BORDER_REPLICATE).reshape(n * s, n * s, -1)
            for c in range(0, n_vocab, _CV_MAX_CHANNELS)], 2)
        pooled = _token_sums(sampled * point_weight[..., None], n).reshape(s * s, n_vocab).astype(np.float64)
        if len(vocab) < n_vocab:
            vocab = np.concatenate([vocab, np.setdiff1d(np.arange(n_vocab + len(vocab)), vocab)])[:n_vocab]
        if self.logit_fill is not None:  # softmax over all num_classes classes
            pooled += self.logit_fill  # back from "relative to the fill" to logits
            top = np.maximum(pooled.max(1, keepdims=True), self.logit_fill)
            pooled = np.exp(pooled - top)
            unread = (self.num_classes - n_vocab) * np.exp(self.logit_fill - top)
            pooled /= pooled.sum(1, keepdims=True) + unread

        # top-k per token, largest first (k argmax passes: faster than sorting for small k)
        probs = np.empty((self.topk, s * s))
        index = np.empty((self.topk, s * s), np.int64)
        tokens = np.arange(s * s)
        for i in range(self.topk):
            index[i] = pooled.argmax(1)
            probs[i] = pooled[tokens, index[i]]
            pooled[tokens, index[i]] = -1.  # scores are >= 0
        if self.logit_fill is None:
            probs /= np.maximum(probs.sum(0), 1e-12)
        target = np.stack([probs, vocab[index]]).reshape(2, self.topk, s, s)
        return torch.from_numpy(target.astype(np.float32))

    def __repr__(self):
        return (f'{self.__class__.__name__}(token_label_size={self.token_label_size}, topk={self.topk}, '
                f'samples_per_token={self.samples_per_token}, logit_fill={self.logit_fill}, '
                f'num_classes={self.num_classes})')
