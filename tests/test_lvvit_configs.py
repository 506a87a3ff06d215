"""Every config under configs/lvvit loads, names known components, and holds the paper's numbers."""

from pathlib import Path

import pytest
import torch
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmvitreg.models.backbones import LVViT
from mmvitreg.utils import check_plugin_types

DIR = Path(__file__).resolve().parents[1] / 'configs' / 'lvvit'
CONFIGS = sorted(DIR.glob('*.py'))
TEACHER = DIR / 'resnet18-cifar-w16_1xb64_digits-teacher.py'  # the digits chain's teacher, not an LV-ViT
IMAGENET_TEACHER = DIR / 'efficientnetv2-l_label-maps_in1k-576px.py'  # the label-map teacher for ImageNet
CLS = [p for p in CONFIGS if not p.name.startswith('upernet') and p not in (TEACHER, IMAGENET_TEACHER)]
SEG = [p for p in CONFIGS if p.name.startswith('upernet')]


def dims(arch):
    return arch['embed_dims'] if isinstance(arch, dict) else LVViT.arch_zoo[arch]['embed_dims']


@pytest.mark.parametrize('path', CLS + SEG, ids=lambda p: p.name)
def test_config_loads_with_known_components(path):
    cfg = Config.fromfile(str(path))
    check_plugin_types(cfg)
    backbone = cfg.model.backbone
    assert backbone.type == 'mmvitreg.LVViT'
    if path in CLS:
        assert cfg.model.type == 'mmvitreg.TokenClassifier' and backbone.out_type == 'raw'
        assert cfg.model.head.in_channels == dims(backbone.arch)
    else:
        d = dims(backbone.arch)
        if cfg.model.neck.type == 'MultiLevelNeck':
            assert cfg.model.neck.in_channels == [d] * 4 and cfg.model.decode_head.in_channels == [d] * 4
        else:  # the official side layers
            assert cfg.model.neck.in_channels == d and cfg.model.decode_head.in_channels == [d] * 3 + [2048]
        assert max(backbone.out_indices) == LVViT.arch_zoo[backbone.arch]['num_layers'] - 1


