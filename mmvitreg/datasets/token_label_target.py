"""Per-token targets from a dense label map (token labeling, Eq. 6): packed per sample, computed per batch."""
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from mmcv.transforms import BaseTransform
from torch import Tensor

from mmvitreg.registry import TRANSFORMS


@dataclass
class PackedLabelMap:
    """What :func:`token_label_targets` needs of one sample; made by :class:`TokenLabelTarget`.

    Attributes:
        label_map (Tensor): ``(2, k, h, w)`` the untouched map (top-k logits, class indices), as
            stored (float16 for the official maps).
        matrix (Tensor): ``(3, 3)`` float64, from the augmented image's continuous pixel coordinates
            ``(x, y, 1)`` to continuous map coordinates (map cell ``(i, j)`` covers
            ``[j, j+1) x [i, i+1)``).
        img_shape (tuple[int, int]): ``(H, W)`` of the augmented image.
        image_on_map (tuple[float, float, float, float]): ``(x0, y0, x1, y1)``, the original image in
            map coordinates (the whole map for ``region='full'``, wider for ``'center_square'``);
            sample points outside it are outside the image.
        token_label_size, topk, samples_per_token, logit_fill, num_classes: the target's settings
            (see :class:`TokenLabelTarget`).
    """
    label_map: Tensor
    matrix: Tensor
    img_shape: Tuple[int, int]
    image_on_map: Tuple[float, float, float, float]
    token_label_size: int
    topk: int
    samples_per_token: int
    logit_fill: Optional[float]
    num_classes: Optional[int]

    def settings(self) -> tuple:
        return (self.token_label_size, self.topk, self.samples_per_token, self.logit_fill, self.num_classes)


