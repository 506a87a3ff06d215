"""TL-Align (Xiao et al., ICCV 2023): label propagation (Eq. 9, 11, Table 10) and the CutMix that feeds it."""

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import CONFIGS, run_tool
from mmengine.config import Config
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmpretrain.structures import DataSample

from mmvitreg.models.layers import Ride, WindowLayout, attend
from mmvitreg.models.target_transforms import TLAlign
from mmvitreg.models.trace import MixPlan, TokenTrace, TraceUserError
from mmvitreg.registry import MODELS
from mmvitreg.utils import check_plugin_types

C = 1000  # the C-dimensional reference runs at ImageNet's label width


def tiny_deit(img=32, patch=8, **kw):
    return dict(
        type='mmvitreg.VisionTransformer',
        arch=dict(embed_dims=48, num_layers=4, num_heads=3, feedforward_channels=96),
        img_size=img,
        patch_size=patch,
        **kw,
    )


def tiny_swin(img=44):
    """11x11 tokens, windows of 3: stage 1 pads to 12x12 and shifts, merging pads 11 -> 12 -> 6x6."""
    return dict(
        type='mmvitreg.SwinTransformer',
        arch=dict(embed_dims=16, depths=[2, 2], num_heads=[2, 2]),
        img_size=img,
        window_size=3,
        out_indices=(1,),
    )


def reference_targets(trace: TokenTrace, labels: torch.Tensor) -> torch.Tensor:
    """The official C-dimensional label stream (``tla.py`` + the patched ViT), written out plainly:
    ``(B, N, C)`` labels, dense grid attention, padding handled by dropping its weights."""
    plan = trace.mix
    own = F.one_hot(labels, C).double()
    partner = own[plan.index]
    m = plan.mask.flatten(1).double().unsqueeze(-1)
    Y = m * own.unsqueeze(1) + (1 - m) * partner.unsqueeze(1)  # (B, HW, C)
    if trace.num_extra_tokens:
        lam = plan.lam.double().view(-1, 1, 1)
        Y = torch.cat([lam * own.unsqueeze(1) + (1 - lam) * partner.unsqueeze(1), Y], 1)
    grid = trace.grid
    for i in range(trace.num_layers):
        if tuple(trace.grids[i]) != tuple(grid):  # patch merging: Norm(sum of the 2x2 merged labels)
            H, W = grid
            H2, W2 = trace.grids[i]
            Ym = Y.view(-1, H, W, C)
            merged = torch.zeros(Y.shape[0], H2, W2, C, dtype=Y.dtype)
            for r in range(H2):
                for c in range(W2):
                    merged[:, r, c] = Ym[:, 2 * r : 2 * r + 2, 2 * c : 2 * c + 2].sum((1, 2))
            Y = (merged / merged.sum(-1, keepdim=True)).flatten(1, 2)
            grid = (H2, W2)
        attn = trace.attn[i].double()
        if i in trace.windows:
            attn = dense_window_map(trace.windows[i], attn)  # (B, heads, HW, HW), padding weights dropped
        A = attn.mean(1).clamp(min=0)
        A = A / A.sum(-1, keepdim=True)  # Table 10 Norm(W)
        Y = 0.5 * (A @ Y + Y)
    return Y[:, 0] if trace.num_extra_tokens else Y.mean(1)


def dense_window_map(layout: WindowLayout, attn: torch.Tensor) -> torch.Tensor:
    """Window attention ``(B * nW, heads, w * w, w * w)`` -> grid attention ``(B, heads, H * W, H * W)``: row ``i``,
    column ``j`` the weight token ``i`` gives token ``j``, 0 across windows, weights on padding dropped."""
    nW, n = len(layout.grid_index()), layout.window**2
    B, heads = attn.shape[0] // nW, attn.shape[1]
    windows = attn.view(B, nW, heads, n, n)
    full = attn.new_zeros(B, heads, nW * n, nW * n)
    for w in range(nW):
        full[:, :, w * n : (w + 1) * n, w * n : (w + 1) * n] = windows[:, w]
    index = layout.grid_index().flatten()
    slots = index.argsort()[int((index < 0).sum()) :]  # the slot of grid token 0, 1, ..., H * W - 1
    return full[:, :, slots][:, :, :, slots]


