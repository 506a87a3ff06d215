"""Behaviours of the auxiliary losses that the mutation run (``tools/misc/mutation_score.py``, docs/mutation.md)
found untested: the smallest inputs each formula is defined on, the refusals at its edge, and the paper defaults
a config inherits. Each test names the equation or behaviour it checks."""

import pytest
import torch
import torch.nn.functional as F
from mmpretrain.structures import DataSample

from mmvitreg.models.losses import (
    AttentionCosineLoss,
    PatchContrastiveLoss,
    PatchCosineLoss,
    PatchMixingLoss,
    patch_cosine_similarity,
)
from mmvitreg.models.trace import MixPlan, TokenTrace

G = torch.Generator().manual_seed(38)


def test_patch_cosine_is_defined_from_two_patches_and_refuses_one():
    """DiversePatch §3, P(h) = 1/(n(n-1)) sum_{i!=j} |cos(h_i, h_j)|: with n = 2 it is |cos(h_1, h_2)|; n = 1 has no
    pair and is refused."""
    h = torch.randn(3, 2, 4, generator=G)
    torch.testing.assert_close(patch_cosine_similarity(h), F.cosine_similarity(h[:, 0], h[:, 1], dim=-1).abs())
    with pytest.raises(ValueError, match='at least 2 patch tokens, got 1'):
        patch_cosine_similarity(h[:, :1])


def test_patch_cosine_loss_default_weight_is_the_papers_alpha_1():
    """DiversePatch §4, L_cos = alpha_1 P(h^[L]) with alpha_1 = 1 by default (a config that sets no weight)."""
    h = torch.randn(2, 1 + 6, 5, generator=G)
    trace = TokenTrace(num_layers=1, num_extra_tokens=1, tokens={0: h}, grids={0: (2, 3)})
    out = PatchCosineLoss().loss((), [], trace)['loss_patch_cos']
    torch.testing.assert_close(out, patch_cosine_similarity(h[:, 1:]).mean())


def test_attention_cosine_takes_a_single_pair_and_refuses_maps_without_heads():
    """DeepViT's L_cos with n = 1 pair is w * mean_{b,i,j} cos(A^0, A^1) over heads (the smallest valid n); a
    backbone's (B, N, N) maps without a head axis are refused."""
    maps = [torch.randn(2, 3, 5, 5, generator=G) for _ in range(2)]
    out = AttentionCosineLoss(num_pairs=1, loss_weight=1.0).loss((), [], TokenTrace(attn=dict(enumerate(maps))))
    torch.testing.assert_close(out['loss_attn_cos'], F.cosine_similarity(maps[0], maps[1], dim=1).mean())
    with pytest.raises(ValueError, match=r'\(B, heads, N, N\)'):
        AttentionCosineLoss(num_pairs=1).loss((), [], TokenTrace(attn={i: m[:, 0] for i, m in enumerate(maps)}))


def test_patch_contrastive_is_defined_from_two_patches_and_refuses_one():
    """DiversePatch §4 contrastive loss with n = 2: the negative g_i = mean_{j != i} h_j is the other patch, so
    L = -1/2 sum_i log softmax(a_i.h_i, a_i.h_j)[0]; n = 1 leaves no negative and is refused."""
    tokens = {0: torch.randn(2, 1 + 2, 4, generator=G), 1: torch.randn(2, 1 + 2, 4, generator=G)}
    trace = TokenTrace(num_layers=2, num_extra_tokens=1, tokens=tokens, grids={0: (1, 2), 1: (1, 2)})
    a, h = tokens[0][:, 1:], tokens[1][:, 1:]
    logits = torch.stack([(a * h).sum(-1), (a * h.flip(1)).sum(-1)], -1)
    expected = -logits.log_softmax(-1)[..., 0].mean()
    torch.testing.assert_close(PatchContrastiveLoss().loss((), [], trace)['loss_patch_contrastive'], expected)
    one = TokenTrace(
        num_layers=2, num_extra_tokens=1, tokens={i: t[:, :2] for i, t in tokens.items()}, grids={0: (1, 1), 1: (1, 1)}
    )
    with pytest.raises(ValueError, match='at least 2 patch tokens, got 1'):
        PatchContrastiveLoss().loss((), [], one)


