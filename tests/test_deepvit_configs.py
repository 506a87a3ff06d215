"""The DeepViT configs (configs/deepvit): every one loads, builds its model and runs it (shapes on the
meta device), carries the paper's §5.1 recipe with the official values where the paper is silent,
and agrees with metafile.yml."""

from pathlib import Path

import pytest
import torch
import yaml
from conftest import CONFIGS, REPO
from mmengine.config import Config
from mmengine.registry import DefaultScope

DEEPVIT = CONFIGS / 'deepvit'
RECIPE = DEEPVIT / 'deepvit_8xb32_in1k_recipe.py'
SEG = DEEPVIT / 'upernet_deepvit-s_mln_8xb2-160k_ade20k-512x512.py'
DIGITS = DEEPVIT / 'deepvit-tiny_1xb64_digits.py'  # the bundled-digits config (trained in the run-guarantee tests)
# config -> (backbone arch, embed dims, parameters with the 1000-class head (DeepViT docstring /
# official code, computed))
PRESETS = {
    'deepvit-16b_8xb32_in1k': ('16b', 384, 24.43e6),
    'deepvit-24b_8xb32_in1k': ('24b', 384, 36.26e6),
    'deepvit-32b_8xb32_in1k': ('32b', 384, 48.10e6),
    'vit-16b_8xb32_in1k': ('vit-16b', 384, 24.42e6),
    'vit-24b_8xb32_in1k': ('vit-24b', 384, 36.26e6),
    'vit-32b_8xb32_in1k': ('vit-32b', 384, 48.09e6),
    'deepvit-s_8xb32_in1k': ('s', 396, 27.31e6),
    'deepvit-l_8xb32_in1k': ('l', 420, 58.88e6),
    'deepvit-l-408_8xb32_in1k': ('l-408', 408, 55.64e6),
}


METAFILE = {m['Name']: m for m in yaml.safe_load((DEEPVIT / 'metafile.yml').read_text())['Models']}


def load(path):
    from mmvitreg.utils import load_config

    return load_config(str(path))


def build_model(cfg, scope):
    from mmengine.registry import MODELS

    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(model_cfg)


def unscoped(node):
    """A config node without the ``_scope_`` keys mmengine adds to what comes from another package."""
    if isinstance(node, dict):
        return {k: unscoped(v) for k, v in node.items() if k != '_scope_'}
    if isinstance(node, (list, tuple)):
        return [unscoped(v) for v in node]
    return node


def test_every_config_in_the_folder_is_a_known_preset_or_the_recipe_or_the_seg_or_digits_config():
    names = {p.stem for p in DEEPVIT.glob('*.py')}
    assert names == set(PRESETS) | {RECIPE.stem, SEG.stem, DIGITS.stem}


@pytest.mark.parametrize('name', sorted(PRESETS))
def test_preset_config_builds_and_classifies(name):
    arch, dims, params = PRESETS[name]
    cfg = load(DEEPVIT / f'{name}.py')
    assert cfg.model.backbone.arch == arch
    with torch.device('meta'):
        model = build_model(cfg, 'mmpretrain')
        logits = model(torch.empty(2, 3, 224, 224), mode='tensor')
    assert type(model.backbone).__name__ == 'DeepViT'
    assert model.backbone.embed_dims == dims == model.head.in_channels
    assert logits.shape == (2, 1000)
    num_params = sum(p.numel() for p in model.parameters())
    assert abs(num_params - params) < 0.005e6
    assert num_params == METAFILE[name]['Metadata']['Parameters']


