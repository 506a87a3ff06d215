"""Per-token targets from a dense label map (token labeling, Eq. 6): packed per sample, computed per batch."""

from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

import torch
from mmcv.transforms import BaseTransform
from torch import Tensor

from mmvitreg.registry import TRANSFORMS

READINGS = ('topk', 'official')


@dataclass
class PackedLabelMap:
    """What :func:`token_label_targets` needs of one sample; made by :class:`TokenLabelTarget`.

    Attributes:
        label_map (Tensor): ``(2, k, h, w)`` the untouched map (top-k logits, class indices), as stored.
        matrix (Tensor): ``(3, 3)`` float64, from the augmented image's continuous pixel coordinates ``(x, y, 1)``
            to continuous map coordinates (map cell ``(i, j)`` covers ``[j, j+1) x [i, i+1)``).
        img_shape (tuple[int, int]): ``(H, W)`` of the augmented image.
        image_on_map (tuple[float, float, float, float]): ``(x0, y0, x1, y1)``, the original image in map
            coordinates; sample points outside it are outside the image.
        target (TokenLabelTarget): the settings it was packed with.
    """

    label_map: Tensor
    matrix: Tensor
    img_shape: Tuple[int, int]
    image_on_map: Tuple[float, float, float, float]
    target: 'TokenLabelTarget'

    @property
    def reading(self) -> str:
        return self.target.reading


@TRANSFORMS.register_module()
class TokenLabelTarget(BaseTransform):
    r"""Pack the dense label map and its geometry so that the batch can read it under every token.

    Token labeling (`Jiang et al. 2021 <https://arxiv.org/abs/2104.10858>`_, Eq. 6) gives token
    ``i`` of an ``S x S`` grid the teacher's score ``y^i`` of the image region under it:

    .. math::
        L_{aux} = \frac{1}{N} \sum_{i=1}^{N} H(X^i, y^i)

    This transform does no per-token work: it replaces ``token_label_map`` by its :class:`PackedLabelMap`
    (pack it with ``PackInputs(algorithm_keys=['token_label_map'])``);
    :class:`~mmvitreg.models.data_preprocessors.TokenClsDataPreprocessor` computes the batch's ``token_label``
    with :func:`token_label_targets` (and, for the official reading, ``relabel_label`` with
    :func:`relabel_targets`), which document the two readings of a top-k map.

    **Required keys:** ``img``, ``token_label_map``. **Modified key:** ``token_label_map``.

    Args:
        token_label_size (int): ``S``, tokens per side (14 for 224 px and patch 16). Defaults to 14.
        topk (int): Classes kept per token by the ``'topk'`` reading. Defaults to 5.
        samples_per_token (int): ``n``, sample points per token side of the ``'topk'`` reading (the
            official reading takes ``roi_align``'s adaptive count). Defaults to 2.
        reading (str): ``'topk'`` (the paper's: a renormalised top-k distribution per token) or
            ``'official'`` (the official code's ``get_featuremaps`` + ``roi_align`` + softmax over all
            classes, with a ReLabel class-token target). Defaults to ``'topk'``.
        num_classes (int, optional): Number of classes ``C``; required by ``reading='official'``.
            Defaults to None.
    """

    def __init__(
        self,
        token_label_size: int = 14,
        topk: int = 5,
        samples_per_token: int = 2,
        reading: str = 'topk',
        num_classes: Optional[int] = None,
    ):
        sizes = dict(token_label_size=token_label_size, topk=topk, samples_per_token=samples_per_token)
        for name, value in sizes.items():
            if not isinstance(value, int) or value < 1:
                raise ValueError(f'{name} must be a positive int, got {value!r}')
        if reading not in READINGS:
            raise ValueError(f'reading must be one of {READINGS}, got {reading!r}')
        if reading == 'official' and (not isinstance(num_classes, int) or num_classes < 1):
            raise ValueError(
                f"reading='official' (the softmax over all classes) needs num_classes, got num_classes={num_classes!r}"
            )
        self.token_label_size = token_label_size
        self.topk = topk
        self.samples_per_token = samples_per_token
        self.reading = reading
        self.num_classes = num_classes

    def transform(self, results: dict) -> dict:
        if 'token_label_map' not in results:
            raise KeyError(
                'TokenLabelTarget needs a label map: put mmvitreg.LoadTokenLabelMap right after LoadImageFromFile'
            )
        label_map = results['token_label_map']
        img_shape = tuple(results['img'].shape[:2])
        label_map.check_shape(img_shape)
        results['token_label_map'] = self.pack(label_map, img_shape)
        return results

    def pack(self, label_map, img_shape: Tuple[int, int]) -> PackedLabelMap:
        """The :class:`PackedLabelMap` of a :class:`~mmvitreg.datasets.label_maps.TokenLabelMap`."""
        matrix = torch.from_numpy(label_map.map_matrix())
        return PackedLabelMap(torch.from_numpy(label_map.label_map), matrix, img_shape, label_map.image_on_map(), self)

    def __repr__(self):
        return (
            f'{self.__class__.__name__}(token_label_size={self.token_label_size}, topk={self.topk}, '
            f'samples_per_token={self.samples_per_token}, reading={self.reading!r}, '
            f'num_classes={self.num_classes})'
        )


