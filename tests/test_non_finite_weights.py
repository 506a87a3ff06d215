"""Non-finite weights never pass silently (issue 43.1).

* A step with a finite loss can still overflow the weights: the checkpoint after it is not written (the check runs
  on what mmengine is about to save, after the EMA hook's swap), the run stops naming the first non-finite tensor
  and the last checkpoint whose weights are all finite, and mmengine's ``max_keep_ckpts`` does not remove that one
  first. A later non-finite loss names it too.
* ``tools/test.py`` (with or without ``--allow-partial``), mmpretrain's inferencer and ``get_model`` refuse a
  checkpoint with one NaN weight, in ``state_dict`` or ``ema_state_dict``, with one line naming the file and the
  tensor.
"""

from types import SimpleNamespace

import pytest
import torch
from conftest import CONFIGS
from guard_helpers import build_workspace, run_options, tool
from mmengine.config import Config
from mmengine.hooks import Hook
from model_helpers import random_checkpoint
from torch import nn

from mmvitreg.engine import AtomicLocalBackend, CheckpointError
from mmvitreg.engine.checkpoint import non_finite
from mmvitreg.engine.hooks import LossGuardHook, NonFiniteLossError, unwrap_model

QUICK_START = CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'
DEEPVIT = CONFIGS / 'deepvit' / 'deepvit-tiny_1xb64_digits.py'


class PoisonHook(Hook):
    """Puts a NaN into the first weight after iteration ``at`` (``when='iter'``: before the checkpoint hook saves,
    as an overflowing optimizer step would) or after epoch ``at`` (``when='epoch'``: once it has saved)."""

    def __init__(self, at: int, when: str):
        self.at, self.when = at, when
        self.priority = 'LOW' if when == 'iter' else 'LOWEST'  # the checkpoint hook is VERY_LOW

    def poison(self, runner):
        with torch.no_grad():
            next(unwrap_model(runner.model).parameters()).view(-1)[0] = float('nan')

    def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
        if self.when == 'iter' and runner.iter + 1 == self.at:
            self.poison(runner)

    def after_train_epoch(self, runner):
        if self.when == 'epoch' and runner.epoch + 1 == self.at:
            self.poison(runner)


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('nan_ws'))


def poisoned_run(ws, tmp_path, when, **extra):
    config = tmp_path / f'poisoned_{when}.py'
    config.write_text(
        f"_base_ = '{QUICK_START}'\n"
        f"custom_hooks = [dict(type='test_non_finite_weights.PoisonHook', at=2, when={when!r})]\n"
        "custom_imports = dict(imports=['test_non_finite_weights'], allow_failed_imports=False)\n"
    )
    work = tmp_path / 'work'
    options = {
        'train_dataloader.dataset.indices': 64,
        'train_cfg.max_epochs': 3,
        'train_cfg.val_interval': 5,
        'default_hooks.checkpoint.max_keep_ckpts': 1,
        **extra,
    }  # 1 iteration per epoch, one checkpoint kept
    with pytest.raises(SystemExit) as e:
        tool('train')([str(config), '--work-dir', str(work), *run_options(config, ws, work, **options)])
    return str(e.value), work


def all_finite(path):
    checkpoint = torch.load(path, weights_only=False)
    return not non_finite(checkpoint['state_dict'], checkpoint.get('ema_state_dict') or {})


def test_weights_that_are_not_finite_are_not_saved_and_the_previous_checkpoint_is_kept(ws, tmp_path):
    message, work = poisoned_run(ws, tmp_path, 'iter')
    assert message.startswith('error: non-finite weights after iteration 2: ')
    assert 'holds NaN or infinite values (1 tensors do)' in message
    assert f'{work / "epoch_2.pth"} is not written' in message
    assert f'the last resumable checkpoint with finite weights is {work / "epoch_1.pth"}' in message
    assert '\n' not in message
    # max_keep_ckpts=1 asked mmengine to remove epoch_1.pth before saving epoch_2.pth: it stays, as the save failed
    assert sorted(p.name for p in work.glob('*.pth')) == ['epoch_1.pth'] and all_finite(work / 'epoch_1.pth')
    assert (work / 'last_checkpoint').read_text().strip() == str(work / 'epoch_1.pth')
    assert not list(work.glob('.*.tmp'))