def test_recipe_numbers_paper_first_then_official():
    cfg = load(DEEPVIT / 'deepvit-s_8xb32_in1k.py')
    # paper §5.1: batch 256 = 8 GPUs x 32, AdamW, initial lr 5e-4, cosine, 300 epochs; warm-up: the
    # official 5 epochs (paper: 3)
    assert cfg.train_dataloader.batch_size * 8 == 256 == cfg.auto_scale_lr.base_batch_size
    assert cfg.optim_wrapper.optimizer.type == 'AdamW' and cfg.optim_wrapper.optimizer.lr == 5e-4
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.begin, warmup.end) == ('LinearLR', 0, 5)
    assert (cosine.type, cosine.begin, cosine.end) == ('CosineAnnealingLR', 5, 300)
    assert cfg.train_cfg.max_epochs == 300
    # official YAML: wd 0.05, warmup_lr 1e-6, min_lr 1e-5, EMA 0.99996, drop_path 0.2, mean = std = 0.5
    assert cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert warmup.start_factor * 5e-4 == pytest.approx(1e-6) and cosine.eta_min == 1e-5
    assert cfg.custom_hooks == [
        dict(type='EMAHook', momentum=pytest.approx(1 - 0.99996), update_buffers=True, priority='ABOVE_NORMAL'),
        dict(type='mmvitreg.BNRecalibrationHook', num_batches=50, batch_size=256, restore_momentum=False),
    ]
    assert cfg.model.backbone.drop_path_rate == 0.2
    assert cfg.data_preprocessor.mean == cfg.data_preprocessor.std == [127.5] * 3
    # official: rand-m9-mstd0.5-inc1, reprob 0.25, mixup 0.8 / cutmix 1.0, smoothing 0.1, crop_pct 0.9
    steps = {t['type']: t for t in cfg.train_dataloader.dataset.pipeline}
    rand_aug = steps['RandAugment']
    assert (
        rand_aug.policies,
        rand_aug.num_policies,
        rand_aug.magnitude_level,
        rand_aug.total_level,
        rand_aug.magnitude_std,
    ) == ('timm_increasing', 2, 9, 10, 0.5)
    assert steps['RandomErasing'].erase_prob == 0.25
    assert cfg.model.train_cfg.augments == [dict(type='Mixup', alpha=0.8), dict(type='CutMix', alpha=1.0)]
    assert cfg.model.head.loss == dict(type='LabelSmoothLoss', label_smooth_val=0.1, mode='original')
    resize = [t for t in cfg.test_dataloader.dataset.pipeline if t['type'] == 'ResizeEdge'][0]
    assert resize.scale == int(224 / 0.9)


def test_weight_decay_follows_timm_rule():
    """timm's optimizer (official code): no decay on biases, 1-D parameters (norms, BatchNorms) and
    pos_embed / cls_token; decay on every weight matrix and the re-attention transform."""
    from mmengine.optim import build_optim_wrapper

    cfg = load(DEEPVIT / 'deepvit-s_8xb32_in1k.py')
    tiny = dict(
        embed_dims=24,
        num_layers=2,
        num_heads=2,
        feedforward_channels=48,
        attn_types=['msa', 'reattn'],
        stem=dict(channels=8, num_convs=2),
        scale_adjustment=0.5,
    )
    cfg.model.backbone.arch = tiny
    cfg.model.head.in_channels = 24
    model = build_model(cfg, 'mmpretrain')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        optim = build_optim_wrapper(model, cfg.optim_wrapper)
    decay = {}
    names = {id(p): n for n, p in model.named_parameters()}
    for group in optim.optimizer.param_groups:
        for p in group['params']:
            decay[names[id(p)]] = group['weight_decay']
    assert len(decay) == len(names)
    for name, wd in decay.items():
        no_decay = (
            name.endswith('.bias') or model.get_parameter(name).ndim <= 1 or name.endswith(('cls_token', 'pos_embed'))
        )
        assert wd == (0.0 if no_decay else 0.05), name
    assert decay['backbone.layers.1.attn.reatten_matrix.weight'] == 0.05


def test_segmentation_config_swaps_the_backbone_of_mmsegs_vit_upernet():
    cfg = load(SEG)
    import mmseg

    base = Config.fromfile(
        Path(mmseg.__file__).parent / '.mim' / 'configs' / 'vit' / 'vit_vit-b16_mln_upernet_8xb2-160k_ade20k-512x512.py'
    )
    # mmseg's recipe unchanged: AdamW 6e-5, warm-up + poly, 160k iterations, 2 images per GPU
    assert unscoped(cfg.optim_wrapper) == unscoped(base.optim_wrapper)
    assert unscoped(cfg.param_scheduler) == unscoped(base.param_scheduler)
    assert cfg.train_cfg.max_iters == 160000 and cfg.train_dataloader.batch_size == 2
    assert cfg.model.neck.type == 'MultiLevelNeck' and cfg.model.decode_head.type == 'UPerHead'
    backbone = cfg.model.backbone
    assert backbone.type == 'mmvitreg.DeepViT' and backbone.out_type == 'featmap'
    assert backbone.init_cfg.prefix == 'backbone.'
    assert cfg.model.data_preprocessor.mean == [127.5] * 3  # DeepViT's pre-training normalisation
    with torch.device('meta'):
        cfg.model.backbone.init_cfg = None
        model = build_model(cfg, 'mmseg')
        feats = model.backbone(torch.empty(1, 3, 512, 512))
    assert [tuple(f.shape) for f in feats] == [(1, 396, 32, 32)] * 4
    assert list(cfg.model.neck.in_channels) == list(cfg.model.decode_head.in_channels) == [396] * 4
    assert cfg.model.auxiliary_head.in_channels == 396


