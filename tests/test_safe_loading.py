"""Safe loading (issue 23, item 3): checkpoints are unpickled with ``weights_only=True`` and the allow-list of
mmvitreg.fileio.checkpoint_safe_globals. Every checkpoint the tools write loads (load_from, --resume,
tools/test.py; EMA and AMP included); a pickle that would run code is refused wherever a checkpoint is read,
runs nothing, and the message names the file, the global and the opt-in; with the opt-in it loads."""

import argparse
import pickle

import pytest
import torch
from guard_helpers import TECHNIQUES, build_workspace, tool, train
from mmengine.logging import HistoryBuffer
from mmengine.runner.checkpoint import CheckpointLoader

from mmvitreg.engine import CheckpointError, read_checkpoint
from mmvitreg.fileio import TORCH_WEIGHTS_ONLY, UNSAFE_LOAD_ENV, UnsafeCheckpointError, load_checkpoint
from mmvitreg.models.converters import convert_checkpoint

DEEPVIT = TECHNIQUES[0]
SHORT = {
    'train_cfg.max_epochs': 1,
    'train_dataloader.batch_size': 16,
    'train_dataloader.dataset.indices': 32,
    'train_cfg.val_interval': 1,
}
refusing = pytest.mark.skipif(
    not TORCH_WEIGHTS_ONLY,
    reason='before torch 2.6 there is no allow-list of named globals; checkpoints load as '
    'torch then did by default (mmvitreg.fileio.TORCH_WEIGHTS_ONLY)',
)


class _RunsCode:
    """Unpickling it runs ``exec(code)``: what a malicious checkpoint does."""

    def __init__(self, code: str):
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


def code_running_checkpoint(path, real, marker):
    """``real`` (a checkpoint the tools wrote) with an entry whose unpickling creates the file ``marker``;
    unpickled, it is still a working checkpoint (``exec`` returns None)."""
    checkpoint = torch.load(real, map_location='cpu', weights_only=False)
    checkpoint['meta']['note'] = _RunsCode(f'open({str(marker)!r}, "w").close()')
    torch.save(checkpoint, path)
    return path


def digits_options(ws) -> list:
    """``--cfg-options`` of tools/test.py for the workspace's digits."""
    return [
        f'test_dataloader.dataset.data_root={ws / "digits"}',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
    ]


@pytest.fixture(autouse=True)
def no_opt_in(monkeypatch):
    """No test starts opted in, and an opt-in set by a tool's --unsafe-load ends with its test."""
    monkeypatch.delenv(UNSAFE_LOAD_ENV, raising=False)


@pytest.fixture(scope='module')
def runs(tmp_path_factory):
    """One epoch of every technique's digits config, and of the DeepViT one with EMA under --amp."""
    ws = build_workspace(tmp_path_factory.mktemp('safe_ws'))
    ema = ws / 'deepvit_ema.py'
    ema.write_text(f"_base_ = '{DEEPVIT}'\ncustom_hooks = [dict(type='EMAHook')]\n")
    work = {}
    for config in TECHNIQUES:
        work[config] = ws / f'train_{config.stem}'
        train(config, ws, work[config], **SHORT)
    work[ema] = ws / 'train_ema'
    train(ema, ws, work[ema], '--amp', **SHORT)
    return ws, ema, work


def test_every_checkpoint_the_tools_write_loads_with_the_allow_list(runs):
    ws, ema, work = runs
    for config, folder in work.items():
        checkpoint = load_checkpoint(str(folder / 'epoch_1.pth'), map_location='cpu', unsafe=False)
        # what the allow-list is for: mmengine's message hub, numpy scalars and RNGStateHook's numpy state
        assert isinstance(checkpoint['message_hub']['log_scalars']['train/loss'], HistoryBuffer), config
        assert checkpoint['message_hub']['log_scalars']['train/loss'].mean() > 0
        assert checkpoint['rng_state']['ranks'][0]['numpy'][1].dtype.name == 'uint32'
        assert checkpoint['optimizer']['state'] and checkpoint['param_schedulers']
    assert load_checkpoint(str(work[ema] / 'epoch_1.pth'))['ema_state_dict']  # mmengine's EMAHook


def test_load_from_resume_and_test_read_the_written_checkpoints(runs, capsys):
    ws, ema, work = runs
    for config in (DEEPVIT, ema):
        ckpt = work[config] / 'epoch_1.pth'
        train(config, ws, ws / f'from_{config.stem}', load_from=ckpt, **SHORT)
        resumed = ws / f'resumed_{config.stem}'
        train(config, ws, resumed, '--resume', ckpt, **{**SHORT, 'train_cfg.max_epochs': 2})
        assert load_checkpoint(str(resumed / 'epoch_2.pth'))['meta']['epoch'] == 2
        capsys.readouterr()
        tool('test')(
            [
                str(config),
                str(resumed / 'epoch_2.pth'),
                '--work-dir',
                str(ws / f'test_{config.stem}'),
                '--cfg-options',
                *digits_options(ws),
            ]
        )
        assert 'metrics: ' in capsys.readouterr().out


