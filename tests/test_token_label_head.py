"""TokenLabelHead: token labeling loss (LV-ViT paper Eq. 6-7), beta, smoothing, ReLabel target, prediction."""

import pytest
import torch
import torch.nn.functional as F
from mmpretrain.structures import DataSample

from mmvitreg.models.heads import TokenLabelHead
from mmvitreg.models.heads.token_label_head import mix_token_label_target
from mmvitreg.models.trace import MixPlan, TokenTrace

B, G, C, D, K = 3, 2, 6, 8, 2  # batch, grid side, classes, token dim, top-k
N = G * G


def make_inputs(seed=0, with_token_label=True):
    g = torch.Generator().manual_seed(seed)
    feats = (torch.randn(B, 1 + N, D, generator=g),)
    samples = []
    for b in range(B):
        s = DataSample().set_gt_label(int(torch.randint(C, (1,), generator=g)))
        if with_token_label:
            p = torch.rand(K, G, G, generator=g)
            idx = torch.stack([torch.randperm(C, generator=g)[:K] for _ in range(N)], 1).view(K, G, G)
            s.set_field(torch.stack([p / p.sum(0), idx.float()]), 'token_label')
        samples.append(s)
    trace = TokenTrace(grid=(G, G), num_layers=1, grids={0: (G, G)}, num_extra_tokens=1)
    return feats, samples, trace


def dense_targets(samples):
    """(B, N, C) dense token labels from the (2, k, S, S) top-k format."""
    out = torch.zeros(B, N, C)
    for b, s in enumerate(samples):
        p = s.token_label[0].flatten(1).t()
        i = s.token_label[1].flatten(1).t().long()
        out[b].scatter_(1, i, p)
    return out


def soft_ce(logits, target):
    return -(target * F.log_softmax(logits, -1)).sum(-1)


def build(**kw):
    head = TokenLabelHead(num_classes=C, in_channels=D, **kw)
    head.init_weights()
    torch.nn.init.normal_(head.layers.head.bias)
    torch.nn.init.normal_(head.aux_head.bias)
    return head


def test_eq7_total_loss_matches_hand_computation():
    """Eq. 6-7: L = H(X^cls, y^cls) + beta * (1/N) sum_i H(X^i, y^i), with label smoothing s."""
    feats, samples, trace = make_inputs()
    s, beta = 0.1, 0.5
    head = build(beta=beta, token_label_smooth_val=s)
    losses = head.loss(feats, samples, trace)
    x = feats[0]
    cls_logits = x[:, 0] @ head.layers.head.weight.t() + head.layers.head.bias
    aux_logits = x[:, 1:] @ head.aux_head.weight.t() + head.aux_head.bias
    y_cls = F.one_hot(torch.tensor([int(t.gt_label) for t in samples]), C).float() * (1 - s) + s / C
    y_tok = dense_targets(samples) * (1 - s) + s / C
    l_cls = soft_ce(cls_logits, y_cls).mean()
    l_aux = soft_ce(aux_logits, y_tok).mean()
    torch.testing.assert_close(losses['loss_cls'], l_cls)
    torch.testing.assert_close(losses['loss_token'], beta * l_aux)


def test_beta_scales_the_token_term_and_zero_needs_no_token_labels():
    """Eq. 7: beta weighs L_aux (paper 0.5, official 1.0); beta=0 trains plain data (no token_label)."""
    feats, samples, trace = make_inputs()
    half = build(beta=0.5)
    one = build(beta=1.0)
    one.load_state_dict(half.state_dict())
    torch.testing.assert_close(
        one.loss(feats, samples, trace)['loss_token'], 2 * half.loss(feats, samples, trace)['loss_token']
    )
    feats, plain, trace = make_inputs(with_token_label=False)
    losses = build(beta=0.0).loss(feats, plain, trace)
    assert set(losses) == {'loss_cls'}
    with pytest.raises(ValueError, match="token_label"):
        half.loss(feats, plain, trace)
    for sample in plain:  # packed maps that no TokenClsDataPreprocessor read: the error says what to use
        sample.set_field(object(), 'token_label_map')
    with pytest.raises(ValueError, match='TokenClsDataPreprocessor'):
        half.loss(feats, plain, trace)


def test_token_label_smoothing():
    """Smoothed token label (1 - s) y + s / C; s = 0 gives the plain soft CE."""
    feats, samples, trace = make_inputs(1)
    plain = build(beta=1.0, token_label_smooth_val=0.0)
    smooth = build(beta=1.0, token_label_smooth_val=0.3)
    smooth.load_state_dict(plain.state_dict())
    aux_logits = plain.aux_head(feats[0][:, 1:])
    y = dense_targets(samples)
    torch.testing.assert_close(plain.loss(feats, samples, trace)['loss_token'], soft_ce(aux_logits, y).mean())
    torch.testing.assert_close(
        smooth.loss(feats, samples, trace)['loss_token'], soft_ce(aux_logits, 0.7 * y + 0.3 / C).mean()
    )


