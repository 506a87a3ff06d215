"""The foundation: one set of tools trains and tests mmpretrain, mmseg and mmdet configs on the
bundled digits sets, resumes, runs two CPU processes, and fails clearly on bad input."""

import json
import re
import runpy
from types import SimpleNamespace

import mmengine
import pytest
import torch
from conftest import CONFIGS, TOOLS, free_port, run_tool
from mmengine.config import Config

CLS = CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'
SEG = CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-300_digits-ade20k-128x128.py'
DET = CONFIGS / 'demo' / 'cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_digits-coco.py'
QUICK_START = CONFIGS / 'demo' / 'deit-tiny_1xb64-13e_drloc_digits.py'  # tools/quickstart.sh's default
# a small slice of the classification set keeps each run at a few seconds
CLS_SMALL = [
    'train_dataloader.dataset.indices=256',
    'val_dataloader.dataset.indices=128',
    'test_dataloader.dataset.indices=128',
    'train_cfg.val_interval=1',
]


def metrics_of(proc):
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith('metrics: ')][-1]
    return json.loads(line[len('metrics: ') :])


def last_checkpoint(work_dir):
    return (work_dir / 'last_checkpoint').read_text().strip()


def logged_scalars(work_dir, key):
    """Every value of ``key`` in the json scalars a run logged, in order."""
    logs = sorted(work_dir.glob('*/vis_data/scalars.json'))
    return [json.loads(ln)[key] for ln in logs[-1].read_text().splitlines() if key in ln]


def val_metric_logged(work_dir, key):
    """The last value of ``key`` in the json scalars a run logged."""
    return logged_scalars(work_dir, key)[-1]


def test_quick_start_trains_a_technique_seeded_and_the_install_page_states_its_figure(digits_workspace, tmp_path):
    """tools/quickstart.sh trains QUICK_START by default: DRLoc on the DeiT-tiny of CLS (a config of the package,
    not the library's plain recipe), whose term `loss_drloc` is logged beside `loss_cls`; seeded (two runs on one
    machine log the same losses and top-1, its data workers and Mixup/CutMix included), not forced deterministic
    (torch would refuse the non-deterministic CUDA kernels of a GPU run); docs/install.md's "Seeded figures" names
    the seed and the top-1 the run prints."""
    script = (TOOLS / 'quickstart.sh').read_text()
    assert re.search(r'^CONFIG=\$\{1:-(\S+)\}$', script, re.M)[1] == str(QUICK_START.relative_to(CONFIGS.parent))
    cfg = Config.fromfile(str(QUICK_START))
    assert cfg.randomness == dict(seed=0, deterministic=False)
    assert [user['type'] for user in cfg.model.aux_losses] == ['mmvitreg.DRLoc']
    short = [
        'train_cfg.max_epochs=1',
        'train_dataloader.dataset.indices=128',
        'val_dataloader.dataset.indices=64',
        'default_hooks.logger.interval=1',
    ]
    runs = [tmp_path / 'a', tmp_path / 'b']
    for work in runs:
        run_tool(['train.py', QUICK_START, '--work-dir', work, '--cfg-options', *short], cwd=digits_workspace)
    losses = [logged_scalars(work, 'loss') for work in runs]
    assert len(losses[0]) == 128 // 64 and losses[0] == losses[1]
    drloc = logged_scalars(runs[0], 'loss_drloc')
    assert len(drloc) == 2 and all(term > 0 for term in drloc)
    assert logged_scalars(runs[0], 'accuracy/top1') == logged_scalars(runs[1], 'accuracy/top1') != []
    install = (CLS.parents[2] / 'docs' / 'install.md').read_text()
    start = install.index('### Seeded figures')
    quick_start = install[start : install.index('\n#', start)]
    assert '`randomness.seed=0`' in quick_start
    assert re.search(r'`accuracy/top1` \d+\.\d+', quick_start)


def test_classification_train_checkpoint_test_reproduces_metric_and_resume(digits_workspace, tmp_path):
    """train -> checkpoint -> tools/test.py (load_from) gives the metric validation logged; --resume
    continues at the iteration where the checkpoint stopped."""
    work = tmp_path / 'cls'
    run_tool(
        ['train.py', CLS, '--work-dir', work, '--cfg-options', 'train_cfg.max_epochs=1', *CLS_SMALL],
        cwd=digits_workspace,
    )
    ckpt = last_checkpoint(work)
    assert ckpt.endswith('epoch_1.pth')
    logged = val_metric_logged(work, 'accuracy/top1')
    tested = metrics_of(
        run_tool(['test.py', CLS, ckpt, '--work-dir', work / 'test', '--cfg-options', *CLS_SMALL], cwd=digits_workspace)
    )
    assert abs(tested['accuracy/top1'] - logged) < 1e-6

    iters_per_epoch = 256 // 64
    proc = run_tool(
        ['train.py', CLS, '--work-dir', work, '--resume', '--cfg-options', 'train_cfg.max_epochs=2', *CLS_SMALL],
        cwd=digits_workspace,
    )
    assert re.search(r'resumed epoch: 1, iter: 4', proc.stdout + proc.stderr)
    meta = torch.load(last_checkpoint(work), map_location='cpu', weights_only=False)['meta']
    assert (meta['epoch'], meta['iter']) == (2, 2 * iters_per_epoch)