def token_label_targets(packed: Sequence[PackedLabelMap], device=None) -> Tensor:
    r"""Token labels ``(B, 2, K, S, S)`` of a batch of packed maps, vectorised over the batch.

    Each of the ``S x S`` token cells of the augmented image gets ``n x n`` evenly spaced sample points, carried onto
    its sample's map; each point reads the four nearest map cells bilinearly (borders clamped, as ``roi_align``). A
    top-k map cannot be interpolated as an array (indices are not numbers): each point contributes its 4 cells x k
    ``(class, weight x value)`` pairs, summed per class for each token, so the cost does not grow with ``C``.

    Two readings of a top-k map (:class:`TokenLabelTarget`'s ``reading``):

    * ``'topk'`` (default, the paper): ``n = samples_per_token``; each map cell's score is the teacher's softmax
      over its stored top-k logits; a token's score is the mean of the scores at its sample points inside the image
      (none inside: all-zero probabilities, no token label). The token keeps its ``topk`` most probable classes,
      renormalised to sum 1 (``K = topk``); unread classes fill the slots of a token that read fewer (probability
      0, smallest class indices first).
    * ``'official'`` (``tlt/data/mixup.py``: ``get_featuremaps`` scatters the stored logits into a ``C``-class map
      of zeros, ``roi_align(output_size=(S, S))`` on the crop, softmax over all ``C`` classes): a token's logit of
      class ``c`` is the mean of the bilinearly read logit map over its sample points, ``n`` per axis
      ``roi_align``'s adaptive ``ceil(roi side in map cells / S)``; points outside the image read logit 0 (the
      official RandAugment fills the map with 0). The classes no cell under the token stores share the mean logit 0,
      so the exact distribution is the ``R`` read classes plus one shared tail value, without a ``C x h x w`` map.
      ``K = max R + 1`` over the batch: slot ``r < R`` holds a read class and its probability, the slots after it
      class ``-1`` and probability 0, but the last holds the probability of **each** of the ``C - R`` unlisted
      classes.

    Args:
        packed (Sequence[PackedLabelMap]): One per sample, with equal settings.
        device (torch.device, optional): Where to compute. Defaults to the maps' device.

    Returns:
        Tensor: float32 ``(B, 2, K, S, S)``: ``[:, 0]`` probabilities, ``[:, 1]`` class indices
        (integers stored as float; -1 in the official reading's tail slots).
    """
    return _by_map_shape(packed, device, _read_maps)