def test_metafile_lists_every_preset():
    collections = {c['Name'] for c in yaml.safe_load((DEEPVIT / 'metafile.yml').read_text())['Collections']}
    assert set(METAFILE) == set(PRESETS)
    for name, model in METAFILE.items():
        assert model['Config'] == f'configs/deepvit/{name}.py' and (REPO / model['Config']).is_file()
        assert model['In Collection'] in collections
        assert model['Results'][0]['Metrics']['Top 1 Accuracy'] > 78  # the paper's Table 4 / 6


def test_recipe_trains_and_tests_on_digits(digits_workspace, tmp_path):
    """The whole recipe (RandAugment, random erasing, Mixup/CutMix, label smoothing, AdamW with the
    timm decay rule, warm-up + cosine, EMA of weights and BatchNorm statistics) runs through
    tools/train.py and tools/test.py, with DeepViT-S shrunk to 32x32 digits."""
    from conftest import run_tool

    import mmvitreg  # noqa: F401  (mmpretrain:: bases)

    cfg = Config.fromfile(str(DEEPVIT / 'deepvit-s_8xb32_in1k.py'))
    digits = Config.fromfile(str(CONFIGS / '_base_' / 'datasets' / 'digits_imagenet.py'))
    cfg.model.backbone.update(
        arch=dict(
            embed_dims=24,
            num_layers=3,
            num_heads=2,
            feedforward_channels=72,
            attn_types=['msa', 'reattn', 'reattn'],
            stem=dict(channels=8, num_convs=2),
            attn_cfgs=dict(reattn=dict(transform_scale=True)),
            scale_adjustment=0.5,
        ),
        img_size=32,
    )
    cfg.model.head.update(num_classes=10, in_channels=24)
    cfg.data_preprocessor.num_classes = 10
    train_pipeline = cfg.train_dataloader.dataset.pipeline
    train_pipeline[1].scale = 32  # RandomResizedCrop
    test_pipeline = [dict(type='LoadImageFromFile'), dict(type='PackInputs')]
    for key, pipeline, size in (
        ('train_dataloader', train_pipeline, 16),
        ('val_dataloader', test_pipeline, 8),
        ('test_dataloader', test_pipeline, 8),
    ):
        cfg[key] = digits[key]
        cfg[key].update(batch_size=8, num_workers=0, persistent_workers=False)
        cfg[key].dataset.update(pipeline=pipeline, indices=size)
    cfg.train_cfg.max_epochs = 1
    cfg.param_scheduler[0].end = 1  # a 1-epoch warm-up, then (no) cosine
    cfg.dump(str(tmp_path / 'deepvit-s_tiny_digits.py'))

    work = tmp_path / 'work'
    proc = run_tool(['train.py', tmp_path / 'deepvit-s_tiny_digits.py', '--work-dir', work], cwd=digits_workspace)
    assert 'EMAHook' in proc.stdout + proc.stderr
    ckpt = (work / 'last_checkpoint').read_text().strip()
    checkpoint = torch.load(ckpt, map_location='cpu', weights_only=False)
    # the EMA model, re-attention BatchNorm statistics included (update_buffers=True)
    assert 'module.backbone.layers.2.attn.var_norm.running_var' in checkpoint['ema_state_dict']
    assert 'backbone.layers.2.attn.var_norm.running_var' in checkpoint['state_dict']
    proc = run_tool(['test.py', tmp_path / 'deepvit-s_tiny_digits.py', ckpt, '--work-dir', work], cwd=digits_workspace)
    assert 'accuracy/top1' in proc.stdout
