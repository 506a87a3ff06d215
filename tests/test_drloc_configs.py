"""The DRLoc recipe configs (configs/drloc): every one loads, names the backbone / data set / schedule of
the paper row it cites, carries the official numbers (yhlleo/VTs-Drloc config.py, main.py, train.sh), builds
its model in mmpretrain's scope (one per backbone) and has a metafile entry."""

import re

import pytest
import yaml
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.registry import DefaultScope

DRLOC = CONFIGS / 'drloc'
RECIPES = sorted(p for p in DRLOC.glob('*_8xb128-*.py'))
NUM_CLASSES = {
    'cifar10': 10,
    'cifar100': 100,
    'svhn': 10,
    'flowers102': 102,
    'imagenet100': 100,
    **{f'domainnet-{d}': 345 for d in ('clipart', 'infograph', 'painting', 'quickdraw', 'real', 'sketch')},
}
# backbone -> (type, DRLoc λ, DRLoc in_channels, grid pooling) of the official code
BACKBONES = {
    'swin-t': ('mmvitreg.SwinTransformer', 0.5, 768, None),
    't2t-vit-14': ('T2T_ViT', 0.1, 384, 'avg3x3'),
    'cvt-13': ('mmvitreg.CvT', 0.1, 384, 'avg3x3'),
    'resnet50': ('ResNet', 0.5, 2048, None),
}
NAME = re.compile(r'(?P<backbone>[a-z0-9-]+?)(?P<pre>_in1k-pre)?_drloc_8xb128-(?P<epochs>\d+)e_(?P<data>[a-z0-9-]+)')


def test_recipes_cover_tables_3_4_and_5():
    names = [NAME.fullmatch(p.stem).groupdict() for p in RECIPES]
    scratch = {(n['backbone'], n['data']) for n in names if not n['pre'] and n['epochs'] == '100'}
    # Table 4 + Table 3 (100 epochs; no ResNet row)
    assert scratch == {(b, d) for b in BACKBONES for d in NUM_CLASSES} - {('resnet50', 'imagenet100')}
    assert {n['backbone'] for n in names if n['epochs'] == '300'} == {'swin-t', 't2t-vit-14', 'cvt-13'}  # Table 3
    finetune = {(n['backbone'], n['data']) for n in names if n['pre']}
    assert finetune == {(b, d) for b in ('swin-t', 't2t-vit-14', 'resnet50') for d in NUM_CLASSES if d != 'imagenet100'}


@pytest.mark.parametrize('path', RECIPES, ids=lambda p: p.stem)
def test_recipe_numbers(path):
    """224 crops, 8 x 128 with drop_last, AdamW 1e-3 / wd 0.05 / clip 5, 20 warm-up epochs, cosine and λ laid out
    for 300 epochs, 101 epochs run (300 for the Table 3 column), the official DRLoc loss form, m = 64."""
    name = NAME.fullmatch(path.stem).groupdict()
    cfg = Config.fromfile(str(path))
    kind, lam, channels, pool = BACKBONES[name['backbone']]
    assert cfg.model.backbone.type == kind and cfg.model.head.num_classes == NUM_CLASSES[name['data']]
    assert cfg.data_preprocessor.num_classes == NUM_CLASSES[name['data']]
    (drloc,) = cfg.model.aux_losses
    assert (drloc.loss_weight, drloc.in_channels, drloc.get('grid_pool')) == (lam, channels, pool)
    assert (drloc.num_pairs, drloc.target, drloc.reduction, drloc.replacement) == (64, 'abs', 'mean', True)
    assert cfg.train_dataloader.batch_size == 128 and cfg.train_dataloader.drop_last
    assert cfg.optim_wrapper.optimizer.lr == 1e-3 and cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert cfg.optim_wrapper.clip_grad.max_norm == 5.0
    (lr,) = cfg.param_scheduler  # timm's curve (compared epoch by epoch in test_recipes_official.py)
    assert (lr.type, lr.warmup, lr.warmup_lr_init, lr.T_max, lr.eta_min) == (
        'mmvitreg.TimmCosineLR',
        20,
        1e-6,
        300,
        1e-5,
    )
    assert cfg.train_cfg.max_epochs == (300 if name['epochs'] == '300' else 101)
    assert cfg.custom_hooks == [dict(type='mmvitreg.DRLocWeightScheduleHook', warmup_epochs=20, total_epochs=300)]
    crop = [t for t in cfg.train_dataloader.dataset.pipeline if t.type == 'RandomResizedCrop']
    assert crop[0].scale == 224
    pretrained = cfg.model.backbone.get('init_cfg')
    assert bool(name['pre']) == (isinstance(pretrained, dict) and pretrained.get('type') == 'Pretrained')


@pytest.mark.parametrize('backbone', BACKBONES)
def test_model_builds_in_mmpretrain_scope(backbone):
    from mmpretrain.registry import MODELS

    import mmvitreg  # noqa: F401

    cfg = Config.fromfile(str(DRLOC / f'{backbone}_drloc_8xb128-100e_cifar100.py'))
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg.model)
    assert type(model).__name__ == 'TokenClassifier' and model.head.num_classes == 100
    assert model.aux_losses[0].heads[0].trunk[0].in_features == 2 * BACKBONES[backbone][2]


def test_metafile_lists_every_recipe_with_its_paper_number():
    models = {m['Name']: m for m in yaml.safe_load((DRLOC / 'metafile.yml').read_text())['Models']}
    assert set(models) == {p.stem for p in RECIPES}
    for name, model in models.items():
        assert model['Config'] == f'configs/drloc/{name}.py'
        (result,) = model['Results']
        assert 0 < result['Metrics']['Top 1 Accuracy'] < 100
    assert models['swin-t_drloc_8xb128-100e_cifar100']['Results'][0]['Metrics']['Top 1 Accuracy'] == 66.23
