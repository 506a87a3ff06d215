"""The TL-Align configs (configs/tlalign): each inherits its library's baseline, builds in its scope with
TL-Align over every block of its backbone, and carries the numbers of the run behind the paper's figure."""

import pytest
import torch
import yaml
from conftest import CONFIGS
from test_deepvit_configs import build_model as build

TLALIGN = CONFIGS / 'tlalign'
# ImageNet config -> (backbone type, arch, blocks, head channels, the paper's Table 1 top-1 with TL-Align)
IMAGENET = {
    'deit-tiny_8xb128_cutmix-tlalign_in1k': ('VisionTransformer', 'deit-tiny', 12, 192, 73.2),
    'deit-small_8xb128_cutmix-tlalign_in1k': ('VisionTransformer', 'deit-small', 12, 384, 80.6),
    'deit-base_8xb128_cutmix-tlalign-ft40e_in1k': ('VisionTransformer', 'deit-base', 12, 768, 82.3),
    'swin-tiny_16xb64_cutmix-tlalign_in1k': ('SwinTransformer', 'tiny', 12, 768, 81.4),
    'swin-small_16xb64_cutmix-tlalign_in1k': ('SwinTransformer', 'small', 24, 768, 83.4),
    'swin-base_16xb64_cutmix-tlalign-ft40e_in1k': ('SwinTransformer', 'base', 24, 1024, 83.7),
}
# ADE20K config -> (embed dims of the 4 maps, the ImageNet config whose backbone it starts from)
UPERNET = {
    'upernet_deit-s-tlalign_mln_8xb2-160k_ade20k-512x512': ([384] * 4, 'deit-small_8xb128_cutmix-tlalign_in1k'),
    'upernet_swin-t-tlalign_8xb2-160k_ade20k-512x512': ([96, 192, 384, 768], 'swin-tiny_16xb64_cutmix-tlalign_in1k'),
    'upernet_swin-s-tlalign_8xb2-160k_ade20k-512x512': ([96, 192, 384, 768], 'swin-small_16xb64_cutmix-tlalign_in1k'),
    'upernet_swin-b-tlalign_8xb2-160k_ade20k-512x512': (
        [128, 256, 512, 1024],
        'swin-base_16xb64_cutmix-tlalign-ft40e_in1k',
    ),
}
CASCADE = {
    f'cascade-mask-rcnn_swin-{s}-tlalign-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco': (arch, dims, dp, src)
    for s, arch, dims, dp, src in (
        ('t', 'tiny', [96, 192, 384, 768], 0.2, 'swin-tiny_16xb64_cutmix-tlalign_in1k'),
        ('s', 'small', [96, 192, 384, 768], 0.2, 'swin-small_16xb64_cutmix-tlalign_in1k'),
        ('b', 'base', [128, 256, 512, 1024], 0.3, 'swin-base_16xb64_cutmix-tlalign-ft40e_in1k'),
    )
}
OTHERS = {
    'deit_8xb128_cutmix-tlalign_in1k_recipe',
    'deit-tiny_1xb64_cutmix-tlalign_digits',
    'swin-nano_1xb64_cutmix-tlalign_digits',
}
METAFILE = {m['Name']: m for m in yaml.safe_load((TLALIGN / 'metafile.yml').read_text())['Models']}


def load(name):
    from mmvitreg.utils import load_config

    return load_config(str(TLALIGN / f'{name}.py'))


def device_of(cfg):
    """Plain ViTs build and run on the meta device (shapes only); a Swin reads its drop-path rates with
    ``.item()`` while it is built, so it runs on the CPU."""
    return torch.device('meta' if 'Swin' not in cfg.model.backbone.type else 'cpu')


def test_the_folder_holds_exactly_the_listed_configs_and_each_paper_config_is_in_the_metafile():
    names = {p.stem for p in TLALIGN.glob('*.py')}
    assert names == set(IMAGENET) | set(UPERNET) | set(CASCADE) | OTHERS
    assert set(METAFILE) == set(IMAGENET) | set(UPERNET) | set(CASCADE)
    for name in METAFILE:
        assert METAFILE[name]['Config'] == f'configs/tlalign/{name}.py'


@pytest.mark.parametrize('name', sorted(IMAGENET))
def test_imagenet_config_builds_a_tl_align_classifier_over_every_block(name):
    backbone_type, arch, blocks, dims, top1 = IMAGENET[name]
    cfg = load(name)
    assert cfg.model.backbone.arch == arch
    assert dict(cfg.model.target_transform) == dict(type='mmvitreg.TLAlign')  # the depth comes from the trace
    with device_of(cfg), torch.no_grad():
        model = build(cfg, 'mmpretrain').eval()  # the classifier checks TLAlign's blocks against the backbone
        logits = model(torch.zeros(2, 3, 224, 224), mode='tensor')
    assert type(model.backbone).__name__ == backbone_type and type(model.backbone).__module__.startswith('mmvitreg')
    assert model.backbone.trace_spec.num_blocks == blocks and logits.shape == (2, 1000)
    assert model.head.fc.in_features == dims if hasattr(model.head, 'fc') else model.head.in_channels == dims
    assert METAFILE[name]['Results'][0]['Metrics']['Top 1 Accuracy'] == top1


