"""tools/generate_label_maps.py: ReLabel-style dense annotation (token labeling §4.1 "Re-labeling").

A tiny mmpretrain classifier annotates the bundled digits set: one (2, k, H, W) float16 map per image,
and a second run skips every finished file.
"""

import importlib.util
import os
import os.path as osp
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from conftest import free_port, tool_env
from digits import build_imagenet

from mmvitreg.datasets.label_maps import load_label_map

ROOT = osp.dirname(osp.dirname(osp.abspath(__file__)))

MODELS = {
    # ViT: the head on every patch token (out_type='featmap'); 32 px / patch 8 -> 4x4 map
    'vit': dict(
        backbone=dict(
            type='VisionTransformer',
            arch=dict(embed_dims=32, num_layers=1, num_heads=2, feedforward_channels=64),
            img_size=32,
            patch_size=8,
        ),
        neck=None,
        head=dict(type='VisionTransformerClsHead', num_classes=10, in_channels=32),
        size=32,
        grid=4,
        region='center_square',
    ),
    # CNN: the fc as a 1x1 conv on the final feature map; 64 px / stride 32 -> 2x2 map
    'cnn': dict(
        backbone=dict(type='ResNet', depth=18, base_channels=8, stem_channels=8),
        neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=10, in_channels=64),
        size=64,
        grid=2,
        region='full',
    ),
}