def test_window_attention_placed_on_the_grid():
    """dense_window_map (the reference's) puts each window's map at the grid positions of its tokens: (A_dense @ v)
    on the grid equals attending inside the windows and reversing."""
    layout = WindowLayout((5, 6), 4, 2)
    B, heads = 2, 3
    attn = torch.rand(B * len(layout.grid_index()), heads, 16, 16).softmax(-1)
    v = torch.randn(B, 30, 1, 4)  # per-token values shared by the heads
    vw = layout.partition(v).flatten(0, 1).transpose(1, 2).expand(-1, heads, -1, -1)  # (B*nW, heads, 16, 4)
    windowed = layout.reverse((attn @ vw).transpose(1, 2).unflatten(0, (B, -1)))  # (B, 30, heads, 4)
    dense = dense_window_map(layout, attn)
    assert dense.shape == (B, heads, 30, 30)
    torch.testing.assert_close(dense @ v[:, :, 0].unsqueeze(1), windowed.transpose(1, 2))


def aligned_vs_reference(backbone_cfg, img, num_layers, grid, B=4, seed=0, representation='weights'):
    """Run the backbone under a fractional random plan twice with the same weights and input: once with
    TLAlign's stream (the labels ride in the fused kernels), once recording every attention map; return
    TLAlign's targets, the reference targets built from the maps, and the map trace."""
    torch.manual_seed(seed)
    backbone = MODELS.build(backbone_cfg).train()  # PyTorch's default init: peaked, non-uniform maps
    tl = TLAlign(num_layers=num_layers, representation=representation, num_classes=C)
    x = torch.randn(B, 3, img, img)
    labels = torch.tensor([3, 999, 3, 512])[:B]
    mask = torch.rand(B, *grid)
    mask[0, :2] = 0.0  # whole rows from the partner, whole tokens of own
    mask[1, -1] = 1.0
    plan = MixPlan(index=torch.arange(B - 1, -1, -1), mask=mask)
    samples = [DataSample().set_gt_label(int(y)).set_gt_score(torch.zeros(C)) for y in labels]
    trace = TokenTrace.for_request(tl.trace_request, mix=plan, samples=samples)
    maps = TokenTrace(mix=plan, attn_layers=tuple(range(num_layers)))
    state = {k: v.clone() for k, v in backbone.state_dict().items()}
    torch.manual_seed(seed + 1)  # the same drop-path draws in both runs
    backbone(x, trace=trace)  # the labels ride along every block
    backbone.load_state_dict(state)  # (BatchNorm statistics of re-attention as before the first run)
    torch.manual_seed(seed + 1)
    backbone(x, trace=maps)  # fills the grid, the layouts and the maps of every block
    tl.transform(trace, samples)
    ours = torch.stack([s.gt_score for s in samples])
    return ours, reference_targets(maps, labels), maps


def test_eq9_11_weight_stream_equals_c_dim_labels_on_deit():
    """DeiT: Y <- (A Y + Y) / 2 per block with the head-mean map, cls target; the (B, N) weight stream
    equals the (B, N, C=1000) label stream."""
    ours, ref, trace = aligned_vs_reference(tiny_deit(), 32, 4, (4, 4))
    assert trace.num_extra_tokens == 1 and set(trace.attn) == {0, 1, 2, 3}
    assert (ours - ref.float()).abs().max() <= 1e-6
    official, _, _ = aligned_vs_reference(tiny_deit(), 32, 4, (4, 4), representation='labels')
    assert (official - ref.float()).abs().max() <= 1e-6
    assert torch.allclose(ours.sum(1), torch.ones(4)) and ours.min() >= 0
    # the target moved away from the area mix: alignment is not the identity
    own_share = torch.stack([ours[b, y] for b, y in enumerate([3, 999, 3, 512])])
    assert (own_share[[1, 3]] - trace.mix.lam[[1, 3]]).abs().max() > 1e-3


def test_swin_labels_follow_shift_padding_and_merging():
    """Swin with shifted windows, window padding and padded 2x2 merging: target = mean token label;
    the weight stream equals the C-dimensional reference built on the dense grid attention."""
    ours, ref, trace = aligned_vs_reference(tiny_swin(), 44, 4, (11, 11))
    layouts = [trace.windows[i] for i in range(4)]
    assert layouts[0].grid == (11, 11) and layouts[0].padded == (12, 12)
    assert layouts[1].shift > 0 and layouts[2].grid == (6, 6)  # stage 2 after merging 11 -> 6 (padded)
    assert trace.num_extra_tokens == 0
    assert (ours - ref.float()).abs().max() <= 1e-6
    assert torch.allclose(ours.sum(1), torch.ones(4))


