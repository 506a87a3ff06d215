"""TokenClassifier: the trace wiring (plan in from the preprocessor, taps out to the head)."""

import numpy as np
import pytest
import torch
import torch.nn as nn
from mmengine.model import BaseModule
from mmpretrain.models.heads import ClsHead
from mmpretrain.structures import DataSample

from mmvitreg.models.classifiers import TokenClassifier
from mmvitreg.models.trace import MixPlan, TokenTrace, TraceRequest, TraceSpec, TraceUserError

C, D, P, IMG = 5, 8, 4, 16  # classes, token dim, patch size, image size
G = IMG // P


class TraceBackbone(BaseModule):
    """A two-block toy ViT filling the trace through its recording API (mix before pos-embed, taps, grid)."""

    def __init__(self, cls_only=False):
        super().__init__()
        self.cls_only = cls_only
        self.proj = nn.Conv2d(3, D, P, P)
        self.cls_token = nn.Parameter(torch.randn(1, 1, D))
        self.pos_embed = nn.Parameter(torch.randn(1, 1 + G * G, D))
        self.blocks = nn.ModuleList([nn.Linear(D, D), nn.Linear(D, D)])
        self.ln = nn.LayerNorm(D)
        self.traces = []
        self.trace_spec = TraceSpec(
            num_blocks=2,
            channels=(D, D),
            num_extra_tokens=1,
            services={'mix'},
            facts={'cls_token'},
            out_types=('cls_token', 'raw'),
            out_type='cls_token' if cls_only else 'raw',
        )

    def forward(self, x, trace=None):
        self.traces.append(trace)
        t = self.proj(x)
        grid = tuple(t.shape[-2:])
        t = t.flatten(2).transpose(1, 2)
        if trace is not None:
            t = trace.start(self.trace_spec, t, grid)
        x = torch.cat([self.cls_token.expand(len(t), -1, -1), t], 1) + self.pos_embed
        for i, blk in enumerate(self.blocks):
            run = lambda x, need_attn, ride: x + blk(x)  # noqa: E731
            x = run(x, False, None) if trace is None else trace.block(i, run, x, grid)
        x = self.ln(x)
        return (x[:, 0] if self.cls_only else x,)


class PlainBackbone(TraceBackbone):
    """The same model with no trace."""

    def __init__(self, cls_only=False):
        super().__init__(cls_only)
        self.trace_spec = None


class TapHead(ClsHead):
    """A head that asks for the tokens of the last block (as DiversePatch / DRLoc heads will)."""

    trace_request = TraceRequest(token_layers=(-1,))

    def __init__(self):
        super().__init__(loss=dict(type='mmpretrain.CrossEntropyLoss', use_soft=True))
        self.fc = nn.Linear(D, C)
        self.seen = []

    def forward(self, feats, trace=None):
        return self.fc(feats[-1][:, 0])

    def loss(self, feats, data_samples, trace):
        self.seen.append(trace)
        return dict(loss_tap=trace.patch_tokens(1).pow(2).mean())


def make_data(B=4, token_label=True):
    samples = []
    for b in range(B):
        s = DataSample().set_gt_label(b % C)
        if token_label:
            s.set_field(torch.stack([torch.ones(1, G, G), torch.full((1, G, G), float(b % C))]), 'token_label')
        samples.append(s)
    return dict(inputs=torch.randint(0, 255, (B, 3, IMG, IMG), dtype=torch.uint8), data_samples=samples)


def token_label_head(**kw):
    return dict(type='mmvitreg.TokenLabelHead', num_classes=C, in_channels=D, **kw)


def build(backbone=None, head=None, token_mix=True):
    train_cfg = dict(mix=dict(type='mmvitreg.MixToken', patch_size=P)) if token_mix else None
    return TokenClassifier(
        backbone=backbone or TraceBackbone(),
        head=head or token_label_head(),
        train_cfg=train_cfg,
        data_preprocessor=dict(num_classes=C),
    )


def test_loss_hands_the_plan_to_the_backbone_and_the_trace_to_the_head():
    model = build()
    np.random.seed(0)
    data = model.data_preprocessor(make_data(), training=True)
    losses = model(**data, mode='loss')
    assert set(losses) == {'loss_cls', 'loss_token'}
    trace = model.backbone.traces[-1]
    assert trace.mix is data['mix_plan'] and trace.grid == (G, G)
    losses['loss_token'].backward()
    assert model.backbone.proj.weight.grad is not None


def test_predict_and_tensor_modes_use_an_unmixed_trace():
    model = build()
    data = model.data_preprocessor(make_data(), training=False)
    preds = model(**data, mode='predict')
    assert len(preds) == 4 and preds[0].pred_score.shape == (C,)
    assert model.backbone.traces[-1].mix is None
    score = model(data['inputs'], mode='tensor')
    feats = model.extract_feat(data['inputs'], trace=TokenTrace())
    torch.testing.assert_close(score, model.head(feats, model.backbone.traces[-1]))