def test_a_non_finite_loss_names_the_last_checkpoint_with_finite_weights(ws, tmp_path):
    message, work = poisoned_run(ws, tmp_path, 'epoch')  # epoch_2.pth is saved, then iteration 3's loss is NaN
    assert message.startswith('error: non-finite loss at iteration 3 (epoch 3)')
    assert f'the last resumable checkpoint with finite weights is {work / "epoch_2.pth"}' in message
    assert sorted(p.name for p in work.glob('*.pth')) == ['epoch_2.pth'] and all_finite(work / 'epoch_2.pth')


def test_the_stop_never_names_a_best_checkpoint_which_does_not_resume(ws, tmp_path):
    """Validated each epoch, checkpointed every 2: after epoch 1 the run has only best_accuracy_top1_epoch_1.pth,
    which holds no optimizer or scheduler state (resuming it is refused); the stop at iteration 2 used to name it as
    the last checkpoint with finite weights."""
    message, work = poisoned_run(
        ws, tmp_path, 'iter', **{'train_cfg.val_interval': 1, 'default_hooks.checkpoint.interval': 2}
    )
    assert sorted(p.name for p in work.glob('*.pth')) == ['best_accuracy_top1_epoch_1.pth']
    assert message.startswith('error: non-finite weights after iteration 2: ')
    assert message.endswith(
        f'{work / "epoch_2.pth"} is not written and the run stops; this run has no resumable '
        f'checkpoint yet ({LossGuardHook.hint(torch.nn.Linear(1, 1))})'
    )


def test_the_issues_lr_1e3_run_writes_no_checkpoint_of_non_finite_weights(digits_workspace, tmp_path):
    """DeepViT-tiny on 192 digits with lr 1e3: iteration 3's loss is finite but its step overflows the weights; the
    epoch ends there, and epoch_1.pth (20 non-finite tensors) used to be saved and scored 0.0 with exit 0."""
    work, data = tmp_path / 'work', digits_workspace / 'data' / 'digits_imagenet'
    with pytest.raises(SystemExit) as e:
        tool('train')(
            [
                str(DEEPVIT),
                '--work-dir',
                str(work),
                '--cfg-options',
                'train_cfg.val_interval=5',
                f'train_dataloader.dataset.data_root={data}',
                f'val_dataloader.dataset.data_root={data}',
                'optim_wrapper.optimizer.lr=1e3',
                'train_dataloader.dataset.indices=192',
                'train_cfg.max_epochs=3',
                'default_hooks.checkpoint.interval=1',
                'randomness.seed=0',
                'train_dataloader.num_workers=0',
                'train_dataloader.persistent_workers=False',
            ]
        )
    message = str(e.value)
    assert message.startswith('error: non-finite weights after iteration 3: ') and '(20 tensors do)' in message
    assert 'this run has no resumable checkpoint yet' in message
    assert not list(work.glob('*.pth')) and not (work / 'last_checkpoint').exists()


def test_the_loss_guard_names_what_it_knows_of_the_checkpoints():
    runner = SimpleNamespace(model=torch.nn.Linear(2, 2), iter=6, epoch=1, last_finite_checkpoint='w/epoch_1.pth')
    outputs = dict(loss=torch.tensor(float('nan')))
    with pytest.raises(NonFiniteLossError, match='the last resumable checkpoint with finite weights is w/epoch_1.pth'):
        LossGuardHook().after_train_iter(runner, 0, outputs=outputs)
    del runner.last_finite_checkpoint  # mmengine's Runner: its checkpoints were never checked
    with pytest.raises(NonFiniteLossError, match='this runner writes checkpoints unchecked'):
        LossGuardHook().after_train_iter(runner, 0, outputs=outputs)


def test_non_finite_lists_the_floating_point_tensors_holding_nan_or_inf_in_order():
    state = dict(
        a=torch.ones(3), b=torch.tensor([1.0, float('inf')]), steps=torch.tensor(3), c=torch.tensor([float('nan')])
    )
    assert non_finite(state, dict(d=torch.zeros(2))) == ['b', 'c']
    assert non_finite(dict(a=torch.ones(2)), {}) == [] and non_finite({}) == []


def test_non_finite_covers_complex_weights():
    """Issue 47 finding 5: NaN weights stored as complex64 passed the check (tools/test.py scored 0.0, exit 0)."""
    state = dict(
        a=torch.tensor([1 + 1j], dtype=torch.complex64),
        b=torch.tensor([complex(float('nan'), 0)], dtype=torch.complex64),
        c=torch.tensor([complex(0, float('inf'))], dtype=torch.complex128),
    )
    assert non_finite(state) == ['b', 'c']


