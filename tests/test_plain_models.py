"""Issue 44 item 2: ``import mmvitreg`` leaves a model that is not mmvitreg's as it finds it. mmpretrain's own
``tools/train.py`` trains a plain ResNet-18 and a plain tiny ViT (the DeiT demo, made deterministic) with the same
losses and weights with ``import mmvitreg`` as without it, with ``compile`` too (ResNet-18's SGD compiles in
mmengine's whole ``train_step``; the ViT's AdamW stops dynamo there with and without mmvitreg alike), and under
``torch.distributed.run`` on the CPU it stops where mmengine 0.10 stops, with and without mmvitreg alike: the gloo
fallback belongs to mmvitreg's tools. ``tools/dist_train.sh`` (2 processes, gloo) trains both models as mmpretrain's
own tool trains them in one process (2 x B/2 = 1 x B), so the fallback changes nothing but the device."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import mmpretrain
import pytest
import torch
from conftest import CONFIGS, REPO, free_port, run_tool, tool_env
from guard_helpers import build_workspace, run_options
from test_distributed_guard import PROBE

#: mmpretrain's own train.py, as pip installs it
MMPRETRAIN_TRAIN = Path(mmpretrain.__file__).parent / '.mim' / 'tools' / 'train.py'
BATCH, ITERS = 8, 3
#: imports mmvitreg, then runs the script it is given as ``__main__`` (the "with" side)
WITH_MMVITREG = (
    'import runpy, sys\nimport mmvitreg  # noqa: F401\nsys.argv = sys.argv[1:]\n'
    'runpy.run_path(sys.argv[0], run_name="__main__")\n'
)


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    ws = build_workspace(tmp_path_factory.mktemp('plain_ws'))
    (ws / 'dist_probe.py').write_text(PROBE)
    (ws / 'with_mmvitreg.py').write_text(WITH_MMVITREG)
    # the DeiT demo (mmpretrain's VisionTransformer) without its random parts: Mixup / CutMix, random crops
    (ws / 'vit.py').write_text(
        textwrap.dedent(f'''
        _base_ = '{CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'}'
        model = dict(train_cfg=dict(_delete_=True))
        train_dataloader = dict(dataset=dict(pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')]))
        custom_imports = dict(imports=['dist_probe'], allow_failed_imports=False)
        custom_hooks = [dict(type='DistProbeHook')]
    ''')
    )
    # mmpretrain's ResNet-18 with SGD; its BatchNorm keeps its running statistics (norm_eval), so that a batch
    # split over two processes normalises as the whole batch does
    (ws / 'resnet.py').write_text(
        textwrap.dedent('''
        _base_ = './vit.py'
        model = dict(_delete_=True, type='ImageClassifier', backbone=dict(type='ResNet', depth=18, norm_eval=True),
                     neck=dict(type='GlobalAveragePooling'),
                     head=dict(type='LinearClsHead', num_classes=10, in_channels=512,
                               loss=dict(type='CrossEntropyLoss')))
        optim_wrapper = dict(_delete_=True, optimizer=dict(type='SGD', lr=0.01, momentum=0.9))
    ''')
    )
    return ws


def options(ws, config, work, batch=BATCH, **extra):
    return run_options(
        ws / config,
        ws,
        work,
        **{
            'train_dataloader.batch_size': batch,
            'train_dataloader.dataset.indices': BATCH * ITERS,
            'train_dataloader.sampler.seed': 0,
            'train_cfg.max_epochs': 1,
            **extra,
        },
    )


def mmpretrain_train(ws, config, work, with_mmvitreg, launcher=(), **extra):
    """mmpretrain's own tools/train.py, with ``import mmvitreg`` first or not; ``launcher``: the command that starts
    it (torch.distributed.run), else this interpreter."""
    script = [str(ws / 'with_mmvitreg.py')] if with_mmvitreg else []
    cmd = [
        *(launcher or [sys.executable]),
        *script,
        str(MMPRETRAIN_TRAIN),
        str(ws / config),
        '--work-dir',
        str(work),
        *(['--launcher', 'pytorch'] if launcher else []),
        *options(ws, config, work, **extra),
    ]  # no validation
    # in one epoch: val_interval=10
    env = {**tool_env(), 'PYTHONPATH': os.pathsep.join([str(REPO), str(ws)])}
    return subprocess.run(cmd, cwd=ws, env=env, capture_output=True, text=True, timeout=900)


def steps_and_weights(work, ranks=(0,)):
    steps = [json.loads((work / f'steps_rank{r}.json').read_text()) for r in ranks]
    weights = [torch.load(work / f'weights_rank{r}.pth', map_location='cpu') for r in ranks]
    return steps, weights


def trained(proc):
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


@pytest.mark.parametrize('config', ['resnet.py', 'vit.py'])
def test_mmpretrains_own_train_py_trains_the_same_with_import_mmvitreg(ws, config):
    runs = {}
    for side in (False, True):
        trained(mmpretrain_train(ws, config, ws / f'own_{config}_{side}', side))
        runs[side] = steps_and_weights(ws / f'own_{config}_{side}')
    (without, weights), (with_, weights_with) = runs[False], runs[True]
    assert len(without[0]) == ITERS and with_ == without  # the same losses and images, bit for bit
    assert weights[0].keys() == weights_with[0].keys()
    assert all(torch.equal(weights[0][k], weights_with[0][k]) for k in weights[0])


def test_compiled_training_is_mmengines_with_import_mmvitreg(ws):
    """``compile`` in mmpretrain's own tool is mmengine's whole-``train_step`` compile either way: ResNet-18 with SGD
    trains with the same losses and weights; the ViT's AdamW stops dynamo inside the optimizer step, the same way."""
    runs = {}
    for side in (False, True):
        trained(mmpretrain_train(ws, 'resnet.py', ws / f'compiled_{side}', side, **{'compile.backend': 'eager'}))
        runs[side] = steps_and_weights(ws / f'compiled_{side}')
        log = next((ws / f'compiled_{side}').glob('*/*.log')).read_text()
        assert 'Model has been "compiled"' in log and 'model.loss has been compiled' not in log
    assert runs[True][0] == runs[False][0]
    assert all(torch.equal(runs[False][1][0][k], runs[True][1][0][k]) for k in runs[False][1][0])
    failures = [
        mmpretrain_train(ws, 'vit.py', ws / f'compiled_vit_{side}', side, compile=True) for side in (False, True)
    ]
    for proc in failures:
        assert proc.returncode != 0 and "'UserDefinedDictVariable' object has no attribute 'items'" in proc.stderr