def test_patch_contrastive_paper_form_is_the_exact_log_softmax_without_the_official_floor():
    """Paper form: -log softmax(a_i.h_i, a_i.g_i)[0], unbounded; the official -log(softmax[0] + 1e-8) stops at
    -log(1e-8) = 18.4. An anchor far from its own patch shows which one runs."""
    h = torch.tensor([[[1.0, 0.0], [0.0, 1.0]]])
    a = torch.tensor([[[-30.0, 30.0], [30.0, -30.0]]])  # a_i.h_i = -30, a_i.g_i = 30: softmax[0] = e^-60
    tokens = {0: torch.cat([torch.zeros(1, 1, 2), a], 1), 1: torch.cat([torch.zeros(1, 1, 2), h], 1)}
    trace = TokenTrace(num_layers=2, num_extra_tokens=1, tokens=tokens, grids={0: (1, 2), 1: (1, 2)})
    out = PatchContrastiveLoss().loss((), [], trace)['loss_patch_contrastive']
    torch.testing.assert_close(out, torch.tensor(60.0), rtol=1e-5, atol=1e-4)


def test_patch_mixing_loss_joins_the_prediction_only_when_asked():
    """DiversePatch's paper predicts with the class head alone: a default PatchMixingLoss (ensemble=False) leaves
    the TokenClassifier's scores the head's softmax (the official t_acc ensemble is an opt-in)."""
    from test_diversepatch_losses import predict_on_digits

    out, final, model = predict_on_digits(dict(type='mmvitreg.PatchMixingLoss', num_classes=10, in_channels=32), 2)
    with torch.no_grad():
        expected = model.head.layers.head(final[:, 0]).softmax(-1)
    torch.testing.assert_close(torch.stack([s.pred_score for s in out]), expected)


def test_patch_mixing_own_share_pools_the_mask_onto_the_last_grid_or_refuses_either_axis():
    """DiversePatch mixing loss, y_i = w_i y_b + (1 - w_i) y_index[b]: w_i is the plan's mask average-pooled onto the
    last block's grid; a mask that does not divide the grid on either axis (rows or columns) is refused."""
    h = torch.zeros(2, 8, 3)
    mask = (torch.rand(2, 4, 8, generator=G) > 0.5).float()
    trace = TokenTrace(mix=MixPlan(index=torch.tensor([1, 0]), mask=mask), num_layers=1, grids={0: (2, 4)})
    expected = mask.view(2, 2, 2, 4, 2).mean((2, 4)).flatten(1)
    torch.testing.assert_close(PatchMixingLoss.own_share(trace, h), expected)
    for bad in ((4, 6), (3, 8)):  # columns, then rows, do not pool onto (2, 4)
        trace.mix = MixPlan(index=torch.tensor([1, 0]), mask=torch.ones(2, *bad))
        with pytest.raises(ValueError, match='does not pool onto'):
            PatchMixingLoss.own_share(trace, h)


def test_patch_mixing_official_form_weights_each_samples_kl_by_its_own_area():
    """Official patch_loss: L = 1/B sum_b sum_R (sum_i R_i / n) KL_b,R, each sample's KL weighted by its own
    region's area (the samples here own 1/4 and 3/4 of their tokens, so a batch-mean weight would differ)."""
    B, K = 2, 4
    mask = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 1.0], [1.0, 0.0]]])
    h = torch.randn(B, 1 + 4, 5, generator=G)
    trace = TokenTrace(
        mix=MixPlan(index=torch.tensor([1, 0]), mask=mask),
        num_layers=1,
        num_extra_tokens=1,
        tokens={0: h},
        grids={0: (2, 2)},
    )
    loss = PatchMixingLoss(num_classes=K, in_channels=5, form='official')
    labels = [3, 0]
    total = 0
    for b in range(B):
        w = mask[b].flatten()
        for region, label in ((w, labels[b]), (1 - w, labels[1 - b])):
            pooled = (region[:, None] * h[b, 1:]).sum(0) / (region.sum() + 1e-4)
            p = loss.patch_head(pooled).softmax(-1)
            total = total + region.mean() * -torch.log(p[label] + 1e-8)
    samples = [DataSample().set_gt_label(y) for y in labels]
    torch.testing.assert_close(loss.loss((), samples, trace)['loss_patch_mixing'], total / B)


