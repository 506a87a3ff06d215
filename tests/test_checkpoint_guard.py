"""Checkpoints are never silently wrong (issue 14, part 1): checked reading, strict / partial loading
with a key report, atomic saving (also under SIGKILL), and --resume auto past an unreadable newest
checkpoint - through mmvitreg.engine and through tools/train.py and tools/test.py."""

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import torch
from guard_helpers import TECHNIQUES, build_workspace, checkpoints, files_of, logged_losses, tool, train
from torch import nn

from mmvitreg.engine import AtomicLocalBackend, CheckpointError, fit, read_checkpoint, resume_candidates
from mmvitreg.engine.checkpoint import load_weights


# ---------------------------------------------------------------- reading
def test_read_checkpoint_names_the_file_and_the_problem(tmp_path):
    good = tmp_path / 'good.pth'
    torch.save({'state_dict': {'w': torch.ones(2)}, 'meta': {}}, good)
    assert read_checkpoint(str(good))['state_dict']['w'].sum() == 2
    cases = {
        'missing.pth': (None, 'does not exist'),
        'empty.pth': (b'', 'empty file (0 bytes)'),
        'truncated.pth': (good.read_bytes()[: len(good.read_bytes()) // 2], 'not a readable PyTorch checkpoint'),
        'notes.txt': (b'lr=0.1\n', 'not a readable PyTorch checkpoint'),
    }
    for name, (content, problem) in cases.items():
        if content is not None:
            (tmp_path / name).write_bytes(content)
        with pytest.raises(CheckpointError) as e:
            read_checkpoint(str(tmp_path / name))
        message = str(e.value)
        assert str(tmp_path / name) in message and problem in message and '\n' not in message
    torch.save([torch.ones(1)], tmp_path / 'list.pth')
    with pytest.raises(CheckpointError, match='holds a list, not a checkpoint'):
        read_checkpoint(str(tmp_path / 'list.pth'))
    torch.save({'meta': {'epoch': 1}}, tmp_path / 'meta_only.pth')
    with pytest.raises(CheckpointError, match=r"meta_only.pth: no state dict found .* top-level keys: \['meta'\]"):
        load_weights(Net(), str(tmp_path / 'meta_only.pth'))  # the convert stage
    torch.save({'state_dict': {'note': 'x'}}, tmp_path / 'no_tensors.pth')
    with pytest.raises(CheckpointError, match='no_tensors.pth: holds no tensors'):
        load_weights(Net(), str(tmp_path / 'no_tensors.pth'))  # the values, before the fit


# ---------------------------------------------------------------- key report
class Net(nn.Module):
    def __init__(self, classes=10):
        super().__init__()
        self.body = nn.Linear(4, 8)
        self.bn = nn.BatchNorm1d(8)
        self.head = nn.Linear(8, classes)


def test_key_report_counts_matched_missing_unexpected_and_mismatched():
    source = Net(classes=3).state_dict()
    source['extra.weight'] = torch.zeros(1)
    del source['body.bias']
    source.pop('bn.num_batches_tracked')  # old checkpoints lack it: never reported (as mmengine)
    model = Net(classes=10)
    before = model.head.weight.clone()
    report = fit(model, source)
    assert report.missing == ['body.bias']
    assert report.unexpected == ['extra.weight']
    assert report.mismatched == {'head.weight': ((3, 8), (10, 8)), 'head.bias': ((3,), (10,))}
    assert report.resized == {}
    assert sorted(report.matched) == ['bn.bias', 'bn.running_mean', 'bn.running_var', 'bn.weight', 'body.weight']
    assert not report.clean and report.summary() == '5 matched, 0 resized, 1 missing, 1 unexpected, 2 mismatched keys'
    assert 'head.weight [3, 8] in the checkpoint vs [10, 8] in the model' in report.describe()
    assert torch.equal(model.body.weight, source['body.weight']) and torch.equal(model.head.weight, before)
    assert fit(Net(), Net().state_dict()).clean


def test_key_report_runs_load_time_hooks_position_embedding_resize_is_reported_resized():
    """mmpretrain's ViT resizes pos_embed in a load-state-dict pre-hook: a checkpoint of another input
    size fits (the mmpretrain compatibility the design promises), it is not a size mismatch, and the report says
    which key was resized from which shape (issue 47: it said "0 resized keys")."""
    from mmvitreg.models.backbones import VisionTransformer

    arch = dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64)
    small = VisionTransformer(arch=arch, img_size=32, patch_size=8).state_dict()
    big = VisionTransformer(arch=arch, img_size=64, patch_size=8)
    report = fit(big, small)
    assert report.clean and big.pos_embed.shape == (1, 65, 32)
    assert report.resized == {'pos_embed': ((1, 17, 32), (1, 65, 32))} and 'pos_embed' not in report.matched
    assert report.summary().startswith(f'{len(small) - 1} matched, 1 resized, 0 missing')
    assert (
        "resized by the model's load hooks: pos_embed [1, 17, 32] in the checkpoint to [1, 65, 32]" in report.describe()
    )


# ---------------------------------------------------------------- atomic saving
KILLED_SAVE = textwrap.dedent('''
    import io, os, signal, sys
    import torch
    from mmvitreg.engine import AtomicLocalBackend
    target = sys.argv[1]

    buffer = io.BytesIO()
    torch.save({'state_dict': {'w': torch.ones(1000)}}, buffer)
    backend = AtomicLocalBackend()
    os.write(1, b'saving\\n')
    # mmengine writes the serialised bytes through the backend: kill the process during that write
    real_fdopen = os.fdopen
    def killing_fdopen(fd, mode):
        f = real_fdopen(fd, mode)
        real_write = f.write
        def write(data):
            real_write(data[:len(data) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        f.write = write
        return f
    os.fdopen = killing_fdopen
    backend.put(buffer.getvalue(), target)
''')


def test_a_process_killed_while_saving_leaves_the_previous_checkpoint_intact(tmp_path):
    target = tmp_path / 'epoch_2.pth'
    torch.save({'state_dict': {'w': torch.zeros(3)}}, target)
    previous = target.read_bytes()
    script = tmp_path / 'killed_save.py'
    script.write_text(KILLED_SAVE)
    proc = subprocess.run(
        [sys.executable, str(script), str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)},
    )
    assert proc.returncode == -signal.SIGKILL and 'saving' in proc.stdout
    assert target.read_bytes() == previous  # the final name still holds the complete old file
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith('.epoch_2.pth.')]
    assert len(leftovers) == 1 and leftovers[0].endswith('.tmp')  # the half-written temporary file only
    assert checkpoints(tmp_path) == ['epoch_2.pth']  # a hidden .tmp is never taken for a checkpoint


