"""Shared by the run-guarantee tests (issue 14): the technique configs they cover, a small digits
workspace with label maps, and in-process runs of tools/train.py and tools/test.py.

A new technique is covered by every generic guarantee (AMP, strict loading, bad checkpoints, NaN
stop) by adding its digits config to TECHNIQUES; the options below point any such config at the
workspace without knowing the technique.
"""

import importlib.util
import itertools
import json
import os
import time
from pathlib import Path

import torch
from conftest import CONFIGS, REPO
from mmengine.config import Config

#: one digits config per technique; exact resume is checked on the first two (the issue's pair)
TECHNIQUES = [
    CONFIGS / 'deepvit' / 'deepvit-tiny_1xb64_digits.py',
    CONFIGS / 'lvvit' / 'lvvit-tiny_1xb64_tl_digits.py',
    CONFIGS / 'demo' / 'swin-nano_1xb64_mixtoken_digits.py',
    CONFIGS / 'tlalign' / 'deit-tiny_1xb64_cutmix-tlalign_digits.py',
    CONFIGS / 'tlalign' / 'swin-nano_1xb64_cutmix-tlalign_digits.py',
    CONFIGS / 'diversepatch' / 'deit-deep-narrow_1xb64_diversepatch_digits.py',
    CONFIGS / 'drloc' / 'deit-tiny_1xb64_drloc_digits.py',
]
NUM_TRAIN, NUM_VAL = 128, 32
_runs = itertools.count()


_last_start = [0]


def tool(name):
    """``main(argv)`` of ``tools/<name>.py``, run in this process.

    mmengine names a run, its logger and its visualizer by the second it starts in, and in one
    process two runs of the same second share them (the second writes into the first's log folder):
    each call starts in a second of its own.
    """
    spec = importlib.util.spec_from_file_location(f'tool_{name.replace("/", "_")}', REPO / 'tools' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def main(argv):
        while int(time.time()) == _last_start[0]:
            time.sleep(0.05)
        _last_start[0] = int(time.time())
        return module.main(argv)

    return main


def build_workspace(root: Path) -> Path:
    """``root/digits`` (digits in the ImageNet layout, NUM_TRAIN / NUM_VAL images) and
    ``root/label_maps``: one top-5 map per training image on a 4x4 grid, the image's own class
    first (a teacher that is always right), then the next four classes."""
    from digits import build_imagenet

    from mmvitreg.datasets.label_maps import label_map_path, save_label_map

    data = root / 'digits'
    build_imagenet(str(data), num_train=NUM_TRAIN, num_val=NUM_VAL)
    for line in (data / 'meta' / 'train.txt').read_text().split('\n'):
        if not line:
            continue
        name, label = line.split()
        indices = torch.tensor([(int(label) + i) % 10 for i in range(5)], dtype=torch.float32)
        logits = torch.tensor([8.0, 4.0, 3.0, 2.0, 1.0])
        save_label_map(
            label_map_path(str(root / 'label_maps'), str(data / 'train' / name), str(data / 'train')),
            logits.view(5, 1, 1).expand(5, 4, 4),
            indices.view(5, 1, 1).expand(5, 4, 4),
        )
    return root


def run_options(config: Path, ws: Path, work_dir: Path, **extra) -> list:
    """``--cfg-options`` that point ``config`` at the workspace: every data loader reads
    ``ws/digits`` in this process (no workers), a label-map loader reads ``ws/label_maps``; deterministic
    seed 0; a log line per iteration; a checkpoint per epoch; a unique experiment name."""
    cfg = Config.fromfile(str(config), import_custom_modules=False)
    opts = {
        'randomness.seed': 0,
        'randomness.deterministic': True,
        'default_hooks.logger.interval': 1,
        'default_hooks.checkpoint.interval': 1,
        'default_hooks.checkpoint.max_keep_ckpts': -1,
        'experiment_name': f'{work_dir.name}_{next(_runs)}_{os.getpid()}',
    }
    for split in ('train', 'val', 'test'):
        opts.update(
            {
                f'{split}_dataloader.dataset.data_root': str(ws / 'digits'),
                f'{split}_dataloader.num_workers': 0,
                f'{split}_dataloader.persistent_workers': False,
            }
        )
    for i, step in enumerate(cfg.train_dataloader.dataset.pipeline):
        if step['type'] == 'mmvitreg.LoadTokenLabelMap':
            opts[f'train_dataloader.dataset.pipeline.{i}.label_root'] = str(ws / 'label_maps')
            opts[f'train_dataloader.dataset.pipeline.{i}.img_prefix'] = str(ws / 'digits' / 'train')
    opts.update(extra)
    return ['--cfg-options'] + [f'{k}={v}' for k, v in opts.items()]


def train(config: Path, ws: Path, work_dir: Path, *flags, **options):
    """tools/train.py CONFIG --work-dir WORK_DIR FLAGS --cfg-options (run_options + options)."""
    tool('train')(
        [str(config), '--work-dir', str(work_dir), *map(str, flags), *run_options(config, ws, work_dir, **options)]
    )


def logged_losses(work_dir: Path, all_runs: bool = False) -> list:
    """Every logged training step (``{loss name: value, 'iter', 'epoch'}``) of the latest run in
    ``work_dir``, or of all its runs in order."""
    files = sorted(work_dir.glob('*/vis_data/scalars.json'))
    steps = [json.loads(line) for f in (files if all_runs else files[-1:]) for line in f.read_text().splitlines()]
    return [
        {k: v for k, v in s.items() if k.startswith('loss') or k in ('iter', 'epoch')} for s in steps if 'loss' in s
    ]


def files_of(folder: Path) -> dict:
    """``{relative path: bytes}`` of every file under ``folder`` (to prove nothing changed)."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob('*')) if p.is_file()}


def checkpoints(folder: Path) -> list:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob('*.pth'))
