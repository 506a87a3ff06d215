"""mmvitreg.TokenClassifier keeps mmpretrain's ImageClassifier contract (issue 32, part 5): the checks of
mmpretrain 1.2.0's ``tests/test_models/test_classifiers.py::TestImageClassifier`` (written anew here, same
models and the same assertions) with ``type='mmvitreg.TokenClassifier'`` in place of ``'ImageClassifier'``.
Code written for ImageClassifier reads ``losses['loss']``; the log shows the total under ``loss``."""

from unittest.mock import MagicMock

import pytest
import torch
from mmengine import ConfigDict
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS
from mmpretrain.structures import DataSample

from mmvitreg.models.classifiers import TokenClassifier

DEFAULT_ARGS = dict(
    type='mmvitreg.TokenClassifier',
    backbone=dict(type='ResNet', depth=18),
    neck=dict(type='GlobalAveragePooling'),
    head=dict(type='LinearClsHead', num_classes=10, in_channels=512, loss=dict(type='CrossEntropyLoss')),
)
NORMALISE = dict(data_preprocessor=dict(mean=[127.5] * 3, std=[127.5] * 3))


def build(cfg=None, **changes):
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build({**(DEFAULT_ARGS if cfg is None else cfg), **changes})
    assert isinstance(model, TokenClassifier)
    return model


def batch():
    return dict(inputs=torch.randint(0, 256, (1, 3, 224, 224)), data_samples=[DataSample().set_gt_label(1)])


def test_initialize():
    """Upstream ``test_initialize``: neck and head flags, ``pretrained`` as init_cfg, batch augments from train_cfg."""
    model = build()
    assert model.with_neck and model.with_head
    assert build(pretrained='checkpoint').init_cfg == dict(type='Pretrained', checkpoint='checkpoint')
    cfg = ConfigDict(DEFAULT_ARGS)
    cfg.pop('neck')
    assert not build(cfg).with_neck
    cfg = ConfigDict(DEFAULT_ARGS)
    cfg.pop('head')
    assert not build(cfg).with_head
    assert build(train_cfg=dict(augments=dict(type='Mixup', alpha=1.0))).data_preprocessor.batch_augments is not None
    assert build(train_cfg=dict()).data_preprocessor.batch_augments is None


def test_extract_feat():
    """Upstream ``test_extract_feat``: backbone, neck and pre_logits stages, ``extract_feats``, the errors."""
    inputs = torch.rand(1, 3, 224, 224)
    cfg = ConfigDict(DEFAULT_ARGS)
    cfg.backbone.out_indices = (0, 1, 2, 3)
    model = build(cfg)
    maps = [(1, 64, 56, 56), (1, 128, 28, 28), (1, 256, 14, 14), (1, 512, 7, 7)]
    assert [f.shape for f in model.extract_feat(inputs, stage='backbone')] == maps
    assert [f.shape for f in model.extract_feat(inputs, stage='neck')] == [(1, 64), (1, 128), (1, 256), (1, 512)]
    assert model.extract_feat(inputs, stage='pre_logits').shape == (1, 512)
    multi = model.extract_feats([inputs, inputs], stage='backbone')
    assert len(multi) == 2 and all([f.shape for f in feats] == maps for feats in multi)

    cfg.pop('neck')
    assert [f.shape for f in build(cfg).extract_feat(inputs, stage='neck')] == maps  # no neck: the backbone's
    cfg.pop('head')
    headless = build(cfg)
    with pytest.raises(AssertionError, match='No head or the head'):
        headless.extract_feat(inputs, stage='pre_logits')
    with pytest.raises(AssertionError, match='use `extract_feat`'):
        headless.extract_feats(inputs)


def test_loss():
    """Upstream ``test_loss``: the head's term under ``loss``."""
    losses = build().loss(torch.rand(1, 3, 224, 224), [DataSample().set_gt_label(1)])
    assert set(losses) == {'loss'} and losses['loss'].item() > 0


def test_predict():
    """Upstream ``test_predict``: scores per class, written into the given data samples too."""
    inputs, samples = torch.rand(1, 3, 224, 224), [DataSample().set_gt_label(1)]
    model = build()
    assert model.predict(inputs)[0].pred_score.shape == (10,)
    predictions = model.predict(inputs, samples)
    assert predictions[0].pred_score.shape == samples[0].pred_score.shape == (10,)
    torch.testing.assert_close(samples[0].pred_score, predictions[0].pred_score)


def test_forward():
    """Upstream ``test_forward``: tensor, loss and predict modes; an unknown mode is a RuntimeError."""
    inputs, samples = torch.rand(1, 3, 224, 224), [DataSample().set_gt_label(1)]
    model = build()
    assert isinstance(model(inputs), torch.Tensor)
    assert model(inputs, samples, mode='loss')['loss'].item() > 0
    assert model(inputs, mode='predict')[0].pred_score.shape == (10,)
    predictions = model(inputs, samples, mode='predict')
    assert predictions[0].pred_score.shape == samples[0].pred_score.shape == (10,)
    torch.testing.assert_close(samples[0].pred_score, predictions[0].pred_score)
    with pytest.raises(RuntimeError, match='Invalid mode "unknown"'):
        model(inputs, mode='unknown')


def test_train_step():
    """Upstream ``test_train_step``: the log has ``loss`` and the optimizer wrapper steps once. Here also: with
    only the head, the logged total is its term, also logged as ``loss_cls``."""
    model = build(**NORMALISE)
    optim_wrapper = MagicMock()
    log_vars = model.train_step(batch(), optim_wrapper)
    assert 'loss' in log_vars
    optim_wrapper.update_params.assert_called_once()
    assert list(log_vars) == ['loss', 'loss_cls']
    torch.testing.assert_close(log_vars['loss'], log_vars['loss_cls'])


def test_val_step_and_test_step():
    """Upstream ``test_val_step`` and ``test_test_step``."""
    model = build(**NORMALISE)
    assert model.val_step(batch())[0].pred_score.shape == (10,)
    assert model.test_step(batch())[0].pred_score.shape == (10,)
