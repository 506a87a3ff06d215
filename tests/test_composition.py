"""Several trace users in one model: a head, auxiliary token losses and a target transform share one
trace filled once per forward; users the backbone cannot serve fail when the model is built."""

import numpy as np
import pytest
import torch
from mmengine.model import BaseModule
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmpretrain.structures import DataSample
from studies.trace_support import support_table

from mmvitreg.models.trace import TraceRequest, TraceUserError
from mmvitreg.registry import MODELS

C, IMG, P = 5, 16, 4
G = IMG // P


@MODELS.register_module(name='ToyTokenNormLoss', force=True)
class TokenNormLoss(BaseModule):
    """Reads the patch tokens of one block (as DiversePatch / DRLoc do)."""

    def __init__(self, layer=0, name='loss_token_norm'):
        super().__init__()
        self.trace_request = TraceRequest(token_layers=(layer,))
        self.layer, self.name, self.seen = layer, name, []

    def loss(self, feats, data_samples, trace):
        self.seen.append(trace)
        return {self.name: 1e-2 * trace.patch_tokens(self.layer).pow(2).mean()}


@MODELS.register_module(name='ToyAttentionLoss', force=True)
class AttentionLoss(BaseModule):
    """Reads the attention map of the last block (as the DeepViT regulariser does)."""

    trace_request = TraceRequest(attn_layers=(-1,))

    def __init__(self):
        super().__init__()
        self.seen = []

    def loss(self, feats, data_samples, trace):
        self.seen.append(trace)
        attn = trace.attn[max(trace.attn)]
        return {'loss_attn_entropy': -1e-2 * (attn * attn.clamp_min(1e-6).log()).sum(-1).mean()}


@MODELS.register_module(name='ToyFeatureMapLoss', force=True)
class FeatureMapLoss(BaseModule):
    """Reads only the backbone's last output (as DRLoc on a ResNet): no trace needed."""

    trace_request = TraceRequest()

    def __init__(self):
        super().__init__()
        self.seen = []

    def loss(self, feats, data_samples, trace):
        self.seen.append((trace, feats[-1].shape))
        return {'loss_featmap': 1e-3 * feats[-1].float().pow(2).mean()}


@MODELS.register_module(name='ToySmoothTarget', force=True)
class SmoothTarget(BaseModule):
    """A target transform (as TL-Align): rewrites gt_score after the backbone ran."""

    trace_request = TraceRequest(trace=True)

    def __init__(self, eps=0.2):
        super().__init__()
        self.eps, self.seen = eps, []

    def transform(self, trace, data_samples):
        self.seen.append(trace)
        for s in data_samples:
            s.set_gt_score((1 - self.eps) * s.gt_score + self.eps / s.gt_score.numel())


def tiny_lvvit(**kw):
    return dict(
        type='mmvitreg.LVViT',
        arch=dict(
            embed_dims=16,
            num_layers=3,
            num_heads=2,
            feedforward_channels=32,
            stem=dict(channels=8, num_convs=3),
            skip_lam=2.0,
        ),
        img_size=IMG,
        patch_size=P,
        **dict(dict(out_type='raw'), **kw),
    )


def tiny_swin():
    return dict(
        type='mmvitreg.SwinTransformer',
        arch=dict(embed_dims=16, depths=[2, 2], num_heads=[1, 2]),
        img_size=IMG,
        window_size=2,
        out_indices=(1,),
    )


def build(backbone, head, aux_losses=(), target_transform=None, token_mix=True, neck=None):
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone,
        neck=neck,
        head=head,
        aux_losses=list(aux_losses),
        target_transform=target_transform,
        train_cfg=dict(mix=dict(type='mmvitreg.MixToken', patch_size=P)) if token_mix else None,
        data_preprocessor=dict(num_classes=C),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


def token_label_head():
    return dict(type='mmvitreg.TokenLabelHead', num_classes=C, in_channels=16, beta=0.5)


def linear_head(in_channels=16, soft=True):
    """Soft targets when MixToken mixes the labels, hard ones otherwise."""
    return dict(
        type='mmpretrain.LinearClsHead',
        num_classes=C,
        in_channels=in_channels,
        loss=dict(type='mmpretrain.CrossEntropyLoss', use_soft=soft),
    )


def make_data(B=4, token_label=True, img=IMG, grid=G):
    samples = []
    for b in range(B):
        s = DataSample().set_gt_label(b % C)
        if token_label:
            s.set_field(
                torch.stack([torch.ones(1, grid, grid), torch.full((1, grid, grid), float(b % C))]), 'token_label'
            )
        samples.append(s)
    return dict(inputs=torch.randint(0, 255, (B, 3, img, img), dtype=torch.uint8), data_samples=samples)


