"""The token losses' segmentation and detection configs (issue 24 item 3; configs/drloc, configs/diversepatch):
every one loads, its model is ours (mmvitreg.TokenSegmentor / mmvitreg.TokenCascadeRCNN) with the auxiliary
losses configs/*/README.md documents, everything else is the library's baseline it inherits (optimizer, schedule,
crop, data), and it builds its model in its library's scope (Swins with one block per stage on the CPU, ViTs on the
meta device); a training step of each segmentation config returns the library's losses and the token losses."""

import copy

import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.hub import get_config
from mmengine.registry import DefaultScope

DRLOC = dict(
    type='mmvitreg.DRLoc',
    in_channels=768,
    layers=(-1,),
    num_pairs=64,
    loss_weight=0.5,
    target='abs',
    reduction='mean',
    replacement=True,
    init_cfg=dict(type='TruncNormal', layer='Linear', std=0.02, bias=0.0),
)
COS = dict(type='mmvitreg.PatchCosineLoss', loss_weight=1.0)
CONTRASTIVE = dict(type='mmvitreg.PatchContrastiveLoss', loss_weight=1.0, form='paper')
SWIN_ADE = CONFIGS / 'swin' / 'upernet_swin-t_8xb2-160k_ade20k-512x512.py'
SWIN_CASCADE = CONFIGS / 'swin' / 'cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'
# config -> (its model type, its aux_losses, the config it is with the type and the losses taken out)
DENSE = {
    'drloc/upernet_swin-t_drloc_8xb2-160k_ade20k-512x512': ('mmvitreg.TokenSegmentor', [DRLOC], SWIN_ADE),
    'drloc/upernet_swin-t_drloc_8xb2-160k_ade20k-1of8-512x512': ('mmvitreg.TokenSegmentor', [DRLOC], None),
    'drloc/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_drloc_8xb2-3x_coco': (
        'mmvitreg.TokenCascadeRCNN',
        [DRLOC],
        SWIN_CASCADE,
    ),
    'drloc/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp_drloc_8xb2-1x_coco': (
        'mmvitreg.TokenCascadeRCNN',
        [DRLOC],
        None,
    ),
    'diversepatch/upernet_swin-t_patch-cos_8xb2-160k_ade20k-512x512': ('mmvitreg.TokenSegmentor', [COS], SWIN_ADE),
    'diversepatch/upernet_swin-t_patch-cos_8xb2-80k_cityscapes-769x769': ('mmvitreg.TokenSegmentor', [COS], None),
    'diversepatch/upernet_deit-s_mln_patch-contrastive-cos_8xb2-160k_ade20k-512x512': (
        'mmvitreg.TokenSegmentor',
        [CONTRASTIVE, COS],
        None,
    ),
}
LIBRARY_TYPE = {'mmvitreg.TokenSegmentor': 'EncoderDecoder', 'mmvitreg.TokenCascadeRCNN': 'CascadeRCNN'}
# the small digits configs of the "Beyond the papers" study of docs/claims.md: the digits UperNet with the same losses
DIGITS = {
    'drloc/upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128': [dict(DRLOC, in_channels=256)],
    'diversepatch/upernet_swin-nano_patch-cos_1xb8-2k_digits-ade20k-128x128': [COS],
}
DIGITS_UPERNET = CONFIGS / 'swin' / 'upernet_swin-nano_1xb8-2k_digits-ade20k-128x128.py'
# the keys of a schedule: the CPU demos of configs/demo change these alone
SCHEDULE = ('max_iters', 'train_cfg', 'param_scheduler', 'default_hooks')


def load(name):
    from mmvitreg.utils import load_config

    return load_config(str(CONFIGS / f'{name}.py'))


def unscoped(node):
    """A config (dict) without the ``_scope_`` keys mmengine adds to what a child inherits from another package."""
    if isinstance(node, dict):
        return {k: unscoped(v) for k, v in node.items() if k != '_scope_'}
    if isinstance(node, (list, tuple)):
        return type(node)(unscoped(v) for v in node)
    return node


def without_losses(cfg):
    """The config as a dict with the library's model type and no ``aux_losses``."""
    plain = unscoped(copy.deepcopy(cfg.to_dict()))
    plain['model']['type'] = LIBRARY_TYPE[plain['model']['type']]
    del plain['model']['aux_losses']
    return plain


def bounded(hooks: dict) -> dict:
    """A library's ``default_hooks`` with the checkpoint bound of our long segmentation runs (the last 3 and the best
    mIoU; tests/test_recipes_official.py checks every long config has one)."""
    return dict(hooks, checkpoint=dict(hooks['checkpoint'], max_keep_ckpts=3, save_best='mIoU'))


