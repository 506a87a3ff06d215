"""tools/train.py and tools/test.py on the device: exact resume (N iterations, stop, --resume to 2N gives the
weights, optimizer state and logged losses of 2N straight, bit for bit, with mmengine's deterministic settings; the
CPU version is tests/test_exact_resume.py) and a digits classifier trained, then tested, end to end."""

import json

import pytest
import torch
from conftest import CONFIGS, run_tool
from device_helpers import DEVICE, needs_device
from guard_helpers import TECHNIQUES, build_workspace, logged_losses, run_options
from test_exact_resume import ITERS_PER_EPOCH, N_EPOCHS, OPTIONS, assert_identical

pytestmark = needs_device


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('cuda_runs_ws'))


def train(config, ws, work, *flags, **options):
    """tools/train.py in a process of its own (CUBLAS_WORKSPACE_CONFIG set: see device_helpers.py)."""
    return run_tool(
        ['train.py', config, '--work-dir', work, *flags, *run_options(config, ws, work, **options)], cwd=ws, timeout=300
    )


def assert_ran_on_the_device(work):
    """mmengine logs the CUDA memory of every training iteration only when the model trains on CUDA."""
    log = next(work.glob('*/*.log')).read_text()
    lines = [ln for ln in log.splitlines() if 'loss:' in ln and ' lr: ' in ln]
    assert lines and all((' memory: ' in ln) == DEVICE.startswith('cuda') for ln in lines)


@pytest.mark.parametrize('config', TECHNIQUES[:2], ids=lambda p: p.stem)
def test_n_then_resume_to_2n_equals_2n_straight(ws, config):
    straight, resumed = ws / f'straight_{config.stem}', ws / f'resumed_{config.stem}'
    train(config, ws, straight, **OPTIONS, **{'train_cfg.max_epochs': 2 * N_EPOCHS})
    train(config, ws, resumed, **OPTIONS, **{'train_cfg.max_epochs': N_EPOCHS})
    train(config, ws, resumed, '--resume', **OPTIONS, **{'train_cfg.max_epochs': 2 * N_EPOCHS})
    assert_ran_on_the_device(straight)
    a = torch.load(straight / 'epoch_2.pth', map_location='cpu', weights_only=False)
    b = torch.load(resumed / 'epoch_2.pth', map_location='cpu', weights_only=False)
    assert a['meta']['iter'] == b['meta']['iter'] == 2 * ITERS_PER_EPOCH
    for key, what in (
        ('state_dict', 'weights'),
        ('optimizer', 'optimizer state'),
        ('param_schedulers', 'schedulers'),
        ('rng_state', 'random generators'),
    ):
        assert_identical(a[key], b[key], what)
    assert logged_losses(resumed, all_runs=True) == logged_losses(straight)


def test_train_then_test_a_digits_classifier(ws):
    config = CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'
    work = ws / 'train_test'
    train(config, ws, work, **{'train_cfg.max_epochs': 2, 'train_cfg.val_interval': 1})
    assert_ran_on_the_device(work)
    checkpoint = work / 'epoch_2.pth'
    proc = run_tool(
        ['test.py', config, checkpoint, '--work-dir', work / 'test', *run_options(config, ws, work / 'test')],
        cwd=ws,
        timeout=300,
    )
    metrics = json.loads([ln for ln in proc.stdout.splitlines() if ln.startswith('metrics: ')][-1][len('metrics: ') :])
    assert 0.0 <= metrics['accuracy/top1'] <= 100.0