def test_swin_labels_without_padding_skip_norm_and_merge_by_the_mean():
    """Swin whose windows and merging need no padding (6x6 tokens, windows of 3; after merging one 3x3 window,
    the grid itself): every map is a softmax over real tokens, so the stream mixes unnormalised (Norm is the
    identity), merges four tokens by their mean and leaves the values of a one-window stage in place; the target
    still equals the reference, which normalises every map and every merge."""
    ours, ref, trace = aligned_vs_reference(tiny_swin(24), 24, 4, (6, 6))
    layouts = [trace.windows[i] for i in range(4)]
    assert all(lay.padded == lay.grid for lay in layouts) and layouts[1].shift > 0 and not layouts[1].is_grid
    assert layouts[2].grid == (3, 3) and layouts[2].is_grid and layouts[3].is_grid
    assert (ours - ref.float()).abs().max() <= 1e-6
    assert torch.allclose(ours.sum(1), torch.ones(4))


def test_deepvit_reattention_norm_equals_reference():
    """DeepViT-S preset (re-attention in the last 5 of 16 blocks, BatchNorm'd maps with negative entries):
    Table 10's Norm(W) gives the same target in both representations and keeps labels on the simplex."""
    ours, ref, trace = aligned_vs_reference(dict(type='mmvitreg.DeepViT', arch='s', img_size=64), 64, 16, (4, 4))
    assert trace.attn[15].mean(1).min() < 0  # the re-attention map really has negative weights
    assert trace.attn[0].min() >= 0
    assert (ours - ref.float()).abs().max() <= 1e-6
    assert ours.min() >= 0 and torch.allclose(ours.sum(1), torch.ones(4))


def test_table10_norm_drops_negative_weights_and_keeps_label_of_rows_without_positive_weight():
    """Norm(W) on a re-attention-like map: negative weights count as 0, rows are scaled to sum 1,
    a row with no positive weight leaves the token's label unchanged."""
    attn = torch.tensor([[[0.5, -0.2, 0.7], [-1.0, -1.0, -1.0], [0.2, 0.3, 0.5]]]).view(1, 1, 3, 3)
    w = torch.tensor([[1.0, 0.0, 0.25]]).unsqueeze(-1)
    ride = Ride(torch.cat([w, 1 - w], -1))
    qkv = torch.zeros(1, 3, 3, 1, 1)
    attend(qkv, 1.0, ride=ride, attention_map=lambda q, k: attn)
    out = TLAlign.step(TokenTrace(), 0, ride.values, ride.mixed)[..., 0]
    aligned = torch.tensor([[(0.5 * 1 + 0.7 * 0.25) / 1.2, 0.0, 0.2 + 0.5 * 0.25]])
    assert torch.allclose(out, 0.5 * (aligned + w[..., 0]))


def build_classifier(backbone=None, num_layers=None, target_transform=True, num_classes=10, patch=8):
    """A TokenClassifier with PatchCutMix and TLAlign (``num_layers=None``: the depth from the trace)."""
    tl = dict(type='mmvitreg.TLAlign', **({} if num_layers is None else dict(num_layers=num_layers)))
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone or tiny_deit(),
        head=dict(
            type='mmpretrain.LinearClsHead',
            num_classes=num_classes,
            in_channels=48,
            loss=dict(type='mmpretrain.LabelSmoothLoss', label_smooth_val=0.1, mode='original'),
        ),
        target_transform=tl if target_transform else None,
        train_cfg=dict(mix=dict(type='mmvitreg.PatchCutMix', patch_size=patch)),
        data_preprocessor=dict(num_classes=num_classes),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


def make_data(B=4, img=32):
    return dict(
        inputs=torch.randint(0, 255, (B, 3, img, img), dtype=torch.uint8),
        data_samples=[DataSample().set_gt_label(b % 10) for b in range(B)],
    )


