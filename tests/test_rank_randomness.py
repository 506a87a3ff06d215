"""Every rank draws its own random numbers (issue 26): the official codes seed with seed + rank, so each GPU
mixes its images with its own box; mmengine's default seeds every rank alike (one box per global batch).
`tools/dist_train.sh CONFIG 2` on the TL-Align digits config: the two ranks' CutMix boxes differ, and
N epochs + --resume to 2N still equals 2N straight on each rank."""

import json
import textwrap

import pytest
import torch
from conftest import CONFIGS, run_tool
from guard_helpers import build_workspace, run_options
from test_distributed_guard import env_for

TLALIGN = CONFIGS / 'tlalign' / 'deit-tiny_1xb64_cutmix-tlalign_digits.py'
BATCH, ITERS = 4, 4  # per rank and per epoch

PROBE = textwrap.dedent('''
    """Test probe: every rank writes the mixing box and the losses of each of its steps."""
    import json
    from mmengine.dist import get_rank
    from mmengine.hooks import Hook
    from mmengine.registry import HOOKS


    @HOOKS.register_module()
    class PlanProbeHook(Hook):
        def __init__(self):
            self.steps = []

        def before_train(self, runner):
            model = runner.model.module if hasattr(runner.model, 'module') else runner.model
            mix = model.data_preprocessor.mix
            draw = mix.plan

            def plan(*args, **kwargs):
                drawn = draw(*args, **kwargs)
                self.steps.append(dict(box=drawn.mask[0].tolist()))
                return drawn
            mix.plan = plan

        def after_train_iter(self, runner, batch_idx, data_batch=None, outputs=None):
            self.steps[-1]['losses'] = {k: float(v) for k, v in outputs.items()}

        def after_run(self, runner):
            with open(f'{runner.work_dir}/plans_rank{get_rank()}_epoch{runner.epoch}.json', 'w') as f:
                json.dump(self.steps, f)
''')


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    ws = build_workspace(tmp_path_factory.mktemp('rank_ws'))
    (ws / 'plan_probe.py').write_text(PROBE)
    (ws / 'probed.py').write_text(
        f"_base_ = '{TLALIGN}'\n"
        "custom_imports = dict(imports=['plan_probe'], allow_failed_imports=False)\n"
        "custom_hooks = [dict(type='PlanProbeHook')]\n"
    )
    return ws


def launch(ws, work, epochs, *flags):
    options = {
        'train_dataloader.batch_size': BATCH,
        'train_dataloader.dataset.indices': 2 * BATCH * ITERS,
        'train_cfg.max_epochs': epochs,
    }
    run_tool(
        [
            'dist_train.sh',
            ws / 'probed.py',
            2,
            '--work-dir',
            work,
            '--no-validate',
            *flags,
            *run_options(ws / 'probed.py', ws, work, **options),
        ],
        cwd=ws,
        env=env_for(ws),
    )


def test_ranks_draw_their_own_boxes_and_resume_stays_exact(ws):
    straight, resumed = ws / 'straight', ws / 'resumed'
    launch(ws, straight, 2)
    launch(ws, resumed, 1)
    launch(ws, resumed, 2, '--resume')

    plans = [json.loads((straight / f'plans_rank{r}_epoch2.json').read_text()) for r in (0, 1)]
    assert len(plans[0]) == len(plans[1]) == 2 * ITERS
    for step, (a, b) in enumerate(zip(*plans)):
        print(f'step {step}: rank 0 box rows {a["box"]}, rank 1 box rows {b["box"]}')
    differ = sum(a['box'] != b['box'] for a, b in zip(*plans))
    assert differ >= ITERS  # one box per rank (mmengine's default seeding: the same box at every step)

    for r in (0, 1):  # the resumed second epoch draws the boxes and gives the losses of the straight run
        second = json.loads((resumed / f'plans_rank{r}_epoch2.json').read_text())
        assert second == plans[r][ITERS:], f'rank {r}'
    a, b = (
        torch.load(w / 'epoch_2.pth', map_location='cpu', weights_only=False)['state_dict'] for w in (straight, resumed)
    )
    assert all(torch.equal(a[k], b[k]) for k in a)