def test_atomic_backend_replaces_the_file_in_one_step(tmp_path):
    target = tmp_path / 'sub' / 'last_checkpoint'
    AtomicLocalBackend().put_text('a/epoch_1.pth', target)
    AtomicLocalBackend().put_text('a/epoch_2.pth', target)
    assert target.read_text() == 'a/epoch_2.pth' and sorted(os.listdir(target.parent)) == ['last_checkpoint']


CONCURRENT_SAVES = textwrap.dedent('''
    import os, sys, time
    from mmvitreg.engine import AtomicLocalBackend
    work_dir, control, run, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    backend = AtomicLocalBackend()
    open(os.path.join(control, run), 'w').close()
    while not os.path.exists(os.path.join(control, 'go')):
        time.sleep(0.001)
    for i in range(count):  # as CheckpointHook saves: the checkpoint, then last_checkpoint
        backend.put(f'{run} {i} '.encode() * 16384, os.path.join(work_dir, f'{run}_iter_{i}.pth'))
        backend.put_text(f'{run}_iter_{i}.pth', os.path.join(work_dir, f'{run}_last_checkpoint'))
''')


def test_two_runs_saving_into_one_work_dir_both_keep_every_checkpoint(tmp_path):
    """Two processes save 100 checkpoints each into one folder at once: each save's removal of stale temporaries
    used to delete the other run's temporary while it was being written (its os.replace: FileNotFoundError)."""
    work_dir, control, count = tmp_path / 'work', tmp_path / 'control', 100
    control.mkdir()
    script = tmp_path / 'concurrent_saves.py'
    script.write_text(CONCURRENT_SAVES)
    env = {**os.environ, 'PYTHONPATH': os.pathsep.join(sys.path)}
    runs = {
        run: subprocess.Popen(
            [sys.executable, str(script), str(work_dir), str(control), run, str(count)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for run in ('a', 'b')
    }
    deadline = time.time() + 120
    while not all((control / run).exists() for run in runs) and time.time() < deadline:
        time.sleep(0.01)
    (control / 'go').touch()  # both imported and waiting: their saves overlap
    results = {run: (proc.wait(timeout=120), proc.communicate()[1]) for run, proc in runs.items()}
    assert {run: rc for run, (rc, _) in results.items()} == {'a': 0, 'b': 0}, results
    for run in runs:
        for i in range(count):
            assert (work_dir / f'{run}_iter_{i}.pth').read_bytes() == f'{run} {i} '.encode() * 16384
        assert (work_dir / f'{run}_last_checkpoint').read_text() == f'{run}_iter_{count - 1}.pth'
    assert not [p.name for p in work_dir.iterdir() if p.name.endswith('.tmp')]  # each run removed its own


def test_resume_candidates_newest_first(tmp_path):
    for name in ('epoch_2.pth', 'epoch_10.pth', 'best_accuracy_epoch_3.pth', 'epoch_1.pth'):
        (tmp_path / name).write_bytes(b'x')
    (tmp_path / 'last_checkpoint').write_text(str(tmp_path / 'epoch_10.pth'))
    assert [os.path.basename(p) for p in resume_candidates(str(tmp_path))] == [
        'epoch_10.pth',
        'epoch_2.pth',
        'epoch_1.pth',
    ]


# ---------------------------------------------------------------- through the tools
@pytest.fixture(scope='module')
def trained(tmp_path_factory):
    """Every technique trained for two epochs of two iterations (one checkpoint per epoch)."""
    ws = build_workspace(tmp_path_factory.mktemp('ckpt_ws'))
    runs = {}
    for config in TECHNIQUES:
        work = ws / f'train_{config.stem}'
        train(
            config,
            ws,
            work,
            **{
                'train_cfg.max_epochs': 2,
                'train_dataloader.batch_size': 16,
                'train_dataloader.dataset.indices': 32,
                'train_cfg.val_interval': 2,
            },
        )
        runs[config] = work
    return ws, runs


def test_test_tool_refuses_a_checkpoint_of_another_model_and_names_file_and_keys(trained, capsys):
    ws, runs = trained
    for config, other in zip(TECHNIQUES, TECHNIQUES[1:] + TECHNIQUES[:1]):
        ckpt = runs[other] / 'epoch_2.pth'
        before = files_of(runs[other])
        with pytest.raises(SystemExit) as e:
            tool('test')(
                [
                    str(config),
                    str(ckpt),
                    '--work-dir',
                    str(ws / 'test_mismatch'),
                    '--cfg-options',
                    f'test_dataloader.dataset.data_root={ws / "digits"}',
                    'test_dataloader.num_workers=0',
                    'test_dataloader.persistent_workers=False',
                ]
            )
        message = str(e.value.code)
        assert message.startswith(f'error: checkpoint {ckpt} does not fit the model')
        assert 'missing: backbone.' in message or 'unexpected: backbone.' in message, message
        assert 'pass --allow-partial' in message
        assert files_of(runs[other]) == before
    capsys.readouterr()


def test_test_tool_loads_its_own_checkpoint_strictly_and_allow_partial_evaluates_a_foreign_one(trained, capsys):
    ws, runs = trained
    config, other = TECHNIQUES[0], TECHNIQUES[1]
    data = [
        f'test_dataloader.dataset.data_root={ws / "digits"}',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
    ]
    tool('test')(
        [str(config), str(runs[config] / 'epoch_2.pth'), '--work-dir', str(ws / 't_own'), '--cfg-options', *data]
    )
    assert 'metrics: ' in capsys.readouterr().out
    tool('test')(
        [
            str(config),
            str(runs[other] / 'epoch_2.pth'),
            '--work-dir',
            str(ws / 't_partial'),
            '--allow-partial',
            '--cfg-options',
            *data,
        ]
    )
    assert 'metrics: ' in capsys.readouterr().out
    log = next((ws / 't_partial').rglob('*.log')).read_text()
    assert f'load_from {runs[other] / "epoch_2.pth"}: ' in log and ' matched, ' in log


def test_load_from_of_another_model_stops_unless_allowed_partial_then_one_summary_line(trained):
    """DeepViT config, LV-ViT checkpoint: 49 of 66 backbone tensors would load, below the 90% a load_from
    needs: the run stops naming the file; with --allow-partial it loads what fits and logs one summary line."""
    ws, runs = trained
    config, other = TECHNIQUES[0], TECHNIQUES[1]
    ckpt = runs[other] / 'epoch_2.pth'
    options = {
        'load_from': ckpt,
        'train_cfg.max_epochs': 1,
        'train_dataloader.batch_size': 16,
        'train_dataloader.dataset.indices': 16,
    }
    with pytest.raises(SystemExit) as e:
        train(config, ws, ws / 'finetune_refused', **options)
    assert f'checkpoint {ckpt} does not fit the model' in str(e.value.code) and '--allow-partial' in str(e.value.code)
    assert checkpoints(ws / 'finetune_refused') == []
    work = ws / 'finetune'
    train(config, ws, work, '--allow-partial', **options)
    lines = [ln for ln in next(work.rglob('*.log')).read_text().splitlines() if f'load_from {ckpt}:' in ln]
    assert len(lines) == 1
    assert (
        ' matched, ' in lines[0]
        and ' missing, ' in lines[0]
        and ' unexpected, ' in lines[0]
        and ' mismatched keys' in lines[0]
    )
    assert [c for c in checkpoints(work) if not c.startswith('best_')] == ['epoch_1.pth']  # and the best of the run


def test_resume_of_another_models_checkpoint_stops_and_loses_nothing(trained):
    ws, runs = trained
    config, other = TECHNIQUES[0], TECHNIQUES[1]
    before = files_of(runs[other])
    work = ws / 'resume_other'
    with pytest.raises(SystemExit) as e:
        train(config, ws, work, '--resume', runs[other] / 'epoch_1.pth', **{'train_cfg.max_epochs': 2})
    assert f'checkpoint {runs[other] / "epoch_1.pth"} does not fit the model' in str(e.value.code)
    assert 'resume needs a checkpoint of this very config' in str(e.value.code)
    assert checkpoints(work) == [] and files_of(runs[other]) == before


def test_resume_auto_skips_an_unreadable_newest_checkpoint(trained):
    ws, runs = trained
    config = TECHNIQUES[0]
    work = ws / 'resume_auto'
    work.mkdir()
    for name in ('epoch_1.pth', 'epoch_2.pth'):
        (work / name).write_bytes((runs[config] / name).read_bytes())
    newest = work / 'epoch_3.pth'
    newest.write_bytes((runs[config] / 'epoch_2.pth').read_bytes()[:1000])  # truncated by a crash of another tool
    (work / 'last_checkpoint').write_text(str(newest))
    train(
        config,
        ws,
        work,
        '--resume',
        **{
            'train_cfg.max_epochs': 3,
            'train_dataloader.batch_size': 16,
            'train_dataloader.dataset.indices': 32,
            'train_cfg.val_interval': 5,
        },
    )
    log = next(work.rglob('*.log')).read_text()
    assert f'--resume auto: skipping {newest}, which cannot be read' in log
    assert f'--resume auto: resuming from {work / "epoch_2.pth"}' in log
    steps = logged_losses(work)
    assert [s['iter'] for s in steps] == [5, 6]  # epoch 3 only: resumed after epoch 2
    meta = torch.load(work / 'epoch_3.pth', map_location='cpu', weights_only=False)['meta']
    assert (meta['epoch'], meta['iter']) == (3, 6)