def library(path):
    """A library's config (``mmseg::...``) or one of ours, as a dict."""
    import mmvitreg  # noqa: F401  (mmvitreg.compat: the libraries' configs load)

    return unscoped((get_config(path) if '::' in str(path) else Config.fromfile(str(path))).to_dict())


def build_model(cfg):
    """The config's model in its library's scope: Swins on the CPU with one block per stage (their constructor
    reads tensor values), the arch's widths and heads kept; ViTs on the meta device."""
    from mmengine.registry import MODELS
    from mmpretrain.models import SwinTransformer

    model_cfg = copy.deepcopy(cfg.model)
    backbone = model_cfg.backbone
    swin = backbone.type == 'mmvitreg.SwinTransformer'
    if swin:
        backbone.arch = dict(SwinTransformer.arch_zoo[backbone.arch], depths=[1, 1, 1, 1])
    backbone.init_cfg = None
    with DefaultScope.overwrite_default_scope(cfg.default_scope), torch.device('cpu' if swin else 'meta'):
        return MODELS.build(model_cfg)


@pytest.mark.parametrize('name', sorted(DENSE))
def test_config_is_ours_with_the_documented_losses_and_builds(name):
    model_type, losses, _ = DENSE[name]
    cfg = load(name)
    assert cfg.model.type == model_type and cfg.model.aux_losses == losses
    assert cfg.train_dataloader.batch_size == 2 and '8xb2' in name  # 8 GPUs x 2 images, as the name says
    model = build_model(cfg)
    assert type(model).__name__ == model_type.split('.')[1]
    assert [f'mmvitreg.{type(u).__name__}' for u in model.aux_losses] == [u['type'] for u in losses]
    assert type(model.backbone).__module__.startswith('mmvitreg')
    for user in model.aux_losses:
        if type(user).__name__ == 'DRLoc':
            assert user.heads[0].trunk[0].in_features == 2 * 768 and user.reduction == 'mean'


@pytest.mark.parametrize('name', sorted(n for n, (_, _, base) in DENSE.items() if base is not None))
def test_config_is_its_base_plus_the_model_type_and_losses(name):
    """Nothing but ``model.type`` and ``model.aux_losses`` differs from the inherited config (mmseg's Swin-T
    UperNet recipe, the Swin paper's Cascade Mask R-CNN recipe of configs/swin)."""
    assert without_losses(load(name)) == library(DENSE[name][2])


def test_one_eighth_split_is_every_8th_training_image_of_the_full_config():
    full = load('drloc/upernet_swin-t_drloc_8xb2-160k_ade20k-512x512')
    split = load('drloc/upernet_swin-t_drloc_8xb2-160k_ade20k-1of8-512x512')
    indices = split.train_dataloader.dataset.pop('indices')
    assert indices == list(range(0, 20210, 8)) and len(indices) == 2527
    assert 'indices' not in split.val_dataloader.dataset and split.train_cfg.max_iters == 160000
    assert unscoped(split.to_dict()) == unscoped(full.to_dict()) | {'num_train_images': 20210}


def test_cascade_1x_is_the_3x_config_on_mmdets_swin_1x_schedule_and_data():
    cascade = 'drloc/cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp{}_drloc_8xb2-{}_coco'
    one = unscoped(load(cascade.format('', '1x')).to_dict())
    three = unscoped(load(cascade.format('-ms-crop', '3x')).to_dict())
    swin_1x = library('mmdet::swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py')
    assert one['param_scheduler'] == swin_1x['param_scheduler'] and one['train_cfg'] == swin_1x['train_cfg']
    assert one['train_dataloader']['dataset']['pipeline'] == swin_1x['train_dataloader']['dataset']['pipeline']
    assert one['optim_wrapper'] == three['optim_wrapper'] and one['optim_wrapper']['type'] == 'AmpOptimWrapper'
    assert one['model'] == three['model'] and one['test_dataloader'] == three['test_dataloader']


def test_cityscapes_config_is_mmsegs_cityscapes_upernet_with_the_swin_t_recipe():
    cfg = load('diversepatch/upernet_swin-t_patch-cos_8xb2-80k_cityscapes-769x769')
    plain = without_losses(cfg)
    cfg = Config(unscoped(cfg.to_dict()))
    upernet = library('mmseg::upernet/upernet_r50_4xb2-80k_cityscapes-769x769.py')
    swin = library(SWIN_ADE)
    for key in ('train_dataloader', 'val_dataloader', 'test_dataloader', 'val_evaluator', 'tta_pipeline', 'train_cfg'):
        assert cfg[key] == upernet[key], key
    assert cfg.default_hooks == bounded(upernet['default_hooks'])
    assert cfg.model.test_cfg == upernet['model']['test_cfg'] and cfg.model.data_preprocessor.size == (769, 769)
    assert cfg.model.decode_head.align_corners and cfg.model.auxiliary_head.align_corners
    assert cfg.model.decode_head.num_classes == 19 and cfg.train_cfg.max_iters == 80000
    assert cfg.model.backbone == swin['model']['backbone']
    assert cfg.optim_wrapper == swin['optim_wrapper']
    warmup, poly = swin['param_scheduler']
    assert cfg.param_scheduler == [warmup, dict(poly, end=80000)]
    for part in ('decode_head', 'auxiliary_head'):
        heads = swin['model'][part] | dict(num_classes=19, align_corners=True)
        assert plain['model'][part] == heads