def test_training_uses_the_aligned_target_and_inference_builds_no_trace():
    """TokenClassifier + PatchCutMix + TLAlign: the head trains on the aligned target (not the area
    mix); the loss backpropagates; predict runs the backbone without a trace."""
    torch.manual_seed(0)
    np.random.seed(1)
    model = build_classifier()
    traces, targets = [], []
    model.backbone.register_forward_hook(lambda m, a, kw, out: traces.append(kw.get('trace')), with_kwargs=True)
    head_loss = model.head.loss
    model.head.loss = lambda feats, samples, **kw: (
        targets.append(torch.stack([s.gt_score for s in samples])),
        head_loss(feats, samples, **kw),
    )[1]
    optim = OptimWrapper(torch.optim.AdamW(model.parameters(), lr=1e-3))
    data = model.data_preprocessor(make_data(), training=True)
    plan = data['mix_plan']
    assert plan.in_pixels and 0 < float(plan.lam[0]) < 1
    losses = model(**data, mode='loss')
    assert torch.isfinite(losses['loss']) and 'loss_cls' not in losses  # the head's term under its own name
    trace = traces[-1]
    assert trace.mix is plan and set(trace.streamed) == set(range(4)) and not trace.attn
    w = model.target_transform.aligned_weights(trace)
    own = F.one_hot(torch.arange(4) % 10, 10).float()
    assert torch.allclose(targets[-1], w[:, None] * own + (1 - w[:, None]) * own.flip(0))
    assert not torch.allclose(w, plan.lam)
    # the logged scalar: how far alignment moved the targets (every pair here has two classes: |w - lam|)
    assert not losses['tla_shift'].requires_grad
    torch.testing.assert_close(losses['tla_shift'], (w - plan.lam).abs().mean())
    log = model.train_step(make_data(), optim)
    assert np.isfinite(log['loss'].item())
    model.eval()
    model.val_step(make_data())
    assert traces[-1] is None


def test_depth_comes_from_the_trace_and_a_given_depth_is_checked_at_build_time():
    """TLAlign() carries the labels through every block of the backbone it runs on: the same targets as
    TLAlign(num_layers=4) on a 4-block DeiT; a num_layers that is not the backbone's depth fails when the model
    is built, naming the fix."""
    targets = []
    for num_layers in (None, 4):
        torch.manual_seed(0)
        np.random.seed(1)
        model = build_classifier(num_layers=num_layers)
        assert model.target_transform.num_layers == num_layers
        data = model.data_preprocessor(make_data(), training=True)
        model(**data, mode='loss')
        targets.append(torch.stack([s.gt_score for s in data['data_samples']]))
    torch.testing.assert_close(targets[0], targets[1], rtol=0, atol=0)
    for num_layers in (3, 5):
        with pytest.raises(TraceUserError) as error:
            build_classifier(num_layers=num_layers)
        assert str(error.value) == (
            f'TLAlign carries its stream through num_layers={num_layers} blocks but '
            'VisionTransformer has 4: set num_layers=4 or leave it out (the depth is taken '
            'from the backbone)'
        )
    with pytest.raises(ValueError, match='positive integer'):
        TLAlign(num_layers=0)


def test_tl_align_errors_name_the_fix():
    """Misconfigurations fail: no plan / wrong depth at the first step (a TLAlign run outside a classifier)."""
    model = build_classifier(num_layers=4)
    trace = TokenTrace.for_request(model.target_transform.trace_request)
    with pytest.raises(ValueError, match='PatchCutMix'):
        model.target_transform.transform(trace, [DataSample().set_gt_label(0)])
    with pytest.raises(ValueError, match='PatchCutMix'):
        model.backbone(torch.randn(2, 3, 32, 32), trace=trace)
    x = torch.randn(2, 3, 32, 32)
    trace = TokenTrace.for_request(
        TLAlign(num_layers=3).trace_request, mix=MixPlan(torch.tensor([1, 0]), torch.ones(2, 4, 4))
    )
    with pytest.raises(
        TraceUserError,
        match=r'this trace carries its stream through num_layers=3 blocks but '
        'VisionTransformer has 4: set num_layers=4 or leave it out',
    ):
        model.backbone(x, trace=trace)
    trace = TokenTrace.for_request(
        model.target_transform.trace_request,
        mix=MixPlan(torch.tensor([1, 0]), torch.ones(2, 2, 2), torch.ones(2, 32, 32)),
    )
    with pytest.raises(ValueError, match='patch_size'):
        model.backbone(x, trace=trace)
    with pytest.raises(ValueError, match='num_classes'):
        TLAlign(num_layers=4, representation='labels')


