"""Swin configs: the downstream recipes build with mmvitreg.SwinTransformer in place of the libraries'
own Swin, and the small Swin classifier with a trace user trains and tests through the tools."""

import torch
from conftest import CONFIGS, run_tool
from mmengine.config import Config
from mmengine.registry import DefaultScope
from test_tools import CLS_SMALL, last_checkpoint, metrics_of

SWIN = CONFIGS / 'swin'
UPERNET = SWIN / 'upernet_swin-t_8xb2-160k_ade20k-512x512.py'
CASCADE = SWIN / 'cascade-mask-rcnn_swin-t-p4-w7_fpn_4conv1fc-giou_amp-ms-crop_8xb2-3x_coco.py'
MIXTOKEN = CONFIGS / 'demo' / 'swin-nano_1xb64_mixtoken_digits.py'


def build_model(cfg, scope):
    from mmengine.registry import MODELS

    with DefaultScope.overwrite_default_scope(scope):
        return MODELS.build(cfg.model)


def test_upernet_recipe_is_mmseg_swin_t_with_the_mmvitreg_backbone():
    import mmvitreg  # noqa: F401

    cfg = Config.fromfile(str(UPERNET))
    assert cfg.model.backbone.type == 'mmvitreg.SwinTransformer' and cfg.model.backbone.pad_small_map
    assert cfg.model.decode_head.in_channels == [96, 192, 384, 768]
    assert cfg.optim_wrapper.optimizer.lr == 6e-5 and cfg.train_cfg.max_iters == 160000
    assert [t.scale_factor for t in cfg.tta_pipeline[1].transforms[0]] == [0.5, 0.75, 1.0, 1.25, 1.5, 1.75]
    cfg.model.backbone.init_cfg = None
    model = build_model(cfg, 'mmseg').eval()
    with torch.no_grad():
        feats = model.extract_feat(torch.randn(1, 3, 96, 128))
    assert [tuple(f.shape[1:]) for f in feats] == [(96, 24, 32), (192, 12, 16), (384, 6, 8), (768, 3, 4)]


def test_cascade_recipe_swaps_convnext_for_swin_with_swin_optimizer():
    import mmvitreg  # noqa: F401

    cfg = Config.fromfile(str(CASCADE))
    assert cfg.model.backbone.type == 'mmvitreg.SwinTransformer' and cfg.model.backbone.drop_path_rate == 0.2
    assert cfg.model.neck.in_channels == [96, 192, 384, 768]
    assert 'constructor' not in cfg.optim_wrapper and cfg.optim_wrapper.optimizer.lr == 1e-4
    assert set(cfg.optim_wrapper.paramwise_cfg.custom_keys) == {
        'absolute_pos_embed',
        'relative_position_bias_table',
        'norm',
    }
    assert cfg.train_cfg.max_epochs == 36 and cfg.model.roi_head.bbox_head[0].num_shared_convs == 4
    cfg.model.backbone.init_cfg = None
    model = build_model(cfg, 'mmdet')
    assert type(model).__name__ == 'CascadeRCNN' and type(model.backbone).__module__.startswith('mmvitreg')


def test_swin_classifier_with_mix_token_trains_and_tests(digits_workspace, tmp_path):
    work = tmp_path / 'swin'
    run_tool(
        ['train.py', MIXTOKEN, '--work-dir', work, '--cfg-options', 'train_cfg.max_epochs=1', *CLS_SMALL],
        cwd=digits_workspace,
    )
    built = Config.fromfile(work / MIXTOKEN.name)
    assert built.model.type == 'mmvitreg.TokenClassifier' and built.model.backbone.type == 'mmvitreg.SwinTransformer'
    assert built.model.train_cfg == dict(mix=dict(type='mmvitreg.MixToken', alpha=1.0, patch_size=4))
    ckpt = last_checkpoint(work)
    state = torch.load(ckpt, map_location='cpu', weights_only=False)['state_dict']
    assert 'backbone.stages.1.blocks.1.attn.w_msa.relative_position_bias_table' in state
    metrics = metrics_of(
        run_tool(['test.py', MIXTOKEN, ckpt, '--work-dir', work, '--cfg-options', *CLS_SMALL[1:]], cwd=digits_workspace)
    )
    assert 0 <= metrics['accuracy/top1'] <= 100