def test_segmentation_demo_trains_tests_and_runs_multiscale_flip_tta(digits_workspace, tmp_path):
    work = tmp_path / 'seg'
    run_tool(
        [
            'train.py',
            SEG,
            '--work-dir',
            work,
            '--cfg-options',
            'train_cfg.max_iters=2',
            'train_cfg.val_interval=2',
            'train_dataloader.batch_size=2',
        ],
        cwd=digits_workspace,
    )
    ckpt = last_checkpoint(work)
    plain = run_tool(['test.py', SEG, ckpt, '--work-dir', work / 'plain'], cwd=digits_workspace)
    tta = run_tool(['test.py', SEG, ckpt, '--work-dir', work / 'tta', '--tta'], cwd=digits_workspace)
    assert {'mIoU', 'aAcc'} <= set(metrics_of(plain)) and {'mIoU', 'aAcc'} <= set(metrics_of(tta))
    # the config each run built (dumped by the runner): --tta swapped in mmseg's SegTTAModel around
    # the model, and the dataset's multi-scale (0.5..1.75) x flip pipeline
    built = {k: Config.fromfile(work / k / SEG.name) for k in ('plain', 'tta')}
    assert built['plain'].model.type == 'EncoderDecoder'
    assert built['tta'].model.type == 'SegTTAModel' and built['tta'].model.module.type == 'EncoderDecoder'
    scales, flips = built['tta'].test_dataloader.dataset.pipeline[1].transforms[:2]
    assert [t.scale_factor for t in scales] == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert [t.prob for t in flips] == [0.0, 1.0]


def test_detection_demo_trains_and_tests(digits_workspace, tmp_path):
    work = tmp_path / 'det'
    small = [
        'train_dataloader.dataset.indices=8',
        'val_dataloader.dataset.indices=4',
        'test_dataloader.dataset.indices=4',
    ]
    run_tool(
        ['train.py', DET, '--work-dir', work, '--cfg-options', 'train_cfg.max_epochs=1', *small], cwd=digits_workspace
    )
    metrics = metrics_of(
        run_tool(
            ['test.py', DET, last_checkpoint(work), '--work-dir', work, '--cfg-options', *small], cwd=digits_workspace
        )
    )
    assert {'coco/bbox_mAP', 'coco/segm_mAP'} <= set(metrics)


def test_two_cpu_processes_through_dist_train(digits_workspace, tmp_path):
    """`bash tools/dist_train.sh CONFIG 2` on a CPU-only machine: gloo, DDP without device ids."""
    work = tmp_path / 'dist'
    proc = run_tool(
        ['dist_train.sh', CLS, 2, '--work-dir', work, '--cfg-options', 'train_cfg.max_epochs=1', *CLS_SMALL],
        cwd=digits_workspace,
        env={'PORT': str(free_port())},
    )
    out = proc.stdout + proc.stderr
    assert 'Distributed training: True' in out and 'GPU number: 2' in out
    # the two ranks share the 256 images: 256 / (2 x 64) = 2 iterations per epoch, not 4
    meta = torch.load(last_checkpoint(work), map_location='cpu', weights_only=False)['meta']
    assert (meta['epoch'], meta['iter']) == (1, 2)


