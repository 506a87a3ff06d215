"""DiversePatch (paper §4): the patch-wise cosine, contrastive and mixing losses, each checked against a
direct transcription of its formula (loops over patches and pairs) on small tensors, their official
forms (ChengyueGongR/PatchVisionTransformer deit/models.py), and tiny models trained through the trace."""

import math

import pytest
import torch
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmpretrain.structures import DataSample
from test_attention_cosine_loss import digits_batch

from mmvitreg.models.losses import PatchContrastiveLoss, PatchCosineLoss, PatchMixingLoss
from mmvitreg.models.trace import MixPlan, TokenTrace, TraceUserError

G = torch.Generator().manual_seed(0)


def vit_trace(B=2, grid=(3, 4), C=5, layers=3, mix=None):
    """A filled ViT trace: cls + patches for every block, the final norm's tokens and the embedding."""
    n = grid[0] * grid[1]
    tokens = {i: torch.randn(B, 1 + n, C, generator=G) for i in range(layers)}
    return TokenTrace(
        mix=mix,
        grid=grid,
        num_layers=layers,
        num_extra_tokens=1,
        tokens=tokens,
        grids={i: grid for i in range(layers)},
        embed=torch.randn(B, n, C, generator=G),
        final=torch.randn(B, 1 + n, C, generator=G),
    )


def test_cosine_loss_is_the_mean_absolute_cosine_over_pairs_i_ne_j():
    """L_cos = 1/(n(n-1)) sum_{i != j} |h_i.h_j| / (|h_i||h_j|), class token ignored, mean over the batch."""
    trace = vit_trace()
    for tokens, h in (('block', trace.tokens[2][:, 1:]), ('final_norm', trace.final[:, 1:])):
        B, n, _ = h.shape
        direct = (
            sum(
                abs(h[b, i] @ h[b, j]) / (h[b, i].norm() * h[b, j].norm())
                for b in range(B)
                for i in range(n)
                for j in range(n)
                if i != j
            )
            / (n * (n - 1))
            / B
        )
        out = PatchCosineLoss(loss_weight=0.5, tokens=tokens).loss((), [], trace)
        torch.testing.assert_close(out['loss_patch_cos'], 0.5 * direct)
    with pytest.raises(ValueError, match='tokens must be one of'):
        PatchCosineLoss(tokens='normed')


def test_contrastive_loss_paper_form_is_the_paper_equation():
    """-1/n sum_i log e^{a_i.h_i} / (e^{a_i.h_i} + e^{a_i.mean_{j!=i} h_j}), a = first block, h = last block,
    raw dot products; the anchor gets no gradient."""
    trace = vit_trace()
    trace.tokens[0].requires_grad_(True)
    trace.tokens[2].requires_grad_(True)
    a, h = trace.tokens[0][:, 1:].detach(), trace.tokens[2][:, 1:].detach()
    B, n, _ = h.shape
    terms = []
    for b in range(B):
        for i in range(n):  # values only: the gradient is checked on the loss below
            neg = sum(h[b, j] for j in range(n) if j != i) / (n - 1)
            pos_e, neg_e = math.exp((a[b, i] @ h[b, i]).item()), math.exp((a[b, i] @ neg).item())
            terms.append(-math.log(pos_e / (pos_e + neg_e)))
    loss = PatchContrastiveLoss().loss((), [], trace)['loss_patch_contrastive']
    assert loss.item() == pytest.approx(sum(terms) / len(terms), rel=1e-5)
    loss.backward()
    assert trace.tokens[0].grad is None and trace.tokens[2].grad.abs().sum() > 0


def test_contrastive_loss_official_form_adds_the_7x7_neighbourhood_negative():
    """Official: anchor = patch embedding, h = final-norm tokens, second negative = sum of the valid 7x7
    neighbours / 48 (zero padding counted), loss -log(softmax[0] + 1e-8)."""
    trace = vit_trace(grid=(9, 8), C=3)
    a, h = trace.embed, trace.final[:, 1:]
    H, W = trace.grid
    n = H * W
    terms = []
    for b in range(a.shape[0]):
        for i in range(n):
            r, c = divmod(i, W)
            neigh = [
                h[b, rr * W + cc]
                for rr in range(r - 3, r + 4)
                for cc in range(c - 3, c + 4)
                if 0 <= rr < H and 0 <= cc < W and (rr, cc) != (r, c)
            ]
            logits = torch.stack(
                [a[b, i] @ h[b, i], a[b, i] @ ((h[b].sum(0) - h[b, i]) / (n - 1)), a[b, i] @ (sum(neigh) / 48)]
            )
            terms.append(-torch.log(logits.softmax(0)[0] + 1e-8))
    out = PatchContrastiveLoss(form='official', loss_weight=2.0).loss((), [], trace)['loss_patch_contrastive']
    torch.testing.assert_close(out, 2 * torch.stack(terms).mean())
    with pytest.raises(ValueError, match='form must be one of'):
        PatchContrastiveLoss(form='simclr')