def test_deit_recipe_is_the_official_script():
    """train_deit_small_tla.sh + main_tla.py: 8 x 128 with repeated augmentation x3 and drop_last, lr 1e-3
    (5e-4 x 1024/512), timm's per-epoch LR (5 warm-up epochs, cosine to 1e-5; the curve itself:
    test_recipes_official.py), 300 epochs, drop path 0.1, CutMix only on the token grid, no clipping, AMP, the
    head trunc-normal 0.02."""
    cfg = load('deit-small_8xb128_cutmix-tlalign_in1k')
    assert cfg.train_dataloader.batch_size == 128 and cfg.train_dataloader.sampler.type == 'RepeatAugSampler'
    assert cfg.train_dataloader.sampler.num_repeats == 3 and cfg.train_dataloader.drop_last
    assert cfg.optim_wrapper.optimizer.lr == 1e-3 and cfg.optim_wrapper.optimizer.weight_decay == 0.05
    assert cfg.optim_wrapper.type == 'AmpOptimWrapper' and cfg.optim_wrapper.clip_grad is None
    assert [(s.type, s.warmup, s.eta_min, s.by_epoch) for s in cfg.param_scheduler] == [
        ('mmvitreg.TimmCosineLR', 5, 1e-5, True)
    ]
    assert dict(cfg.model.head.init_cfg) == dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0)
    assert cfg.train_cfg.max_epochs == 300 and cfg.model.backbone.drop_path_rate == 0.1
    assert dict(cfg.model.train_cfg.mix) == dict(type='mmvitreg.PatchCutMix', alpha=1.0, patch_size=16)
    assert cfg.model.head.loss.label_smooth_val == 0.1 and not cfg.get('custom_hooks')  # no EMA


def test_swin_recipe_keeps_mixup_cutmix_and_fine_tunes_are_40_epochs_at_constant_1e_5():
    """Swin from scratch: the Swin recipe's MixUp/CutMix switch with TL-Align targets; DeiT-B / Swin-B: the official
    pre-trained weights fine-tuned 40 epochs, constant lr 1e-5, wd 1e-8 (paper Sec. 4.1)."""
    swin = load('swin-tiny_16xb64_cutmix-tlalign_in1k')
    mix = swin.model.train_cfg.mix
    assert mix.type == 'mmvitreg.MixupCutMixSwitch' and (mix.mixup_alpha, mix.cutmix_alpha, mix.switch_prob) == (
        0.8,
        1.0,
        0.5,
    )
    assert mix.patch_size == 4 and mix.box_on == 'pixels' and swin.optim_wrapper.clip_grad.max_norm == 5.0
    for name in ('deit-base_8xb128_cutmix-tlalign-ft40e_in1k', 'swin-base_16xb64_cutmix-tlalign-ft40e_in1k'):
        cfg = load(name)
        assert cfg.load_from.startswith('https://download.openmmlab.com/mmclassification/')
        assert cfg.optim_wrapper.optimizer.lr == 1e-5 and cfg.optim_wrapper.optimizer.weight_decay == 1e-8
        assert [(s.type, s.factor) for s in cfg.param_scheduler] == [('ConstantLR', 1.0)]
        assert cfg.train_cfg.max_epochs == 40 and not cfg.get('custom_hooks')


@pytest.mark.parametrize('name', sorted(UPERNET))
def test_upernet_config_builds_on_the_tl_align_backbone_with_ms_flip_tta(name):
    dims, source = UPERNET[name]
    cfg = load(name)
    assert cfg.model.backbone.init_cfg.checkpoint == f'pretrain/{source}.pth'
    assert cfg.model.backbone.init_cfg.prefix == 'backbone.'
    assert cfg.train_cfg.max_iters == 160000 and cfg.optim_wrapper.optimizer.lr == 6e-5
    assert [t.scale_factor for t in cfg.tta_pipeline[1].transforms[0]] == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    assert [t.prob for t in cfg.tta_pipeline[1].transforms[1]] == [0.0, 1.0]  # and flip
    cfg.model.backbone.init_cfg = None
    with device_of(cfg), torch.no_grad():
        model = build(cfg, 'mmseg').eval()
        feats = model.extract_feat(torch.zeros(1, 3, 64, 64))
    assert type(model.backbone).__module__.startswith('mmvitreg')
    assert [f.shape[1] for f in feats] == (
        list(cfg.model.neck.out_channels for _ in range(4)) if cfg.model.get('neck') else dims
    )
    assert list(cfg.model.decode_head.in_channels) == (dims if not cfg.model.get('neck') else [384] * 4)


@pytest.mark.parametrize('name', sorted(CASCADE))
def test_cascade_config_builds_on_the_tl_align_swin(name):
    arch, dims, drop_path, source = CASCADE[name]
    cfg = load(name)
    assert cfg.model.backbone.arch == arch and cfg.model.backbone.drop_path_rate == drop_path
    assert cfg.model.backbone.init_cfg.checkpoint == f'pretrain/{source}.pth'
    assert cfg.train_cfg.max_epochs == 36 and cfg.optim_wrapper.type == 'AmpOptimWrapper'
    cfg.model.backbone.init_cfg = None
    with device_of(cfg), torch.no_grad():
        model = build(cfg, 'mmdet').eval()
        feats = model.backbone(torch.zeros(1, 3, 64, 64))
    assert type(model).__name__ == 'CascadeRCNN' and type(model.backbone).__module__.startswith('mmvitreg')
    assert [f.shape[1] for f in feats] == dims == list(cfg.model.neck.in_channels)