def test_patch_cutmix_is_the_official_token_box_mixed_in_pixels(monkeypatch):
    """tla.py: lam re-drawn while 1, box on the token grid, lam = 1 - box/grid, flip(0) partner, images
    mixed in whole patches; the token mask (1 = own) is the initial label weight."""
    aug = MODELS.build(dict(type='mmvitreg.PatchCutMix', patch_size=8))
    draws = iter([1.0, 1.0, 0.5])
    monkeypatch.setattr(np.random, 'beta', lambda a, b: next(draws))
    np.random.seed(3)
    x = torch.rand(4, 3, 48, 32)
    plan = aug.plan(x)
    assert next(draws, None) is None  # two lam == 1 draws were rejected
    box = plan.mask[0] == 0
    assert plan.mask.shape == (4, 6, 4) and box.any()
    rows, cols = box.any(1).nonzero().flatten(), box.any(0).nonzero().flatten()
    assert int(box.sum()) == len(rows) * len(cols)  # one rectangle
    assert torch.allclose(plan.lam, torch.full((4,), 1 - box.sum().item() / 24))
    assert torch.equal(plan.index, torch.tensor([3, 2, 1, 0]))
    assert torch.equal(plan.pixel_mask[0], plan.mask[0].repeat_interleave(8, 0).repeat_interleave(8, 1))
    mixed = plan.mix_images(x)
    m = plan.pixel_mask[:, None]
    assert torch.equal(mixed, x * m + x.flip(0) * (1 - m))
    monkeypatch.undo()
    odd = aug.plan(torch.rand(2, 3, 30, 36))  # the backbone's padded grid, the pixel mask cropped to the image
    assert odd.mask.shape == (2, 4, 5) and odd.pixel_mask.shape == (2, 30, 36)
    assert torch.equal(odd.pixel_mask[0], odd.mask[0].repeat_interleave(8, 0).repeat_interleave(8, 1)[:30, :36])


def test_pixel_mixed_plan_leaves_the_backbone_tokens_alone():
    """With a pixel plan the data preprocessor mixes the images once; the ViT and Swin backbones do not
    mix the tokens again."""
    torch.manual_seed(0)
    for cfg, img, grid in ((tiny_deit(), 32, (4, 4)), (tiny_swin(32), 32, (8, 8))):
        backbone = MODELS.build(cfg).eval()
        x = torch.randn(2, 3, img, img)
        mask = torch.zeros(2, *grid)
        plan = MixPlan(index=torch.tensor([1, 0]), mask=mask, pixel_mask=torch.zeros(2, img, img))
        with torch.no_grad():
            plain = backbone(x)[-1]
            traced = backbone(x, trace=TokenTrace(mix=plan))[-1]
        assert torch.allclose(plain, traced, atol=1e-6)


CONFIG = CONFIGS / 'tlalign' / 'deit-tiny_1xb64_cutmix-tlalign_digits.py'


def test_digits_config_trains_through_the_tools(tmp_path):
    """configs/tlalign: the quick-start DeiT-tiny with PatchCutMix + TLAlign over all its blocks trains a
    few iterations through tools/train.py on the bundled digits and writes a checkpoint."""
    cfg = Config.fromfile(str(CONFIG))
    check_plugin_types(cfg)
    assert cfg.model.type == 'mmvitreg.TokenClassifier' and cfg.model.backbone.type == 'mmvitreg.VisionTransformer'
    assert dict(cfg.model.target_transform) == dict(type='mmvitreg.TLAlign') and cfg.model.backbone.arch.num_layers == 4
    assert dict(cfg.model.train_cfg) == dict(mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=8))
    assert cfg.model.backbone.patch_size == 8
    run_tool(['dataset_converters/digits.py', 'imagenet', '--out', tmp_path / 'data'], cwd=tmp_path)
    work = tmp_path / 'work'
    run_tool(
        [
            'train.py',
            CONFIG,
            '--work-dir',
            work,
            '--cfg-options',
            'train_cfg.max_epochs=1',
            'train_dataloader.dataset.indices=256',
            'val_dataloader.dataset.indices=128',
            'train_dataloader.num_workers=0',
            'val_dataloader.num_workers=0',
            'train_cfg.val_interval=1',
        ],
        cwd=tmp_path,
    )
    assert (work / 'last_checkpoint').read_text().strip().endswith('epoch_1.pth')
    logs = sorted(work.glob('*/vis_data/scalars.json'))[-1].read_text().splitlines()
    losses = [json.loads(ln)['loss'] for ln in logs if '"loss"' in ln]
    assert losses and all(np.isfinite(losses))
    assert any('accuracy/top1' in ln for ln in logs)