def test_relabel_cls_target_is_pooled_token_labels_mixed_by_eq10():
    """ReLabel cls target of the top-k reading: the crop's pooled label map (mean of token labels),
    smoothed as the token labels, mixed by M_bar (Eq. 10)."""
    feats, samples, trace = make_inputs(2)
    head = build(cls_target='relabel')
    cls_logits = head.layers.head(feats[0][:, 0])
    pooled = dense_targets(samples).mean(1) * 0.9 + 0.1 / C
    torch.testing.assert_close(head.loss(feats, samples, trace)['loss_cls'], soft_ce(cls_logits, pooled).mean())
    mask = torch.ones(B, G, G)
    mask[:, 0, :] = 0
    trace.mix = MixPlan(index=torch.tensor([2, 1, 0]), mask=mask)
    lam = 0.5
    mixed = lam * pooled + (1 - lam) * pooled[[2, 1, 0]]
    torch.testing.assert_close(head.loss(feats, samples, trace)['loss_cls'], soft_ce(cls_logits, mixed).mean())


def official_inputs(seed):
    """Token labels and relabel targets in the official reading's format: listed classes, then class
    -1 slots (padding 0, the last one the probability of each unlisted class); and their dense form."""
    g = torch.Generator().manual_seed(seed)
    feats, samples, trace = make_inputs(seed)
    dense = torch.zeros(B, 1 + N, C)
    for b, sample in enumerate(samples):
        sparse = []
        for t in range(1 + N):
            listed = torch.randperm(C, generator=g)[:3]
            p = torch.rand(5, generator=g)
            p = p / p.sum()
            probs = torch.cat([p[:3], torch.zeros(1), p[3:].sum().view(1) / (C - 3)])  # pad slot, tail slot
            sparse.append(torch.stack([probs, torch.cat([listed.float(), torch.tensor([-1.0, -1.0])])]))
            dense[b, t] = probs[-1]
            dense[b, t, listed] = p[:3]
        sparse = torch.stack(sparse, -1)  # (2, 5, 1 + N)
        sample.set_field(sparse[..., 0], 'relabel_label')
        sample.set_field(sparse[..., 1:].reshape(2, 5, G, G), 'token_label')
    return feats, samples, trace, dense


def test_official_reading_targets_and_official_smoothing():
    """Official-reading labels (listed classes + a shared tail) give the soft CE over all C classes;
    official smoothing uses on = 1 - s + s / C, off = s / C for soft targets (sum 1 + s / C)."""
    feats, samples, trace, dense = official_inputs(4)
    torch.testing.assert_close(dense.sum(-1), torch.ones(B, 1 + N))
    s = 0.1
    head = build(beta=1.0, cls_target='relabel', label_smooth_form='official', token_label_smooth_val=s)
    losses = head.loss(feats, samples, trace)
    cls_logits = head.layers.head(feats[0][:, 0])
    aux_logits = head.aux_head(feats[0][:, 1:])
    on, off = 1 - s + s / C, s / C
    torch.testing.assert_close(losses['loss_cls'], soft_ce(cls_logits, dense[:, 0] * on + off).mean())
    torch.testing.assert_close(losses['loss_token'], soft_ce(aux_logits, dense[:, 1:] * on + off).mean())
    standard = build(beta=1.0, cls_target='relabel', token_label_smooth_val=s)
    standard.load_state_dict(head.state_dict())
    torch.testing.assert_close(
        standard.loss(feats, samples, trace)['loss_token'], soft_ce(aux_logits, dense[:, 1:] * (1 - s) + off).mean()
    )


def test_relabel_gt_is_the_official_ground_truth_correction():
    """Official --ground-truth: ratio = 0.9 - 0.4 [argmax relabel == argmax gt], target = ratio * relabel
    + (1 - ratio) * gt (both smoothed), then mixed by Eq. 10 like any class-token target."""
    feats, samples, trace, dense = official_inputs(5)
    s = 0.1
    on, off = 1 - s + s / C, s / C
    relabel = dense[:, 0] * on + off
    samples[0].set_gt_label(int(relabel[0].argmax()))  # one sample where the teacher agrees
    samples[1].set_gt_label(int(relabel[1].argmin()))  # and one where it does not
    gt = torch.tensor([int(x.gt_label) for x in samples])
    gt_target = F.one_hot(gt, C).float() * (1 - s) + s / C
    ratio = torch.where(relabel.argmax(-1) == gt, 0.5, 0.9).unsqueeze(-1)
    assert ratio[0] == 0.5 and ratio[1] == 0.9
    target = ratio * relabel + (1 - ratio) * gt_target
    head = build(beta=0.0, cls_target='relabel_gt', label_smooth_form='official', token_label_smooth_val=s)
    cls_logits = head.layers.head(feats[0][:, 0])
    torch.testing.assert_close(head.loss(feats, samples, trace)['loss_cls'], soft_ce(cls_logits, target).mean())
    mask = torch.ones(B, G, G)
    mask[:, :, 0] = 0
    trace.mix = MixPlan(index=torch.tensor([2, 1, 0]), mask=mask)
    mixed = 0.5 * target + 0.5 * target[[2, 1, 0]]
    torch.testing.assert_close(head.loss(feats, samples, trace)['loss_cls'], soft_ce(cls_logits, mixed).mean())


