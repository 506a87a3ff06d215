"""Official releases load where users put them (issue 22, item 1): a random state dict under the exact key names
and shapes of each release (the converter tests' builders) goes through ``load_from`` (GuardedRunner),
``init_cfg=dict(type='Pretrained')`` (with and without ``prefix='backbone.'``) and ``tools/test.py``, raw or
wrapped, and the model gives the outputs of the same model loaded strictly from the explicit converter's output.
A load that would leave the backbone random stops with an error naming the file and the layout."""

import copy
import itertools
import pickle

import pytest
import torch
from conftest import CONFIGS
from guard_helpers import build_workspace, tool
from mmengine.config import ConfigDict
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS
from test_diversepatch_converter import official_state_dict as diversepatch_state_dict
from test_model_converters import official_state_dict as timm_state_dict
from test_swin import NANO, nano, official_swin_state_dict

from mmvitreg.engine import CheckpointError, GuardedRunner
from mmvitreg.models.backbones import convert_deepvit, convert_lvvit, convert_swin
from mmvitreg.models.converters import convert_checkpoint, convert_diversepatch, convert_timm_vit, detect_layout

K = 5  # classes of every tiny release
_runs = itertools.count()


def vit_head(dims):
    return dict(type='VisionTransformerClsHead', num_classes=K, in_channels=dims)


def deit_state_dict():
    """timm / DeiT (facebookresearch/deit; TL-Align's code keeps it): DiversePatch's without talking heads and
    patch_head."""
    return {k: v for k, v in diversepatch_state_dict().items() if not k.startswith('patch_head') and '.proj_p' not in k}


# layout -> (official state dict, its converter, the mmpretrain-scope model the converter's keys are made for)
LAYOUTS = {
    'lvvit': (
        lambda: timm_state_dict(
            dim=24, depth=2, heads=4, qkv_bias=False, stem=(8, 3), aux_head=True, classes=K, img_size=32
        ),
        convert_lvvit,
        dict(
            type='mmvitreg.TokenClassifier',
            backbone=dict(
                type='mmvitreg.LVViT',
                img_size=32,
                out_type='raw',
                arch=dict(
                    embed_dims=24,
                    num_layers=2,
                    num_heads=4,
                    feedforward_channels=72,
                    stem=dict(channels=8, num_convs=3),
                    skip_lam=2.0,
                ),
            ),
            head=dict(type='mmvitreg.TokenLabelHead', num_classes=K, in_channels=24),
        ),
    ),
    'deepvit': (
        lambda: timm_state_dict(dim=36, depth=4, heads=12, reattn=(2, 3), stem=(8, 2), classes=K, img_size=32),
        convert_deepvit,
        dict(
            type='ImageClassifier',
            head=vit_head(36),
            backbone=dict(
                type='mmvitreg.DeepViT',
                img_size=32,
                arch=dict(
                    embed_dims=36,
                    num_layers=4,
                    num_heads=12,
                    feedforward_channels=108,
                    attn_types=[False] * 2 + [True] * 2,
                    stem=dict(channels=8, num_convs=2),
                    scale_adjustment=0.5,
                ),
            ),
        ),
    ),
    'diversepatch': (
        diversepatch_state_dict,
        convert_diversepatch,
        dict(
            type='mmvitreg.TokenClassifier',
            head=vit_head(16),
            backbone=dict(
                type='mmvitreg.VisionTransformer',
                img_size=32,
                patch_size=8,
                arch=dict(
                    embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=64, attn_types='talking_heads'
                ),
            ),
            aux_losses=[
                dict(type='mmvitreg.PatchCosineLoss'),
                dict(type='mmvitreg.PatchContrastiveLoss'),
                dict(type='mmvitreg.PatchMixingLoss', num_classes=K, in_channels=16),
            ],
        ),
    ),
    'deit': (
        deit_state_dict,
        convert_timm_vit,  # mmpretrain's own ViT, as the TL-Align and demo DeiT configs
        dict(
            type='ImageClassifier',
            head=vit_head(16),
            backbone=dict(
                type='VisionTransformer',
                img_size=32,
                patch_size=8,
                arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=64),
            ),
        ),
    ),
    'swin': (
        lambda: official_swin_state_dict(nano(), classes=K),
        convert_swin,
        dict(
            type='ImageClassifier',
            neck=dict(type='GlobalAveragePooling'),
            head=dict(type='LinearClsHead', num_classes=K, in_channels=64),
            backbone=dict(type='mmvitreg.SwinTransformer', arch=NANO, img_size=64, window_size=4, out_indices=(2,)),
        ),
    ),
}
IMG = {'swin': 64}