def test_pixel_box_cutmix_starts_each_token_with_its_share_of_own_pixels():
    """Paper Sec. 3.3: a pixel box may split patches; a token's initial weight is its patch's share of own
    pixels, and lam is the pixel area share."""
    aug = MODELS.build(dict(type='mmvitreg.PatchCutMix', patch_size=8, box_on='pixels'))
    np.random.seed(0)
    x = torch.rand(2, 3, 32, 32)
    plan = aug.plan(x)
    pm = plan.pixel_mask[0]
    assert torch.allclose(plan.mask[0], pm.view(4, 8, 4, 8).mean((1, 3)))
    assert ((plan.mask > 0) & (plan.mask < 1)).any()  # this seed's box splits patches
    assert torch.allclose(plan.lam, pm.mean().expand(2))
    assert torch.equal(plan.mix_images(x), x * pm + x.flip(0) * (1 - pm))
    with pytest.raises(ValueError, match='box_on'):
        MODELS.build(dict(type='mmvitreg.PatchCutMix', box_on='grid'))


def test_mixup_gives_every_token_lam_and_the_switch_picks_per_batch(monkeypatch):
    """MixUp (Table 7): images blended, every token weight lam (re-drawn while 1); MixUp + CutMix: CutMix with
    probability switch_prob per batch (timm/DeiT)."""
    mixup = MODELS.build(dict(type='mmvitreg.PixelMixup', alpha=0.8, patch_size=8))
    draws = iter([1.0, 0.3])
    monkeypatch.setattr(np.random, 'beta', lambda a, b: next(draws))
    x = torch.rand(4, 3, 16, 24)
    plan = mixup.plan(x)
    assert plan.mask.shape == (4, 2, 3) and torch.allclose(plan.mask, torch.tensor(0.3))
    assert torch.allclose(plan.mix_images(x), 0.3 * x + 0.7 * x.flip(0))
    monkeypatch.undo()
    switch = MODELS.build(dict(type='mmvitreg.MixupCutMixSwitch', switch_prob=0.5, patch_size=8))
    for u, binary in ((0.2, True), (0.7, False)):
        monkeypatch.setattr(np.random, 'rand', lambda: u)
        mask = switch.plan(x).mask
        assert bool(((mask == 0) | (mask == 1)).all()) == binary
    with pytest.raises(ValueError, match='switch_prob'):
        MODELS.build(dict(type='mmvitreg.MixupCutMixSwitch', switch_prob=1.5))


def test_benchmark_case_compares_tl_align_with_the_same_cutmix():
    """deit-s-tlalign-vs-cutmix: the only difference between the two models is the TLAlign target transform."""
    from studies import train_step_benchmark as bench

    case = bench.get_case('deit-s-tlalign-vs-cutmix')
    model, baseline = case.build('model', 32, True), case.build('baseline', 32, True)
    assert isinstance(model.target_transform, TLAlign) and baseline.target_transform is None
    assert model.target_transform.num_layers is None  # as the config: the depth comes from the trace
    assert type(model.data_preprocessor.mix) is type(baseline.data_preprocessor.mix)
    assert model.data_preprocessor.mix.box_on == 'tokens'
    assert case.max_time_ratio == 1.02


def test_recorded_maps_are_taken_before_attention_dropout():
    """Eq. 9 uses the attention before dropout: with attention dropout on in training, the maps that plain
    MHSA and Swin window attention record are still row-stochastic softmax maps."""
    from mmvitreg.models.layers import MultiheadSelfAttention, WindowAttention

    torch.manual_seed(0)
    msa = MultiheadSelfAttention(16, 2, attn_drop=0.5).train()
    _, attn = msa(torch.randn(2, 5, 16), need_attn=True)
    win = WindowAttention(16, (2, 2), 2, attn_drop=0.5).train()
    _, wattn = win(torch.randn(3, 4, 16), need_attn=True)
    for a in (attn, wattn):
        assert torch.allclose(a.sum(-1), torch.ones(a.shape[:-1])) and (a > 0).all()


