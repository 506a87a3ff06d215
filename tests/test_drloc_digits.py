"""DRLoc on the bundled digits through the real tools: every backbone kind the paper uses (ViT, Swin,
T2T-ViT, CvT, ResNet; tiny variants) trains with the loss, and the official λ warm-up/decay hook sets λ
per epoch in a real runner."""

import pytest
from conftest import CONFIGS
from guard_helpers import build_workspace, logged_losses, train
from mmengine.config import Config

from mmvitreg.engine.hooks import DRLocWeightScheduleHook

DIGITS = sorted((CONFIGS / 'drloc').glob('*_drloc_digits.py'))


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('drloc_ws'))


def test_every_backbone_kind_has_a_digits_config():
    backbones = {Config.fromfile(str(c)).model.backbone.type.split('.')[-1] for c in DIGITS}
    assert backbones == {'VisionTransformer', 'SwinTransformer', 'T2T_ViT', 'CvT', 'ResNet_CIFAR'}


@pytest.mark.parametrize('config', DIGITS, ids=[c.name.split('_')[0] for c in DIGITS])
def test_trains_with_drloc_on_digits(ws, tmp_path, config):
    """tools/train.py, one epoch: every step logs a finite, positive DRLoc term."""
    train(config, ws, tmp_path, **{'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 1})
    steps = logged_losses(tmp_path)
    assert steps and all(0 < s['loss_drloc'] < 100 for s in steps)


def test_official_schedule_values():
    """Official main.py _weight_decay with 20 warm-up and 300 total epochs: 0 at epoch 0, 0.05λ at 1, λ at 20,
    0.714λ at 100 (where the official loop stops)."""
    hook = DRLocWeightScheduleHook()
    assert [round(hook.factor(e), 4) for e in (0, 1, 10, 20, 50, 100)] == [0, 0.05, 0.5, 1, 0.8929, 0.7143]
    with pytest.raises(ValueError, match='warmup_epochs'):
        DRLocWeightScheduleHook(warmup_epochs=5, total_epochs=5)


def test_schedule_hook_sets_lambda_per_epoch_in_a_runner(ws, tmp_path):
    """With W = 2, T = 4: epoch 0 trains with λ = 0 (logged DRLoc term exactly 0), epoch 1 with λ/2."""
    config = tmp_path / 'swin_drloc_schedule.py'
    config.write_text(
        f"_base_ = '{CONFIGS / 'drloc' / 'swin-nano_1xb64_drloc_digits.py'}'\n"
        "custom_hooks = [dict(type='mmvitreg.DRLocWeightScheduleHook', warmup_epochs=2, total_epochs=4)]\n"
    )
    train(config, ws, tmp_path, **{'train_cfg.max_epochs': 2, 'train_cfg.val_interval': 2})
    steps = logged_losses(tmp_path)
    by_epoch = {e: [s['loss_drloc'] for s in steps if s['epoch'] == e] for e in (1, 2)}
    assert by_epoch[1] and all(v == 0 for v in by_epoch[1])
    assert by_epoch[2] and all(v > 0 for v in by_epoch[2])


def test_baseline_override_runs_with_the_schedule_hook(ws, tmp_path):
    """The documented baseline of every DRLoc recipe, --cfg-options model.aux_losses=[], trains with the recipe's
    λ schedule hook and LR scheduler (official timm curve) in place: the hook says once that there is no DRLoc
    and stays idle, no DRLoc term is logged."""
    config = tmp_path / 'swin_drloc_recipe_hooks.py'
    config.write_text(
        f"_base_ = '{CONFIGS / 'drloc' / 'swin-nano_1xb64_drloc_digits.py'}'\n"
        "custom_hooks = [dict(type='mmvitreg.DRLocWeightScheduleHook', warmup_epochs=2, total_epochs=4)]\n"
        "param_scheduler = [dict(type='mmvitreg.TimmCosineLR', T_max=4, warmup=1, eta_min=1e-5,\n"
        "                        by_epoch=True, convert_to_iter_based=True)]\n"
    )
    train(config, ws, tmp_path, **{'model.aux_losses': '[]', 'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 1})
    steps = logged_losses(tmp_path)
    assert steps and all('loss_drloc' not in s and 0 < s['loss'] < 100 for s in steps)
    log = next(tmp_path.glob('*/*.log')).read_text()
    assert log.count('DRLocWeightScheduleHook: the model has no mmvitreg.DRLoc') == 1