def test_head_declares_its_taps():
    """The classifier knows no technique: it records what the head asks for."""
    model = build(head=TapHead(), token_mix=False)
    data = model.data_preprocessor(make_data(token_label=False), training=True)
    assert 'mix_plan' not in data
    model(**data, mode='loss')
    trace = model.head.seen[-1]
    assert set(trace.tokens) == {1} and trace.tokens[1].shape == (4, 1 + G * G, D)


def test_plain_head_with_mix_token_trains_on_eq10_targets():
    """A head without a trace still gets MixToken: mixed tokens in the backbone, mixed gt_score (Eq. 10)."""
    head = dict(
        type='mmpretrain.LinearClsHead',
        num_classes=C,
        in_channels=D,
        loss=dict(type='mmpretrain.CrossEntropyLoss', use_soft=True),
    )
    backbone = TraceBackbone(cls_only=True)
    model = build(backbone=backbone, head=head)
    np.random.seed(0)
    data = model.data_preprocessor(make_data(token_label=False), training=True)
    assert set(model(**data, mode='loss')) == {'loss'}  # the head's term, named as mmpretrain names it
    assert backbone.traces[-1].mix is data['mix_plan']
    assert data['data_samples'][0].gt_score.shape == (C,)


def test_errors():
    with pytest.raises(TraceUserError, match='MixToken needs a backbone that takes a token trace.*PlainBackbone'):
        build(backbone=PlainBackbone(), head=dict(type='mmpretrain.LinearClsHead', num_classes=C, in_channels=D))
    with pytest.raises(TraceUserError, match='TokenLabelHead'):
        build(backbone=PlainBackbone(), token_mix=False)
    model = build()
    np.random.seed(0)
    data = model.data_preprocessor(make_data(), training=True)
    with pytest.raises(ValueError, match='mode="loss"'):
        model(**dict(data, mode='predict'))


def tiny_lvvit():
    return dict(
        type='mmvitreg.LVViT',
        arch=dict(
            embed_dims=D,
            num_layers=2,
            num_heads=2,
            feedforward_channels=24,
            stem=dict(channels=8, num_convs=3),
            skip_lam=2.0,
        ),
        img_size=IMG,
        patch_size=P,
        out_type='raw',
    )


def test_real_lvvit_mixes_patch_tokens_before_the_position_embedding():
    """Eq. 8 on mmvitreg.LVViT: the block input is mix(patch_embed(x)) + pos_embed, cls token unmixed."""
    model = build(backbone=tiny_lvvit())
    captured = {}
    model.backbone.patch_embed.register_forward_hook(lambda m, i, o: captured.update(embed=o))
    model.backbone.layers[0].register_forward_pre_hook(lambda m, a: captured.update(block_in=a[0]))
    np.random.seed(3)  # a box of a quarter of the grid (seed 2 drew none: nothing was mixed)
    data = model.data_preprocessor(make_data(), training=True)
    plan = data['mix_plan']
    assert (plan.mask == 0).any() and (plan.mask == 1).any()  # a box of partner tokens, and own tokens
    losses = model(**data, mode='loss')
    expected = plan.mix_tokens(captured['embed'][0]) + model.backbone.pos_embed[:, 1:]
    torch.testing.assert_close(captured['block_in'][:, 1:], expected)
    torch.testing.assert_close(
        captured['block_in'][:, 0], (model.backbone.cls_token + model.backbone.pos_embed[:, :1]).expand(4, 1, D)[:, 0]
    )
    sum(losses.values()).backward()


def test_real_lvvit_train_step_and_grid_mismatch():
    from mmengine.optim import OptimWrapper

    model = build(backbone=tiny_lvvit())
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    log = model.train_step(make_data(), optim)
    assert set(log) == {'loss', 'loss_cls', 'loss_token'}
    with pytest.raises(
        TraceUserError,
        match=f"^MixToken draws its plan on {2 * P}-pixel patches but LVViT embeds "
        f"{P}-pixel patches: set the plan's patch_size={P}",
    ):
        TokenClassifier(
            backbone=tiny_lvvit(),
            head=token_label_head(),
            train_cfg=dict(mix=dict(type='mmvitreg.MixToken', patch_size=2 * P)),
            data_preprocessor=dict(num_classes=C),
        )
    trace = TokenTrace(mix=MixPlan(torch.arange(2), torch.ones(2, 1, 1)))  # a plan made by hand: checked each step
    with pytest.raises(ValueError, match=r'the mixing plan covers a \(1, 1\) token grid but LVViT has'):
        model.backbone(torch.zeros(2, 3, IMG, IMG), trace=trace)