def test_benchmark_case_weight_stream_vs_c_dim_stream_trains_on_the_same_target():
    """deit-s-tlalign-weights-vs-labels: the two models differ only in TLAlign's representation, and with the
    same weights and the same CutMix draw both give the same loss (the same aligned target)."""
    from studies import train_step_benchmark as bench

    case = bench.get_case('deit-s-tlalign-weights-vs-labels')
    losses = {}
    for role, representation in (('model', 'weights'), ('baseline', 'labels')):
        torch.manual_seed(0)
        model = case.build(role, 32, True)
        assert model.target_transform.representation == representation
        np.random.seed(0)
        data = model.data_preprocessor(case.make_batch(4, 32), training=True)
        losses[role] = model(**data, mode='loss')
    for name in ('loss', 'tla_shift'):  # the same target, and the same distance from the area target
        assert torch.allclose(losses['model'][name], losses['baseline'][name], atol=1e-6)


def _initial_weights(plan, grid):
    """TLAlign's initial per-token labels for ``plan`` on a ViT grid with a cls token: (own, partner) shares."""
    trace = TokenTrace(mix=plan, grid=grid, num_layers=4, num_extra_tokens=1)
    return TLAlign(num_layers=4).start(trace)


def test_random_patch_mix_takes_round_1_minus_lam_random_tokens_and_mixes_pixels(monkeypatch):
    """Table 7 "Random" (MAE-style): per sample round((1 - lam) N) whole 16x16 patches from the partner, drawn at
    random; images mixed in pixel space; TLAlign starts each token at 1 (own) / 0 (partner), the cls token at lam."""
    aug = MODELS.build(dict(type='mmvitreg.RandomPatchMix', patch_size=16))
    draws = iter([1.0, 0.75, 0.5, 0.3])
    monkeypatch.setattr(np.random, 'beta', lambda a, b: next(draws))
    np.random.seed(0)
    x = torch.rand(3, 3, 64, 64)
    plan = aug.plan(x)
    assert [int((plan.mask[b] == 0).sum()) for b in range(3)] == [4, 8, 11]  # 16 tokens; lam == 1 redrawn
    draws = iter([0.5] * 6)
    again = aug.plan(x)  # the same lam for every sample: 8 tokens each, at random places
    assert (again.mask == 0).flatten(1).sum(1).tolist() == [8, 8, 8] and not torch.equal(again.mask[0], again.mask[1])
    assert torch.equal(plan.pixel_mask, plan.mask.repeat_interleave(16, 1).repeat_interleave(16, 2))
    assert torch.equal(plan.mix_images(x), x * plan.pixel_mask[:, None] + x.flip(0) * (1 - plan.pixel_mask[:, None]))
    assert torch.allclose(plan.lam, torch.tensor([12 / 16, 8 / 16, 5 / 16]))
    w = _initial_weights(plan, (4, 4))
    assert torch.equal(w[:, 1:, 0], plan.mask.flatten(1)) and torch.allclose(w[:, 0, 0], plan.lam)
    assert torch.allclose(w.sum(-1), torch.ones(3, 17))


