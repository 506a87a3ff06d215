"""The DiversePatch configs (configs/diversepatch): every one loads and builds its model in its library's scope
(shapes on the meta device), carries the paper's numbers (§5.1 ImageNet, Table 2 fine-tuning, §5.2
segmentation recipe), agrees with metafile.yml, and the digits config trains through tools/train.py."""

import json

import pytest
import torch
import yaml
from conftest import CONFIGS
from guard_helpers import build_workspace, logged_losses, train
from mmengine.config import Config
from mmengine.registry import DefaultScope
from test_dense_configs import DENSE
from test_dense_configs import DIGITS as DENSE_DIGITS

DP = CONFIGS / 'diversepatch'
DIGITS = DP / 'deit-deep-narrow_1xb64_diversepatch_digits.py'
RECIPE = DP / 'deit_4xb256_diversepatch_in1k_recipe.py'
# config -> (paper top-1 or mIoU it cites, (blocks, channels) or Swin arch, losses)
DEIT = {
    'deit-small12_4xb256-400e_diversepatch_in1k': (12, 384),
    'deit-small24_4xb256-400e_diversepatch_in1k': (24, 384),
    'deit-base12_4xb256-400e_diversepatch_in1k': (12, 768),
    'deit-base24_4xb256-400e_diversepatch_in1k': (24, 768),
    'deit-base12-talking-heads_4xb256-400e_diversepatch_in1k': (12, 768),
    'deit-base24-talking-heads_4xb256-400e_diversepatch_in1k': (24, 768),
}
FINETUNE = {
    'swin-base_8xb128-30e_diversepatch_in1k': (224, 1024),
    'swin-base_8xb128-30e_diversepatch_in1k-384px': (384, 1024),
    'swin-large_8xb128-30e_diversepatch_in21k-pre_in1k-384px': (384, 1536),
    'vit-large-p16_8xb128-30e_diversepatch_in21k-pre_in1k': (224, 1024),
    'vit-large-p16_8xb128-30e_diversepatch_in21k-pre_in1k-384px': (384, 1024),
}
SEG = {
    'upernet_swin-base_8xb2-160k_diversepatch_ade20k-512x512': (128, 512, 160000, 150),
    'upernet_swin-large_8xb2-160k_diversepatch_ade20k-512x512': (192, 512, 160000, 150),
    'upernet_swin-base_8xb2-80k_diversepatch_cityscapes-769x769': (128, 769, 80000, 19),
    'upernet_swin-large_8xb2-80k_diversepatch_cityscapes-769x769': (192, 769, 80000, 19),
}
METAFILE = {m['Name']: m for m in yaml.safe_load((DP / 'metafile.yml').read_text())['Models']}


def load(name):
    from mmvitreg.utils import load_config

    return load_config(str(DP / f'{name}.py'))


def build_model(cfg, scope):
    """The config's model: ViTs on the meta device; Swins (whose constructor reads tensor values) on the CPU
    with one block per stage, the arch's channels and heads kept."""
    from mmengine.registry import MODELS
    from mmpretrain.models import SwinTransformer

    model_cfg = cfg.model.copy()
    model_cfg.setdefault('data_preprocessor', cfg.get('data_preprocessor'))
    backbone = model_cfg.backbone
    swin = backbone.type == 'mmvitreg.SwinTransformer'
    if swin:
        backbone.arch = dict(SwinTransformer.arch_zoo[backbone.arch], depths=[1, 1, 1, 1])
        backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope(scope), torch.device('cpu' if swin else 'meta'):
        return MODELS.build(model_cfg)


def loss_types(cfg):
    return [a['type'] for a in cfg.model.aux_losses]


def test_the_folder_holds_the_known_configs_and_the_metafile_lists_them():
    names = {p.stem for p in DP.glob('*.py')}
    # the cosine / contrastive losses in segmentation training (beyond the paper, no paper number, no metafile
    # entry): tests/test_dense_configs.py
    dense = {n.split('/')[1] for n in [*DENSE, *DENSE_DIGITS] if n.startswith('diversepatch/')}
    assert names == set(DEIT) | set(FINETUNE) | set(SEG) | {RECIPE.stem, DIGITS.stem} | dense
    assert set(METAFILE) == set(DEIT) | set(FINETUNE) | set(SEG)
    for name, entry in METAFILE.items():
        assert entry['Config'] == f'configs/diversepatch/{name}.py'


