"""DRLoc (Liu et al. 2021, §4): the loss against a direct implementation of Eq. 1-2 and of the official
variants (yhlleo/VTs-Drloc drloc/losses.py), pair sampling, the feature grid of every backbone kind, and a
train step through TokenClassifier."""

import pytest
import torch
import torch.nn.functional as F
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from test_attention_cosine_loss import digits_batch

from mmvitreg.models.losses import DRLoc
from mmvitreg.models.trace import TokenTrace, TraceRequest, TraceUserError


def fixed_pairs(loss, p1, p2):
    """Make ``loss`` use the given (B, m, 2) pairs."""
    loss.sample_pairs = lambda batch, grid, device: (p1, p2)


def eq2_reference(fmap, p1, p2, mlp):
    """Eq. 2 written out: for every image, the mean over its pairs of |t - d|_1 with t = |Δ| / k (Eq. 1),
    summed over the images."""
    B, C, k, _ = fmap.shape
    total = 0.0
    for b in range(B):
        per_image = []
        for (i, j), (p, h) in zip(p1[b].tolist(), p2[b].tolist()):
            d = mlp(torch.cat((fmap[b, :, i, j], fmap[b, :, p, h])))
            t = torch.tensor([abs(i - p) / k, abs(j - h) / k])
            per_image.append((t - d).abs().sum())
        total = total + torch.stack(per_image).mean()
    return total