def load_tool():
    spec = importlib.util.spec_from_file_location(
        'generate_label_maps', osp.join(ROOT, 'tools', 'generate_label_maps.py')
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def write_config(tmp_path, data_root, kind):
    spec = MODELS[kind]
    model = dict(
        type='ImageClassifier',
        backbone=spec['backbone'],
        neck=spec['neck'],
        head=spec['head'],
        data_preprocessor=dict(mean=[127.5] * 3, std=[127.5] * 3, to_rgb=True),
    )
    cfg = f"""
default_scope = 'mmpretrain'
model = {model!r}
train_dataloader = dict(batch_size=8, num_workers=0, sampler=dict(type='DefaultSampler', shuffle=True),
    dataset=dict(type='CustomDataset', data_root={data_root!r}, data_prefix='train',
                 ann_file='meta/train.txt',
                 pipeline=[dict(type='LoadImageFromFile'), dict(type='PackInputs')]))
"""
    path = tmp_path / f'{kind}.py'
    path.write_text(cfg)
    return str(path), model


@pytest.mark.parametrize('kind', sorted(MODELS))
def test_generate_maps_for_every_image_and_resume(tmp_path, kind, capsys):
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    data_root = str(tmp_path / 'digits')
    build_imagenet(data_root, num_train=20, num_val=4)
    config, model_cfg = write_config(tmp_path, data_root, kind)
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    classifier = MMPRETRAIN_MODELS.build(model_cfg)
    checkpoint = str(tmp_path / 'teacher.pth')
    torch.save(dict(state_dict=classifier.state_dict()), checkpoint)

    tool = load_tool()
    label_root = tmp_path / 'labels'
    size, grid = MODELS[kind]['size'], MODELS[kind]['grid']
    argv = [
        config,
        checkpoint,
        str(label_root),
        '--img-size',
        str(size),
        '--batch-size',
        '8',
        '--num-workers',
        '0',
        '--topk',
        '3',
        '--region',
        MODELS[kind]['region'],
    ]
    tool.main(argv)
    assert 'wrote 20 label maps' in capsys.readouterr().out

    lines = (tmp_path / 'digits' / 'meta' / 'train.txt').read_text().split('\n')
    images = [line.split()[0] for line in lines if line]
    for name in images:
        label_map = load_label_map(str(label_root / (osp.splitext(name)[0] + '.npy')), num_classes=10)
        assert label_map.shape == (2, 3, grid, grid) and label_map.dtype == np.float16
        logits, classes = torch.from_numpy(label_map.astype(np.float32))
        assert (logits[:-1] >= logits[1:]).all()  # sorted, largest first
        assert (classes.sort(0).values[1:] != classes.sort(0).values[:-1]).all()  # k distinct classes
    mtimes = {p: p.stat().st_mtime_ns for p in label_root.rglob('*.npy')}
    assert len(mtimes) == len(images)
    assert not list(label_root.rglob('*.tmp*'))  # atomic writes leave no temporary files

    tool.main(argv)
    assert 'wrote 0 label maps' in capsys.readouterr().out
    assert {p: p.stat().st_mtime_ns for p in label_root.rglob('*.npy')} == mtimes


def test_cnn_annotation_is_the_classifier_per_position(tmp_path):
    """ReLabel: with global average pooling and a linear head, the mean of the dense logits over the
    map is exactly the classifier's logits (the fc acts as a 1x1 conv on the final feature map)."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    init_default_scope('mmpretrain')
    spec = MODELS['cnn']
    classifier = MMPRETRAIN_MODELS.build(
        dict(type='ImageClassifier', backbone=spec['backbone'], neck=spec['neck'], head=spec['head'])
    ).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        pooled = classifier(x, mode='tensor')
        dense = load_tool().DenseAnnotator(classifier)(x)
    assert dense.shape == (2, 2, 2, 10)
    torch.testing.assert_close(dense.mean((1, 2)), pooled, rtol=1e-5, atol=1e-5)


def test_token_label_head_annotates_with_its_aux_head():
    """An mmvitreg TokenLabelHead teacher annotates with its aux head on every patch token (the
    official generator's ``aux_head`` rule), on the final-normed tokens the head is trained on."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    init_default_scope('mmpretrain')
    cfg = Config.fromfile(osp.join(ROOT, 'configs', 'lvvit', 'lvvit-tiny_1xb64_tl_digits.py'))
    classifier = MMPRETRAIN_MODELS.build(cfg.model).eval()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        tokens = classifier.backbone(x)[-1][:, 1:]  # out_type='raw': final-normed tokens, cls first
        expect = classifier.head.aux_head(tokens).reshape(2, 8, 8, 10)
        dense = load_tool().DenseAnnotator(classifier)(x)
    torch.testing.assert_close(dense, expect)


def test_teacher_gets_the_config_top_level_data_preprocessor(tmp_path):
    """mmpretrain configs keep mean/std/to_rgb at the top level; the teacher must normalise its
    inputs with them exactly as in training (else every map collapses to one class)."""
    from mmengine.config import Config
    from mmengine.registry import init_default_scope

    cfg_path, model = write_config(tmp_path, str(tmp_path), 'cnn')
    cfg = Config.fromfile(cfg_path)
    cfg.data_preprocessor = cfg.model.pop('data_preprocessor')
    cfg.data_preprocessor.update(mean=[10.0, 20.0, 30.0], std=[2.0, 3.0, 4.0])
    init_default_scope('mmpretrain')
    classifier = load_tool().build_classifier(cfg)
    assert classifier.data_preprocessor.mean.flatten().tolist() == [10.0, 20.0, 30.0]
    assert classifier.data_preprocessor.std.flatten().tolist() == [2.0, 3.0, 4.0]


def test_two_processes_annotate_disjoint_shards_like_one_process(tmp_path):
    """``--launcher pytorch`` under torchrun with two CPU processes (gloo): each rank annotates its
    shard ``todo[rank::2]``, every image gets exactly one map, and the maps are bit for bit those
    of a single-process run with the same checkpoint."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    num_images = 20
    data_root = str(tmp_path / 'digits')
    build_imagenet(data_root, num_train=num_images, num_val=2)
    config, model_cfg = write_config(tmp_path, data_root, 'cnn')
    init_default_scope('mmpretrain')
    torch.manual_seed(0)
    checkpoint = str(tmp_path / 'teacher.pth')
    torch.save(dict(state_dict=MMPRETRAIN_MODELS.build(model_cfg).state_dict()), checkpoint)

    tool = osp.join(ROOT, 'tools', 'generate_label_maps.py')
    args = [config, checkpoint, '--img-size', '64', '--batch-size', '4', '--num-workers', '0', '--topk', '3']
    roots = {'dist': tmp_path / 'labels_dist', 'single': tmp_path / 'labels_single'}
    cmds = {
        'dist': [
            sys.executable,
            '-m',
            'torch.distributed.run',
            '--nnodes',
            '1',
            '--nproc_per_node',
            '2',
            '--master_addr',
            '127.0.0.1',
            '--master_port',
            str(free_port()),
            tool,
            *args[:2],
            str(roots['dist']),
            *args[2:],
            '--launcher',
            'pytorch',
        ],
        'single': [sys.executable, tool, *args[:2], str(roots['single']), *args[2:]],
    }
    outs = {}
    for key, cmd in cmds.items():
        proc = subprocess.run(cmd, cwd=tmp_path, env=tool_env(), capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, f'{key} run exited {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}'
        outs[key] = proc.stdout

    shares = {int(r): int(n) for r, n in re.findall(r'rank (\d+)/2: wrote (\d+) label maps', outs['dist'])}
    assert sorted(shares) == [0, 1] and sum(shares.values()) == num_images
    assert all(n > 0 for n in shares.values())
    assert f'rank 0/1: wrote {num_images} label maps' in outs['single']

    lines = (tmp_path / 'digits' / 'meta' / 'train.txt').read_text().split('\n')
    names = sorted(osp.splitext(line.split()[0])[0] + '.npy' for line in lines if line)
    assert len(names) == num_images
    for root in roots.values():
        assert sorted(str(p.relative_to(root)) for p in root.rglob('*.npy')) == names  # one map per image
        assert not list(root.rglob('*.tmp*'))  # atomic writes leave no temporary files
    for name in names:
        dist_map, single_map = (load_label_map(str(root / name), num_classes=10) for root in roots.values())
        assert dist_map.dtype == single_map.dtype == np.float16 and dist_map.shape == (2, 3, 2, 2)
        assert dist_map.tobytes() == single_map.tobytes(), name


def test_a_teacher_checkpoint_without_its_head_stops_the_run(tmp_path, capsys):
    """The teacher writes the training targets: a checkpoint that fills the backbone but not the head (the head
    would stay random, and so would every map) stops with one line naming the missing keys and the opt-out; with
    ``--allow-partial`` it annotates."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    data_root = str(tmp_path / 'digits')
    build_imagenet(data_root, num_train=4, num_val=2)
    config, model_cfg = write_config(tmp_path, data_root, 'cnn')
    init_default_scope('mmpretrain')
    state_dict = MMPRETRAIN_MODELS.build(model_cfg).state_dict()
    checkpoint = str(tmp_path / 'backbone_only.pth')
    torch.save(dict(state_dict={k: v for k, v in state_dict.items() if not k.startswith('head.')}), checkpoint)
    argv = [
        config,
        checkpoint,
        str(tmp_path / 'labels'),
        '--img-size',
        '64',
        '--batch-size',
        '4',
        '--num-workers',
        '0',
        '--topk',
        '3',
    ]
    tool = load_tool()
    with pytest.raises(SystemExit) as stop:
        tool.main(argv)
    message = str(stop.value.code)
    assert message.startswith('error: ') and 'head.fc.weight' in message and '--allow-partial' in message
    assert not (tmp_path / 'labels').exists()
    tool.main([*argv, '--allow-partial'])
    assert 'wrote 4 label maps' in capsys.readouterr().out


def test_existing_maps_are_skipped_only_once_they_read_as_valid(tmp_path, capsys):
    """A second run used to count every existing file as "already there": a truncated map, a pickled object array,
    a map of another teacher (class 99 of 10), one of another top-k, a FIFO (which would hang a plain read) and a
    dangling symlink under a map's name are now read by the training reader and written again (nothing is
    unpickled); the valid ones are kept untouched."""
    from mmengine.registry import init_default_scope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    data_root = str(tmp_path / 'digits')
    build_imagenet(data_root, num_train=10, num_val=2)
    config, model_cfg = write_config(tmp_path, data_root, 'cnn')
    init_default_scope('mmpretrain')
    torch.save(dict(state_dict=MMPRETRAIN_MODELS.build(model_cfg).state_dict()), tmp_path / 'teacher.pth')
    argv = [
        config,
        str(tmp_path / 'teacher.pth'),
        str(tmp_path / 'labels'),
        '--img-size',
        '64',
        '--batch-size',
        '4',
        '--num-workers',
        '0',
        '--topk',
        '3',
    ]
    tool = load_tool()
    tool.main(argv)
    maps = sorted((tmp_path / 'labels').rglob('*.npy'))
    maps[0].write_bytes(maps[0].read_bytes()[:100])
    np.save(maps[1], np.array([None, 'x'] * 12, dtype=object).reshape(2, 3, 2, 2), allow_pickle=True)
    np.save(maps[2], np.stack([np.ones((3, 2, 2)), np.full((3, 2, 2), 99.0)]).astype(np.float16))
    np.save(maps[3], np.stack([np.ones((5, 2, 2)), np.zeros((5, 2, 2))]).astype(np.float16))
    for path in maps[4:6]:
        path.unlink()
    os.mkfifo(maps[4])
    os.symlink(tmp_path / 'nowhere.npy', maps[5])
    kept = {p: p.read_bytes() for p in maps[6:]}
    capsys.readouterr()
    tool.main(argv)
    out = capsys.readouterr().out
    assert '6 existing label maps are not valid and are written again; the first: ' in out
    assert 'wrote 6 label maps' in out and '(4 valid ones were there and kept, 6 invalid ones rewritten)' in out
    assert {p: p.read_bytes() for p in maps[6:]} == kept
    for path in maps:
        assert path.is_file() and not path.is_symlink()
        assert load_label_map(str(path), num_classes=10).shape == (2, 3, 2, 2)