def test_deit_config_is_mmsegs_deit_s_upernet_with_our_backbone():
    cfg = load('diversepatch/upernet_deit-s_mln_patch-contrastive-cos_8xb2-160k_ade20k-512x512')
    base = library('mmseg::vit/vit_deit-s16_mln_upernet_8xb2-160k_ade20k-512x512.py')
    plain = without_losses(cfg)
    backbone = plain['model'].pop('backbone')
    base_backbone = base['model'].pop('backbone')
    assert plain['model'].pop('pretrained') is None and plain.pop('checkpoint').startswith('https://')
    base['model'].pop('pretrained')
    assert plain == dict(base, default_hooks=bounded(base['default_hooks']))
    assert (backbone['type'], backbone['arch'], backbone['out_indices'], backbone['final_norm']) == (
        'mmvitreg.VisionTransformer',
        'deit-small',
        (2, 5, 8, 11),
        False,
    )
    assert backbone['drop_path_rate'] == base_backbone['drop_path_rate'] == 0.1
    assert tuple(base_backbone['out_indices']) == (2, 5, 8, 11) and not base_backbone.get('final_norm', False)
    assert backbone['img_size'] == base_backbone['img_size'] == (512, 512)


@pytest.mark.parametrize('name', sorted(DIGITS))
def test_digits_study_configs_are_the_digits_upernet_with_the_losses(name):
    cfg = load(name)
    assert cfg.model.aux_losses == DIGITS[name]
    plain = without_losses(cfg)
    assert plain == library(DIGITS_UPERNET)


def test_the_seg_demos_are_the_digits_upernets_on_one_short_schedule():
    """configs/demo's two UperNets are the digits UperNet and configs/drloc's digits one with nothing changed but
    the schedule, and both train on the same 300-iteration one."""
    demo, drloc_demo = (
        unscoped(load(f'demo/upernet_swin-nano_1xb8-300{tag}_digits-ade20k-128x128').to_dict())
        for tag in ('', '_drloc')
    )
    bases = (
        unscoped(load(f'{name}_digits-ade20k-128x128').to_dict())
        for name in ('swin/upernet_swin-nano_1xb8-2k', 'drloc/upernet_swin-nano_drloc_1xb8-2k')
    )
    for config, base in zip((demo, drloc_demo), bases):
        assert {k: v for k, v in config.items() if k not in SCHEDULE} == {
            k: v for k, v in base.items() if k not in SCHEDULE
        }
        assert base['train_cfg']['max_iters'] == 2000
    assert {k: drloc_demo[k] for k in SCHEDULE} == {k: demo[k] for k in SCHEDULE}
    assert demo['train_cfg']['max_iters'] == demo['param_scheduler'][-1]['end'] == 300


def test_the_digits_drloc_upernet_is_in_the_dense_configs_form():
    """configs/drloc's digits UperNet (which configs/demo's DRLoc UperNet trains on a shorter schedule) has the
    full-size dense configs' DRLoc (DRLOC: 64 pairs, the MLP initialised trunc-normal 0.02 as the official Swin) at
    the digits model's 256 channels; built, its MLP starts trunc-normal 0.02 with zero biases."""
    from mmvitreg.registry import MODELS

    (drloc,) = load('drloc/upernet_swin-nano_drloc_1xb8-2k_digits-ade20k-128x128').model.aux_losses
    assert drloc == dict(DRLOC, in_channels=256)
    torch.manual_seed(0)
    user = MODELS.build(drloc)
    user.init_weights()
    linears = [m for m in user.modules() if isinstance(m, torch.nn.Linear)]
    assert linears and all(torch.all(m.bias == 0) for m in linears)
    weights = torch.cat([m.weight.flatten() for m in linears])
    assert abs(weights.std().item() - 0.02) < 0.002


def seg_batch(crop, num_classes, n=2):
    from mmengine.structures import PixelData
    from mmseg.structures import SegDataSample

    g = torch.Generator().manual_seed(0)
    samples = []
    for _ in range(n):
        sample = SegDataSample(metainfo=dict(img_shape=crop, pad_shape=crop, ori_shape=crop))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, num_classes, (1, *crop), generator=g))
        samples.append(sample)
    return dict(
        inputs=[torch.randint(0, 256, (3, *crop), generator=g, dtype=torch.uint8) for _ in range(n)],
        data_samples=samples,
    )


