"""BNRecalibrationHook: DeepViT's official BatchNorm re-calibration before validation (dvit_repo
train.py / utils/misc.py bn_calibration): every BatchNorm's statistics become the cumulative average
over 50 training batches read with the evaluation pipeline."""

from types import SimpleNamespace

import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmpretrain.structures import DataSample

from mmvitreg.engine.hooks import BNRecalibrationHook
from mmvitreg.engine.hooks.bn_recalibration_hook import calibration_dataloader_cfg
from mmvitreg.registry import HOOKS


def tiny_deepvit():
    """A DeepViT with a conv stem (BatchNorms) and re-attention (BatchNorm over heads)."""
    cfg = dict(
        type='ImageClassifier',
        backbone=dict(
            type='mmvitreg.DeepViT',
            img_size=32,
            patch_size=8,
            arch=dict(
                embed_dims=24,
                num_layers=2,
                num_heads=3,
                feedforward_channels=48,
                attn_types=['msa', 'reattn'],
                stem=dict(channels=8, num_convs=2),
            ),
        ),
        head=dict(type='VisionTransformerClsHead', num_classes=10, in_channels=24),
        data_preprocessor=dict(num_classes=10, mean=[127.5] * 3, std=[127.5] * 3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


def batches(n, size=4):
    g = torch.Generator().manual_seed(1)
    return [
        dict(
            inputs=[torch.randint(0, 256, (3, 32, 32), dtype=torch.uint8, generator=g) for _ in range(size)],
            data_samples=[DataSample().set_gt_label(0) for _ in range(size)],
        )
        for _ in range(n)
    ]


def test_statistics_are_the_cumulative_average_of_the_batch_statistics():
    """Running mean / var = the plain average over the first num_batches batches of each batch's mean and
    unbiased variance of the norm's input (momentum=None), for the stem and the re-attention norms."""
    model = tiny_deepvit()
    norms = {n: m for n, m in model.named_modules() if isinstance(m, torch.nn.BatchNorm2d)}
    assert any('var_norm' in n for n in norms) and any('patch_embed' in n for n in norms)
    data = batches(4)
    inputs = {n: [] for n in norms}
    handles = [
        m.register_forward_hook(lambda m, args, out, n=n: inputs[n].append(args[0].detach())) for n, m in norms.items()
    ]
    model.train()  # every norm normalises with its batch statistics, as during calibration
    with torch.no_grad():
        for batch in data[:3]:
            model._run_forward(model.data_preprocessor(batch, False), mode='tensor')
    for h in handles:
        h.remove()
    for m in norms.values():  # stale statistics and momentum the hook must replace
        m.running_mean.fill_(7.0)
        m.momentum = 0.1
    hook = BNRecalibrationHook(num_batches=3)
    hook.recalibrate(model, data)
    assert not model.training and all(not m.training for m in norms.values())
    for n, m in norms.items():
        xs = inputs[n]
        mean = torch.stack([x.mean((0, 2, 3)) for x in xs]).mean(0)
        var = torch.stack([x.transpose(0, 1).flatten(1).var(1, unbiased=True) for x in xs]).mean(0)
        torch.testing.assert_close(m.running_mean, mean, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(m.running_var, var, rtol=1e-5, atol=1e-6)
        assert m.momentum is None and int(m.num_batches_tracked) == 3  # official: momentum None stays


def test_restore_momentum_and_the_hook_runs_before_validation():
    model = tiny_deepvit()
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.momentum = 0.2
    hook = HOOKS.build(
        dict(type='mmvitreg.BNRecalibrationHook', num_batches=2, dataloader=batches(5), restore_momentum=True)
    )
    runner = SimpleNamespace(model=model)
    hook.before_val_epoch(runner)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm2d)]
    assert all(m.momentum == 0.2 and int(m.num_batches_tracked) == 2 for m in norms)
    with pytest.raises(ValueError, match='num_batches'):
        BNRecalibrationHook(num_batches=0)


def test_default_calibration_data_is_the_training_set_with_the_validation_pipeline():
    """The DeepViT recipes turn the hook on with the official 50 batches of 256 un-augmented images."""
    from mmvitreg.utils import load_config

    cfg = load_config(str(CONFIGS / 'deepvit' / 'deepvit-s_8xb32_in1k.py'))
    hook = [h for h in cfg.custom_hooks if h['type'] == 'mmvitreg.BNRecalibrationHook'][0]
    assert (hook['num_batches'], hook['batch_size'], hook['restore_momentum']) == (50, 256, False)
    loader = calibration_dataloader_cfg(cfg, batch_size=256)
    assert loader['batch_size'] == 256
    assert loader['dataset']['pipeline'] == cfg.val_dataloader.dataset.pipeline
    train = cfg.train_dataloader.dataset.to_dict()
    assert {k: v for k, v in loader['dataset'].items() if k != 'pipeline'} == {
        k: v for k, v in train.items() if k != 'pipeline'
    } and train['split'] == 'train'  # the training set
    assert cfg.train_dataloader.batch_size == 32  # the config itself is untouched
    with pytest.raises(ValueError, match='val_dataloader'):
        calibration_dataloader_cfg(Config(dict(train_dataloader=dict())))
