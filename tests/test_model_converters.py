"""Converters of the official DeepViT / LV-ViT checkpoints: every official tensor lands, unchanged, strictly."""

import runpy
import sys
from pathlib import Path

import pytest
import torch
import yaml
from mmpretrain.models.heads import VisionTransformerClsHead
from modelindex import load as load_model_index

from mmvitreg.models.backbones import DeepViT, LVViT, convert_deepvit, convert_lvvit
from mmvitreg.models.converters import convert_checkpoint, convert_timm_vit, unwrap_checkpoint

REPO = Path(__file__).resolve().parents[1]


def official_state_dict(
    dim,
    depth,
    heads,
    qkv_bias=True,
    reattn=(),
    stem=None,
    aux_head=False,
    classes=1000,
    img_size=224,
    patch=16,
    mlp_ratio=3,
):
    """Random tensors under the official names and shapes.

    DeepViT: zhoudaquan/dvit_repo models/{layers,deep_vision_transformer}.py (``PatchEmbed.proj`` or
    ``PatchEmbed_CNN.conv1/bn1/conv2/bn2/proj``, ``blocks.i.attn.{qkv,reatten_matrix,var_norm,proj}``, ``Mlp.fc1/fc2``).
    LV-ViT: zihangJiang/TokenLabeling tlt/models/{layers,lvvit}.py (``PatchEmbed4_2[_128].conv1..3/bn1..3/proj``,
    ``qkv`` without bias, ``head`` and ``aux_head``). MLP ratio 3 in both (timm / DeiT: 4).
    """
    g = torch.Generator().manual_seed(0)
    sd = {}

    def add(name, *shape):
        sd[name] = torch.randn(*shape, generator=g)

    def norm(name, c, bn=False):
        add(f'{name}.weight', c)
        add(f'{name}.bias', c)
        if bn:
            sd[f'{name}.running_mean'] = torch.randn(c, generator=g)
            sd[f'{name}.running_var'] = torch.rand(c, generator=g) + 0.5
            sd[f'{name}.num_batches_tracked'] = torch.tensor(1234)

    if stem is None:
        add('patch_embed.proj.weight', dim, 3, patch, patch)
    else:
        channels, num_convs = stem
        for i in range(1, num_convs + 1):
            add(f'patch_embed.conv{i}.weight', channels, 3 if i == 1 else channels, *((7, 7) if i == 1 else (3, 3)))
            norm(f'patch_embed.bn{i}', channels, bn=True)
        add('patch_embed.proj.weight', dim, channels, patch // 2, patch // 2)
    add('patch_embed.proj.bias', dim)
    add('cls_token', 1, 1, dim)
    add('pos_embed', 1, (img_size // patch) ** 2 + 1, dim)
    for i in range(depth):
        p = f'blocks.{i}.'
        norm(p + 'norm1', dim)
        add(p + 'attn.qkv.weight', 3 * dim, dim)
        if qkv_bias:
            add(p + 'attn.qkv.bias', 3 * dim)
        if i in reattn:
            add(p + 'attn.reatten_matrix.weight', heads, heads, 1, 1)
            add(p + 'attn.reatten_matrix.bias', heads)
            norm(p + 'attn.var_norm', heads, bn=True)
        add(p + 'attn.proj.weight', dim, dim)
        add(p + 'attn.proj.bias', dim)
        norm(p + 'norm2', dim)
        add(p + 'mlp.fc1.weight', mlp_ratio * dim, dim)
        add(p + 'mlp.fc1.bias', mlp_ratio * dim)
        add(p + 'mlp.fc2.weight', dim, mlp_ratio * dim)
        add(p + 'mlp.fc2.bias', dim)
    norm('norm', dim)
    add('head.weight', classes, dim)
    add('head.bias', classes)
    if aux_head:
        add('aux_head.weight', classes, dim)
        add('aux_head.bias', classes)
    return sd


def split(converted):
    backbone = {k[len('backbone.') :]: v for k, v in converted.items() if k.startswith('backbone.')}
    head = {k[len('head.') :]: v for k, v in converted.items() if k.startswith('head.')}
    assert len(backbone) + len(head) == len(converted)
    return backbone, head


def assert_lands(model, backbone_sd, official, converted):
    """strict load, then every official backbone tensor is in the model's state dict, bit-identical."""
    model.load_state_dict(backbone_sd, strict=True)
    assert len(converted) == len(official)
    ours = model.state_dict()
    for value, new_key in zip(official.values(), converted):
        if new_key.startswith('backbone.'):
            assert torch.equal(ours[new_key[len('backbone.') :]], value), new_key


@pytest.mark.parametrize(
    'arch,official_kwargs',
    [
        ('s', dict(dim=396, depth=16, heads=12, reattn=range(11, 16), stem=(64, 2))),
        ('16b', dict(dim=384, depth=16, heads=12, reattn=range(16))),
        (
            dict(
                embed_dims=36,
                num_layers=4,
                num_heads=12,
                feedforward_channels=108,
                attn_types=[False] * 2 + [True] * 2,
                stem=dict(channels=8, num_convs=2),
                scale_adjustment=0.5,
            ),
            dict(dim=36, depth=4, heads=12, reattn=(2, 3), stem=(8, 2)),
        ),
    ],
)
def test_deepvit_official_checkpoint_loads_strictly(arch, official_kwargs):
    """DeepViT: backbone keys load strict=True into mmvitreg.DeepViT, head into mmpretrain's ViT cls head."""
    official = official_state_dict(**official_kwargs)
    converted = convert_deepvit(official)
    backbone_sd, head_sd = split(converted)
    assert set(head_sd) == {'layers.head.weight', 'layers.head.bias'}
    assert_lands(DeepViT(arch=arch), backbone_sd, official, converted)
    head = VisionTransformerClsHead(num_classes=1000, in_channels=official_kwargs['dim'])
    head.load_state_dict(head_sd, strict=True)
    assert torch.equal(head.layers.head.weight, official['head.weight'])


@pytest.mark.parametrize(
    'arch,official_kwargs',
    [
        ('t', dict(dim=240, depth=12, heads=4, stem=(64, 3))),
        (
            dict(
                embed_dims=48,
                num_layers=2,
                num_heads=4,
                feedforward_channels=144,
                stem=dict(channels=128, num_convs=3),
                skip_lam=3.0,
            ),
            dict(dim=48, depth=2, heads=4, stem=(128, 3)),
        ),
    ],
)
def test_lvvit_official_checkpoint_loads_strictly(arch, official_kwargs):
    """LV-ViT: backbone strict into mmvitreg.LVViT; head.layers.head.* (cls) and head.aux_head.* (token labels)."""
    official = official_state_dict(qkv_bias=False, aux_head=True, **official_kwargs)
    converted = convert_lvvit(official)
    backbone_sd, head_sd = split(converted)
    assert set(head_sd) == {'layers.head.weight', 'layers.head.bias', 'aux_head.weight', 'aux_head.bias'}
    assert torch.equal(converted['head.aux_head.weight'], official['aux_head.weight'])
    assert_lands(LVViT(arch=arch), backbone_sd, official, converted)


def test_converter_rejects_unknown_keys_and_the_pass_strips_ddp_prefix():
    """``module.`` is dropped once, by the loading pass's key revision (convert_checkpoint), before the layout is
    detected and converted."""
    official = official_state_dict(dim=24, depth=1, heads=4, img_size=32)
    converted = convert_checkpoint({'model': {'module.' + k: v for k, v in official.items()}}, 'deit.pth')
    assert converted['meta']['official_layout'].startswith('timm / DeiT ViT')
    converted = converted['state_dict']
    assert 'backbone.layers.0.ffn.layers.0.0.weight' in converted and 'backbone.ln1.weight' in converted
    with pytest.raises(ValueError, match="dist_token"):
        convert_timm_vit({**official, 'dist_token': torch.zeros(1, 1, 24)})
    with pytest.raises(ValueError, match='aux_head'):
        convert_deepvit({**official, 'aux_head.weight': torch.zeros(10, 24)})


def test_unwrap_checkpoint_prefers_the_requested_weights():
    a, b = {'w': torch.zeros(1)}, {'w': torch.ones(1)}
    assert unwrap_checkpoint({'state_dict': a, 'state_dict_ema': b, 'epoch': 3})['w'] == 0
    assert unwrap_checkpoint({'state_dict': a, 'state_dict_ema': b}, ema=True)['w'] == 1
    assert unwrap_checkpoint({'model': b})['w'] == 1
    assert unwrap_checkpoint({'model': a, 'model_ema': b}, ema=True)['w'] == 1  # DiversePatch / DeiT EMA
    assert unwrap_checkpoint({'model_ema': b, 'epoch': 3})['w'] == 1
    assert unwrap_checkpoint(a)['w'] == 0
    with pytest.raises(KeyError, match='no state dict'):
        unwrap_checkpoint({'epoch': 3, 'args': 'x'})


def test_cli_converts_a_saved_official_checkpoint(tmp_path, monkeypatch):
    """tools/model_converters/lvvit_to_mmvitreg.py SRC DST --ema: loads the pickle, unwraps, converts, saves."""
    official = official_state_dict(
        dim=24, depth=1, heads=4, qkv_bias=False, stem=(8, 3), aux_head=True, classes=5, img_size=32
    )
    torch.save(
        {
            'state_dict': {k: torch.zeros_like(v) for k, v in official.items()},
            'state_dict_ema': official,
            'epoch': 300,
            'arch': 'lvvit_t',
        },
        tmp_path / 'src.pth.tar',
    )
    tool = REPO / 'tools/model_converters/lvvit_to_mmvitreg.py'
    monkeypatch.setattr(sys, 'argv', [str(tool), str(tmp_path / 'src.pth.tar'), str(tmp_path / 'dst.pth'), '--ema'])
    runpy.run_path(str(tool), run_name='__main__')
    saved = torch.load(tmp_path / 'dst.pth', weights_only=True)['state_dict']
    assert saved.keys() == convert_lvvit(official).keys()
    assert torch.equal(saved['head.aux_head.weight'], official['aux_head.weight'])


def test_every_released_checkpoint_is_in_the_model_index_with_its_config_and_converter():
    """Issue 22 item 2: the metafiles parse (as ``mim`` reads them, through model-index.yml); each ``Converted From``
    names the official weights, the official code, an existing config and the command of an existing converter;
    the papers that released weights (DeepViT, DiversePatch, LV-ViT) list them; TL-Align and DRLoc released none
    in a layout a converter takes."""
    index = load_model_index(str(REPO / 'model-index.yml'))
    assert len(index.models) == sum(
        len(yaml.safe_load(p.read_text())['Models']) for p in (REPO / 'configs').glob('*/metafile.yml')
    )
    released = {}
    for model in index.models:
        source = model.data.get('Converted From')
        if source is None:
            continue
        assert set(source) == {'Weights', 'Code', 'Converter'}, model.name
        assert source['Weights'].startswith('https://') and source['Code'].startswith('https://github.com/')
        assert (REPO / model.data['Config']).is_file(), model.name
        python, tool, *args = source['Converter'].split()
        assert python == 'python' and args == ['SRC', 'DST'] and (REPO / tool).is_file(), source['Converter']
        assert tool.startswith('tools/model_converters/'), tool
        released.setdefault(model.data['Config'].split('/')[1], []).append(model.name)
    assert {k: len(v) for k, v in released.items()} == {'deepvit': 4, 'diversepatch': 4, 'lvvit': 6}