def build(cfg):
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MODELS.build(copy.deepcopy(cfg)).eval()


def outputs(model, layout):
    x = torch.randn(2, 3, IMG.get(layout, 32), IMG.get(layout, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(x, mode='tensor')
    return torch.cat([t.flatten() for t in (out if isinstance(out, (tuple, list)) else [out])])


def reference(layout):
    """The outputs of the model loaded strictly from the explicit converter's state dict."""
    official, convert, cfg = LAYOUTS[layout]
    model = build(cfg)
    model.load_state_dict(convert(official()), strict=True)
    return outputs(model, layout)


def max_diff(model, layout):
    return (outputs(model.eval(), layout) - reference(layout)).abs().max().item()


def save(path, layout, wrap='raw'):
    sd = LAYOUTS[layout][0]()
    wrapped = {
        'raw': lambda: sd,
        'model': lambda: {'model': sd, 'epoch': 300},
        'state_dict': lambda: {'state_dict': sd, 'state_dict_ema': {k: v + 1 for k, v in sd.items()}},
        'model_ema': lambda: {'model_ema': sd, 'epoch': 300},
        'module': lambda: {'model': {'module.' + k: v for k, v in sd.items()}},
    }[wrap]()
    torch.save(wrapped, path)
    return path


def runner_load(tmp_path, cfg, ckpt, **policy):
    runner = GuardedRunner(
        model=copy.deepcopy(cfg),
        work_dir=str(tmp_path / 'work'),
        load_from=str(ckpt),
        experiment_name=f'official_{next(_runs)}',
        default_scope='mmpretrain',
        cfg=dict(checkpoint_policy=policy or None),
    )
    runner.load_or_resume()
    return runner


def test_each_release_is_recognised_by_its_keys_and_native_checkpoints_are_left_alone():
    names = {layout: detect_layout(LAYOUTS[layout][0]()).name for layout in LAYOUTS}
    assert names == {
        'lvvit': 'official LV-ViT (zihangJiang/TokenLabeling)',
        'deepvit': 'official DeepViT (zhoudaquan/dvit_repo)',
        'diversepatch': 'official DiversePatch (ChengyueGongR/PatchVisionTransformer)',
        'deit': 'timm / DeiT ViT (facebookresearch/deit, Euphoria16/TL-Align)',
        'swin': 'official Swin Transformer (microsoft/Swin-Transformer)',
    }
    for layout, (official, convert, cfg) in LAYOUTS.items():
        converted = convert(official())
        assert detect_layout(converted) is None, layout  # mmvitreg / mmpretrain classifier keys
        backbone = {k[len('backbone.') :]: v for k, v in converted.items() if k.startswith('backbone.')}
        assert detect_layout(backbone) is None, layout  # mmseg / mmdet backbone keys (e.g. swin2mmseg's output)
        checkpoint = {'state_dict': converted, 'meta': {'epoch': 3}}
        assert convert_checkpoint(checkpoint, 'native.pth') == checkpoint


@pytest.mark.parametrize('layout', LAYOUTS)
def test_load_from_converts_the_official_release(tmp_path, layout):
    ckpt = save(tmp_path / 'official.pth', layout)
    runner = runner_load(tmp_path, LAYOUTS[layout][2], ckpt)
    assert max_diff(runner.model, layout) == 0
    log = next((tmp_path / 'work').rglob('*.log')).read_text()
    assert 'release layout, converted on load by' in log and '0 missing' in log, log[-2000:]


@pytest.mark.parametrize('wrap', ['model', 'state_dict', 'model_ema', 'module'])
def test_wrapped_releases_load_their_model_weights(tmp_path, wrap):
    """``{'model': ...}`` (DeiT-based codes), ``state_dict`` beside ``state_dict_ema`` (timm), ``model_ema`` alone
    (DiversePatch's EMA), ``module.`` keys: the model weights land (the EMA only where they are all there is)."""
    ckpt = save(tmp_path / 'official.pth', 'diversepatch', wrap)
    assert max_diff(runner_load(tmp_path, LAYOUTS['diversepatch'][2], ckpt).model, 'diversepatch') == 0


def pretrained(layout, **kwargs):
    """``init_cfg`` Pretrained: mmvitreg's models get mmvitreg's loading for the plain type; mmpretrain's own ViT
    (the DeiT layout's model) only where the config asks for it (``_scope_='mmvitreg'``)."""
    return dict(type='Pretrained', **({'_scope_': 'mmvitreg'} if layout == 'deit' else {}), **kwargs)


@pytest.mark.parametrize('layout', LAYOUTS)
def test_init_cfg_pretrained_converts_with_and_without_prefix(tmp_path, layout):
    ckpt = str(save(tmp_path / 'official.pth', layout, 'model'))
    whole = dict(LAYOUTS[layout][2], init_cfg=pretrained(layout, checkpoint=ckpt))
    model = build(whole)
    model.init_weights()
    assert max_diff(model, layout) == 0
    cfg = copy.deepcopy(LAYOUTS[layout][2])
    cfg['backbone']['init_cfg'] = pretrained(layout, checkpoint=ckpt, prefix='backbone.')
    model = build(cfg)
    model.init_weights()
    ref = build(LAYOUTS[layout][2])
    ref.load_state_dict(LAYOUTS[layout][1](LAYOUTS[layout][0]()), strict=True)
    for (name, ours), theirs in zip(model.backbone.state_dict().items(), ref.backbone.state_dict().values()):
        assert torch.equal(ours, theirs), name


def test_mmdet_swin_still_converts_official_releases_itself(tmp_path):
    """mmdet's (and mmseg's) own Swin reads official files through mmengine's CheckpointLoader and converts them
    itself (``convert_weights=True``): it must get the file as it is, not converted a second time."""
    from mmdet.models.backbones import SwinTransformer as MMDetSwin

    ckpt = str(save(tmp_path / 'official.pth', 'swin', 'model'))
    theirs = MMDetSwin(
        embed_dims=16,
        depths=(2, 2, 2),
        num_heads=(1, 2, 4),
        strides=(4, 2, 2),
        window_size=4,
        out_indices=(0, 1, 2),
        convert_weights=True,
        init_cfg=ConfigDict(type='Pretrained', checkpoint=ckpt),
    )
    theirs.init_weights()
    ours = {
        k[len('backbone.') :]: v for k, v in convert_swin(LAYOUTS['swin'][0]()).items() if k.startswith('backbone.')
    }
    loaded = {k: v for k, v in theirs.state_dict().items() if k.startswith(('patch_embed.', 'stages.'))}
    assert len(loaded) == 94  # every patch-embedding and stage tensor (mmdet's converter leaves the output norms)
    for key, value in loaded.items():
        assert torch.equal(value, ours[key]), key


def test_init_cfg_that_would_leave_the_backbone_random_stops(tmp_path):
    """mmengine's PretrainedInit loads whatever fits with one warning per key; a converted DeiT release given to
    the backbone without prefix='backbone.' (every key under backbone.) would leave it random: an error."""
    ckpt = str(save(tmp_path / 'official.pth', 'deit'))
    cfg = copy.deepcopy(LAYOUTS['deit'][2])
    cfg['backbone']['init_cfg'] = pretrained('deit', checkpoint=ckpt)
    with pytest.raises(CheckpointError) as e:
        build(cfg).init_weights()
    assert f'checkpoint {ckpt} does not fit the model VisionTransformer: it would fill 0 of the' in str(e.value)
    assert 'timm / DeiT ViT' in str(e.value) and "prefix='backbone.'" in str(e.value)
    cfg['backbone']['init_cfg']['prefix'] = 'model.backbone'
    with pytest.raises(CheckpointError, match="has no key under the prefix='model.backbone.'"):
        build(cfg).init_weights()


def test_load_from_of_another_model_stops_naming_the_file_and_the_layout(tmp_path):
    ckpt = save(tmp_path / 'lvvit_official.pth', 'lvvit')
    with pytest.raises(CheckpointError) as e:
        runner_load(tmp_path, LAYOUTS['swin'][2], ckpt)
    message = str(e.value)
    assert str(ckpt) in message and 'official LV-ViT (zihangJiang/TokenLabeling) release layout' in message
    assert 'fill 0 of the' in message and '--allow-partial' in message
    # --allow-partial: today's partial load (nothing fits, nothing is loaded, one warning)
    runner_load(tmp_path, LAYOUTS['swin'][2], ckpt, load_from='partial')


def test_load_from_filling_too_little_of_the_backbone_stops(tmp_path):
    """A DiversePatch release without talking heads into the talking-heads model: 4 of 34 backbone tensors
    (proj_pre / proj_post) would stay random, below the 90% the load needs."""
    sd = {k: v for k, v in diversepatch_state_dict().items() if '.proj_p' not in k}
    torch.save(sd, tmp_path / 'no_talk.pth')
    with pytest.raises(CheckpointError, match=r'fill 30 of the 34 backbone tensors \(at least 90% needed'):
        runner_load(tmp_path, LAYOUTS['diversepatch'][2], tmp_path / 'no_talk.pth')


@pytest.fixture(scope='module')
def digits(tmp_path_factory):
    return build_workspace(tmp_path_factory.mktemp('digits_ws')) / 'digits'


@pytest.mark.parametrize('layout', LAYOUTS)
def test_tools_test_py_evaluates_the_release_as_the_converted_file(tmp_path, digits, layout):
    """``tools/test.py CONFIG OFFICIAL.pth`` (strict) predicts what it predicts from the offline converter's file:
    the quick-start digits config with the release's tiny model."""
    official, convert, model = LAYOUTS[layout]
    size = IMG.get(layout, 32)
    config = tmp_path / f'{layout}_digits.py'
    config.write_text(
        f"_base_ = '{CONFIGS / 'demo' / 'deit-tiny_1xb64_digits.py'}'\n"
        f'model = dict(_delete_=True, **{model!r})\n'
        "test_pipeline = [dict(type='LoadImageFromFile'), "
        f"dict(type='Resize', scale={size}), dict(type='PackInputs')]\n"
        f"test_dataloader = dict(num_workers=0, persistent_workers=False, dataset=dict(\n"
        f"    data_root='{digits}', indices=8, pipeline=test_pipeline))\n"
        'test_evaluator = dict(topk=(1, ))\n'
    )
    converted = tmp_path / 'converted.pth'
    torch.save({'state_dict': convert(official())}, converted)
    scores = []
    for ckpt in (save(tmp_path / 'official.pth', layout, 'model'), converted):
        out = tmp_path / f'{ckpt.stem}.pkl'
        tool('test')([str(config), str(ckpt), '--work-dir', str(tmp_path / 'w'), '--out', str(out)])
        scores.append(torch.stack([s['pred_score'] for s in pickle.loads(out.read_bytes())]))
    assert scores[0].shape == (8, K) and torch.equal(scores[0], scores[1])
