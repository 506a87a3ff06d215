"""The official token-labeling targets (TokenLabeling ``tlt/data/mixup.py``: ``get_featuremaps``,
``get_label``): the stored top-k logits scattered into a C-class map of zeros, RoI-aligned on the crop
(S x S for the tokens, 1 x 1 for the class token), soft-maxed over all C classes.

The reference below is a direct transcription of that code on dense ``(B, C, h, w)`` maps with
torchvision's ``roi_align`` (boxes in its (x1, y1, x2, y2) order, i.e. the official crop with its
x/y swap corrected, as our reading keeps the correct crop).
"""

import numpy as np
import torch
from mmengine.registry import init_default_scope
from mmpretrain.structures import DataSample
from torchvision.ops import roi_align

from mmvitreg.datasets.label_maps import TokenLabelMap
from mmvitreg.datasets.token_label_target import TokenLabelTarget, relabel_targets, token_label_targets
from mmvitreg.models.data_preprocessors import TokenClsDataPreprocessor

H0, W0, OUT, C, K, MAP = 120, 200, 112, 50, 5, 18


def random_crops(rng, n):
    """Official-like random maps (top-5 of 50 classes on 18 x 18, fp16) and RandomResizedCrop boxes
    (top, left, height, width) of a 120 x 200 image, as TokenLabelMaps that went through the crop."""
    maps, boxes = [], []
    for _ in range(n):
        logits = -np.sort(-rng.normal(0.0, 3.0, (K, MAP, MAP)), 0)
        classes = np.stack([rng.choice(C, K, replace=False) for _ in range(MAP * MAP)], 1).reshape(K, MAP, MAP)
        label_map = TokenLabelMap(np.stack([logits, classes]).astype(np.float16), (H0, W0))
        area = rng.uniform(0.08, 1.0) * H0 * W0
        ratio = np.exp(rng.uniform(np.log(3 / 4), np.log(4 / 3)))
        ch, cw = min(np.sqrt(area / ratio), H0), min(np.sqrt(area * ratio), W0)
        top, left = rng.uniform(0, H0 - ch), rng.uniform(0, W0 - cw)
        label_map.compose(
            np.array([[cw / OUT, 0.0, left], [0.0, ch / OUT, top], [0.0, 0.0, 1.0]]), (H0, W0), (OUT, OUT)
        )
        maps.append(label_map)
        boxes.append((top / H0, left / W0, ch / H0, cw / W0))
    return maps, torch.tensor(boxes)


def official_targets(maps, coords, size):
    """Transcription of get_featuremaps + get_label (before label smoothing): ``(B, C, size * size)``."""
    topk = torch.stack([torch.from_numpy(m.label_map) for m in maps])
    label_maps = torch.zeros(len(maps), C, MAP, MAP, dtype=torch.float64)
    for label_map, label_topk in zip(label_maps, topk):
        label_map.scatter_(0, label_topk[1].long(), label_topk[0].double())
    top, left, h, w = coords.unbind(1)
    xyxy = torch.stack([left, top, left + w, top + h], 1)  # the official passes (top, left, ...): swapped
    boxes = torch.cat([torch.arange(len(maps)).view(-1, 1).double(), xyxy.double() * MAP - 0.5], 1)
    target = roi_align(label_maps, boxes, output_size=(size, size))
    return target.flatten(2).softmax(1)


def to_dense(target):
    """``(B, 2, K', ...)`` in the official reading's format -> ``(B, C, ...)`` probabilities."""
    probs, index = target[:, 0], target[:, 1].long()
    listed = index >= 0
    tail = (probs * ~listed).sum(1, keepdim=True)
    dense = tail.expand(-1, C, *tail.shape[2:]).clone()
    return dense.scatter_add(1, index.clamp(min=0), (probs - tail) * listed)