def half_plan(B, grid):
    """Own tokens on the left half, the partner's (reversed batch) on the right."""
    mask = torch.ones(B, *grid)
    mask[..., grid[1] // 2 :] = 0
    return MixPlan(index=torch.arange(B - 1, -1, -1), mask=mask)


def samples(labels):
    return [DataSample().set_gt_label(int(y)) for y in labels]


def test_mixing_loss_paper_form_classifies_every_patch_by_its_source_image():
    """L_mixing = 1/n sum_i CE(g(h_i^[L]), y_i) with y_i the label of the image patch i came from."""
    B, grid, K = 3, (2, 4), 6
    trace = vit_trace(B=B, grid=grid, mix=half_plan(B, grid))
    labels = [1, 4, 5]
    loss = PatchMixingLoss(num_classes=K, in_channels=5)
    h = trace.tokens[2][:, 1:]
    terms = []
    for b in range(B):
        for i in range(h.shape[1]):
            source = b if i % grid[1] < grid[1] // 2 else B - 1 - b
            terms.append(
                torch.nn.functional.cross_entropy(loss.patch_head(h[b, i])[None], torch.tensor([labels[source]]))
            )
    out = loss.loss((), samples(labels), trace)['loss_patch_mixing']
    torch.testing.assert_close(out, torch.stack(terms).mean())
    with pytest.raises(ValueError, match='gt_label'):
        loss.loss((), [DataSample()], trace)


def test_mixing_loss_official_form_is_the_area_weighted_region_pooled_kl():
    """Official: per region R (own, partner) the masked mean of the final-norm tokens -> g -> KL to the source's
    label, weighted by the area share; a 4x4 mask on a 2x2 last grid is average-pooled first."""
    B, K = 2, 4
    mask = torch.zeros(B, 4, 4)
    mask[:, :, :1] = 1  # own share of the 2x2 tokens: [[.5, 0], [.5, 0]]
    trace = vit_trace(B=B, grid=(2, 2), mix=MixPlan(index=torch.tensor([1, 0]), mask=mask))
    loss = PatchMixingLoss(num_classes=K, in_channels=5, form='official', tokens='final_norm').eval()
    h, labels = trace.final[:, 1:], [3, 0]
    w = torch.tensor([0.5, 0, 0.5, 0])
    total = 0
    for b in range(B):
        for region, label in ((w, labels[b]), (1 - w, labels[1 - b])):
            pooled = (region[:, None] * h[b]).sum(0) / (region.sum() + 1e-4)
            p = loss.patch_head(pooled).softmax(-1)
            total = total + region.mean() * -torch.log(p[label] + 1e-8)
    out = loss.loss((), samples(labels), trace)['loss_patch_mixing']
    torch.testing.assert_close(out, total / B)
    with pytest.raises(ValueError, match='does not pool onto'):
        bad = vit_trace(grid=(3, 3), mix=MixPlan(index=torch.tensor([1, 0]), mask=torch.ones(2, 4, 4)))
        loss.loss((), samples(labels), bad)


def tiny_classifier(backbone, embed_dims, aux_losses, token_mix):
    if backbone['type'] == 'mmvitreg.SwinTransformer':
        head = dict(
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=10, in_channels=embed_dims),
        )
    else:
        head = dict(head=dict(type='mmpretrain.VisionTransformerClsHead', num_classes=10, in_channels=embed_dims))
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone,
        **head,
        aux_losses=aux_losses,
        train_cfg=dict(mix=token_mix),
        data_preprocessor=dict(num_classes=10, mean=[127.5] * 3, std=[127.5] * 3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


def predict_on_digits(mixing, batch_size):
    """A tiny DeiT TokenClassifier with ``mixing`` as its aux loss, in eval: its predictions on ``batch_size`` digits
    and, from the same images, the backbone's final tokens ``(B, 1 + N, C)`` and the model."""
    model = tiny_classifier(
        dict(type='mmvitreg.VisionTransformer', arch=TINY_ARCH, img_size=32, patch_size=8), 32, [mixing], None
    ).eval()
    data = model.data_preprocessor(digits_batch(batch_size), False)
    with torch.no_grad():
        out = model.predict(data['inputs'], data['data_samples'])
        trace = TokenTrace(points={'final'})
        model.backbone(data['inputs'], trace=trace)
    return out, trace.final, model


ALL_THREE = [
    dict(type='mmvitreg.PatchCosineLoss'),
    dict(type='mmvitreg.PatchContrastiveLoss'),
    dict(type='mmvitreg.PatchMixingLoss', num_classes=10, in_channels=32),
]
TINY_ARCH = dict(embed_dims=32, num_layers=3, num_heads=2, feedforward_channels=64)


@pytest.mark.parametrize('backbone_type', ['mmvitreg.VisionTransformer', 'mmvitreg.DeepViT', 'mmvitreg.LVViT'])
def test_all_three_train_a_tiny_vit_with_patch_cutmix(backbone_type):
    """One train step of a ViT / DeepViT / LV-ViT with the three losses and token-aligned CutMix: each loss is
    logged, the patch head and the backbone get gradients, and the mixing loss equals its formula on the
    recorded trace."""
    arch = dict(TINY_ARCH, attn_types='reattn') if backbone_type == 'mmvitreg.DeepViT' else TINY_ARCH
    if backbone_type == 'mmvitreg.LVViT':
        arch = dict(TINY_ARCH, stem=dict(channels=16), skip_lam=2.0)
    model = tiny_classifier(
        dict(type=backbone_type, arch=arch, img_size=32, patch_size=8),
        32,
        ALL_THREE,
        dict(type='mmvitreg.PatchCutMix', patch_size=8),
    )
    seen = []
    model.backbone.register_forward_hook(lambda m, a, kw, out: seen.append(kw.get('trace')), with_kwargs=True)
    log = model.train_step(digits_batch(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0)))
    assert set(log) == {'loss', 'loss_cls', 'loss_patch_cos', 'loss_patch_contrastive', 'loss_patch_mixing'}
    trace = seen[0]
    assert trace.mix is not None and trace.mix.in_pixels and set(trace.tokens) == {0, 2}
    data = model.data_preprocessor(digits_batch(), True)
    model.zero_grad()
    losses = model.loss(data['inputs'], data['data_samples'], mix_plan=data['mix_plan'])
    sum(v for k, v in losses.items() if k != 'loss').backward()
    assert model.aux_losses[2].patch_head.weight.grad.abs().sum() > 0
    assert model.backbone.layers[1].ffn.layers[0][0].weight.grad.abs().sum() > 0


