"""Distributed runs on CPU (issue 14, part 3): `tools/dist_train.sh CONFIG 2` with gloo gives every rank
a disjoint shard, the same weights on every rank as in the checkpoint, and - for a deterministic config
(no dropout, drop path, random augmentation or BatchNorm) - the losses of 1 process x batch B and
2 processes x B/2 agree to 1e-5 over five iterations. A SyncBN config converts and runs."""

import json
import os
import sys
import textwrap

import pytest
import torch
from conftest import REPO, free_port, run_tool
from guard_helpers import TECHNIQUES, build_workspace, run_options, train

DEEPVIT = TECHNIQUES[0]
BATCH, ITERS = 16, 5

PROBE = textwrap.dedent('''
    """Test probe: every rank writes the losses and images of each of its steps, and its final weights."""
    import json
    import torch
    from mmengine.dist import get_rank
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS


    @HOOKS.register_module()
    class DistProbeHook(Hook):
        def __init__(self):
            self.steps = []

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            self.steps.append(dict(losses={k: float(v) for k, v in outputs.items()},
                                   images=[s.img_path for s in data_batch['data_samples']]))

        def after_run(self, runner):
            model = runner.model.module if hasattr(runner.model, 'module') else runner.model
            torch.save(model.state_dict(), f'{runner.work_dir}/weights_rank{get_rank()}.pth')
            with open(f'{runner.work_dir}/steps_rank{get_rank()}.json', 'w') as f:
                json.dump(self.steps, f)
''')


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    ws = build_workspace(tmp_path_factory.mktemp('dist_ws'))
    (ws / 'dist_probe.py').write_text(PROBE)
    # DeepViT digits made deterministic: re-attention normalised by LayerNorm instead of BatchNorm,
    # no drop path, no Mixup/CutMix, no random crop
    (ws / 'deterministic.py').write_text(
        textwrap.dedent(f'''
        _base_ = '{DEEPVIT}'
        model = dict(backbone=dict(drop_path_rate=0., arch=dict(attn_cfgs=dict(reattn=dict(norm='ln')))),
                     train_cfg=dict(_delete_=True))
        train_dataloader = dict(dataset=dict(pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')]))
        custom_imports = dict(imports=['dist_probe'], allow_failed_imports=False)
        custom_hooks = [dict(type='DistProbeHook')]
    ''')
    )
    return ws


def env_for(ws):
    return {
        'PYTHONPATH': os.pathsep.join([str(REPO), str(ws), os.environ.get('PYTHONPATH', '')]),
        'PORT': str(free_port()),
    }


def launch(ws, config, work, nproc, batch):
    options = {
        'train_dataloader.batch_size': batch,
        'train_dataloader.dataset.indices': BATCH * ITERS,
        'train_dataloader.sampler.seed': 0,
        'train_cfg.max_epochs': 1,
    }
    if nproc == 1:  # in this process (one interpreter start-up less)
        if str(ws) not in sys.path:
            sys.path.insert(0, str(ws))
        return train(config, ws, work, '--no-validate', **options)
    return run_tool(
        [
            'dist_train.sh',
            config,
            nproc,
            '--work-dir',
            work,
            '--no-validate',
            *run_options(config, ws, work, **options),
        ],
        cwd=ws,
        env=env_for(ws),
    )


def test_one_process_batch_b_equals_two_processes_batch_b_half(ws):
    config = ws / 'deterministic.py'
    launch(ws, config, ws / 'one', 1, BATCH)
    proc = launch(ws, config, ws / 'two', 2, BATCH // 2)
    assert 'Distributed training: True' in proc.stdout + proc.stderr

    one = json.loads((ws / 'one' / 'steps_rank0.json').read_text())
    ranks = [json.loads((ws / 'two' / f'steps_rank{r}.json').read_text()) for r in (0, 1)]
    assert len(one) == len(ranks[0]) == len(ranks[1]) == ITERS
    worst = 0.0
    for i in range(ITERS):
        shard0, shard1 = set(ranks[0][i]['images']), set(ranks[1][i]['images'])
        assert len(shard0) == len(shard1) == BATCH // 2 and not shard0 & shard1  # disjoint shards
        assert shard0 | shard1 == set(one[i]['images'])  # together: the batch of the single process
        for term, value in one[i]['losses'].items():
            mean = (ranks[0][i]['losses'][term] + ranks[1][i]['losses'][term]) / 2
            worst = max(worst, abs(mean - value))
    print(f'1 x {BATCH} vs 2 x {BATCH // 2}: largest loss difference over {ITERS} iterations = {worst:.3e}')
    assert worst < 1e-5

    saved = torch.load(ws / 'two' / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    weights = [torch.load(ws / 'two' / f'weights_rank{r}.pth') for r in (0, 1)]
    for key, value in saved.items():
        assert torch.equal(weights[0][key], value) and torch.equal(weights[1][key], value), key
    single = torch.load(ws / 'one' / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    drift = max(float((single[k].float() - saved[k].float()).abs().max()) for k in saved)
    print(f'weights after {ITERS} iterations, 1 vs 2 processes: largest difference {drift:.3e}')
    assert drift < 1e-4


def test_syncbn_config_converts_and_runs_on_two_cpu_processes(ws):
    """DeepViT's re-attention BatchNorm as SyncBN (sync_bn='torch'); on CPU the DDP wrapper reverts it
    to per-process BN (mmvitreg.compat), and the run trains and saves."""
    work = ws / 'syncbn'
    opts = run_options(
        DEEPVIT,
        ws,
        work,
        **{
            'sync_bn': 'torch',
            'train_dataloader.batch_size': 8,
            'train_dataloader.dataset.indices': 32,
            'train_cfg.max_epochs': 1,
        },
    )
    run_tool(['dist_train.sh', DEEPVIT, 2, '--work-dir', work, '--no-validate', *opts], cwd=ws, env=env_for(ws))
    state = torch.load(work / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    assert int(state['backbone.layers.3.attn.var_norm.num_batches_tracked']) == 2  # 32 / (2 x 8) steps