def test_head_two_aux_losses_and_a_target_transform_train_on_one_trace():
    """LV-ViT + token-label head + MixToken + two aux losses + a target transform: one backbone pass per
    step fills the union of the taps; the transform runs before the head's loss; every loss is returned."""
    model = build(
        tiny_lvvit(),
        token_label_head(),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=0), dict(type='mmvitreg.ToyAttentionLoss')],
        target_transform=dict(type='mmvitreg.ToySmoothTarget'),
    )
    assert model.train_request == TraceRequest(token_layers=(0,), attn_layers=(-1,), facts={'cls_token'}, trace=True)
    calls, seen_targets = [], []
    model.backbone.register_forward_hook(
        lambda m, args, kwargs, out: calls.append(kwargs.get('trace')), with_kwargs=True
    )
    head_loss = model.head.loss
    model.head.loss = lambda feats, samples, **kw: (
        seen_targets.append(samples[0].gt_score.clone()),
        head_loss(feats, samples, **kw),
    )[1]
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    np.random.seed(0)
    for _ in range(3):
        log = model.train_step(make_data(), optim)
        assert set(log) == {'loss', 'loss_cls', 'loss_token', 'loss_token_norm', 'loss_attn_entropy'}
        assert all(np.isfinite(float(v)) for v in log.values())
    assert len(calls) == 3
    trace = calls[-1]
    assert trace is model.aux_losses[0].seen[-1] is model.aux_losses[1].seen[-1] is model.target_transform.seen[-1]
    assert set(trace.tokens) == {0} and set(trace.attn) == {2} and trace.mix is not None
    # the head trained on the transformed target: MixToken's mixed score, then smoothed by 0.2
    assert seen_targets[-1].min() >= 0.2 / C - 1e-6
    # every parameter of the backbone gets a gradient from the summed losses (train_step cleared them)
    losses = model(**model.data_preprocessor(make_data(), training=True), mode='loss')
    sum(losses.values()).backward()
    assert all(p.grad is not None for p in model.backbone.parameters() if p.requires_grad)


def test_prediction_builds_only_what_the_head_needs():
    model = build(tiny_lvvit(), token_label_head(), aux_losses=[dict(type='mmvitreg.ToyAttentionLoss')])
    traces = []
    model.backbone.register_forward_hook(
        lambda m, args, kwargs, out: traces.append(kwargs.get('trace')), with_kwargs=True
    )
    data = model.data_preprocessor(make_data(), training=False)
    model(**data, mode='predict')
    assert traces[-1].attn_layers == () and traces[-1].token_layers == () and not traces[-1].attn
    plain = build(
        tiny_lvvit(out_type='cls_token'),
        dict(type='mmpretrain.VisionTransformerClsHead', num_classes=C, in_channels=16),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss')],
        token_mix=False,
    )
    plain.backbone.register_forward_hook(
        lambda m, args, kwargs, out: traces.append(kwargs.get('trace')), with_kwargs=True
    )
    plain(**plain.data_preprocessor(make_data(), training=False), mode='predict')
    assert traces[-1] is None  # no user at inference: the ordinary, fused backbone


def test_swin_with_mix_token_and_a_token_loss():
    model = build(
        tiny_swin(),
        linear_head(32),
        neck=dict(type='mmpretrain.GlobalAveragePooling'),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=-1)],
    )
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    np.random.seed(1)
    log = model.train_step(make_data(token_label=False), optim)
    assert set(log) == {'loss', 'loss_cls', 'loss_token_norm'}
    trace = model.aux_losses[0].seen[-1]
    assert trace.grid == (G, G) and trace.mix.mask.shape == (4, G, G)
    assert set(trace.tokens) == {3} and trace.grids[3] == (G // 2, G // 2)


def test_the_logged_loss_is_the_total_the_backward_uses():
    """loss() returns the head's term under `loss`, as mmpretrain's ImageClassifier does; the log
    (parse_losses) shows the sum of every named term under `loss` and the head's term as `loss_cls` (under
    `loss` it would overwrite the total); a user returning a bare `loss` or a `loss_cls` is refused."""
    model = build(
        tiny_swin(),
        linear_head(32),
        neck=dict(type='mmpretrain.GlobalAveragePooling'),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=-1)],
    )
    np.random.seed(1)
    losses = model(**model.data_preprocessor(make_data(token_label=False), training=True), mode='loss')
    assert set(losses) == {'loss', 'loss_token_norm'}
    total, log = model.parse_losses(losses)
    torch.testing.assert_close(total, losses['loss'] + losses['loss_token_norm'])
    assert list(log) == ['loss', 'loss_cls', 'loss_token_norm']
    torch.testing.assert_close(log['loss_cls'], losses['loss'])
    assert float(log['loss']) == pytest.approx(float(total)) and float(log['loss']) > float(log['loss_cls'])
    clash = build(
        tiny_swin(),
        linear_head(32),
        neck=dict(type='mmpretrain.GlobalAveragePooling'),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=-1, name='loss_cls')],
    )
    with pytest.raises(KeyError, match="a part of the model returns 'loss_cls', the name the head's 'loss' is logged"):
        clash.train_step(make_data(token_label=False), OptimWrapper(torch.optim.SGD(clash.parameters(), lr=0.0)))
    bare = build(
        tiny_swin(),
        linear_head(32),
        neck=dict(type='mmpretrain.GlobalAveragePooling'),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=-1, name='loss')],
    )
    with pytest.raises(KeyError, match="TokenNormLoss returns a term named 'loss', the name of the logged total"):
        bare(**bare.data_preprocessor(make_data(token_label=False), training=True), mode='loss')