def relabel_targets(packed: Sequence[PackedLabelMap], device=None) -> Tensor:
    """The official class-token (ReLabel) target ``(B, 2, K)`` of a batch (``reading='official'``): the official
    ``get_label`` RoI-aligns the token labels' ``C``-class logit map with ``output_size=(1, 1)`` and soft-maxes over
    all ``C`` classes; the format of one token of :func:`token_label_targets`' official reading."""
    if packed[0].reading != 'official':
        raise ValueError(
            "relabel_targets is the official class-token target: pack the maps with "
            "TokenLabelTarget(reading='official', num_classes=C)"
        )
    return _by_map_shape(packed, device, lambda group, dev: _read_official(group, 1, dev)[..., 0, 0])


def _by_map_shape(packed, device, read) -> Tensor:
    """``read`` every group of samples whose maps have one shape, put back in batch order."""
    settings = {repr(p.target) for p in packed}
    if len(settings) != 1:
        raise ValueError(f'the samples of a batch were packed with different TokenLabelTarget settings: {settings}')
    groups = {}  # samples with equal map shapes are read together
    for i, p in enumerate(packed):
        groups.setdefault(tuple(p.label_map.shape), []).append(i)
    parts = [(indices, read([packed[i] for i in indices], device)) for indices in groups.values()]
    slots = max(part.shape[2] for _, part in parts)  # official: groups may list different class counts
    out = None
    for indices, part in parts:
        if part.shape[2] < slots:  # pad with tail slots: class -1, probability 0, the tail value last
            pad = part.new_zeros((part.shape[0], 2, slots - part.shape[2]) + part.shape[3:])
            pad[:, 1] = -1.0
            part = torch.cat([part[:, :, :-1], pad, part[:, :, -1:]], 2)
        if out is None:
            out = part.new_empty((len(packed),) + part.shape[1:])
        out[indices] = part
    return out


def _to_map(packed: List[PackedLabelMap]) -> Tensor:
    """``(B, 3, 3)`` float64 from normalised image coordinates ``(x / W, y / H, 1)`` to map coordinates."""
    scale = torch.tensor([[p.img_shape[1], p.img_shape[0], 1.0] for p in packed], dtype=torch.float64)
    return torch.stack([p.matrix for p in packed]) * scale[:, None, :]


def _token_class_sums(maps: Tensor, xy: Tensor, point_weight: Tensor, values: Tensor, drop_class=None, dtype=None):
    """Per token, the sum over its sample points ``xy`` ``(B, T * P, 2)`` (token-major, weighted by ``point_weight``
    ``(B, T, P)``) of the bilinearly read ``values`` ``(B, k, h * w)``, per class of ``maps[:, 1]``
    ``(B, 2, k, h, w)``, in ``dtype`` (default float32). ``drop_class``: the class given to the pairs of weight 0,
    which then sort last and are not read (None: read with value 0).

    Returns:
        tuple: ``(B * T, L)`` ``scores`` (the summed value of each run of one class), ``classes`` and
        ``read`` (bool: the slot holds a class the token read); runs are compact, in class order.
    """
    B, _, k, h, w = maps.shape
    T, dtype = point_weight.shape[1], dtype or torch.float32
    cells = xy.to(dtype) - 0.5  # cell centres at integers
    low = cells.floor()
    frac = cells - low
    low = low.long()
    cx = torch.stack([low[..., 0].clamp(0, w - 1), (low[..., 0] + 1).clamp(0, w - 1)], -1)  # (B, TP, 2)
    cy = torch.stack([low[..., 1].clamp(0, h - 1), (low[..., 1] + 1).clamp(0, h - 1)], -1)
    wx = torch.stack([1 - frac[..., 0], frac[..., 0]], -1)
    wy = torch.stack([1 - frac[..., 1], frac[..., 1]], -1)
    flat = (cy[..., :, None] * w + cx[..., None, :]).view(B, -1, 1).expand(-1, -1, k)  # (B, TP * 4, k)
    weight = wy[..., :, None] * wx[..., None, :] * point_weight.to(dtype).view(B, -1, 1, 1)  # (B, TP, 2, 2)

    classes = maps[:, 1].flatten(2).long().transpose(1, 2).gather(1, flat)  # (B, TP * 4, k)
    pair_weight = weight.view(B, -1, 1).expand_as(classes)
    values = values.to(dtype).transpose(1, 2).gather(1, flat) * pair_weight
    if drop_class is not None:
        classes = classes.masked_fill(pair_weight == 0, drop_class)
    values, classes = values.reshape(B * T, -1), classes.reshape(B * T, -1)
    classes, order = classes.sort(1)
    values = values.gather(1, order)
    run = torch.cat([classes.new_zeros(len(classes), 1), (classes[:, 1:] != classes[:, :-1]).long()], 1).cumsum(1)
    scores = torch.zeros_like(values).scatter_add_(1, run, values)
    run_classes = torch.zeros_like(classes).scatter_(1, run, classes)
    read = torch.arange(classes.shape[1], device=classes.device) <= run[:, -1:]
    if drop_class is not None:
        read &= run_classes != drop_class
    return scores, run_classes, read