def test_recipe_numbers():
    """The official training command (paper Table 2 where they agree)."""
    s = Config.fromfile(f'{DIR}/lvvit-s_8xb128_tl_in1k.py')
    assert s.optim_wrapper.optimizer.lr == pytest.approx(1e-3 * 1024 / 640)  # lr = 1e-3 * batch / 640
    # official --epochs 300 --cooldown-epochs 10: cosine to 1e-5 at 300, 10 more epochs at 1e-5
    assert s.optim_wrapper.optimizer.weight_decay == 0.05 and s.train_cfg.max_epochs == 310
    assert s.param_scheduler[1].end == 300 and s.param_scheduler[1].eta_min == 1e-5
    # official --dense-weight 1.0, ReLabel class target, official label maps and smoothing
    assert s.train_dataloader.batch_size * 8 == 1024 and s.model.head.beta == 1.0
    assert (s.model.head.cls_target, s.model.head.label_smooth_form) == ('relabel', 'official')
    target = {t.type: t for t in s.train_pipeline}['mmvitreg.TokenLabelTarget']
    assert (target.reading, target.num_classes) == ('official', 1000)
    assert s.custom_hooks[0].update_buffers  # timm ModelEmaV2 averages buffers too
    assert s.param_scheduler[0].end == 5  # 5 warm-up epochs
    assert s.model.train_cfg.mix.type == 'mmvitreg.MixToken'
    steps = [t['type'] for t in s.train_pipeline]
    assert 'Mixup' not in steps and 'CutMix' not in steps and 'augments' not in s.model.train_cfg
    assert {t.type: t for t in s.train_pipeline}['RandomErasing'].erase_prob == 0.25
    assert {t.type: t for t in s.train_pipeline}['mmvitreg.TokenLabelTarget'].token_label_size == 14
    assert s.custom_hooks[0].momentum == pytest.approx(1 - 0.99992)
    assert [s.test_pipeline[1].scale, s.test_pipeline[2].crop_size] == [248, 224]  # crop_pct 0.9
    drop = {a: Config.fromfile(f'{DIR}/lvvit-{a}_8xb128_tl_in1k.py').model.backbone.drop_path_rate for a in 'tsml'}
    assert drop == dict(t=0.1, s=0.1, m=0.2, l=0.3)
    m = Config.fromfile(f'{DIR}/lvvit-m_8xb128_tl_in1k.py')
    assert [m.test_pipeline[1].scale, m.test_pipeline[2].crop_size] == [224, 224]  # crop_pct 1.0
    ft = Config.fromfile(f'{DIR}/lvvit-s_8xb64_tl_in1k-384px.py')
    assert ft.optim_wrapper.optimizer.lr == 5e-6 and ft.optim_wrapper.optimizer.weight_decay == 1e-8
    # main.py defaults for the rest: 300 + 10 epochs, 5 warm-up epochs from 1e-6, min lr = lr; no EMA
    assert ft.train_cfg.max_epochs == 310 and ft.custom_hooks == []
    assert [(p.type, p.end) for p in ft.param_scheduler] == [('LinearLR', 5)]
    assert ft.param_scheduler[0].start_factor * 5e-6 == pytest.approx(1e-6)
    assert {t.type: t for t in ft.train_pipeline}['mmvitreg.TokenLabelTarget'].token_label_size == 24
    seg = {a: Config.fromfile(f'{DIR}/upernet_lvvit-{a}_mln_8xb2-160k_ade20k-512x512.py') for a in 'sml'}
    assert {a: tuple(c.model.backbone.out_indices) for a, c in seg.items()} == dict(
        s=(6, 9, 12, 15), m=(10, 13, 16, 19), l=(14, 17, 20, 23)
    )
    assert {a: c.model.backbone.drop_path_rate for a, c in seg.items()} == dict(s=0.1, m=0.2, l=0.5)
    assert seg['s'].optim_wrapper.optimizer.lr == 6e-5 and seg['s'].train_cfg.max_iters == 160000
    assert seg['s'].model.test_cfg == dict(mode='slide', crop_size=(512, 512), stride=(341, 341))


def test_digits_models_build_and_run():
    from mmpretrain.registry import MODELS

    for name in ('lvvit-tiny_1xb64_tl_digits.py', 'lvvit-tiny_1xb64_digits.py', TEACHER.name):
        cfg = Config.fromfile(f'{DIR}/{name}')
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            model = MODELS.build(cfg.model).eval()
        assert model(torch.rand(2, 3, 32, 32)).shape == (2, 10)


def test_segmentor_builds():
    from mmseg.registry import MODELS

    cfg = Config.fromfile(f'{DIR}/upernet_lvvit-s_mln_8xb2-160k_ade20k-512x512.py')
    cfg.model.backbone.init_cfg = None
    for head in ('decode_head', 'auxiliary_head'):
        cfg.model[head].norm_cfg = dict(type='BN', requires_grad=True)
    with DefaultScope.overwrite_default_scope('mmseg'):
        model = MODELS.build(cfg.model).eval()
    with torch.no_grad():
        out = model(torch.rand(1, 3, 64, 64), mode='tensor')
    assert out.shape == (1, 150, 16, 16)


def test_imagenet_teacher_gives_official_size_maps():
    """The downloadable teacher (mmpretrain's EfficientNetV2-L) annotates 576 px views as 18 x 18 maps
    over 1000 classes, the official maps' size, through tools/generate_label_maps.py's annotator."""
    import sys

    sys.path.insert(0, str(DIR.parents[1] / 'tools'))
    from generate_label_maps import DenseAnnotator, build_classifier

    from mmvitreg.utils import load_config

    cfg = load_config(str(IMAGENET_TEACHER))
    assert cfg.train_dataloader.dataset.data_root == 'data/imagenet'
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        annotator = DenseAnnotator(build_classifier(cfg).to('meta'))  # built on the CPU (init reads values)
        maps = annotator(torch.empty(1, 3, 576, 576, device='meta'))
    assert maps.shape == (1, 18, 18, 1000)