@pytest.mark.parametrize(
    'kind, tensor',
    [
        ('float8_e4m3fn', lambda: torch.ones(2).to(torch.float8_e4m3fn)),
        ('sparse_coo', lambda: torch.ones(2, 2).to_sparse()),
        ('qint8', lambda: torch.quantize_per_tensor(torch.ones(2), 0.1, 0, torch.qint8)),
        ('complex NaN', lambda: torch.tensor([complex(float('nan'), 0)], dtype=torch.complex64)),
    ],
)
def test_a_weight_of_another_kind_or_a_complex_nan_is_refused_in_one_line_naming_file_and_key(tmp_path, kind, tensor):
    """A float8, sparse or quantized tensor (a traceback before) and a complex NaN, in state_dict or
    ema_state_dict: one line naming the file and the key, through the loader of every tool."""
    from mmvitreg.engine.checkpoint import load_weights

    path = tmp_path / 'odd.pth'
    for where in ('state_dict', 'ema_state_dict'):
        torch.save({'state_dict': {'w': torch.ones(2)}, **{where: {'w': torch.ones(2), 'odd': tensor()}}}, path)
        with pytest.raises(CheckpointError) as e:
            load_weights(nn.Linear(2, 1), str(path), 'partial')
        message = str(e.value)
        expected = 'holds NaN or infinite values' if kind == 'complex NaN' else f'is a {kind} tensor'
        assert message.startswith(f'checkpoint {path}: odd ') and expected in message and '\n' not in message


def test_a_removal_waits_for_the_next_completed_write_into_its_folder(tmp_path):
    """What keeps the last finite checkpoint: mmengine's checkpoint hook removes the oldest file before it saves."""
    (tmp_path / 'epoch_1.pth').write_bytes(b'one')
    AtomicLocalBackend().remove(tmp_path / 'epoch_1.pth')
    assert (tmp_path / 'epoch_1.pth').exists()  # the save it precedes has not completed
    AtomicLocalBackend().put(b'two', tmp_path / 'epoch_2.pth')
    assert not (tmp_path / 'epoch_1.pth').exists() and (tmp_path / 'epoch_2.pth').read_bytes() == b'two'


@pytest.mark.parametrize('where', ['state_dict', 'ema_state_dict'])
def test_tools_test_and_the_inferencers_refuse_one_nan_weight_with_one_line(ws, tmp_path, where):
    from mmpretrain import ImageClassificationInferencer, get_model

    cfg = Config.fromfile(str(DEEPVIT))
    checkpoint = torch.load(random_checkpoint(cfg, tmp_path / 'full.pth'), weights_only=False)
    key = 'backbone.layers.1.ffn.layers.1.weight'
    if where == 'ema_state_dict':
        checkpoint['ema_state_dict'] = {'module.' + k: v.clone() for k, v in checkpoint['state_dict'].items()}
    checkpoint[where][('module.' if where == 'ema_state_dict' else '') + key][0, 0] = float('nan')
    torch.save(checkpoint, tmp_path / 'one_nan.pth')
    for flags in ([], ['--allow-partial']):
        with pytest.raises(SystemExit) as e:
            tool('test')(
                [
                    str(DEEPVIT),
                    str(tmp_path / 'one_nan.pth'),
                    '--work-dir',
                    str(tmp_path / 't'),
                    *flags,
                    '--cfg-options',
                    f'test_dataloader.dataset.data_root={ws / "digits"}',
                    'test_dataloader.num_workers=0',
                    'test_dataloader.persistent_workers=False',
                ]
            )
        message = str(e.value)
        assert message.startswith(f'error: checkpoint {tmp_path / "one_nan.pth"}: ') and '\n' not in message
        assert f'{key} holds NaN or infinite values (1 tensors do)' in message
    for load in (
        lambda: ImageClassificationInferencer(str(DEEPVIT), pretrained=str(tmp_path / 'one_nan.pth'), device='cpu'),
        lambda: get_model(str(DEEPVIT), pretrained=str(tmp_path / 'one_nan.pth'), device='cpu'),
    ):
        with pytest.raises(CheckpointError, match=f'{key} holds NaN or infinite values'):
            load()