def random_pairs(B, m, k, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(k, (B, m, 2), generator=g), torch.randint(k, (B, m, 2), generator=g)


def test_paper_loss_equals_eq2_on_fixed_pairs():
    """Default (paper): λ · Σ_x E_pairs |(t_u, t_v) - (d_u, d_v)|_1 with t = |Δ|/k, the MLP two hidden layers
    of 512 and two outputs on the concatenated pair."""
    torch.manual_seed(0)
    fmap = torch.randn(3, 6, 5, 5)
    p1, p2 = random_pairs(3, 7, 5)
    loss = DRLoc(in_channels=6, num_pairs=7, loss_weight=0.3)
    widths = [(m.in_features, m.out_features) for m in loss.heads[0].trunk if isinstance(m, torch.nn.Linear)]
    assert widths == [(12, 512), (512, 512), (512, 2)]
    fixed_pairs(loss, p1, p2)
    out = loss.loss((fmap,), [], None)
    assert set(out) == {'loss_drloc'}
    torch.testing.assert_close(out['loss_drloc'], 0.3 * eq2_reference(fmap, p1, p2, loss.heads[0].trunk))


def test_official_l1_abs_and_signed_targets():
    """Official l1 with --use_abs: F.l1_loss(pred, |Δ|) (mean over B·m·2, raw grid cells); without it the
    target is Δ + (k - 1)."""
    torch.manual_seed(1)
    fmap = torch.randn(2, 4, 7, 7)
    p1, p2 = random_pairs(2, 5, 7, seed=1)
    for target, expect in (('abs', (p1 - p2).abs().float()), ('signed', (p1 - p2 + 6).float())):
        loss = DRLoc(in_channels=4, num_pairs=5, loss_weight=1.0, target=target, reduction='mean')
        fixed_pairs(loss, p1, p2)
        pred = loss.heads[0](
            torch.cat(
                (
                    fmap[torch.arange(2)[:, None], :, p1[..., 0], p1[..., 1]],
                    fmap[torch.arange(2)[:, None], :, p2[..., 0], p2[..., 1]],
                ),
                -1,
            )
        )
        torch.testing.assert_close(loss.loss((fmap,), [], None)['loss_drloc'], F.l1_loss(pred, expect))


def test_official_ce_and_cbr_variants():
    """ce: CE(pred_x, t_x) + CE(pred_y, t_y), each a mean over B·m; cbr: per axis the mean of
    (μ - t)^2 / σ^2 + 0.001 log σ^2 with μ, σ^2 the softmax mean / variance of the bin index."""
    torch.manual_seed(2)
    fmap = torch.randn(2, 4, 5, 5)
    p1, p2 = random_pairs(2, 6, 5, seed=2)
    target = (p1 - p2).abs()
    for mode in ('ce', 'cbr'):
        loss = DRLoc(in_channels=4, num_pairs=6, loss_weight=1.0, mode=mode, target='abs', reduction='mean', num_bins=7)
        assert [h.out_features for h in loss.heads[0].bins] == [7, 7]
        fixed_pairs(loss, p1, p2)
        pairs = torch.cat(
            (
                fmap[torch.arange(2)[:, None], :, p1[..., 0], p1[..., 1]],
                fmap[torch.arange(2)[:, None], :, p2[..., 0], p2[..., 1]],
            ),
            -1,
        ).flatten(0, 1)
        trunk = loss.heads[0].trunk(pairs)
        expect = 0
        for axis, head in enumerate(loss.heads[0].bins):
            logits, t = head(trunk), target[..., axis].flatten().float()
            if mode == 'ce':
                expect = expect + F.cross_entropy(logits, t.long())
            else:
                beta = logits.softmax(-1)
                idx = torch.arange(7.0)
                mu = (beta * idx).sum(1)
                var = (beta * (idx - mu[:, None]) ** 2).sum(1) + 1e-8
                expect = expect + ((mu - t) ** 2 * torch.exp(-var.log()) + 0.001 * var.log()).mean()
        torch.testing.assert_close(loss.loss((fmap,), [], None)['loss_drloc'], expect)
    signed = DRLoc(in_channels=4, mode='ce', target='signed', num_bins=7)
    assert signed.heads[0].bins[0].out_features == 13


def test_pair_sampling():
    """Paper: m distinct pairs per image, uniform; official: endpoints independent, with replacement."""
    torch.manual_seed(3)
    loss = DRLoc(in_channels=4, num_pairs=64)
    p1, p2 = loss.sample_pairs(16, (7, 7), 'cpu')
    assert p1.shape == p2.shape == (16, 64, 2) and 0 <= p1.min() and p1.max() <= 6
    codes = (p1[..., 0] * 7 + p1[..., 1]) * 49 + p2[..., 0] * 7 + p2[..., 1]
    assert all(len(set(c.tolist())) == 64 for c in codes)
    hits = torch.zeros(49)
    for _ in range(40):
        hits += torch.bincount((loss.sample_pairs(16, (7, 7), 'cpu')[0] @ torch.tensor([7, 1])).flatten(), minlength=49)
    assert hits.min() > 0.6 * hits.mean()  # every position is drawn about equally often
    official = DRLoc(in_channels=4, num_pairs=64, replacement=True)
    p1, p2 = official.sample_pairs(200, (3, 3), 'cpu')
    assert (p1 == p2).all(-1).any()  # Δ = 0 occurs
    with pytest.raises(ValueError, match='distinct pairs'):
        DRLoc(in_channels=4, num_pairs=20).sample_pairs(1, (2, 2), 'cpu')


def test_grid_sources_and_pooling():
    """Trace taps read trace.token_map (the patch tokens on the block's grid); backbone outputs are read
    as maps; 'avg2x2' (paper) and 'avg3x3' (official AvgPool2d(3, 2, 1, count_include_pad=False)) take
    14x14 to 7x7."""
    tokens = torch.randn(2, 1 + 196, 8)
    trace = TokenTrace(num_layers=4, num_extra_tokens=1, grids={3: (14, 14)}, tokens={3: tokens})
    tapped = DRLoc(in_channels=8, layers=(-1,))
    assert tapped.trace_request == TraceRequest(token_layers=(-1,), token_channels=(8,))
    torch.testing.assert_close(tapped.feature_maps((), trace)[0], tokens[:, 1:].transpose(1, 2).reshape(2, 8, 14, 14))
    fmap = torch.randn(2, 8, 14, 14)
    assert not DRLoc(in_channels=8).trace_request.needs_trace
    paper = DRLoc(in_channels=8, grid_pool='avg2x2').feature_maps((fmap,), None)[0]
    torch.testing.assert_close(paper, fmap.unfold(2, 2, 2).unfold(3, 2, 2).mean((-1, -2)))
    official = DRLoc(in_channels=8, grid_pool='avg3x3').feature_maps((fmap,), None)[0]
    torch.testing.assert_close(official, torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)(fmap))
    assert paper.shape == official.shape == (2, 8, 7, 7)