def test_timm_era_official_checkpoint_with_its_args_loads_converted(tmp_path):
    """An LV-ViT release as TokenLabeling's timm train.py saves it: the command line as an argparse.Namespace."""
    from test_model_converters import official_state_dict

    path = tmp_path / 'lvvit_release.pth.tar'
    torch.save(
        {
            'epoch': 299,
            'arch': 'lvvit_s',
            'args': argparse.Namespace(model='lvvit_s', lr=1.6e-3),
            'state_dict': official_state_dict(
                dim=24, depth=1, heads=4, qkv_bias=False, stem=(8, 3), aux_head=True, classes=10, img_size=32
            ),
        },
        path,
    )
    checkpoint = convert_checkpoint(read_checkpoint(str(path)), str(path))
    assert checkpoint['meta']['official_layout'] and any(k.startswith('backbone.') for k in checkpoint['state_dict'])


@refusing
def test_a_pickle_that_runs_code_is_refused_by_every_reader_and_runs_nothing(runs, tmp_path):
    ws, _, work = runs
    marker = tmp_path / 'ran'
    ckpt = code_running_checkpoint(tmp_path / 'evil.pth', work[DEEPVIT] / 'epoch_1.pth', marker)
    expected = (
        f'checkpoint {ckpt}: refused to unpickle the global exec: it is not on mmvitreg\'s allow-list of '
        'what checkpoints hold, and unpickling it could run code; if you trust the file, pass --unsafe-load '
        f'(tools/train.py, tools/test.py, the converters) or set {UNSAFE_LOAD_ENV}=1'
    )
    with pytest.raises(pickle.UnpicklingError, match='GLOBAL exec was not an allowed global'):
        CheckpointLoader.load_checkpoint(str(ckpt), map_location='cpu')  # mmengine's own loader: torch's allow-list
    with pytest.raises(CheckpointError) as e:  # mmvitreg's reader (load_from, tools/test.py, init_cfg)
        read_checkpoint(str(ckpt))
    assert str(e.value) == expected
    for run in (
        lambda: tool('test')(
            [str(DEEPVIT), str(ckpt), '--work-dir', str(tmp_path / 'test'), '--cfg-options', *digits_options(ws)]
        ),
        lambda: train(DEEPVIT, ws, tmp_path / 'load_from', load_from=ckpt, **SHORT),
        lambda: train(DEEPVIT, ws, tmp_path / 'resume', '--resume', ckpt, **SHORT),
    ):
        with pytest.raises(SystemExit) as e:
            run()
        assert str(e.value.code) == f'error: {expected}'
    assert not marker.exists()


@refusing
def test_with_the_opt_in_the_pickle_loads(runs, tmp_path, monkeypatch, capsys):
    ws, _, work = runs
    marker = tmp_path / 'ran'
    ckpt = code_running_checkpoint(tmp_path / 'trusted.pth', work[DEEPVIT] / 'epoch_1.pth', marker)
    tool('test')(
        [
            str(DEEPVIT),
            str(ckpt),
            '--unsafe-load',
            '--work-dir',
            str(tmp_path / 'test'),
            '--cfg-options',
            *digits_options(ws),
        ]
    )
    assert 'metrics: ' in capsys.readouterr().out and marker.exists()
    marker.unlink()
    monkeypatch.setenv(UNSAFE_LOAD_ENV, '1')
    assert read_checkpoint(str(ckpt))['meta']['note'] is None and marker.exists()


@refusing
def test_getattr_is_allowed_for_history_buffer_statistics_only(tmp_path):
    """HistoryBuffer pickles its statistic methods as getattr(HistoryBuffer, 'min'); no other getattr passes."""

    class Getattr:
        def __init__(self, owner, name):
            self.owner, self.name = owner, name

        def __reduce__(self):
            return getattr, (self.owner, self.name)

    torch.save({'min': Getattr(HistoryBuffer, 'min')}, tmp_path / 'ok.pth')
    assert load_checkpoint(str(tmp_path / 'ok.pth'))['min'] is HistoryBuffer.min
    for owner, name in ((HistoryBuffer, 'update'), (argparse.Namespace, '__init__')):
        torch.save({'x': Getattr(owner, name)}, tmp_path / 'bad.pth')
        with pytest.raises(UnsafeCheckpointError, match=f"{name}'\\) is not a HistoryBuffer statistic"):
            load_checkpoint(str(tmp_path / 'bad.pth'))


@refusing
def test_converter_refuses_the_pickle_unless_unsafe_load(tmp_path):
    from checkpoint_converter import converter_cli
    from test_model_converters import official_state_dict

    from mmvitreg.models.converters import convert_timm_vit

    marker = tmp_path / 'ran'
    src, dst = tmp_path / 'official.pth', tmp_path / 'converted.pth'
    torch.save(
        {
            'model': official_state_dict(dim=24, depth=1, heads=4, classes=10, img_size=32),
            'args': _RunsCode(f'open({str(marker)!r}, "w").close()'),
        },
        src,
    )
    with pytest.raises(SystemExit, match='^error: checkpoint .*the global exec'):  # one error line, as every tool
        converter_cli(convert_timm_vit, 'DeiT', argv=[str(src), str(dst)])
    assert not marker.exists() and not dst.exists()
    converter_cli(convert_timm_vit, 'DeiT', argv=[str(src), str(dst), '--unsafe-load'])
    assert marker.exists() and dst.exists()