@TRANSFORMS.register_module()
class TokenLabelTarget(BaseTransform):
    r"""Pack the dense label map and its geometry so that the batch can read it under every token.

    Token labeling (`Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, Eq. 6) gives token
    ``i`` of an ``S x S`` grid the teacher's score ``y^i`` of the image region under it:

    .. math::
        L_{aux} = \frac{1}{N} \sum_{i=1}^{N} H(X^i, y^i)

    This transform does no per-token work: it attaches to the sample a :class:`PackedLabelMap` (the
    untouched map as a tensor, the composed matrix from augmented-image pixels to map coordinates,
    the image size and the original image's region on the map, and the settings below).
    :class:`~mmvitreg.models.data_preprocessors.TokenClsDataPreprocessor` then computes the
    ``token_label`` of the whole batch in torch with :func:`token_label_targets`, which documents
    the two readings of a top-k map (``logit_fill=None``: the paper's; ``logit_fill=0.``: the
    official code's).

    **Required keys:** ``img``, ``token_label_map``. **Added key:** ``token_label_map``, replaced by
    its :class:`PackedLabelMap`. Pack it with ``PackInputs(algorithm_keys=['token_label_map'])``.

    Cost (``tools/analysis_tools/benchmark_data_pipeline.py``, one CPU core): about 0.05 ms per
    image here; the batch reading about 150-190 ms per batch of 128 (5 x 18 x 18 maps, ``S = 14``,
    ``n = 2``), about 0.2% of an LV-ViT-S training step on the CPU.

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

    def transform(self, results: dict) -> dict:
        if 'token_label_map' not in results:
            raise KeyError('TokenLabelTarget needs a label map: put mmvitreg.LoadTokenLabelMap right after '
                           'LoadImageFromFile')
        label_map = results['token_label_map']
        img_shape = tuple(results['img'].shape[:2])
        label_map.check_shape(img_shape)
        results['token_label_map'] = self.pack(label_map, img_shape)
        return results

    def pack(self, label_map, img_shape: Tuple[int, int]) -> PackedLabelMap:
        """The :class:`PackedLabelMap` of a :class:`~mmvitreg.datasets.label_maps.TokenLabelMap`."""
        return PackedLabelMap(torch.from_numpy(label_map.label_map), torch.from_numpy(label_map.map_matrix()),
                              img_shape, label_map.image_on_map(), self.token_label_size, self.topk,
                              self.samples_per_token, self.logit_fill, self.num_classes)

    def __repr__(self):
        return (f'{self.__class__.__name__}(token_label_size={self.token_label_size}, topk={self.topk}, '
                f'samples_per_token={self.samples_per_token}, logit_fill={self.logit_fill}, '
                f'num_classes={self.num_classes})')


def token_label_targets(packed: Sequence[PackedLabelMap], device=None) -> Tensor:
    r"""Token labels ``(B, 2, topk, S, S)`` of a batch of packed maps, vectorised over the batch.

    The augmented image is cut into ``S x S`` token cells; each cell gets ``n x n`` evenly spaced
    sample points (``samples_per_token=2``: 4 points, at 1/4 and 3/4 of the cell on each axis).
    One batched matmul carries every point onto its sample's map; each point reads the four nearest
    map cells bilinearly (cell centres at ``(j + .5, i + .5)``, borders clamped; the official code
    reads the map with ``roi_align``, also bilinear). A top-k map cannot be interpolated as an
    array (indices are not numbers): each point contributes its 4 cells x k ``(class, weight x
    value)`` pairs, and the pairs of a token are summed per class (sorted by class, segment sums),
    so the cost is independent of the number of classes. Points inside the image but outside a
    ``'center_square'`` map take the nearest map border.

    Two readings of a top-k map (from :class:`TokenLabelTarget`'s ``logit_fill``):

    * ``None`` (default, the paper): each map cell's score is the teacher's softmax over its stored
      top-k logits (renormalised over those k); a token's score is the mean of the scores at its
      in-image sample points. Points outside the image (areas that rotate/shear/translate filled
      with ``pad_val``) are left out of the mean; a token with none inside gets all-zero
      probabilities (no token label). The token keeps its ``topk`` most probable classes,
      renormalised to sum 1.
    * a number (the official code, ``get_featuremaps`` + ``roi_align`` + ``softmax``): the stored
      logits are scattered into all ``num_classes`` classes, the others set to ``logit_fill``; a
      token's logits are the mean over its sample points (outside the image every class has logit
      ``logit_fill``), then a softmax over all ``num_classes`` classes. The output keeps the
      ``topk`` largest probabilities unnormalised: ``1 - sum`` is the mass of the other classes.

    Classes a token did not read enter its top-k (as the smallest such class indices) when it read
    fewer than ``topk`` classes (probability 0 in the paper's reading) or, in the official reading,
    when their probability ``exp(logit_fill) / Z`` beats that of a read class.

    Args:
        packed (Sequence[PackedLabelMap]): One per sample, with equal settings.
        device (torch.device, optional): Where to compute. Defaults to the maps' device.

    Returns:
        Tensor: float32 ``(B, 2, topk, S, S)``: ``[:, 0]`` the per-token probabilities of its top-k
        classes (largest first), ``[:, 1]`` their class indices (integers stored as float).
    """
    settings = {p.settings() for p in packed}
    if len(settings) != 1:
        raise ValueError(f'the samples of a batch were packed with different TokenLabelTarget settings: {settings}')
    groups = {}  # samples with equal map shapes are read together
    for i, p in enumerate(packed):
        groups.setdefault(tuple(p.label_map.shape), []).append(i)
    out = None
    for indices in groups.values():
        targets = _read_maps([packed[i] for i in indices], device)
        if out is None:
            out = targets.new_empty((len(packed), ) + targets.shape[1:])
        out[indices] = targets
    return out


def _read_maps(packed: List[PackedLabelMap], device) -> Tensor:
    """:func:`token_label_targets` of samples whose maps have one shape ``(2, k, h, w)``."""
    s, topk, n, fill, num_classes = packed[0].settings()
    device = device or packed[0].label_map.device
    # each map to float32 first: torch.stack of float16 maps fails under CPU bfloat16 autocast (--amp)
    maps = torch.stack([p.label_map.to(torch.float32) for p in packed]).to(device)
    B, _, k, h, w = maps.shape
    side = s * n

    # sample points: normalised grid -> image pixels -> map coordinates, one batched matmul
    scale = torch.tensor([[p.img_shape[1], p.img_shape[0], 1.] for p in packed], dtype=torch.float64)
    to_map = torch.stack([p.matrix for p in packed]) * scale[:, None, :]  # (B, 3, 3) = matrix @ diag
    token, sub = torch.arange(s, dtype=torch.float64) * n, torch.arange(n, dtype=torch.float64) + 0.5
    line = (token[:, None] + sub).div(side)  # (S, n): the coordinates of a token's points
    ys = line[:, None, :, None].expand(s, s, n, n)  # points ordered (token row, token col, i, j)
    xs = line[None, :, None, :].expand(s, s, n, n)
    grid = torch.stack([xs.flatten(), ys.flatten(), torch.ones(side * side, dtype=torch.float64)], 1)
    xy = (grid @ to_map[:, :2].transpose(1, 2)).to(device)  # (B, P, 2), P = S^2 n^2, token-major
    region = torch.tensor([p.image_on_map for p in packed], dtype=torch.float64, device=device)
    inside = ((xy >= region[:, None, :2]) & (xy < region[:, None, 2:])).all(-1).float().view(B, s * s, n * n)

    # weight of every point in its token
    if fill is None:  # mean over the token's in-image points
        point_weight = inside / inside.sum(2, keepdim=True).clamp(min=1)
    else:  # mean over all the token's points; outside ones hold logit_fill for every class
        point_weight = inside / n ** 2

    # the 4 map cells under every point (cell centres at integers, borders clamped) and their weights
    cells = xy.float() - 0.5
    low = cells.floor()
    frac = cells - low
    low = low.long()
    cx = torch.stack([low[..., 0].clamp(0, w - 1), (low[..., 0] + 1).clamp(0, w - 1)], -1)  # (B, P, 2)
    cy = torch.stack([low[..., 1].clamp(0, h - 1), (low[..., 1] + 1).clamp(0, h - 1)], -1)
    wx = torch.stack([1 - frac[..., 0], frac[..., 0]], -1)
    wy = torch.stack([1 - frac[..., 1], frac[..., 1]], -1)
    flat = (cy[..., :, None] * w + cx[..., None, :]).view(B, -1, 1).expand(-1, -1, k)  # (B, P * 4, k)
    weight = wy[..., :, None] * wx[..., None, :] * point_weight.view(B, -1, 1, 1)  # (B, P, 2, 2)

    # the (class, value) pairs of each token, cells first: (B, h * w, k) -> (B * S * S, n * n * 4 * k)
    logits, classes = maps[:, 0].flatten(2), maps[:, 1].flatten(2).long()  # (B, k, h * w)
    values = logits.softmax(1) if fill is None else logits - fill  # relative to the unstored classes
    values = values.transpose(1, 2).gather(1, flat) * weight.view(B, -1, 1)
    classes = classes.transpose(1, 2).gather(1, flat)
    values, classes = values.view(B * s * s, -1), classes.view(B * s * s, -1)
    classes, order = classes.sort(1)
    values = values.gather(1, order)
    run = torch.cat([classes.new_zeros(len(classes), 1), (classes[:, 1:] != classes[:, :-1]).long()], 1).cumsum(1)
    scores = torch.zeros_like(values).scatter_add_(1, run, values)  # per class read by the token
    run_classes = torch.zeros_like(classes).scatter_(1, run, classes)
    read = torch.arange(classes.shape[1], device=device) <= run[:, -1:]  # slots holding a class

    if fill is not None:  # softmax over all num_classes classes of the token's mean logits
        logit = scores + fill
        top = logit.masked_fill(~read, fill).amax(1, keepdim=True).clamp(min=fill)
        unread = torch.exp(fill - top)  # every class the token did not read has logit fill
        scores = torch.exp(logit - top)
        norm = (scores * read).sum(1, keepdim=True) + (num_classes - read.sum(1, keepdim=True)) * unread
        scores, unread = scores / norm, unread / norm
    else:
        unread = scores.new_zeros(len(scores), 1)
    # topk extra slots stand for unread classes, chosen when they beat the read ones or too few were read
    if fill is None:
        pad = torch.full_like(unread, -1.).expand(-1, topk)
    else:  # as many as there are unread classes
        unread_count = num_classes - read.sum(1, keepdim=True)
        pad = torch.where(torch.arange(topk, device=device) < unread_count, unread, -1.)
    scores = torch.cat([scores.masked_fill(~read, -1.), pad], 1)  # scores are >= 0
    read = torch.cat([read, read.new_zeros(len(read), topk)], 1)
    run_classes = torch.cat([run_classes, run_classes.new_zeros(len(read), topk)], 1)
    probs, slot = scores.topk(topk, 1)
    index = run_classes.gather(1, slot)
    padded = ~read.gather(1, slot)
    if padded.any():  # the smallest class indices the token did not read
        probs = torch.where(padded, unread.expand_as(probs), probs)
        index = torch.where(padded, _unread_classes(run_classes, read, padded), index)
    if fill is None:
        probs = probs / probs.sum(1, keepdim=True).clamp(min=1e-12)
    target = torch.stack([probs, index.to(probs.dtype)], 1)  # (B * S * S, 2, topk)
    return target.view(B, s, s, 2, topk).permute(0, 3, 4, 1, 2).contiguous()


def _unread_classes(run_classes: Tensor, read: Tensor, padded: Tensor) -> Tensor:
    """For every padded top-k slot, a class its token did not read (the smallest ones, in order)."""
    rows = padded.any(1).nonzero()[:, 0]
    candidates = torch.arange(run_classes.shape[1] + padded.shape[1], device=run_classes.device)
    seen = ((run_classes[rows, :, None] == candidates) & read[rows, :, None]).any(1)
    free = candidates.expand(len(rows), -1).masked_fill(seen, len(candidates)).sort(1)[0]
    index = torch.zeros_like(padded, dtype=run_classes.dtype)
    index[rows] = free.gather(1, padded[rows].long().cumsum(1).sub(1).clamp(min=0))
    return index