def test_swin_takes_cosine_and_mixing_on_the_last_stage_and_refuses_contrastive():
    """Swin: the cosine and mixing losses read the last stage's tokens (32 px, patch 4, three stages: 8x8 ->
    4x4 -> 2x2; PatchCutMix boxes of 16 px align with them); the contrastive loss is refused when the model is
    built (the paper does not define it across down-sampling, Table 5: N/A)."""
    swin = dict(
        type='mmvitreg.SwinTransformer',
        arch=dict(embed_dims=16, depths=[1, 1, 2], num_heads=[1, 2, 4]),
        img_size=32,
        window_size=2,
        out_indices=(2,),
    )
    mixing = dict(type='mmvitreg.PatchMixingLoss', num_classes=10, in_channels=64)
    model = tiny_classifier(
        swin, 64, [dict(type='mmvitreg.PatchCosineLoss'), mixing], dict(type='mmvitreg.PatchCutMix', patch_size=16)
    )
    seen = []
    model.backbone.register_forward_hook(lambda m, a, kw, out: seen.append(kw.get('trace')), with_kwargs=True)
    log = model.train_step(digits_batch(), OptimWrapper(torch.optim.SGD(model.parameters(), lr=0.0)))
    assert set(log) == {'loss', 'loss_cls', 'loss_patch_cos', 'loss_patch_mixing'}
    trace = seen[0]
    assert trace.patch_tokens(-1).shape == (8, 4, 64) and trace.mix.mask.shape[-2:] == (2, 2)
    with pytest.raises(TraceUserError, match="PatchContrastiveLoss needs the fact \\['isotropic'\\]"):
        tiny_classifier(swin, 64, [dict(type='mmvitreg.PatchContrastiveLoss')], None)


def test_ensemble_prediction_averages_the_cls_head_and_the_patch_head():
    """ensemble=True (official t_acc): the prediction is (softmax(cls head) + softmax(g(mean patch))) / 2."""
    mixing = dict(type='mmvitreg.PatchMixingLoss', num_classes=10, in_channels=32, tokens='final_norm', ensemble=True)
    out, final, model = predict_on_digits(mixing, 4)
    with torch.no_grad():
        cls = model.head.layers.head(final[:, 0])
        patch = model.aux_losses[0].patch_head(final[:, 1:].mean(1))
        expected = (cls.softmax(-1) + patch.softmax(-1)) / 2
    torch.testing.assert_close(torch.stack([s.pred_score for s in out]), expected)
    assert [int(s.pred_label) for s in out] == expected.argmax(-1).tolist()


def test_support_table_shows_the_contrastive_loss_only_on_isotropic_backbones():
    from studies.trace_support import support_table

    table = support_table(users=['PatchCosineLoss', 'PatchContrastiveLoss', 'PatchMixingLoss'])
    for backbone in ('VisionTransformer', 'DeepViT', 'LVViT'):
        assert list(table[backbone].values()) == ['✓'] * 6  # each loss at its defaults and its other form
    assert table['SwinTransformer']['PatchContrastiveLoss'] == 'no isotropic'
    assert table['SwinTransformer']['PatchMixingLoss'] == '✓'