def _sample(packed: List[PackedLabelMap], to_map: Tensor, s: int, counts: Tensor, device):
    """The maps and the sample points of every token of an ``s x s`` grid: ``counts`` ``(B, 2)`` per token side along
    x and y for each sample, at ``(j + 0.5) / n`` of the token on each axis; ``to_map``: :func:`_to_map`.

    Returns:
        tuple: ``maps`` ``(B, 2, k, h, w)`` float32 on ``device`` (default: theirs); ``xy`` ``(B, s * s * P, 2)``
        float64 map coordinates with ``P = max nx * max ny`` points per token, token-major (row, col, then the
        token's points); ``inside`` ``(B, s * s, P)`` float, 1 where a point is one of its sample's (not padding)
        and lies inside its original image.
    """
    B = len(to_map)
    nx, ny = int(counts[:, 0].max()), int(counts[:, 1].max())
    token = torch.arange(s, dtype=torch.float64)

    def line(n_max, n):  # (B, s, n_max) positions along one axis, and their validity
        sub = torch.arange(n_max, dtype=torch.float64)
        n = n.to(torch.float64)[:, None, None]
        return (token[None, :, None] + (sub + 0.5)[None, None, :] / n) / s, (sub[None, None, :] < n)

    px, vx = line(nx, counts[:, 0])
    py, vy = line(ny, counts[:, 1])
    shape = (B, s, s, ny, nx)  # (sample, token row, token col, point row, point col)
    xs = px[:, None, :, None, :].expand(shape)
    ys = py[:, :, None, :, None].expand(shape)
    valid = (vx[:, None, :, None, :] & vy[:, :, None, :, None]).expand(shape).reshape(B, s * s, ny * nx)
    xy = xs.reshape(B, -1, 1) * to_map[:, None, :2, 0] + ys.reshape(B, -1, 1) * to_map[:, None, :2, 1]
    device = device or packed[0].label_map.device
    maps = torch.stack([p.label_map.float() for p in packed]).to(device)  # float16 maps cannot stack under --amp
    xy = (xy + to_map[:, None, :2, 2]).to(device)
    region = torch.tensor([p.image_on_map for p in packed], dtype=torch.float64, device=device)
    inside = ((xy >= region[:, None, :2]) & (xy < region[:, None, 2:])).all(-1).view(valid.shape) & valid.to(device)
    return maps, xy, inside.float()


