"""A resume says what runs (issue 43.3): each group of the resume warning is checked against the resumed run itself
(its logged lr, its weights), and what the resumed state cannot follow is one refusal line before anything runs.

The base run: the quick-start DeiT on 128 digits, batch 64 (2 iterations an epoch), 2 epochs (the warm-up, converted
to iterations, ends at iteration 4), a checkpoint each epoch."""

import json

import pytest
import torch
from guard_helpers import build_workspace, run_options, tool
from test_honest_weights import QUICK_START, build_train_runner, close, ema_config

BASE = {'train_cfg.max_epochs': 2, 'train_cfg.val_interval': 5, 'default_hooks.checkpoint.max_keep_ckpts': -1}


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('resume_ws'))


@pytest.fixture(scope='module')
def base(ws):
    work = ws / 'base'
    build_train_runner(QUICK_START, ws, work, **BASE).train()
    return work


def resume(ws, work, config, checkpoint, *flags, **options):
    """The resumed runner after ``train()``, its warning line (or None) and its logged lr per iteration."""
    runner = build_train_runner(config, ws, work, '--resume', checkpoint, *flags, **{**BASE, **options})
    runner.train()
    log = sorted(work.glob('*/*.log'))[-1].read_text()
    warnings = [line for line in log.splitlines() if f'WARNING - resume {checkpoint}: ' in line]
    assert len(warnings) <= 1
    steps = [json.loads(line) for line in sorted(work.glob('*/vis_data/scalars.json'))[-1].read_text().splitlines()]
    return runner, (warnings or [None])[0], [s['lr'] for s in steps if 'lr' in s]


def refusal(ws, tmp_path, config, checkpoint, **options):
    work = tmp_path / 'refused'
    with pytest.raises(SystemExit) as e:
        tool('train')(
            [
                str(config),
                '--work-dir',
                str(work),
                '--resume',
                str(checkpoint),
                *run_options(config, ws, work, **{**BASE, **options}),
            ]
        )
    assert not list(work.glob('*.pth'))
    message = str(e.value)
    assert message.startswith(f'error: --resume {checkpoint}: the resumed state does not fit the new config: ')
    assert '\n' not in message
    return message


def derived(tmp_path, name, body):
    path = tmp_path / f'{name}.py'
    path.write_text(f"_base_ = '{QUICK_START}'\n{body}")
    return path


def test_auto_scale_lr_is_overridden_by_the_optimizer_state_and_a_new_batch_size_is_taken(ws, base, tmp_path):
    """``--auto-scale-lr`` with batch 32: the lr stays the optimizer state's, unscaled (the run equals the resume
    without the flag, weight for weight), as the warning now says; the batch size is taken (4 iterations an epoch)."""
    plain, _, lrs = resume(
        ws,
        tmp_path / 'plain',
        QUICK_START,
        base / 'epoch_2.pth',
        **{'train_cfg.max_epochs': 3, 'train_dataloader.batch_size': 32},
    )
    scaled, warning, scaled_lrs = resume(
        ws,
        tmp_path / 'scaled',
        QUICK_START,
        base / 'epoch_2.pth',
        '--auto-scale-lr',
        **{'train_cfg.max_epochs': 3, 'train_dataloader.batch_size': 32},
    )
    assert "auto_scale_lr.enable '<unset>' -> True (the lr comes from the optimizer state, unscaled)" in warning
    assert 'taken from the new config (the training so far used the old value): ' in warning
    assert 'train_dataloader.batch_size 64 -> 32' in warning.split('taken from the new config')[1]
    assert len(scaled_lrs) == 4 and scaled_lrs == lrs and abs(lrs[0] - 1e-3) < 1e-5  # not 1e-3 * 32 / 64
    assert close(scaled.model, plain.model.state_dict())


def test_a_new_epoch_length_while_the_warm_up_still_counts_the_old_iterations_is_refused(ws, base, tmp_path):
    message = refusal(ws, tmp_path, QUICK_START, base / 'epoch_1.pth', **{'train_dataloader.batch_size': 32})
    assert (
        'an epoch is now 4 iterations (was 2; train_dataloader), while the resumed schedulers count the old '
        "epochs' iterations up to iteration 4" in message
    )


