"""Behaviours of the target transforms that the mutation run (``tools/misc/mutation_score.py``, docs/mutation.md)
found untested: TL-Align's logged shift and smallest depth, and token labels of a batch whose label maps differ in
shape. Each test names the equation or behaviour it checks."""

import dataclasses

import numpy as np
import torch
from mmpretrain.structures import DataSample
from test_official_token_labels import OUT, C, random_crops, to_dense

from mmvitreg.datasets.token_label_target import TokenLabelTarget, token_label_targets
from mmvitreg.models.target_transforms import TLAlign
from mmvitreg.models.trace import MixPlan, TokenTrace


def test_tl_align_target_and_logged_shift_are_the_aligned_and_the_area_mix():
    """TL-Align: each sample's target is w y_own + (1 - w) y_partner with w the cls token's aligned own share, and
    tla_shift = mean_b 0.5 |aligned - area|_1 = mean_b |w_b - lam_b| for a pair of two classes (lam: the area)."""
    mask = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]]])  # lam = 1/4, 3/4
    aligned = torch.tensor([0.6, 0.5])
    labels = torch.stack([aligned, 1 - aligned], -1)[:, None].expand(2, 5, 2)  # (B, 1 + 4 tokens, own/partner)
    trace = TokenTrace(
        mix=MixPlan(index=torch.tensor([1, 0]), mask=mask), num_layers=1, num_extra_tokens=1, streamed={0: labels}
    )
    samples = [DataSample().set_gt_label(y).set_gt_score(torch.zeros(4)) for y in (1, 2)]
    log = TLAlign().transform(trace, samples)
    torch.testing.assert_close(log['tla_shift'], torch.tensor((0.35 + 0.25) / 2))
    torch.testing.assert_close(samples[0].gt_score, torch.tensor([0.0, 0.6, 0.4, 0.0]))
    torch.testing.assert_close(samples[1].gt_score, torch.tensor([0.0, 0.5, 0.5, 0.0]))


def test_tl_align_takes_a_one_block_backbone():
    """TL-Align runs Eq. 9/11 once per block: one block is the smallest depth a given num_layers may state."""
    assert TLAlign(num_layers=1).num_layers == 1


def test_official_token_labels_of_a_batch_with_maps_of_two_shapes_equal_each_sample_alone():
    """Official reading (K = listed classes + one tail slot): samples whose maps differ in shape (here top-5 and
    top-2 logits) are read apart and padded with tail slots (class -1, probability 0 before the last), so each row
    is its sample's target."""
    maps, _ = random_crops(np.random.default_rng(1), 2)
    transform = TokenLabelTarget(token_label_size=7, reading='official', num_classes=C)
    a, b = (transform.pack(m, (OUT, OUT)) for m in maps)
    b = dataclasses.replace(b, label_map=b.label_map[:, :2].contiguous())
    batch = token_label_targets([a, b])
    alone = [token_label_targets([p]) for p in (a, b)]
    assert alone[0].shape[2] != alone[1].shape[2] and batch.shape[2] == max(t.shape[2] for t in alone)
    for row, single in zip(batch, alone):
        torch.testing.assert_close(to_dense(row[None]), to_dense(single))
    probs, index = batch[:, 0], batch[:, 1]
    assert index.min() == -1 and (probs[:, :-1][index[:, :-1] == -1] == 0).all()  # unlisted slots: -1, 0
