"""MixToken (LV-ViT paper Eq. 8-10): box on the token grid, M_bar from the clipped box, target mixing."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from mmpretrain.models.utils import ClsDataPreprocessor
from mmpretrain.structures import DataSample

from mmvitreg.models.data_preprocessors import TokenClsDataPreprocessor
from mmvitreg.models.heads import TokenLabelHead
from mmvitreg.models.mixing import MixToken
from mmvitreg.models.trace import TokenTrace
from mmvitreg.registry import MODELS


def test_box_on_token_grid_follows_cutmix_sampling():
    """One lam ~ Beta(1, 1) and one CutMix box on the (H/16, W/16) grid for the batch; flip partner."""
    mix = MixToken(patch_size=16)
    for seed in range(20):
        np.random.seed(seed)
        plan = mix.plan(torch.zeros(4, 3, 224, 160))
        np.random.seed(seed)  # the official / CutMix sampling, by hand
        lam = np.random.beta(1.0, 1.0)
        cut_h, cut_w = int(14 * np.sqrt(1 - lam)), int(10 * np.sqrt(1 - lam))
        cy, cx = np.random.randint(0, 14), np.random.randint(0, 10)
        y1, y2 = np.clip(cy - cut_h // 2, 0, 14), np.clip(cy + cut_h // 2, 0, 14)
        x1, x2 = np.clip(cx - cut_w // 2, 0, 10), np.clip(cx + cut_w // 2, 0, 10)
        expected = torch.ones(14, 10)
        expected[y1:y2, x1:x2] = 0
        assert plan.mask.shape == (4, 14, 10)
        assert torch.equal(plan.mask, expected.expand(4, 14, 10))
        assert plan.index.tolist() == [3, 2, 1, 0]
        # Eq. 10: M_bar is the mean of M, i.e. 1 - clipped box area / N
        area = (y2 - y1) * (x2 - x1)
        torch.testing.assert_close(plan.lam, torch.full((4,), 1 - area / 140.0))


def test_permute_partner_and_registry():
    np.random.seed(0)
    torch.manual_seed(0)
    mix = MODELS.build(dict(type='mmvitreg.MixToken', partner='permute', patch_size=4))
    plan = mix.plan(torch.zeros(8, 3, 32, 32))
    assert sorted(plan.index.tolist()) == list(range(8))
    assert plan.mask.shape == (8, 8, 8)


def test_token_label_mixing_equals_c_dim_mixing_token_by_token():
    """Eq. 9: the head's loss equals the soft CE against Y_hat = Y1*M + Y2*(1-M) built token by token."""
    B, G, C, D, K = 4, 3, 7, 5, 3
    g = torch.Generator().manual_seed(0)
    feats = (torch.randn(B, 1 + G * G, D, generator=g),)
    samples = []
    for b in range(B):
        p = torch.rand(K, G, G, generator=g)
        idx = torch.stack([torch.randperm(C, generator=g)[:K] for _ in range(G * G)], 1).view(K, G, G)
        sample = DataSample().set_gt_label(b)
        sample.set_field(torch.stack([p / p.sum(0), idx.float()]), 'token_label')
        samples.append(sample)
    np.random.seed(3)
    plan = MixToken(patch_size=1, partner='permute').plan(torch.zeros(B, 3, G, G))
    plan.mask = plan.mask.clone()
    plan.mask[0, 0, 0] = 0.25  # a soft mask value: Eq. 9 holds for any M
    head = TokenLabelHead(num_classes=C, in_channels=D, beta=1.0, token_label_smooth_val=0.1)
    loss = head.loss(
        feats, samples, TokenTrace(mix=plan, grid=(G, G), num_layers=1, grids={0: (G, G)}, num_extra_tokens=1)
    )['loss_token']

    aux = head.aux_head(feats[0][:, 1:])
    ref = []
    for b in range(B):
        for t in range(G * G):
            r, c = divmod(t, G)

            def onehot_label(i):
                y = torch.zeros(C)
                y[samples[i].token_label[1, :, r, c].long()] = samples[i].token_label[0, :, r, c]
                return y

            m = plan.mask[b, r, c]
            y_hat = m * onehot_label(b) + (1 - m) * onehot_label(int(plan.index[b]))
            y_hat = 0.9 * y_hat + 0.1 / C
            ref.append(-(y_hat * F.log_softmax(aux[b, t], -1)).sum())
    torch.testing.assert_close(loss, torch.stack(ref).mean())


def test_preprocessor_mixes_cls_target_by_mask_mean_and_returns_plan():
    """Eq. 10: y_cls = M_bar * y1 + (1 - M_bar) * y2; images stay unmixed (the backbone mixes tokens)."""
    pre = TokenClsDataPreprocessor(num_classes=5, mix=dict(type='mmvitreg.MixToken', patch_size=8))
    imgs = torch.randint(0, 255, (4, 3, 32, 32), dtype=torch.uint8)
    labels = [0, 1, 2, 3]
    data = dict(inputs=imgs, data_samples=[DataSample().set_gt_label(i) for i in labels])
    np.random.seed(1)
    out = pre(data, training=True)
    plan = out['mix_plan']
    assert torch.equal(out['inputs'], imgs.float())
    onehot = F.one_hot(torch.tensor(labels), 5).float()
    lam = plan.lam[:, None]
    expected = lam * onehot + (1 - lam) * onehot[plan.index]
    torch.testing.assert_close(torch.stack([s.gt_score for s in out['data_samples']]), expected)
    val = pre(dict(inputs=imgs, data_samples=[DataSample().set_gt_label(i) for i in labels]), training=False)
    assert 'mix_plan' not in val


def test_errors():
    assert MixToken(patch_size=16).plan(torch.zeros(2, 3, 40, 32)).mask.shape == (2, 3, 2)  # padded, as the backbone
    with pytest.raises(ValueError, match='partner'):
        MixToken(partner='roll')
    with pytest.raises(KeyError, match='mmvitreg.MixToken is not in the mmpretrain::batch augment registry'):
        ClsDataPreprocessor(num_classes=3, batch_augments=dict(augments=[dict(type='mmvitreg.MixToken')]))(
            dict(inputs=torch.zeros(2, 3, 32, 32), data_samples=[DataSample().set_gt_label(0)] * 2), True
        )
    with pytest.raises(ValueError, match='batch_augments'):
        TokenClsDataPreprocessor(
            num_classes=3,
            mix=dict(type='mmvitreg.MixToken'),
            batch_augments=dict(augments=[dict(type='Mixup', alpha=0.8)]),
        )