def test_another_scheduler_type_is_refused(ws, base, tmp_path):
    """A StepLR given the cosine's state used to follow StepLR while the warning said the state kept the cosine."""
    config = derived(
        tmp_path,
        'steplr',
        "param_scheduler = [dict(type='LinearLR', start_factor=1e-3, by_epoch=True, "
        "end=2, convert_to_iter_based=True), dict(type='StepLR', step_size=1, gamma=0.1, by_epoch=True, "
        'begin=2, end=30)]\n',
    )
    message = refusal(ws, tmp_path, config, base / 'epoch_2.pth', **{'train_cfg.max_epochs': 4})
    assert "param_scheduler.1.type 'CosineAnnealingLR' -> 'StepLR'" in message


def test_removing_paramwise_cfg_is_one_refusal_line_not_a_traceback(ws, base, tmp_path):
    config = derived(
        tmp_path,
        'no_paramwise',
        "optim_wrapper = dict(_delete_=True, type='OptimWrapper', optimizer="
        "dict(type='AdamW', lr=1e-3, weight_decay=0.05, eps=1e-8, betas=(0.9, 0.999)))\n",
    )
    message = refusal(ws, tmp_path, config, base / 'epoch_2.pth', **{'train_cfg.max_epochs': 3})
    assert 'parameter groups, the new optimizer 1 (optim_wrapper.paramwise_cfg makes them)' in message


def test_a_new_pipeline_is_listed_as_taken_and_is_applied(ws, base, tmp_path):
    config = derived(
        tmp_path,
        'resize',
        "train_dataloader = dict(dataset=dict(pipeline=[dict(type='LoadImageFromFile'"
        "), dict(type='Resize', scale=32), dict(type='PackInputs')]))\n",
    )
    old, _, _ = resume(ws, tmp_path / 'old', QUICK_START, base / 'epoch_2.pth', **{'train_cfg.max_epochs': 3})
    new, warning, _ = resume(ws, tmp_path / 'new', config, base / 'epoch_2.pth', **{'train_cfg.max_epochs': 3})
    taken = warning.split('taken from the new config (the training so far used the old value): ')[1]
    assert "train_dataloader.dataset.pipeline.1.backend 'pillow' -> '<unset>'" in taken
    assert "train_dataloader.dataset.pipeline.1.type 'RandomResizedCrop' -> 'Resize'" in taken
    assert 'cannot' not in warning and 'overridden' not in warning
    assert not close(new.model, old.model.state_dict())  # the same resume with the old pipeline trains otherwise


def test_a_removed_ema_hook_says_the_run_continues_from_the_ema_copy(ws, tmp_path):
    """mmengine's (and mmpretrain's) hook saves its EMA copy as ``state_dict`` and the trained weights as
    ``ema_state_dict``; without the hook the resumed model starts from the EMA copy, and the warning says so."""
    work = tmp_path / 'ema'
    build_train_runner(ema_config(tmp_path, 'mmpretrain'), ws, work, **{**BASE, 'train_cfg.max_epochs': 1}).train()
    saved = torch.load(work / 'epoch_1.pth', weights_only=False)
    trained = {k[len('module.') :]: v for k, v in saved['ema_state_dict'].items() if k.startswith('module.')}
    runner, warning, _ = resume(ws, work, QUICK_START, work / 'epoch_1.pth', **{'train_cfg.max_epochs': 1})
    assert (
        "the resumed weights: this config has no EMA hook, so the run continues from the file's state_dict, "
        'which holds the EMA copy its hook saved, not from the trained weights (its ema_state_dict)' in warning
    )
    assert close(runner.model, saved['state_dict']) and not close(runner.model, trained)


@pytest.fixture(scope='module')
def validated(ws):
    """The base run validated each epoch: mmengine's CheckpointHook (``save_best='auto'``) adds
    ``best_accuracy_top1_epoch_1.pth``, saved without the optimizer's and the schedulers' states."""
    work = ws / 'validated'
    build_train_runner(QUICK_START, ws, work, **{**BASE, 'train_cfg.val_interval': 1}).train()
    return work


