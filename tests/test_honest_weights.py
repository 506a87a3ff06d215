"""The weights you evaluate are the weights you trained (issue 35).

1. The EMA copy is what the configured hook makes it (mmengine's ``EMAHook``, mmpretrain's, which the LV-ViT and
   DeepViT recipes build, or a user's subclass): ``tools/test.py`` scores what mmengine's own Runner scores on the
   same file, ``load_from`` starts from the weights the hook documents, resume is unchanged.
2. Inference never runs partly loaded: mmpretrain's inferencers / ``get_model`` on an mmvitreg config and
   ``pytorch2onnx.py`` stop with one line naming what is missing and the opt-out.
3. Resume is honest: one warning for what the config changes, one line for a weights-only file, an interrupted
   save's temporaries removed.
4. ``drop_path_rate`` outside [0, 1) is refused when a backbone is built; a config error is one line.
"""

import importlib.util
import os
import pickle
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from conftest import CONFIGS, REPO
from guard_helpers import TECHNIQUES, build_workspace, run_options, tool
from mmengine.config import Config
from mmengine.hooks import EMAHook as MMEngineEMAHook
from mmengine.registry import DefaultScope
from model_helpers import random_checkpoint

from mmvitreg.engine import CheckpointError, partial_loading
from mmvitreg.fileio import temporary_path

QUICK_START = CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'
#: the hook of the LV-ViT / DeepViT recipes (mmpretrain's EMAHook in an mmpretrain config), mmengine's own, and a
#: user's subclass of mmengine's that always starts its copy from the file's EMA weights
HOOKS = {
    'mmpretrain': "dict(type='EMAHook', momentum=8e-5, update_buffers=True, priority='ABOVE_NORMAL')",
    'mmengine': "dict(type='mmengine.EMAHook', momentum=8e-5, update_buffers=True, priority='ABOVE_NORMAL')",
    'subclass': "dict(type='test_honest_weights.EMAFromFileHook', momentum=8e-5, priority='ABOVE_NORMAL')",
}


class EMAFromFileHook(MMEngineEMAHook):
    """A user's rule: the copy always starts from the file's ``ema_state_dict`` (swapped back as saved)."""

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        self._swap_ema_state_dict(checkpoint)
        self.ema_model.load_state_dict(checkpoint['ema_state_dict'], strict=True)


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('honest_ws'))


def ema_config(tmp_path, hook):
    config = tmp_path / f'deit-tiny_{hook}-ema_digits.py'
    config.write_text(
        f"_base_ = '{QUICK_START}'\ncustom_hooks = [{HOOKS[hook]}]\n"
        "custom_imports = dict(imports=['test_honest_weights'], allow_failed_imports=False)\n"
    )
    return config


def ema_checkpoint(config, path):
    """A file as an EMA hook saves it: ``state_dict`` the EMA weights, ``ema_state_dict`` the raw model's under
    ``module.`` (and the step count); the two sets differ by noise, so they score apart. Returns
    ``(path, raw weights, EMA weights)``."""
    raw = torch.load(random_checkpoint(Config.fromfile(str(config)), path), weights_only=False)['state_dict']
    g = torch.Generator().manual_seed(1)
    ema = {k: v + 0.3 * torch.randn(v.shape, generator=g) if v.is_floating_point() else v for k, v in raw.items()}
    torch.save(
        {
            'state_dict': ema,
            'ema_state_dict': {**{'module.' + k: v for k, v in raw.items()}, 'steps': torch.tensor(10)},
            'meta': {},
        },
        path,
    )
    return path, raw, ema


def cli_options(ws, *extra):
    return [
        '--cfg-options',
        f'test_dataloader.dataset.data_root={ws / "digits"}',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
        *extra,
    ]


def scores(ws, config, ckpt, out, *extra):
    tool('test')(
        [str(config), str(ckpt), '--work-dir', str(out.parent / out.stem), '--out', str(out), *cli_options(ws, *extra)]
    )
    with open(out, 'rb') as f:
        return torch.stack([torch.as_tensor(p['pred_score']) for p in pickle.load(f)])


# ---------------------------------------------------------------- item 1: the EMA copy is the hook's
@pytest.mark.parametrize('hook', HOOKS)
def test_tools_test_scores_what_mmengines_runner_scores(ws, tmp_path, hook):
    """tools/test.py (GuardedRunner) and mmengine's Runner (``runner_type=Runner``) predict the same scores from an
    EMA file, for every hook: each hook's copy is what the hook loaded (mmpretrain's: the EMA weights; the runner
    used to refill it with the raw weights that hook had swapped into ``state_dict``)."""
    config = ema_config(tmp_path, hook)
    ckpt, raw, ema = ema_checkpoint(config, tmp_path / 'ema.pth')
    ours = scores(ws, config, ckpt, tmp_path / 'ours.pkl')
    mmengine = scores(ws, config, ckpt, tmp_path / 'mmengine.pkl', 'runner_type=Runner')
    assert torch.equal(ours, mmengine)