@pytest.mark.parametrize(
    'name', sorted(n for n, (kind, _, _) in DENSE.items() if kind == 'mmvitreg.TokenSegmentor' and '1of8' not in n)
)
def test_segmentation_training_step_returns_the_library_and_token_losses(name):
    """One training step (the 512 / 769 recipes at a small non-square crop, Swins with one block per stage):
    mmseg's decode and auxiliary losses and every configured token loss, each finite."""
    from mmengine.model import revert_sync_batchnorm

    cfg = load(name)
    cfg.model.backbone.img_size = (64, 96) if 'deit' in name else cfg.model.backbone.img_size
    cfg.model.data_preprocessor.size = (64, 96)
    torch.manual_seed(0)
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.backbone.init_cfg = None
    if model_cfg.backbone.type == 'mmvitreg.SwinTransformer':
        from mmpretrain.models import SwinTransformer

        model_cfg.backbone.arch = dict(SwinTransformer.arch_zoo[model_cfg.backbone.arch], depths=[1, 1, 1, 1])
    from mmengine.registry import MODELS

    with DefaultScope.overwrite_default_scope('mmseg'):
        model = revert_sync_batchnorm(MODELS.build(model_cfg)).train()
    data = model.data_preprocessor(seg_batch((64, 96), cfg.model.decode_head.num_classes), True)
    losses = model(**data, mode='loss')
    expected = {'loss_drloc'} if 'drloc' in name else {'loss_patch_cos'}
    expected |= {'loss_patch_contrastive'} if 'contrastive' in name else set()
    assert {'decode.loss_ce', 'aux.loss_ce'} | expected <= set(losses)
    assert all(torch.isfinite(v).all() for k, v in losses.items() if 'loss' in k)


@pytest.mark.parametrize(
    'name',
    [
        'drloc/upernet_swin-t_drloc_8xb2-160k_ade20k-512x512',
        'diversepatch/upernet_deit-s_mln_patch-contrastive-cos_8xb2-160k_ade20k-512x512',
    ],
)
def test_inference_is_mmsegs_and_makes_no_trace(name, monkeypatch):
    """Prediction (the config's whole-image test and a sliding window) of the TokenSegmentor with its token losses
    equals that of mmseg's EncoderDecoder with the same weights, and no trace is made: the losses cost nothing at
    inference."""
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS

    from mmvitreg.models.trace import TokenTrace

    cfg = load(name)
    crop = (64, 96)
    model_cfg = copy.deepcopy(cfg.model)
    model_cfg.data_preprocessor.size = crop
    model_cfg.backbone.init_cfg = None
    if model_cfg.backbone.type == 'mmvitreg.SwinTransformer':
        from mmpretrain.models import SwinTransformer

        model_cfg.backbone.arch = dict(SwinTransformer.arch_zoo[model_cfg.backbone.arch], depths=[1, 1, 1, 1])
    else:
        model_cfg.backbone.img_size = crop
    plain_cfg = copy.deepcopy(model_cfg)
    plain_cfg.type = 'EncoderDecoder'
    del plain_cfg.aux_losses
    with DefaultScope.overwrite_default_scope('mmseg'):
        ours = revert_sync_batchnorm(MODELS.build(model_cfg)).eval()
        plain = revert_sync_batchnorm(MODELS.build(plain_cfg)).eval()
    state = {k: v for k, v in ours.state_dict().items() if not k.startswith('aux_losses.')}
    plain.load_state_dict(state)
    made = []
    for_request = TokenTrace.for_request.__func__
    monkeypatch.setattr(
        TokenTrace, 'for_request', classmethod(lambda cls, *a, **k: made.append(for_request(cls, *a, **k)) or made[-1])
    )
    data = seg_batch(crop, cfg.model.decode_head.num_classes)
    for test_cfg in (dict(mode='whole'), dict(mode='slide', crop_size=(64, 64), stride=(32, 32))):
        ours.test_cfg = plain.test_cfg = Config(test_cfg)
        with torch.no_grad():
            got = ours.test_step(copy.deepcopy(data))
            expected = plain.test_step(copy.deepcopy(data))
        for a, b in zip(got, expected):
            torch.testing.assert_close(a.seg_logits.data, b.seg_logits.data)
            assert torch.equal(a.pred_sem_seg.data, b.pred_sem_seg.data)
    assert made == []
    ours.train()
    ours(**ours.data_preprocessor(seg_batch(crop, cfg.model.decode_head.num_classes), True), mode='loss')
    assert len(made) == 1  # the spy sees the training step's one trace