def resume_error(ws, work, checkpoint, **options):
    """The one line with which tools/train.py refuses ``--resume checkpoint``; nothing written."""
    with pytest.raises(SystemExit) as e:
        tool('train')(
            [
                str(QUICK_START),
                '--work-dir',
                str(work),
                '--resume',
                str(checkpoint),
                *run_options(QUICK_START, ws, work, **{**BASE, **options}),
            ]
        )
    assert not list(work.glob('*.pth')) and '\n' not in str(e.value)
    return str(e.value)


def test_a_best_checkpoint_is_refused_naming_a_file_that_resumes_and_load_from(ws, validated, tmp_path):
    """It used to resume with a new AdamW and new schedulers: lr 1e-6 at iteration 3, where resuming epoch_1.pth
    gives 6.67e-4. The refusal names the newest file of its folder that resumes, when there is one."""
    best = validated / 'best_accuracy_top1_epoch_1.pth'
    assert 'optimizer' not in torch.load(best, weights_only=False)
    message = resume_error(ws, tmp_path / 'refused', best, **{'train_cfg.max_epochs': 3})
    assert message == (
        f'error: --resume {best}: it holds no optimizer and no param_schedulers state (mmengine saves '
        'its best checkpoints without them), so the optimizer and the schedulers would start afresh; '
        f'resume from {validated / "epoch_2.pth"}, which holds them, or start a new training from its '
        f'weights with load_from={best} (tools/train.py CONFIG --cfg-options load_from={best})'
    )
    alone = tmp_path / 'alone' / best.name
    alone.parent.mkdir()
    alone.write_bytes(best.read_bytes())
    message = resume_error(ws, tmp_path / 'refused_alone', alone, **{'train_cfg.max_epochs': 3})
    assert 'start afresh; start a new training from its weights with load_from=' in message
    assert 'resume from' not in message


def test_resuming_beyond_max_epochs_is_refused_and_at_max_epochs_says_nothing_trains(ws, base, tmp_path):
    """It used to exit 0 without a word, training nothing."""
    checkpoint = base / 'epoch_2.pth'
    message = resume_error(ws, tmp_path / 'beyond', checkpoint, **{'train_cfg.max_epochs': 1})
    assert message == (
        f'error: --resume {checkpoint}: it has trained 2 epochs, more than train_cfg.max_epochs=1, '
        'so nothing would train; set train_cfg.max_epochs above 2 to train on, or evaluate it with '
        'tools/test.py'
    )
    work = tmp_path / 'at_max'
    build_train_runner(QUICK_START, ws, work, '--resume', checkpoint, **BASE).train()
    log = sorted(work.glob('*/*.log'))[-1].read_text()
    assert (
        f'WARNING - --resume {checkpoint}: it has trained all train_cfg.max_epochs=2 epochs already, so nothing '
        'trains; set train_cfg.max_epochs above 2 to train on' in log
    )
    assert not list(work.glob('*.pth'))


def test_another_seed_is_overridden_by_the_checkpoints_whole_run_data_order_included(ws, base, tmp_path):
    """mmengine re-seeds a resumed run with the checkpoint's seed, but the sampler was built from the config's:
    resuming with seed 1 used to draw another data order (other weights) while the warning said seed 0 was used.
    Now the run with seed 1 is the run with seed 0, weight for weight, its sampler on the base run's seed."""
    same, _, lrs = resume(ws, tmp_path / 'same', QUICK_START, base / 'epoch_2.pth', **{'train_cfg.max_epochs': 3})
    other, warning, other_lrs = resume(
        ws, tmp_path / 'other', QUICK_START, base / 'epoch_2.pth', **{'train_cfg.max_epochs': 3, 'randomness.seed': 1}
    )
    assert "randomness.seed 0 -> 1 (the whole run follows the checkpoint's seed 0, the data order included)" in warning
    recorded = torch.load(base / 'epoch_2.pth', weights_only=False)['rng_state']['sampler_seed']
    assert other.train_dataloader.sampler.seed == same.train_dataloader.sampler.seed == recorded
    assert other.seed == same.seed == 0 and other_lrs == lrs
    assert close(other.model, same.model.state_dict())