def test_multiscale_sums_one_head_per_map():
    """Official --use_multiscale: each map has its own MLP, λ times the sum of their losses."""
    torch.manual_seed(4)
    maps = (torch.randn(2, 4, 8, 8), torch.randn(2, 6, 4, 4))
    loss = DRLoc(
        in_channels=(4, 6), feat_indices=(0, 1), loss_weight=0.5, reduction='mean', target='abs', replacement=True
    )
    single = [
        DRLoc(in_channels=c, feat_indices=(i,), loss_weight=0.5, reduction='mean', target='abs', replacement=True)
        for i, c in enumerate((4, 6))
    ]
    for s, h in zip(single, loss.heads):
        s.heads[0].load_state_dict(h.state_dict())
    torch.manual_seed(5)
    both = loss.loss(maps, [], None)['loss_drloc']
    torch.manual_seed(5)
    torch.testing.assert_close(both, sum(s.loss(maps, [], None)['loss_drloc'] for s in single))


@pytest.fixture(scope='module')
def swin_t_224_trace():
    """Swin-T at 224 (one image) run with a trace that records every stage's output and each stage's last block."""
    from mmvitreg.models.backbones import SwinTransformer

    torch.manual_seed(0)
    swin = SwinTransformer(arch='tiny').eval()
    trace = TokenTrace.for_request(TraceRequest(token_layers=(1, 3, 9, 11), points={'stages'}))
    with torch.no_grad():
        swin(torch.randn(1, 3, 224, 224), trace=trace)
    return swin, trace


def test_multiscale_stage_maps_are_the_official_swin_stage_outputs(swin_t_224_trace):
    """Official --use_multiscale reads each Swin BasicLayer's output, whose patch merging runs inside the
    layer: 2C@28, 4C@14, 8C@7, 8C@7 for Swin-T at 224 (C = 96), i.e. each stage's last block merged."""
    swin, trace = swin_t_224_trace
    loss = DRLoc(
        in_channels=(192, 384, 768, 768), stages=(0, 1, 2, 3), target='abs', reduction='mean', replacement=True
    )
    maps = loss.feature_maps((), trace)
    assert [tuple(m.shape) for m in maps] == [(1, 192, 28, 28), (1, 384, 14, 14), (1, 768, 7, 7), (1, 768, 7, 7)]
    for stage, (block, grid) in enumerate(zip((1, 3, 9), ((56, 56), (28, 28), (14, 14)))):
        merged, hw = swin.stages[stage].downsample(trace.tokens[block], grid)
        torch.testing.assert_close(maps[stage], merged.transpose(1, 2).reshape(1, -1, *hw))
    torch.testing.assert_close(maps[3], trace.token_map(11))  # the last stage has no merging


def official_multiscale_loss(heads, maps, pairs, lam, mode):
    """Official VTs-Drloc losses.py cal_selfsupervised_loss with --use_multiscale --use_abs, transcribed: per map,
    the pairs' embeddings (aux_modules.py: index p[..., 0] * H + p[..., 1]) concatenated through its MLP,
    l1: F.l1_loss(|Δ|, pred); ce: CE_x + CE_y on |Δ| as the class; λ times each, summed over the maps."""
    total = 0.0
    for head, fmap, (p1, p2) in zip(heads, maps, pairs):
        B, C, H, W = fmap.shape
        x = fmap.reshape(B, C, H * W)
        embed = lambda p: torch.gather(x, 2, (p[..., 0] * H + p[..., 1]).unsqueeze(1).expand(-1, C, -1))  # noqa: E731
        pred = head(torch.cat((embed(p1), embed(p2)), dim=1).transpose(1, 2).reshape(-1, 2 * C))
        delta = (p1 - p2).abs().reshape(-1, 2)
        if mode == 'l1':
            loss = F.l1_loss(delta.float(), pred)
        else:
            loss = F.cross_entropy(pred[:, 0], delta[:, 0]) + F.cross_entropy(pred[:, 1], delta[:, 1])
        total = total + lam * loss
    return total