@pytest.mark.parametrize('name', sorted(DEIT))
def test_deit_configs_are_the_400_epoch_recipe_without_mixup(name):
    """Paper §5.1: 400 epochs, stochastic depth 0.5, MixUp and repeated augmentation removed (CutMix on the
    token grid), the three losses with alpha = 1; it builds and a training forward runs on the meta device."""
    cfg = load(name)
    blocks, dims = DEIT[name]
    assert cfg.train_cfg.max_epochs == 400 and cfg.model.backbone.drop_path_rate == 0.5
    assert cfg.model.train_cfg == dict(mix=dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16))
    assert cfg.train_dataloader.sampler.type == 'DefaultSampler' and cfg.train_dataloader.batch_size == 256
    assert loss_types(cfg) == ['mmvitreg.PatchCosineLoss', 'mmvitreg.PatchContrastiveLoss', 'mmvitreg.PatchMixingLoss']
    assert all(a['loss_weight'] == 1.0 for a in cfg.model.aux_losses)
    model = build_model(cfg, 'mmpretrain')
    assert len(model.backbone.layers) == blocks and model.backbone.embed_dims == dims
    assert model.aux_losses[2].patch_head.in_features == dims
    talking = 'talking-heads' in name
    assert hasattr(model.backbone.layers[0].attn, 'proj_pre') == talking


@pytest.mark.parametrize('name', sorted(FINETUNE))
def test_finetune_configs_are_30_epochs_at_constant_1e5(name):
    """Paper §5.1 / Table 2: 30 epochs, batch 1024 (128 x 8), constant lr 1e-5, wd 1e-8; Swin: no contrastive loss."""
    cfg = load(name)
    size, dims = FINETUNE[name]
    assert cfg.train_cfg.max_epochs == 30 and cfg.train_dataloader.batch_size == 128
    assert cfg.optim_wrapper.optimizer.lr == 1e-5 and cfg.optim_wrapper.optimizer.weight_decay == 1e-8
    assert [s['type'] for s in cfg.param_scheduler] == ['ConstantLR'] and cfg.load_from.startswith('https://')
    swin = name.startswith('swin')
    assert ('mmvitreg.PatchContrastiveLoss' in loss_types(cfg)) == (not swin)
    assert cfg.model.backbone.img_size == size
    model = build_model(cfg, 'mmpretrain')
    assert model.aux_losses[-1].patch_head.in_features == dims
    assert cfg.train_dataloader.dataset.pipeline[1].scale == size


@pytest.mark.parametrize('name', sorted(SEG))
def test_seg_configs_carry_the_paper_recipe(name):
    """Paper §5.2: AdamW 6e-5, wd 0.01, 1500 warm-up iterations then cosine, 160k / 80k iterations, 512 / 769
    crops, drop path 0.3 then 0.5 for the last 20 % (the hook), TTA at {0.5 ... 1.75} + flip; it builds in mmseg."""
    cfg = load(name)
    dims, crop, iters, classes = SEG[name]
    assert cfg.optim_wrapper.optimizer.lr == 6e-5 and cfg.optim_wrapper.optimizer.weight_decay == 0.01
    warmup, cosine = cfg.param_scheduler
    assert (warmup.type, warmup.end, cosine.type, cosine.begin, cosine.end) == (
        'LinearLR',
        1500,
        'CosineAnnealingLR',
        1500,
        iters,
    )
    assert cfg.train_cfg.max_iters == iters and tuple(cfg.model.data_preprocessor.size) == (crop, crop)
    assert cfg.custom_hooks == [dict(type='mmvitreg.DropPathScheduleHook', schedule=[(0.0, 0.3), (0.8, 0.5)])]
    assert cfg.model.backbone.drop_path_rate == 0.3
    assert [t.scale_factor for t in cfg.tta_pipeline[1].transforms[0]] == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    model = build_model(cfg, 'mmseg')
    assert model.backbone.embed_dims == dims and model.decode_head.conv_seg.out_channels == classes


def test_digits_config_trains_with_the_three_losses_through_train_py(tmp_path):
    """The deep, narrow DeiT (12 blocks x 64 channels) trains an epoch through tools/train.py (in process) with
    all three losses logged every step, validates, and saves the patch head with the model."""
    ws = build_workspace(tmp_path)
    work = tmp_path / 'dp'
    train(DIGITS, ws, work, **{'train_cfg.max_epochs': 1, 'train_cfg.val_interval': 1})
    steps = logged_losses(work)
    assert steps and all({'loss_patch_cos', 'loss_patch_contrastive', 'loss_patch_mixing'} <= set(s) for s in steps)
    built = Config.fromfile(str(next(work.glob('*/vis_data/config.py'))))
    assert built.model.backbone.arch.num_layers == 12 and built.model.backbone.arch.embed_dims == 64
    assert (
        'aux_losses.2.patch_head.weight'
        in torch.load(work / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    )
    logged = [json.loads(ln) for ln in next(work.glob('*/vis_data/scalars.json')).read_text().splitlines()]
    assert any('accuracy/top1' in entry for entry in logged)