def test_prediction_adds_half_the_per_class_token_max():
    """Official inference: score = X^cls + 0.5 * max_i X^i (aux_pred_weight=0: class token only)."""
    feats, samples, trace = make_inputs(3)
    head = build()
    cls_logits = head.layers.head(feats[0][:, 0])
    aux_logits = head.aux_head(feats[0][:, 1:])
    expected = cls_logits + 0.5 * aux_logits.max(1).values
    torch.testing.assert_close(head(feats, trace), expected)
    preds = head.predict(feats, samples, trace)
    torch.testing.assert_close(torch.stack([p.pred_score for p in preds]), expected.softmax(-1))
    cls_only = build(aux_pred_weight=0.0)
    cls_only.load_state_dict(head.state_dict())
    torch.testing.assert_close(cls_only(feats, trace), cls_logits)


def test_cal_acc_of_the_host_head_is_honoured():
    """``cal_acc`` (a VisionTransformerClsHead option) adds mmpretrain's accuracy to the losses, as in the host."""
    feats, samples, trace = make_inputs()
    head = build(cal_acc=True, topk=(1,))
    losses = head.loss(feats, samples, trace)
    cls_logits = feats[0][:, 0] @ head.layers.head.weight.t() + head.layers.head.bias
    labels = torch.cat([t.gt_label for t in samples])
    assert set(losses) == {'loss_cls', 'loss_token', 'accuracy_top-1'}
    accuracy = (cls_logits.argmax(-1) == labels).float().mean(0, keepdim=True) * 100
    torch.testing.assert_close(losses['accuracy_top-1'][0], accuracy)
    assert set(build().loss(feats, samples, trace)) == {'loss_cls', 'loss_token'}


def test_checkpoint_key_names():
    """Keys match mmpretrain's VisionTransformerClsHead (layers.head) plus the official aux_head."""
    assert set(build().state_dict()) == {'layers.head.weight', 'layers.head.bias', 'aux_head.weight', 'aux_head.bias'}


def test_errors():
    feats, samples, trace = make_inputs()
    head = build()
    with pytest.raises(ValueError, match='cls_target'):
        build(cls_target='pooled')
    with pytest.raises(ValueError, match='label_smooth_form'):
        build(label_smooth_form='timm')
    with pytest.raises(ValueError, match="out_type='raw'"):
        head.loss((feats[0][:, 0],), samples, trace)
    with pytest.raises(ValueError, match='TokenClassifier'):
        head(feats)
    with pytest.raises(ValueError, match='token grid'):
        head.loss(feats, samples, TokenTrace(grid=(3, 3), num_layers=1, grids={0: (3, 3)}, num_extra_tokens=1))
    with pytest.raises(ValueError, match='token_label_size'):
        head.loss(
            (torch.randn(B, 1 + 9, D),),
            samples,
            TokenTrace(grid=(3, 3), num_layers=1, grids={0: (3, 3)}, num_extra_tokens=1),
        )


def test_mix_token_label_target_is_eq9_and_eq10():
    """Eq. 9: the weighted sparse parts sum, token by token, to M * Y_1 + (1 - M) * Y_2 (a soft mask too);
    Eq. 10: the class-token target mixed by the mask mean; without a plan both come back as they are."""
    _, samples, _ = make_inputs(seed=3)
    token_label = torch.stack([s.token_label for s in samples])
    g = torch.Generator().manual_seed(3)
    mask, relabel = torch.rand(B, G, G, generator=g), torch.rand(B, C, generator=g)
    index = torch.tensor([2, 0, 1])
    parts, mixed = mix_token_label_target(token_label, MixPlan(index=index, mask=mask), relabel)
    dense = sum(weight.unsqueeze(-1) * torch.zeros(B, N, C).scatter_add(2, i, p) for weight, p, i in parts)
    y, m, lam = dense_targets(samples), mask.flatten(1).unsqueeze(-1), mask.flatten(1).mean(1, keepdim=True)
    torch.testing.assert_close(dense, m * y + (1 - m) * y[index])
    torch.testing.assert_close(mixed, lam * relabel + (1 - lam) * relabel[index])
    parts, same = mix_token_label_target(token_label, None, relabel)
    assert same is relabel and len(parts) == 1
    torch.testing.assert_close(torch.zeros(B, N, C).scatter_add(2, parts[0][2], parts[0][1]), y)