@pytest.mark.parametrize('mode, num_bins', [('l1', None), ('ce', (56, 28, 14, 7))])
def test_multiscale_loss_equals_the_official_one(swin_t_224_trace, mode, num_bins):
    """The multi-scale loss on the Swin-T stage maps equals the transcribed official one on the same pairs; ce
    with the official per-scale bin counts (out_dim max(224 // (4 * 2^i), 7) = 56, 28, 14, 7)."""
    _, trace = swin_t_224_trace
    torch.manual_seed(1)
    loss = DRLoc(
        in_channels=(192, 384, 768, 768),
        stages=(0, 1, 2, 3),
        loss_weight=0.5,
        mode=mode,
        target='abs',
        reduction='mean',
        replacement=True,
        num_bins=num_bins,
    )
    if num_bins:
        assert [h.bins[0].out_features for h in loss.heads] == list(num_bins)
    maps = loss.feature_maps((), trace)
    pairs = [tuple(torch.randint(m.shape[-1], (1, 64, 2)) for _ in range(2)) for m in maps]
    drawn = iter(pairs)
    loss.sample_pairs = lambda batch, grid, device: next(drawn)
    with torch.no_grad():
        ours = loss.loss((), [], trace)['loss_drloc']
        torch.testing.assert_close(ours, official_multiscale_loss(loss.heads, maps, pairs, 0.5, mode))


def test_bad_configurations_fail_with_the_fix():
    with pytest.raises(ValueError, match="target='abs'"):
        DRLoc(in_channels=4, mode='ce', num_bins=7)
    with pytest.raises(ValueError, match='num_bins'):
        DRLoc(in_channels=4, mode='cbr', target='abs')
    with pytest.raises(ValueError, match='one channel count per map'):
        DRLoc(in_channels=(4, 8), layers=(-1,))
    with pytest.raises(ValueError, match='not both'):
        DRLoc(in_channels=4, layers=(-1,), stages=(-1,))
    with pytest.raises(ValueError, match='one per map'):
        DRLoc(in_channels=(4, 8), feat_indices=(0, 1), mode='ce', target='abs', num_bins=(7, 7, 7))
    with pytest.raises(ValueError, match="mode must be one of"):
        DRLoc(in_channels=4, mode='l2')
    with pytest.raises(ValueError, match="out_type='featmap'"):
        DRLoc(in_channels=4).loss((torch.randn(2, 4),), [], None)
    with pytest.raises(ValueError, match='in_channels do not match'):
        DRLoc(in_channels=4).loss((torch.randn(2, 5, 7, 7),), [], None)
    with pytest.raises(ValueError, match='num_bins >= 7'):
        DRLoc(in_channels=4, mode='ce', target='abs', num_bins=5).loss((torch.randn(2, 4, 7, 7),), [], None)


