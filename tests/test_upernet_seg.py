"""DeepViT and LV-ViT UperNet configs (multi-level neck; LV-ViT also with the official side layers), shrunk,
train and test through tools/train.py and tools/test.py on the bundled ADE20K-layout digits set."""

import json

import pytest
import torch
from conftest import CONFIGS, run_tool
from seg_helpers import shrunk_config

# DeepViT-S in miniature: CNN stem, residual scale 0.5, re-attention (with transform_scale) in the last blocks
TINY_DEEPVIT = dict(
    embed_dims=32,
    num_layers=4,
    num_heads=2,
    feedforward_channels=96,
    attn_types=[False, False, True, True],
    attn_cfgs=dict(reattn=dict(transform_scale=True)),
    stem=dict(channels=16, num_convs=2),
    scale_adjustment=0.5,
)
# LV-ViT-S in miniature: 3-conv stem, residual branches divided by skip_lam 2, plain attention
TINY_LVVIT = dict(
    embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=96, stem=dict(channels=16, num_convs=3), skip_lam=2.0
)
CASES = {
    'deepvit': (
        CONFIGS / 'deepvit' / 'upernet_deepvit-s_mln_8xb2-160k_ade20k-512x512.py',
        TINY_DEEPVIT,
        # re-attention only in the last two blocks, under mmpretrain-style keys
        {
            'backbone.layers.3.attn.reatten_matrix.weight',
            'backbone.layers.3.attn.var_norm.running_mean',
            'neck.lateral_convs.0.conv.weight',
        },
        {'backbone.layers.1.attn.reatten_matrix.weight', 'backbone.patch_embed.conv3.weight'},
    ),
    'lvvit': (
        CONFIGS / 'lvvit' / 'upernet_lvvit-s_mln_8xb2-160k_ade20k-512x512.py',
        TINY_LVVIT,
        {'backbone.patch_embed.conv3.weight', 'backbone.layers.3.attn.qkv.weight', 'neck.lateral_convs.0.conv.weight'},
        {'backbone.layers.3.attn.reatten_matrix.weight', 'backbone.layers.3.attn.qkv.bias'},
    ),
    # the official LV-ViT decoder: side layers (strides 4, 8, 16, 16) instead of the multi-level neck
    'lvvit-side': (
        CONFIGS / 'lvvit' / 'upernet_lvvit-s_8xb4-160k_ade20k-512x512.py',
        TINY_LVVIT,
        {'neck.side_layers.0.0.weight', 'neck.side_layers.3.1.running_var'},
        {'neck.lateral_convs.0.conv.weight'},
    ),
}


@pytest.mark.parametrize('family', sorted(CASES))
def test_upernet_trains_and_tests_on_digits(family, digits_workspace, tmp_path):
    seg_config, arch, present, absent = CASES[family]
    cfg = shrunk_config(seg_config, tmp_path / f'upernet_tiny-{family}_digits.py', arch)
    work = tmp_path / 'work'
    run_tool(['train.py', cfg, '--work-dir', work], cwd=digits_workspace)
    ckpt = (work / 'last_checkpoint').read_text().strip()
    assert ckpt.endswith('iter_2.pth')
    state = torch.load(ckpt, map_location='cpu', weights_only=False)['state_dict']
    assert present | {'decode_head.conv_seg.weight'} <= set(state)
    assert not absent & set(state)

    proc = run_tool(['test.py', cfg, ckpt, '--work-dir', work], cwd=digits_workspace)
    line = [ln for ln in proc.stdout.splitlines() if ln.startswith('metrics: ')][-1]
    metrics = json.loads(line[len('metrics: ') :])
    assert {'mIoU', 'aAcc'} <= set(metrics) and 0 <= metrics['aAcc'] <= 100
