"""The token-labeling chain on the bundled digits, through the real tools (short version).

teacher (an mmpretrain ResNet) -> tools/generate_label_maps.py -> tools/dataset_converters/pack_label_maps.py
-> tiny LV-ViT trained with token labeling (LV-ViT paper Eq. 6-7) and MixToken (Eq. 8-10) -> tools/test.py.
The tools' ``main(argv)`` run in this process (their command lines, without four interpreter start-ups).
"""

import importlib.util
import json
from pathlib import Path

import numpy as np
from digits import build_imagenet

ROOT = Path(__file__).resolve().parents[1]
TEACHER = str(ROOT / 'configs/lvvit/resnet18-cifar-w16_1xb64_digits-teacher.py')
STUDENT = str(ROOT / 'configs/lvvit/lvvit-tiny_1xb64_tl_digits.py')


def tool(name):
    spec = importlib.util.spec_from_file_location(f'tool_{name.replace("/", "_")}', ROOT / 'tools' / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.main


def data_options(data_root):
    """Point every dataloader of a digits config at ``data_root``, load in-process, log every step."""
    opts = ['default_hooks.logger.interval=1']
    for split in ('train', 'val', 'test'):
        opts += [
            f'{split}_dataloader.dataset.data_root={data_root}',
            f'{split}_dataloader.num_workers=0',
            f'{split}_dataloader.persistent_workers=False',
        ]
    return opts


def test_teacher_label_maps_student_test(tmp_path, capsys):
    data_root = tmp_path / 'digits'
    build_imagenet(str(data_root), num_train=128, num_val=64)
    opts = data_options(data_root)

    teacher_dir = tmp_path / 'teacher'
    tool('train')([TEACHER, '--work-dir', str(teacher_dir), '--cfg-options', 'train_cfg.max_epochs=1', *opts])
    label_root = tmp_path / 'label_maps'
    tool('generate_label_maps')(
        [
            TEACHER,
            str(teacher_dir / 'epoch_1.pth'),
            str(label_root),
            '--img-size',
            '32',
            '--batch-size',
            '64',
            '--num-workers',
            '0',
            '--cfg-options',
            *opts,
        ]
    )
    maps = sorted(label_root.rglob('*.npy'))
    assert len(maps) == 128
    assert np.load(maps[0], allow_pickle=False).shape == (2, 5, 4, 4)  # top-5 logits / classes, teacher's 4x4 map

    store = tmp_path / 'label_maps_packed'
    tool('dataset_converters/pack_label_maps')([str(label_root), str(store), '--num-classes', '10'])
    assert json.loads((store / 'packed.json').read_text())['count'] == 128

    student_dir = tmp_path / 'student'
    student_opts = opts + [
        f'train_dataloader.dataset.pipeline.1.label_root={store}',
        f'train_dataloader.dataset.pipeline.1.img_prefix={data_root}/train',
    ]
    tool('train')([STUDENT, '--work-dir', str(student_dir), '--cfg-options', 'train_cfg.max_epochs=1', *student_opts])
    logged = [json.loads(line) for line in next(student_dir.rglob('scalars.json')).read_text().splitlines()]
    steps = [s for s in logged if 'loss' in s]
    assert len(steps) == 2 and all('loss_cls' in s and 'loss_token' in s for s in steps)  # Eq. 7: both terms
    capsys.readouterr()
    tool('test')(
        [
            STUDENT,
            str(student_dir / 'epoch_1.pth'),
            '--work-dir',
            str(tmp_path / 'test'),
            '--cfg-options',
            *student_opts,
        ]
    )
    metrics = json.loads(capsys.readouterr().out.split('metrics:')[-1].strip().splitlines()[0])
    assert 0 <= metrics['accuracy/top1'] <= 100