def test_official_token_and_relabel_targets_equal_the_official_formula():
    """Token labels (S = 14) and the ReLabel class-token target (1 x 1) match the transcription of the
    official code on random maps and crops to 1e-6, though no C x h x w map is built."""
    rng = np.random.default_rng(0)
    maps, coords = random_crops(rng, 8)
    transform = TokenLabelTarget(token_label_size=14, reading='official', num_classes=C)
    packed = [transform.pack(m, (OUT, OUT)) for m in maps]
    tokens = token_label_targets(packed)
    assert tokens.shape[:2] == (8, 2) and tokens.shape[-2:] == (14, 14)
    assert tokens.shape[2] < C  # listed classes + the tail slot, not all C
    ours = to_dense(tokens).flatten(2)
    ref = official_targets(maps, coords, 14)
    assert (ours - ref).abs().max() <= 1e-6
    torch.testing.assert_close(ours.sum(1), torch.ones(8, 196))
    relabel = relabel_targets(packed)
    assert relabel.dim() == 3
    ref_cls = official_targets(maps, coords, 1)[..., 0]
    assert (to_dense(relabel) - ref_cls).abs().max() <= 1e-6


def test_preprocessor_attaches_the_relabel_target():
    """TokenClsDataPreprocessor reads official maps into token_label and relabel_label."""
    init_default_scope('mmpretrain')
    maps, coords = random_crops(np.random.default_rng(1), 2)
    transform = TokenLabelTarget(token_label_size=7, reading='official', num_classes=C)
    samples = []
    for m in maps:
        sample = DataSample().set_gt_label(0)
        sample.set_field(transform.pack(m, (OUT, OUT)), 'token_label_map')
        samples.append(sample)
    data = TokenClsDataPreprocessor()(
        dict(inputs=[torch.zeros(3, OUT, OUT, dtype=torch.uint8)] * 2, data_samples=samples)
    )
    relabel = torch.stack([s.relabel_label for s in data['data_samples']])
    assert (to_dense(relabel) - official_targets(maps, coords, 1)[..., 0]).abs().max() <= 1e-6
    token_label = torch.stack([s.token_label for s in data['data_samples']])
    assert (to_dense(token_label).flatten(2) - official_targets(maps, coords, 7)).abs().max() <= 1e-6


def test_official_targets_train_lvvit_with_mixtoken():
    """The LV-ViT recipe's combination: official token labels and ReLabel target, beta 1, official
    smoothing, MixToken; one training step of a tiny LV-ViT gives finite losses and moves both heads."""
    from mmengine.optim import OptimWrapper
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS

    maps, _ = random_crops(np.random.default_rng(2), 4)
    transform = TokenLabelTarget(token_label_size=4, reading='official', num_classes=C)
    samples = []
    for i, m in enumerate(maps):
        sample = DataSample().set_gt_label(i)
        sample.set_field(transform.pack(m, (OUT, OUT)), 'token_label_map')
        samples.append(sample)
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=dict(
            type='mmvitreg.LVViT',
            img_size=32,
            patch_size=8,
            out_type='raw',
            arch=dict(
                embed_dims=16,
                num_layers=2,
                num_heads=2,
                feedforward_channels=32,
                stem=dict(channels=8, num_convs=3),
                skip_lam=2.0,
            ),
        ),
        head=dict(
            type='mmvitreg.TokenLabelHead',
            num_classes=C,
            in_channels=16,
            beta=1.0,
            cls_target='relabel',
            label_smooth_form='official',
        ),
        train_cfg=dict(mix=dict(type='mmvitreg.MixToken', patch_size=8)),
        data_preprocessor=dict(num_classes=C),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg)
    head_before = [p.detach().clone() for p in (model.head.layers.head.weight, model.head.aux_head.weight)]
    optim = OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1))
    inputs = [torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8) for _ in range(4)]
    log = model.train_step(dict(inputs=inputs, data_samples=samples), optim)
    assert {'loss_cls', 'loss_token'} <= set(log) and all(torch.isfinite(v) for v in log.values())
    assert all(
        not torch.equal(a, b) for a, b in zip(head_before, (model.head.layers.head.weight, model.head.aux_head.weight))
    )