def drloc_pairs(B, m, grid, seed):
    g = torch.Generator().manual_seed(seed)
    rows, cols = (torch.randint(side, (B, m, 2), generator=g) for side in grid)
    return torch.stack((rows[..., 0], cols[..., 0]), -1), torch.stack((rows[..., 1], cols[..., 1]), -1)


@pytest.mark.parametrize('target', ['normalized', 'signed'])
def test_drloc_targets_on_a_non_square_grid_use_each_axis_own_side(target):
    """DRLoc Eq. 1 on an H x W crop: t_u = |Δi| / H, t_v = |Δj| / W (normalised, paper); official signed targets
    Δi + (H - 1), Δj + (W - 1). A 3 x 5 grid tells the axes apart."""
    from mmvitreg.models.losses import DRLoc

    fmap = torch.randn(2, 4, 3, 5, generator=G)
    p1, p2 = drloc_pairs(2, 6, (3, 5), seed=1)
    loss = DRLoc(in_channels=4, num_pairs=6, loss_weight=1.0, target=target)
    loss.sample_pairs = lambda batch, grid, device: (p1, p2)
    b = torch.arange(2)[:, None]
    pred = loss.heads[0](torch.cat((fmap[b, :, p1[..., 0], p1[..., 1]], fmap[b, :, p2[..., 0], p2[..., 1]]), -1))
    delta = (p1 - p2).float()
    t = delta.abs() / torch.tensor([3.0, 5.0]) if target == 'normalized' else delta + torch.tensor([2.0, 4.0])
    expected = (pred - t).abs().sum(-1).mean(1).sum()  # Eq. 2: the mean over an image's pairs, summed over images
    torch.testing.assert_close(loss.loss((fmap,), [], None)['loss_drloc'], expected)


def test_drloc_draws_each_ordered_pair_once_as_rows_and_columns_of_a_non_square_grid():
    """DRLoc §4, m distinct pairs (e_ij, e_ph) of the grid: with m = (HW)^2 on a 2 x 3 grid every ordered pair of
    positions comes exactly once, rows in [0, H) and columns in [0, W)."""
    from mmvitreg.models.losses import DRLoc

    p1, p2 = DRLoc(in_channels=4, num_pairs=36).sample_pairs(2, (2, 3), 'cpu')
    for p in (p1, p2):
        assert 0 <= p[..., 0].min() and p[..., 0].max() == 1 and p[..., 1].max() == 2
    codes = ((p1[..., 0] * 3 + p1[..., 1]) * 6 + p2[..., 0] * 3 + p2[..., 1]).sort(1).values
    assert (codes == torch.arange(36)).all()


def test_drloc_distinct_draws_on_a_large_grid_are_distinct_and_in_range():
    """Distinct pairs on a grid of more than SMALL_GRID tokens (a dense crop's early stage) come from 2m independent
    draws, first draws first: m distinct numbers of 0 .. count - 1 per row, without a (HW)^2 buffer."""
    from mmvitreg.models.losses import DRLoc
    from mmvitreg.models.losses.drloc import SMALL_GRID

    torch.manual_seed(0)
    count = SMALL_GRID**2 + 1
    drawn = DRLoc(in_channels=4, num_pairs=200)._distinct(8, count, 'cpu')
    assert drawn.shape == (8, 200) and 0 <= drawn.min() and drawn.max() < count
    assert all(len(set(row.tolist())) == 200 for row in drawn)


def test_patch_mixing_loss_needs_an_image_label_and_a_known_form():
    """The mixing loss classifies every patch by its image's label (image_target): a model kind without image labels
    (a segmentor) refuses it when built; an unknown form fails naming the two (paper, official)."""
    from mmvitreg.models.trace import TraceUserError
    from mmvitreg.models.trace_users import check_image_target

    with pytest.raises(TraceUserError, match='PatchMixingLoss trains with an image-level target'):
        check_image_target(PatchMixingLoss(num_classes=10, in_channels=4), 'TokenSegmentor', image_targets=False)
    check_image_target(PatchMixingLoss(num_classes=10, in_channels=4), 'TokenClassifier', image_targets=True)
    with pytest.raises(ValueError, match=r"form must be one of \('paper', 'official'\)"):
        PatchMixingLoss(num_classes=10, in_channels=4, form='simclr')
