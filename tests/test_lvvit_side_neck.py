"""The official LV-ViT segmentation side layers (TokenLabeling seg/mmseg/models/backbones/vit.py,
use_side_layer=True) as mmvitreg.LVViTSideNeck, and the UperNet configs that use it."""

import pytest
import torch
from conftest import CONFIGS
from mmengine.config import Config
from mmengine.registry import DefaultScope

from mmvitreg.models.necks import LVViTSideNeck

LVVIT = CONFIGS / 'lvvit'


def side_neck_params(C, out=2048):
    """Official layers: ConvT 4x4 + 1x1, ConvT 2x2 + 1x1, 1x1, 1x1 to `out` (no biases), BN (weight, bias)
    after each conv."""
    convs = 16 * C * C + C * C + 4 * C * C + C * C + C * C + C * out
    norms = 2 * C * 5 + 2 * out
    return convs + norms


@pytest.mark.parametrize('C', [384, 512, 768])
def test_shapes_and_parameter_count(C):
    neck = LVViTSideNeck(in_channels=C, norm_cfg=dict(type='BN'))
    assert sum(p.numel() for p in neck.parameters()) == side_neck_params(C)
    if C != 384:
        return
    maps = [torch.randn(2, C, 8, 12) for _ in range(4)]  # stride 16 of a 128 x 192 image
    outs = neck(maps)
    assert [tuple(o.shape) for o in outs] == [(2, C, 32, 48), (2, C, 16, 24), (2, C, 8, 12), (2, 2048, 8, 12)]
    assert all((o >= 0).all() for o in outs)  # every level ends with ReLU
    with pytest.raises(ValueError, match='4 tapped blocks'):
        neck(maps[:3])
    with pytest.raises(ValueError, match="out_type='featmap'"):
        neck([torch.randn(2, 17, 384)] * 4)


def test_official_key_layout():
    """side_layers.{k}.{i} holds the official backbone.side_layer{k+1}.{i} (same Sequential order)."""
    bn = ('weight', 'bias', 'running_mean', 'running_var', 'num_batches_tracked')
    expected = set()
    for k, convs in enumerate(([0, 3], [0, 3], [0], [0])):
        for i in convs:
            expected |= {f'side_layers.{k}.{i}.weight'} | {f'side_layers.{k}.{i + 1}.{b}' for b in bn}
    assert set(LVViTSideNeck(in_channels=8, out_channels=16, norm_cfg=dict(type='BN')).state_dict()) == expected


def decoder_params(model):
    parts = (model.neck, model.decode_head, model.auxiliary_head)
    return [sum(p.numel() for p in m.parameters()) for m in parts]


@pytest.mark.parametrize('arch,C,batch', [('s', 384, 4), ('m', 512, 4), ('l', 768, 2)])
def test_upernet_configs_use_the_side_neck(arch, C, batch):
    """UPerHead in_channels [C, C, C, 2048]; 4 images per GPU for S/M, 2 for L; FCN channels 512 for L;
    the MultiLevelNeck variant stays as its own config. The segmentor runs on the meta device."""
    from mmseg.registry import MODELS

    name = f'upernet_lvvit-{arch}_8xb{batch}-160k_ade20k-512x512.py'
    cfg = Config.fromfile(str(LVVIT / name))
    mln = Config.fromfile(str(LVVIT / f'upernet_lvvit-{arch}_mln_8xb2-160k_ade20k-512x512.py'))
    assert mln.model.neck.type == 'MultiLevelNeck'
    assert cfg.model.neck.type == 'mmvitreg.LVViTSideNeck' and cfg.model.neck.in_channels == C
    assert list(cfg.model.decode_head.in_channels) == [C, C, C, 2048]
    assert cfg.train_dataloader.batch_size == batch
    assert cfg.model.decode_head.channels == cfg.model.auxiliary_head.channels == (512 if arch == 'l' else 256)
    assert cfg.model.backbone == mln.model.backbone
    for c in (cfg, mln):
        c.model.backbone.init_cfg = None
        for key in ('decode_head', 'auxiliary_head'):
            c.model[key].norm_cfg = dict(type='BN', requires_grad=True)
    cfg.model.neck.norm_cfg = dict(type='BN', requires_grad=True)
    with DefaultScope.overwrite_default_scope('mmseg'), torch.device('meta'):
        model = MODELS.build(cfg.model).eval()
        out = model(torch.empty(1, 3, 512, 512), mode='tensor')
        neck, head, aux = decoder_params(model)
        assert neck == side_neck_params(C)
        assert out.shape == (1, 150, 128, 128)