def test_block_mix_fills_beit_blocks_from_the_partner(monkeypatch):
    """Table 7 "Block-wise" (BEiT Algorithm 1): rectangles of s tokens with aspect r at a uniform position are
    added until round((1 - lam) N) tokens come from the partner, without overshooting."""
    aug = MODELS.build(dict(type='mmvitreg.BlockMix', patch_size=8))
    monkeypatch.setattr(np.random, 'beta', lambda a, b: 0.75)  # 64 tokens -> 16 from the partner
    monkeypatch.setattr(np.random, 'uniform', lambda lo, hi: 16.0 if lo > 0 else 0.0)  # s = 16, log r = 0
    corners = iter([2, 3])
    monkeypatch.setattr(np.random, 'randint', lambda lo, hi: next(corners))
    x = torch.rand(1, 3, 64, 64)
    plan = aug.plan(x)
    expected = torch.ones(8, 8)
    expected[2:6, 3:7] = 0  # one 4x4 block
    assert torch.equal(plan.mask[0], expected)
    assert torch.equal(plan.pixel_mask[0], expected.repeat_interleave(8, 0).repeat_interleave(8, 1))
    monkeypatch.undo()
    np.random.seed(0)
    plan = MODELS.build(dict(type='mmvitreg.BlockMix', patch_size=16)).plan(torch.rand(8, 3, 224, 224))
    taken = (plan.mask == 0).flatten(1).sum(1)
    assert plan.mask.shape == (8, 14, 14) and bool(((plan.mask == 0) | (plan.mask == 1)).all())
    assert (taken > 0).all() and torch.allclose(plan.lam, 1 - taken / 196.0)
    w = _initial_weights(plan, (14, 14))
    assert torch.equal(w[:, 1:, 0], plan.mask.flatten(1))
    with pytest.raises(ValueError, match='aspect'):
        MODELS.build(dict(type='mmvitreg.BlockMix', aspect=2.0))


def test_labels_ride_in_the_bf16_call_under_autocast_on_the_cpu():
    """Under bfloat16 autocast the block runs in bfloat16 and the labels ride in its fused call, on the CPU as on a
    GPU (the official AMP training mixes its labels with the low-precision map too): ``ride.mixed`` is float32
    and within bfloat16 rounding of the labels mixed by a float32 map built from the same (bfloat16) q and k."""
    from mmvitreg.models.layers import MultiheadSelfAttention

    torch.manual_seed(0)
    msa = MultiheadSelfAttention(32, 2).train()
    x = torch.randn(2, 9, 32)
    values = torch.rand(2, 9, 2)
    seen = {}
    msa.register_forward_hook(lambda m, a, out: seen.setdefault('qkv', m.qkv(a[0])))
    ride = Ride(values)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        out = msa(x, ride=ride)
    assert out.dtype == torch.bfloat16 and ride.mixed.dtype == torch.float32
    q, k, _ = seen['qkv'].float().reshape(2, 9, 3, 2, 16).permute(2, 0, 3, 1, 4)
    expected = (((q * msa.scale) @ k.transpose(-2, -1)).softmax(-1).mean(1)) @ values
    assert (ride.mixed - expected).abs().max() <= 2e-2


@pytest.mark.parametrize('channels', [2, 1000])
def test_fused_attention_carries_the_ride_in_its_own_kernel_call(monkeypatch, channels):
    """A ride of at most ``RIDE_CHANNELS`` value channels goes through the attention's own fused kernel call (no
    map formed, no second q k^T) and changes nothing the model computes: the output and the q, k, v gradients
    equal plain ``F.scaled_dot_product_attention``'s, and the mixed values equal the head-mean softmax map
    applied to them. A wider ride (C = 1000 labels) takes the explicit map instead, with the same results."""
    from mmvitreg.models.layers import attention as attention_module
    from mmvitreg.models.layers import ride as ride_module

    torch.manual_seed(0)
    B, H, N, d = 3, 4, 17, 16
    qkv = torch.randn(B, N, 3, H, d, requires_grad=True)
    q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)  # strided views, as the attention makes them
    grad = torch.randn(B, H, N, d)
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.3)
    (expected * grad).sum().backward()
    expected_grad, qkv.grad = qkv.grad, None
    values = torch.rand(B, N, channels)
    ran = []
    head_logits = attention_module.head_logits
    monkeypatch.setattr(attention_module, 'head_logits', lambda *a: ran.append('map') or head_logits(*a))
    widened = attention_module.attend_widened
    monkeypatch.setattr(attention_module, 'attend_widened', lambda *a: ran.append('widened') or widened(*a))
    ride = Ride(values)
    out, _ = attend(qkv, 0.3, ride=ride)
    (out * grad).sum().backward()
    assert ran == ['widened' if channels <= ride_module.RIDE_CHANNELS else 'map']
    assert (out - expected).abs().max() <= 1e-6 and (qkv.grad - expected_grad).abs().max() <= 1e-6
    maps = ((q * 0.3) @ k.transpose(-2, -1)).softmax(-1).mean(1)
    assert ride.mixed.shape == (B, N, channels) and not ride.mixed.requires_grad
    assert (ride.mixed - maps.detach() @ values).abs().max() <= 1e-6