def test_bad_config_path_is_a_clear_error(tmp_path):
    proc = run_tool(['train.py', tmp_path / 'no_such_config.py'], cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert 'config file not found' in proc.stderr and 'no_such_config.py' in proc.stderr
    assert 'Traceback' not in proc.stderr


def test_unknown_plugin_type_is_a_clear_error(tmp_path):
    cfg = tmp_path / 'typo.py'
    cfg.write_text(f"_base_ = '{CLS}'\nmodel = dict(backbone=dict(_delete_=True, type='mmvitreg.DeepVit', arch='s'))\n")
    proc = run_tool(['train.py', cfg], cwd=tmp_path, check=False)
    assert proc.returncode != 0
    assert "unknown component type 'mmvitreg.DeepVit' at cfg.model.backbone" in proc.stderr
    assert 'Did you mean mmvitreg.DeepViT' in proc.stderr
    assert 'Traceback' not in proc.stderr


# the digits DeepViT config asks for persistent workers; with num_workers=0 torch refuses them, so a
# run with all loaders at 0 workers trains only if --no-persistent-workers takes effect
DEEPVIT = CONFIGS / 'deepvit' / 'deepvit-tiny_1xb64_digits.py'
NO_WORKERS = [f'{split}_dataloader.num_workers=0' for split in ('train', 'val', 'test')]


@pytest.fixture(scope='module')
def deepvit_checkpoint(digits_workspace, tmp_path_factory):
    """One epoch of DeepViT-tiny on 64 digits, trained with --no-persistent-workers --no-pin-memory."""
    work = tmp_path_factory.mktemp('deepvit')
    run_tool(
        [
            'train.py',
            DEEPVIT,
            '--work-dir',
            work,
            '--no-validate',
            '--no-persistent-workers',
            '--no-pin-memory',
            '--cfg-options',
            'train_cfg.max_epochs=1',
            'train_dataloader.dataset.indices=64',
            *NO_WORKERS,
        ],
        cwd=digits_workspace,
    )
    return SimpleNamespace(work=work, ckpt=last_checkpoint(work))


def test_train_no_persistent_workers_and_no_pin_memory_reach_every_dataloader(deepvit_checkpoint):
    """The run above trained (torch rejects persistent workers without workers), and the config it
    dumped has both options off in each loader; without the flags the config's own values stay."""
    built = Config.fromfile(deepvit_checkpoint.work / DEEPVIT.name)
    for split in ('train', 'test'):
        loader = built[f'{split}_dataloader']
        assert (loader.persistent_workers, loader.pin_memory) == (False, False), split
    assert Config.fromfile(DEEPVIT).train_dataloader.persistent_workers is True


def test_show_dir_paints_every_test_image_and_out_item_chooses_what_out_holds(
    deepvit_checkpoint, digits_workspace, tmp_path
):
    """--show-dir paints all 24 test images by default (mmpretrain's hook alone paints 1 in 5000) and
    every 4th with --interval 4; --out-item metrics writes the metrics only, --out alone the 24
    predictions; --amp on a CPU tests under bfloat16 autocast and says so."""
    small = [
        '--cfg-options',
        'test_dataloader.dataset.indices=24',
        'test_dataloader.num_workers=0',
        'test_dataloader.persistent_workers=False',
    ]
    every = run_tool(
        [
            'test.py',
            DEEPVIT,
            deepvit_checkpoint.ckpt,
            '--work-dir',
            tmp_path / 'w1',
            '--show-dir',
            tmp_path / 'all',
            '--out',
            tmp_path / 'metrics.json',
            '--out-item',
            'metrics',
            *small,
        ],
        cwd=digits_workspace,
    )
    fourth = run_tool(
        [
            'test.py',
            DEEPVIT,
            deepvit_checkpoint.ckpt,
            '--work-dir',
            tmp_path / 'w2',
            '--show-dir',
            tmp_path / 'fourth',
            '--interval',
            4,
            '--out',
            tmp_path / 'preds.pkl',
            '--amp',
            *small,
        ],
        cwd=digits_workspace,
    )
    assert len(list((tmp_path / 'all').glob('*.png'))) == 24
    assert len(list((tmp_path / 'fourth').glob('*.png'))) == 6
    assert json.loads((tmp_path / 'metrics.json').read_text()) == metrics_of(every)
    preds = mmengine.load(tmp_path / 'preds.pkl')
    assert len(preds) == 24 and {'pred_label', 'gt_label'} <= set(preds[0])
    assert '--amp without a GPU: testing under bfloat16 autocast' in fourth.stdout
    assert Config.fromfile(tmp_path / 'w2' / DEEPVIT.name).test_cfg.fp16 is True


def load_tool(name):
    return runpy.run_path(str(TOOLS / name), run_name=f'mmvitreg_{name[:-3]}')


def test_show_interval_wait_time_and_no_pin_memory_set_each_librarys_hook(digits_workspace, monkeypatch):
    """--show / --show-dir / --interval / --wait-time reach the visualisation hook under each library's
    own names; --no-pin-memory the test loader; --out-item without --out is refused up front."""
    monkeypatch.chdir(digits_workspace)
    test = load_tool('test.py')
    ckpt = digits_workspace / 'fake.pth'
    ckpt.write_bytes(b'0')  # the gate refuses a missing or empty file while the config is built; nothing more is read

    def built(config, *flags):
        return test['build_test_config'](test['parse_args']([str(config), str(ckpt), *map(str, flags)]))

    cls = built(DEEPVIT, '--show', '--interval', 3, '--wait-time', 0.5, '--no-pin-memory')
    assert {
        k: cls.default_hooks.visualization[k] for k in ('enable', 'show', 'interval', 'wait_time', 'out_dir')
    } == dict(enable=True, show=True, interval=3, wait_time=0.5, out_dir=None)
    assert cls.test_dataloader.pin_memory is False
    seg = built(SEG, '--show-dir', 'painted')
    assert (seg.default_hooks.visualization.draw, seg.default_hooks.visualization.interval) == (True, 1)
    assert seg.visualizer.save_dir == 'painted'
    det = built(DET, '--show-dir', 'painted', '--wait-time', 1)
    assert (det.default_hooks.visualization.draw, det.default_hooks.visualization.test_out_dir) == (True, 'painted')
    assert det.default_hooks.visualization.wait_time == 1
    with pytest.raises(test['ConfigError'], match='give --out FILE too'):
        built(DEEPVIT, '--out-item', 'metrics')
    with pytest.raises(test['ConfigError'], match='metrics is written as .json'):
        built(DEEPVIT, '--out', 'm.txt', '--out-item', 'metrics')
