"""DeepViT's cosine-similarity regulariser (official dvit_repo loss/cross_entropy.py
SoftTargetCrossEntropyCosReg, cos_reg_component 12), read through the token trace as an auxiliary loss
of TokenClassifier, and the official 32B recipe that turns it on."""

import numpy as np
import pytest
import torch
from conftest import CONFIGS
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmpretrain.structures import DataSample

from mmvitreg.models.losses import AttentionCosineLoss
from mmvitreg.models.trace import TokenTrace, TraceRequest


def official_cos_reg(atten, n_comn):
    """Transcription of the regulariser term of SoftTargetCrossEntropyCosReg.forward."""
    dis_fn = torch.nn.CosineSimilarity(dim=1)
    cos_loss = 0
    for i in range(n_comn):
        cos_loss += dis_fn(atten[i], atten[i + 1])
    return 0.1 * cos_loss.mean() / n_comn


def test_equals_the_official_loss_on_random_maps():
    """0.1 * mean over (B, N, N) of the sum over 12 consecutive pairs of the cosine across heads, / 12;
    blocks after the 13th are not read."""
    g = torch.Generator().manual_seed(0)
    maps = [torch.randn(3, 4, 9, 9, generator=g) for _ in range(16)]  # re-attention maps may be negative
    loss = AttentionCosineLoss()
    assert loss.trace_request == TraceRequest(attn_layers=tuple(range(13)), facts={'isotropic'})
    trace = TokenTrace(attn=dict(enumerate(maps)))
    out = loss.loss((), [], trace)
    assert set(out) == {'loss_attn_cos'}
    torch.testing.assert_close(out['loss_attn_cos'], official_cos_reg(maps, 12))
    maps[13] = maps[13] * 0 + 5  # outside the 12 pairs
    torch.testing.assert_close(
        loss.loss((), [], TokenTrace(attn=dict(enumerate(maps))))['loss_attn_cos'], out['loss_attn_cos']
    )
    few = AttentionCosineLoss(num_pairs=2, loss_weight=0.3)
    torch.testing.assert_close(few.loss((), [], trace)['loss_attn_cos'], 3 * official_cos_reg(maps, 2))
    with pytest.raises(ValueError, match='num_pairs'):
        AttentionCosineLoss(num_pairs=0)


def tiny_deepvit_classifier(num_pairs=2):
    backbone = dict(
        type='mmvitreg.DeepViT',
        img_size=32,
        patch_size=8,
        out_type='cls_token',
        arch=dict(embed_dims=24, num_layers=3, num_heads=3, feedforward_channels=48, attn_types=['reattn'] * 3),
    )
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone,
        head=dict(type='mmpretrain.VisionTransformerClsHead', num_classes=10, in_channels=24),
        aux_losses=[dict(type='mmvitreg.AttentionCosineLoss', num_pairs=num_pairs)],
        data_preprocessor=dict(num_classes=10, mean=[127.5] * 3, std=[127.5] * 3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


def digits_batch(n=8):
    from digits import load_digit_scans, upscale_scan

    scans, labels = load_digit_scans()
    imgs = [
        torch.from_numpy(np.repeat((255 * upscale_scan(scans[i], 32))[None], 3, 0).astype(np.uint8)) for i in range(n)
    ]
    return dict(inputs=imgs, data_samples=[DataSample().set_gt_label(int(labels[i])) for i in range(n)])


def test_trains_a_deepvit_on_digits_through_the_attention_trace():
    """One backbone pass records blocks 0..2's re-attention maps; the regulariser equals the official
    formula on them and its gradient reaches the re-attention transform."""
    model = tiny_deepvit_classifier()
    seen = []
    model.backbone.register_forward_hook(
        lambda m, args, kwargs, out: seen.append(kwargs.get('trace')), with_kwargs=True
    )
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    log = model.train_step(digits_batch(), optim)
    assert set(log) == {'loss', 'loss_cls', 'loss_attn_cos'} and len(seen) == 1  # 'loss': the total
    trace = seen[0]
    assert set(trace.attn) == {0, 1, 2} and trace.attn[0].shape == (8, 3, 17, 17)
    torch.testing.assert_close(log['loss_attn_cos'], official_cos_reg([trace.attn[i].detach() for i in range(3)], 2))
    data = model.data_preprocessor(digits_batch(), True)
    model.zero_grad()
    losses = model.loss(data['inputs'], data['data_samples'])
    losses['loss_attn_cos'].backward()
    assert model.backbone.layers[0].attn.reatten_matrix.weight.grad.abs().sum() > 0
    assert model.head.layers.head.weight.grad is None  # the regulariser does not reach the head


def test_32b_config_is_the_official_32b_script():
    """configs/deepvit/deepvit-32b_8xb32_in1k.py = scripts/DeepViT_32B_pure_transformer.yaml: mixup 0.1,
    cutmix 0, AMP, the regulariser on 12 pairs with weight 0.1; it builds and trains on the meta device."""
    from mmvitreg.utils import load_config

    cfg = load_config(str(CONFIGS / 'deepvit' / 'deepvit-32b_8xb32_in1k.py'))
    assert cfg.model.train_cfg.augments == [dict(type='Mixup', alpha=0.1)]
    assert cfg.model.aux_losses == [dict(type='mmvitreg.AttentionCosineLoss', num_pairs=12, loss_weight=0.1)]
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper'
    cfg.model.data_preprocessor = cfg.data_preprocessor
    with DefaultScope.overwrite_default_scope('mmpretrain'), torch.device('meta'):
        model = MMPRETRAIN_MODELS.build(cfg.model)
        assert model.train_request.attn_layers == tuple(range(13))
        samples = [DataSample().set_gt_score(torch.full((1000,), 1e-3)) for _ in range(2)]
        losses = model.loss(torch.empty(2, 3, 224, 224), samples)
    assert set(losses) == {'loss', 'loss_attn_cos'}  # the head's CE (mmpretrain's name) and the regulariser