def torchrun(port):
    return [sys.executable, '-m', 'torch.distributed.run', '--nproc_per_node=2', f'--master_port={port}']


@pytest.mark.skipif(torch.cuda.is_available(), reason='the CPU fallback: without CUDA only')
def test_mmpretrains_own_distributed_run_on_the_cpu_stops_where_mmengine_stops_with_import_mmvitreg(ws):
    """mmengine 0.10's ``init_dist`` calls ``torch.cuda.set_device``: mmpretrain's own tool under
    ``torch.distributed.run`` stops there on a CPU, with ``import mmvitreg`` as without it (mmvitreg's gloo fallback
    is its tools', not a patch of mmengine)."""
    ends = []
    for side in (False, True):
        proc = mmpretrain_train(ws, 'resnet.py', ws / f'dist_own_{side}', side, launcher=torchrun(free_port()))
        assert proc.returncode != 0
        assert 'in _init_dist_pytorch' in proc.stderr and 'torch.cuda.set_device(local_rank)' in proc.stderr
        ends.append(next(line for line in proc.stderr.splitlines() if line.startswith('RuntimeError')))
    assert ends[0] == ends[1]


@pytest.mark.parametrize('config', ['resnet.py', 'vit.py'])
def test_dist_train_sh_on_the_cpu_trains_as_mmpretrains_own_tool_in_one_process(ws, config):
    """tools/dist_train.sh, 2 processes x B/2 on gloo, against mmpretrain's own tools/train.py, 1 process x B
    (without mmvitreg): each step's two shards make the single process's batch, the mean of the two losses is its
    loss, and the weights agree."""
    one = ws / f'own_{config}_False'
    if not (one / 'steps_rank0.json').exists():
        trained(mmpretrain_train(ws, config, one, False))
    two = ws / f'dist_{config}'
    run_tool(
        [
            'dist_train.sh',
            ws / config,
            2,
            '--work-dir',
            two,
            '--no-validate',
            *options(ws, config, two, batch=BATCH // 2),
        ],
        cwd=ws,
        env={'PYTHONPATH': os.pathsep.join([str(REPO), str(ws)]), 'PORT': str(free_port())},
    )
    assert 'mmvitreg.CPUDistributedDataParallel' in next(two.glob('*/*.log')).read_text()
    (single,), (weights,) = steps_and_weights(one)
    ranks, rank_weights = steps_and_weights(two, ranks=(0, 1))
    worst = 0.0
    for i in range(ITERS):
        assert set(ranks[0][i]['images']) | set(ranks[1][i]['images']) == set(single[i]['images'])
        for term, value in single[i]['losses'].items():
            worst = max(worst, abs((ranks[0][i]['losses'][term] + ranks[1][i]['losses'][term]) / 2 - value))
    drift = max(float((weights[k].float() - rank_weights[0][k].float()).abs().max()) for k in weights)
    print(
        f'{config}: 1 x {BATCH} (mmpretrain) vs 2 x {BATCH // 2} (dist_train.sh): largest loss difference '
        f'{worst:.2e}, largest weight difference {drift:.2e}'
    )
    assert worst < 1e-5 and drift < 1e-4
    assert all(torch.equal(rank_weights[0][k], rank_weights[1][k]) for k in weights)