def build_classifier(backbone, in_channels, neck, drloc):
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone,
        neck=neck,
        head=dict(type='mmpretrain.LinearClsHead', num_classes=10, in_channels=in_channels),
        aux_losses=[dict(type='mmvitreg.DRLoc', in_channels=in_channels, **drloc)],
        data_preprocessor=dict(num_classes=10, mean=[127.5] * 3, std=[127.5] * 3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


GAP = dict(type='mmpretrain.GlobalAveragePooling')


@pytest.mark.parametrize(
    'backbone,channels',
    [
        (dict(type='mmvitreg.VisionTransformer', arch='deit-tiny', img_size=32, patch_size=8), [192]),
        (
            dict(
                type='mmvitreg.SwinTransformer',
                img_size=32,
                window_size=4,
                out_indices=(1,),
                arch=dict(embed_dims=16, depths=[1, 2], num_heads=[1, 2]),
            ),
            [32],
        ),
        (
            dict(
                type='mmvitreg.CvT',
                arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
                embed_kernels=(3, 3),
                embed_strides=(2, 2),
                embed_paddings=(1, 1),
            ),
            [16],
        ),
    ],
    ids=['vit', 'swin', 'cvt'],
)
def test_an_in_channels_mismatch_on_a_trace_tap_fails_when_the_model_is_built(backbone, channels):
    """The tapped block's width is checked with the build-time trace check (it used to fail at the first step)."""
    with pytest.raises(
        TraceUserError,
        match=rf'DRLoc expects \[24\] channels .* set its in_channels to '
        rf'\[{channels[0]}\]',
    ):
        build_classifier(backbone, 24, GAP, dict(layers=(-1,)))
    model = build_classifier(backbone, channels[0], GAP, dict(layers=(-1,)))  # the right width builds
    assert model.aux_losses[0].trace_request.token_channels == tuple(channels)


@pytest.mark.parametrize(
    'backbone,in_channels,neck,drloc',
    [
        (
            dict(
                type='mmvitreg.SwinTransformer',
                img_size=32,
                window_size=4,
                out_indices=(1,),
                arch=dict(embed_dims=16, depths=[1, 1], num_heads=[1, 2]),
            ),
            32,
            GAP,
            dict(layers=(-1,)),
        ),
        (dict(type='mmpretrain.ResNet_CIFAR', depth=18, out_indices=(3,)), 512, GAP, dict(loss_weight=0.1)),
        (
            dict(
                type='mmpretrain.T2T_ViT',
                img_size=32,
                embed_dims=32,
                num_layers=2,
                out_type='raw',
                layer_cfgs=dict(num_heads=2, feedforward_channels=96),
                t2t_cfg=dict(token_dims=16),
            ),
            32,
            dict(type='mmvitreg.ClsTokenNeck'),
            dict(loss_weight=0.1, num_pairs=8),
        ),  # a 2x2 grid at 32x32
    ],
    ids=['swin-trace', 'resnet-featmap', 't2t-raw-tokens'],
)
def test_train_step_reaches_the_backbone(backbone, in_channels, neck, drloc):
    """One train step: 'loss_drloc' is logged, and its gradient alone reaches the MLP and the backbone
    (never the classification head)."""
    model = build_classifier(backbone, in_channels, neck, drloc)
    log = model.train_step(digits_batch(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.01)))
    assert set(log) == {'loss', 'loss_cls', 'loss_drloc'} and log['loss_drloc'] > 0  # 'loss': the total
    data = model.data_preprocessor(digits_batch(), True)
    model.zero_grad()
    model.loss(data['inputs'], data['data_samples'])['loss_drloc'].backward()
    assert model.aux_losses[0].heads[0].trunk[0].weight.grad.abs().sum() > 0
    assert next(model.backbone.parameters()).grad.abs().sum() > 0
    assert model.head.fc.weight.grad is None


def test_raw_tokens_drop_the_cls_token():
    """A raw (B, 1 + N, C) output goes on the square grid without its cls token; the neck keeps the cls token."""
    from mmvitreg.models.necks import ClsTokenNeck

    raw = torch.randn(2, 1 + 16, 8)
    torch.testing.assert_close(
        DRLoc(in_channels=8).feature_maps((raw,), None)[0], raw[:, 1:].transpose(1, 2).reshape(2, 8, 4, 4)
    )
    torch.testing.assert_close(ClsTokenNeck()((raw,))[0], raw[:, 0])