def train_module():
    spec = importlib.util.spec_from_file_location('tool_train_i35', REPO / 'tools' / 'train.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def build_train_runner(config, ws, work_dir, *flags, **options):
    """The GuardedRunner tools/train.py builds (to look at its model and hooks after ``train()``)."""
    module = train_module()
    args = module.parse_args(
        [str(config), '--work-dir', str(work_dir), *map(str, flags), *run_options(config, ws, work_dir, **options)]
    )
    return module.build_runner(module.build_train_config(args))


def ema_hook(runner):
    return next(h for h in runner.hooks if isinstance(h, MMEngineEMAHook))


def close(module, weights):
    state = module.state_dict()
    return all(
        torch.allclose(state[k].float(), weights[k].float(), atol=1e-5)
        for k in weights
        if weights[k].is_floating_point()
    )


@pytest.mark.parametrize('hook', ['mmpretrain', 'mmengine'])
def test_load_from_an_ema_file_starts_from_the_weights_the_hook_documents_and_resume_is_unchanged(ws, tmp_path, hook):
    """``load_from`` with lr 0 (one epoch): mmpretrain's hook starts the model from the file's EMA weights ("Initialize
    the model parameters with EMA parameters"), mmengine's from ``state_dict``, which holds the EMA weights too;
    the saved model is them (it was the raw weights). Resuming that run: the model gets the raw weights of the
    file's ``ema_state_dict`` and the copy its ``state_dict``, as both hooks swap them back."""
    config = ema_config(tmp_path, hook)
    ckpt, raw, ema = ema_checkpoint(config, tmp_path / 'ema.pth')
    work = tmp_path / 'work'
    runner = build_train_runner(
        config,
        ws,
        work,
        **{'load_from': ckpt, 'optim_wrapper.optimizer.lr': 0, 'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 5},
    )
    runner.train()
    saved = torch.load(work / 'epoch_1.pth', weights_only=False)
    assert all(
        torch.allclose(saved['state_dict'][k].float(), v.float(), atol=1e-5)
        for k, v in ema.items()
        if v.is_floating_point()
    )
    assert not torch.allclose(raw['backbone.cls_token'], ema['backbone.cls_token'], atol=1e-3)

    resumed = build_train_runner(config, ws, work, '--resume', work / 'epoch_1.pth', **{'train_cfg.max_epochs': 1})
    resumed.train()  # resumes at the end: nothing left to train
    file_raw = {k[len('module.') :]: v for k, v in saved['ema_state_dict'].items() if k.startswith('module.')}
    assert close(resumed.model, file_raw)
    assert close(ema_hook(resumed).ema_model.module, saved['state_dict'])


@pytest.mark.parametrize(
    'flags, stop',
    [
        ([], "does not fit LazyEMAHook's EMA copy of ImageClassifier"),
        # issue 43.2: --allow-partial (also under --tta) used to test the copy at its initialisation "on EMA model"
        (['--allow-partial'], 'LazyEMAHook loaded none of its tensors into its EMA copy (0 matched'),
        (['--tta', '--allow-partial'], 'LazyEMAHook loaded none of its tensors into its EMA copy (0 matched'),
    ],
)
def test_an_ema_copy_that_did_not_load_stops_tools_test_py(ws, tmp_path, flags, stop):
    """The copy is checked against the file, whatever the hook's rule and the policy: a hook that leaves it at its
    initialisation (here a subclass that loads nothing) is one error line, not a score of random weights."""
    config = tmp_path / 'lazy_hook.py'
    config.write_text(
        f"_base_ = '{QUICK_START}'\n"
        "custom_hooks = [dict(type='test_honest_weights.LazyEMAHook', priority='ABOVE_NORMAL')]\n"
        "custom_imports = dict(imports=['test_honest_weights'], allow_failed_imports=False)\n"
    )
    ckpt, _, _ = ema_checkpoint(ema_config(tmp_path, 'mmengine'), tmp_path / 'ema.pth')
    with pytest.raises(SystemExit) as e:
        scores(ws, config, ckpt, tmp_path / 'lazy.pkl', *flags)
    message = str(e.value)
    assert stop in message and '\n' not in message


class LazyEMAHook(MMEngineEMAHook):
    """A broken hook: it loads nothing into its copy."""

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        pass


# ---------------------------------------------------------------- item 2: strict inference
def deepvit_files(tmp_path):
    cfg = Config.fromfile(str(TECHNIQUES[0]))
    full = random_checkpoint(cfg, tmp_path / 'deepvit.pth')
    state = torch.load(full, weights_only=False)['state_dict']
    head = {k: torch.randn(1000, *v.shape[1:]) if k.startswith('head.') else v for k, v in state.items()}
    torch.save({'state_dict': head}, tmp_path / 'head1000.pth')
    few = {k: v for k, v in state.items() if not k.startswith(('backbone.layers', 'backbone.patch_embed'))}
    torch.save({'state_dict': few}, tmp_path / 'few.pth')
    return cfg, full, tmp_path / 'head1000.pth', tmp_path / 'few.pth'


def test_the_inferencer_and_get_model_stop_at_a_partly_fitting_file_with_one_line(tmp_path):
    """mmpretrain's inferencer on an mmvitreg config: a file with a 1000-class head, or without most backbone
    tensors, is one error line naming what does not fit and the opt-out (it used to predict from a random head or
    backbone with a warning); inside ``partial_loading()`` it predicts from the keys that fit; a full file loads."""
    from mmpretrain import ImageClassificationInferencer, get_model

    cfg, full, head1000, few = deepvit_files(tmp_path)
    for path, what in ((head1000, 'size mismatch: head.'), (few, 'missing: backbone.')):
        with pytest.raises(CheckpointError) as e:
            ImageClassificationInferencer(str(TECHNIQUES[0]), pretrained=str(path), device='cpu')
        message = str(e.value)
        assert what in message and 'partial_loading' in message and '\n' not in message
    with pytest.raises(CheckpointError, match='missing: backbone.'):
        get_model(str(TECHNIQUES[0]), pretrained=str(few), device='cpu')
    with partial_loading():
        inferencer = ImageClassificationInferencer(str(TECHNIQUES[0]), pretrained=str(head1000), device='cpu')
    image = torch.randint(0, 255, (32, 32, 3), dtype=torch.uint8).numpy()
    assert len(inferencer(image)) == 1
    model = get_model(str(TECHNIQUES[0]), pretrained=str(full), device='cpu')
    assert close(model, torch.load(full, weights_only=False)['state_dict'])


def test_pytorch2onnx_stops_at_a_partly_fitting_file_naming_allow_partial(tmp_path):
    """The export loads every parameter or stops with one line naming the missing keys and --allow-partial."""
    _, _, head1000, _ = deepvit_files(tmp_path)
    with pytest.raises(SystemExit) as e:
        tool('deployment/pytorch2onnx')([str(TECHNIQUES[0]), str(head1000), '--out', str(tmp_path / 'm.onnx')])
    message = str(e.value)
    assert message.startswith('error: ') and 'head.' in message and '--allow-partial' in message
    assert '\n' not in message


# ---------------------------------------------------------------- item 3: honest resume
def test_resume_lists_what_the_config_changes_and_a_weights_only_file_names_load_from(ws, tmp_path):
    """After one epoch: resuming with another lr and drop-path rate logs ONE warning naming the lr the optimizer
    state keeps and the rate taken from the new config (each group run in test_resume_says_what_runs.py); an
    interrupted save's temporary is removed; ``--resume`` of a weights-only file is one line naming load_from."""
    work = tmp_path / 'work'
    options = {'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 5}
    build_train_runner(QUICK_START, ws, work, **options).train()
    stale = Path(temporary_path(work / 'epoch_2.pth', dead_pid()))
    stale.write_bytes(b'half a checkpoint')
    resumed = build_train_runner(
        QUICK_START,
        ws,
        work,
        '--resume',
        work / 'epoch_1.pth',
        **{**options, 'optim_wrapper.optimizer.lr': 0.01, 'model.backbone.drop_path_rate': 0.2},
    )
    resumed.train()
    assert not stale.exists()
    log = sorted(work.glob('*/*.log'))[-1].read_text()
    warnings = [line for line in log.splitlines() if 'the config differs from the checkpoint' in line]
    assert len(warnings) == 1
    line = warnings[0]
    assert "optim_wrapper.optimizer.lr 0.001 -> 0.01 (the optimizer state keeps 0.001)" in line
    assert 'taken from the new config' in line and 'model.backbone.drop_path_rate' in line

    weights = tmp_path / 'weights.pth'
    torch.save({'state_dict': torch.load(work / 'epoch_1.pth', weights_only=False)['state_dict']}, weights)
    with pytest.raises(SystemExit) as e:
        tool('train')(
            [
                str(QUICK_START),
                '--work-dir',
                str(tmp_path / 'w2'),
                '--resume',
                str(weights),
                *run_options(QUICK_START, ws, tmp_path / 'w2', **options),
            ]
        )
    message = str(e.value)
    assert 'weights-only file' in message and f'load_from={weights}' in message and '\n' not in message


def dead_pid() -> int:
    """The pid of a process that has ended (reaped: no process has it until the system reuses it)."""
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait()
    return proc.pid


def test_the_next_save_removes_an_interrupted_saves_temporaries_and_no_live_writers(tmp_path):
    """AtomicLocalBackend (every checkpoint of a local work dir): the temporaries a killed save left go with the
    next save (a dead process's, this process's own, an old-format one unchanged for an hour); those another live
    process may be writing stay (a live pid's, another host's, a fresh old-format one); the new file is complete."""
    from mmvitreg.engine import AtomicLocalBackend

    pid = dead_pid()
    dead = Path(temporary_path(tmp_path / 'epoch_2.pth', pid))
    own = Path(temporary_path(tmp_path / 'epoch_1.pth'))
    old = tmp_path / '.epoch_0.pth.x1y2z3w4.tmp'
    live = Path(temporary_path(tmp_path / 'epoch_2.pth', os.getppid()))
    elsewhere = tmp_path / f'.epoch_2.pth.otherhost-1-{pid}.a1b2c3d4.tmp'  # a pid of another host: not known dead
    fresh = tmp_path / '.epoch_4.pth.a1b2c3d4.tmp'
    keep = tmp_path / 'notes.tmp'
    for path in (dead, own, old, live, elsewhere, fresh, keep):
        path.write_bytes(b'half')
    os.utime(old, (time.time() - 3700, time.time() - 3700))
    AtomicLocalBackend().put(b'complete', tmp_path / 'epoch_3.pth')
    assert not dead.exists() and not own.exists() and not old.exists()
    assert live.exists() and elsewhere.exists() and fresh.exists() and keep.exists()
    assert (tmp_path / 'epoch_3.pth').read_bytes() == b'complete'


# ---------------------------------------------------------------- item 4: values refused at build time
@pytest.mark.parametrize('rate', [-0.1, 1.0, 1.5])
def test_drop_path_rate_outside_zero_one_is_refused_by_every_backbone(rate):
    """A negative rate scales kept branches up, 1 or more divides by zero: each backbone refuses it, naming it."""
    from mmvitreg.models.backbones import CvT, DeepViT, LVViT, SwinTransformer, VisionTransformer

    small = dict(embed_dims=16, num_layers=1, num_heads=2, feedforward_channels=32)
    builds = [
        lambda: VisionTransformer(arch=small, img_size=32, patch_size=8, drop_path_rate=rate),
        lambda: DeepViT(arch='s', img_size=32, patch_size=8, drop_path_rate=rate),
        lambda: LVViT(arch='s', img_size=32, patch_size=8, drop_path_rate=rate),
        lambda: SwinTransformer(arch='tiny', img_size=32, drop_path_rate=rate),
        lambda: CvT(drop_path_rate=rate),
    ]
    for build in builds:
        with DefaultScope.overwrite_default_scope('mmpretrain'), pytest.raises(ValueError, match='drop_path_rate'):
            build()
    VisionTransformer(arch=small, img_size=32, patch_size=8, drop_path_rate=0.0)


def test_tools_print_one_line_for_a_config_error(ws, tmp_path):
    """``num_classes=0`` (mmpretrain's head refuses it while the runner builds the model): one line from
    tools/train.py and tools/test.py, not a traceback around it."""
    bad = ['model.head.num_classes=0']
    with pytest.raises(SystemExit) as e:
        tool('train')(
            [str(QUICK_START), '--work-dir', str(tmp_path / 'w'), *run_options(QUICK_START, ws, tmp_path / 'w'), *bad]
        )
    assert 'num_classes' in str(e.value) and '\n' not in str(e.value)
    ckpt = random_checkpoint(Config.fromfile(str(QUICK_START)), tmp_path / 'q.pth')
    with pytest.raises(SystemExit) as e:
        tool('test')([str(QUICK_START), str(ckpt), '--work-dir', str(tmp_path / 't'), *cli_options(ws, *bad)])
    assert 'num_classes' in str(e.value) and '\n' not in str(e.value)