@pytest.mark.parametrize(
    'backbone,in_channels',
    [
        (
            dict(type='mmpretrain.ResNet', depth=18, num_stages=2, strides=(1, 2), dilations=(1, 1), out_indices=(1,)),
            128,
        ),
        (
            dict(
                type='mmpretrain.T2T_ViT',
                img_size=IMG,
                num_layers=1,
                embed_dims=64,
                layer_cfgs=dict(num_heads=2, feedforward_channels=64),
                t2t_cfg=dict(token_dims=16, use_performer=False),
            ),
            64,
        ),
        (
            dict(
                type='mmpretrain.ConvNeXt',
                arch=dict(depths=[1, 1], channels=[16, 32]),
                out_indices=(1,),
                gap_before_final_norm=False,
            ),
            32,
        ),
    ],
)
def test_feature_map_users_work_on_backbones_without_a_trace(backbone, in_channels):
    """An aux loss with an empty request reads the backbone's outputs: no trace, any mmpretrain backbone."""
    neck = None if 'T2T' in backbone['type'] else dict(type='mmpretrain.GlobalAveragePooling')
    head = (
        linear_head(in_channels, soft=False)
        if neck
        else dict(type='mmpretrain.VisionTransformerClsHead', num_classes=C, in_channels=in_channels)
    )
    model = build(backbone, head, aux_losses=[dict(type='mmvitreg.ToyFeatureMapLoss')], token_mix=False, neck=neck)
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    log = model.train_step(make_data(token_label=False, img=32), optim)
    assert set(log) == {'loss', 'loss_cls', 'loss_featmap'}
    trace, shape = model.aux_losses[0].seen[-1]
    assert trace is None and shape[0] == 4


def test_users_the_backbone_cannot_serve_fail_at_build_time_naming_both():
    resnet = dict(type='mmpretrain.ResNet', depth=18, num_stages=2, strides=(1, 2), dilations=(1, 1), out_indices=(1,))
    with pytest.raises(TraceUserError, match='TokenNormLoss.*ResNet'):
        build(resnet, linear_head(128), aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss')], token_mix=False)
    with pytest.raises(TraceUserError, match='MixToken.*ResNet'):
        build(resnet, linear_head(128))
    with pytest.raises(TraceUserError, match=r"TokenLabelHead needs the fact \['cls_token'\].*SwinTransformer"):
        build(tiny_swin(), token_label_head())
    with pytest.raises(TraceUserError, match='TokenNormLoss taps the tokens of a block that LVViT does not have'):
        build(tiny_lvvit(), token_label_head(), aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=7)])
    with pytest.raises(ValueError, match='at most one target transform'):
        build(tiny_lvvit(), token_label_head(), target_transform=[dict(type='mmvitreg.ToySmoothTarget')] * 2)


def test_two_users_returning_the_same_loss_name_is_an_error():
    model = build(
        tiny_lvvit(),
        token_label_head(),
        aux_losses=[dict(type='mmvitreg.ToyTokenNormLoss', layer=0), dict(type='mmvitreg.ToyTokenNormLoss', layer=1)],
    )
    with pytest.raises(KeyError, match="'loss_token_norm'"):
        model.train_step(make_data(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.1)))


def test_support_table_lists_what_each_backbone_serves():
    table = support_table(backbones=['SwinTransformer', 'LVViT', 'mmpretrain'])
    assert table['SwinTransformer']['MixToken'] == '✓'
    assert table['SwinTransformer']['TokenLabelHead'] == 'no cls_token'
    assert table['LVViT']['TokenLabelHead'] == '✓'
    assert table['mmpretrain.*']['DRLoc'] == '✓'  # the default DRLoc reads the backbone's output
    assert table['mmpretrain.*']['MixToken'] == 'no trace'