def _read_maps(packed: List[PackedLabelMap], device) -> Tensor:
    """:func:`token_label_targets` of samples whose maps have one shape ``(2, k, h, w)``."""
    s, topk, n = packed[0].target.token_label_size, packed[0].target.topk, packed[0].target.samples_per_token
    if packed[0].reading == 'official':
        return _read_official(packed, s, device)
    B = len(packed)
    maps, xy, inside = _sample(packed, _to_map(packed), s, torch.full((B, 2), n), device)
    point_weight = inside / inside.sum(2, keepdim=True).clamp(min=1)  # mean over the token's in-image points
    values = maps[:, 0].flatten(2).softmax(1)  # each cell: its teacher softmax over the stored k
    scores, run_classes, read = _token_class_sums(maps, xy, point_weight, values)

    # topk extra slots stand for unread classes (probability 0), chosen when too few were read
    scores = torch.cat([scores.masked_fill(~read, -1.0), scores.new_full((len(scores), topk), -1.0)], 1)
    read = torch.cat([read, read.new_zeros(len(read), topk)], 1)
    run_classes = torch.cat([run_classes, run_classes.new_zeros(len(read), topk)], 1)
    probs, slot = scores.topk(topk, 1)
    index = run_classes.gather(1, slot)
    padded = ~read.gather(1, slot)
    if padded.any():  # the smallest class indices the token did not read
        probs = probs.masked_fill(padded, 0.0)
        index = torch.where(padded, _unread_classes(run_classes, read, padded), index)
    probs = probs / probs.sum(1, keepdim=True).clamp(min=1e-12)
    target = torch.stack([probs, index.to(probs.dtype)], 1)  # (B * S * S, 2, topk)
    return target.view(B, s, s, 2, topk).permute(0, 3, 4, 1, 2).contiguous()


def _read_official(packed: List[PackedLabelMap], s: int, device) -> Tensor:
    """The official reading (see :func:`token_label_targets`) on an ``s x s`` grid: ``(B, 2, K, s, s)``."""
    num_classes = packed[0].target.num_classes
    B = len(packed)
    to_map = _to_map(packed)
    # roi_align(sampling_ratio=-1, aligned=False): ceil(roi side / s) points per bin side, the roi
    # side at least one map cell; the sides are the map lengths of the image's x and y axes
    sides = to_map[:, :2, :2].norm(dim=1).clamp(min=1.0)
    counts = torch.ceil(sides / s - 1e-9).long().clamp(min=1)
    maps, xy, inside = _sample(packed, to_map, s, counts, device)
    point_weight = inside / counts.prod(1).to(inside).view(B, 1, 1)  # a mean over all points
    # float64: the softmax turns logit rounding (values up to ~10) into probability errors
    scores, run_classes, read = _token_class_sums(
        maps, xy, point_weight, maps[:, 0].flatten(2), drop_class=num_classes, dtype=torch.float64
    )
    # softmax over all C classes; the unread ones have logit 0
    top = scores.masked_fill(~read, 0.0).amax(1, keepdim=True).clamp(min=0.0)
    exp = torch.exp(scores - top) * read
    tail = torch.exp(-top)
    count = read.sum(1, keepdim=True)
    norm = exp.sum(1, keepdim=True) + (num_classes - count) * tail
    width = int(count.max())
    probs = torch.cat([(exp / norm)[:, :width], tail / norm], 1).float()  # read classes: compact, first
    index = torch.cat(
        [run_classes[:, :width].masked_fill(~read[:, :width], -1), run_classes.new_full((len(read), 1), -1)], 1
    )
    target = torch.stack([probs, index.to(probs.dtype)], 1)  # (B * s * s, 2, K)
    return target.view(B, s, s, 2, width + 1).permute(0, 3, 4, 1, 2).contiguous()


def _unread_classes(run_classes: Tensor, read: Tensor, padded: Tensor) -> Tensor:
    """For every padded top-k slot, a class its token did not read (the smallest ones, in order)."""
    rows = padded.any(1).nonzero()[:, 0]
    candidates = torch.arange(run_classes.shape[1] + padded.shape[1], device=run_classes.device)
    seen = ((run_classes[rows, :, None] == candidates) & read[rows, :, None]).any(1)
    free = candidates.expand(len(rows), -1).masked_fill(seen, len(candidates)).sort(1)[0]
    index = torch.zeros_like(padded, dtype=run_classes.dtype)
    index[rows] = free.gather(1, padded[rows].long().cumsum(1).sub(1).clamp(min=0))
    return index
