"""Every dense config starts from the checkpoint it names (issue 42 item 4).

A classifier's checkpoint holds its final norm and its head. A dense backbone built with ``final_norm=False`` (the
``_mln_`` UperNets, as mmseg's ViT recipe) has no place for the norm, a segmentor none for the head: the *backbone*
load policy accepts the keys of the modules the backbone's own options leave out (its ``left_out``) and those
outside the backbone, and still refuses a checkpoint of another architecture, one with backbone parameters the
model has no place for (talking heads) and one that lacks weights the model needs. Every checkpoint here is a real
file: the model of the backbone's classification config (the one the dense config's comment names), shrunk to a
tiny arch and saved as mmengine's CheckpointHook saves it. The smoke test starts every segmentation and detection
config of configs/ at tiny size from such a file through the config's own ``init_cfg`` (same prefix), then takes one
training step (on mmseg's and mmdet's models: reported skipped where they do not import, see conftest)."""

import copy
import functools
import re
from collections import OrderedDict
from pathlib import Path

import pytest
import torch
from conftest import CONFIGS, REPO
from mmengine.config import Config
from mmengine.registry import DefaultScope
from seg_helpers import TINY_SWIN, shrunk_config
from test_dense_configs import seg_batch, unscoped
from test_dense_token_losses import TINY_VIT, det_batch
from test_upernet_seg import TINY_DEEPVIT, TINY_LVVIT

# the backbone of each dense config in miniature (its classifier's checkpoint is saved at the same size)
TINY = {
    'mmvitreg.VisionTransformer': TINY_VIT['arch'],
    'mmvitreg.DeepViT': TINY_DEEPVIT,
    'mmvitreg.LVViT': TINY_LVVIT,
    'mmvitreg.SwinTransformer': TINY_SWIN,
}
# the releases the dense configs download, and the classification configs whose checkpoints they are
CLASSIFIER_OF_URL = {
    # mmpretrain's metafile
    'https://download.openmmlab.com/mmclassification/v0/deit/deit-small_pt-4xb256_in1k_20220218-9425b9bb.pth':  # noqa: E501
    'mmpretrain::deit/deit-small_4xb256_in1k.py',
    # mmseg's conversion of the official Swin-T ImageNet-1k release: the backbone's weights alone
    'https://download.openmmlab.com/mmsegmentation/v0.5/pretrain/swin/swin_tiny_patch4_window7_224_20220317-1cdeb081.pth':  # noqa: E501
    'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py',
}
MLN = sorted(CONFIGS.glob('*/upernet_*_mln_*.py'))
DENSE = sorted(p for p in CONFIGS.glob('*/*.py') if re.search('upernet|cascade', p.read_text()))
# the demo-size cascade (FPN, RPN and the three cascade heads at 32 channels): the shrunk heads of every cascade
DEMO_CASCADE = CONFIGS / 'demo' / 'cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_digits-coco.py'
# what a shrunk UperNet keeps of its backbone's settings: the checkpoint it starts from, a Swin's window
KEEP = ('init_cfg', 'window_size')


def classification_config(checkpoint: str) -> str:
    """The classification config whose checkpoint a dense config names: a release by its URL, else the config of
    configs/ that ``pretrain/<config>.pth`` or ``work_dirs/<config>/epoch_N.pth`` names."""
    if checkpoint in CLASSIFIER_OF_URL:
        return CLASSIFIER_OF_URL[checkpoint]
    path = Path(checkpoint)
    stem = path.stem if path.parts[0] == 'pretrain' else path.parent.name
    found = sorted(CONFIGS.glob(f'*/{stem}.py'))
    assert len(found) == 1, f'{checkpoint}: no classification config configs/*/{stem}.py'
    return str(found[0].relative_to(REPO))


def width(arch: dict) -> int:
    """The channels of the backbone's last output (a Swin doubles them at every stage)."""
    return arch['embed_dims'] * 2 ** (len(arch['depths']) - 1) if 'depths' in arch else arch['embed_dims']


def save_classifier(config: str, arch: dict, path: Path, prefix) -> Path:
    """The checkpoint a user gets from the classification ``config`` at tiny size: its model with the backbone's
    ``arch`` (the head and any loss reading the features at its width), initialised and saved as mmengine's
    CheckpointHook saves it (``Runner.save_checkpoint``: ``meta`` and the state dict on the CPU). Without a
    ``prefix`` the backbone's weights alone, as mmseg's converted Swin release holds them."""
    from mmengine.hub import get_config
    from mmengine.registry import MODELS
    from mmengine.runner.checkpoint import get_state_dict, save_checkpoint, weights_to_cpu

    import mmvitreg  # noqa: F401  (mmvitreg.compat: the libraries' configs load)

    cfg = get_config(config) if '::' in config else Config.fromfile(str(REPO / config))
    cfg.model.backbone.arch = arch
    for part in (cfg.model.head, *cfg.model.get('aux_losses', [])):
        if 'in_channels' in part:
            part.in_channels = width(arch)
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(cfg.model)
    model.init_weights()
    state = weights_to_cpu(get_state_dict(model))
    if not prefix:
        state = OrderedDict((k[len('backbone.') :], v) for k, v in state.items() if k.startswith('backbone.'))
    save_checkpoint(dict(meta=dict(epoch=1, iter=1), state_dict=state), str(path))
    return path


@pytest.fixture(scope='module')
def classifiers(tmp_path_factory):
    """``get(config, arch, prefix)``: the saved tiny classifier of ``config`` (:func:`save_classifier`), made once
    and shared by the dense configs that start from it."""
    folder, made = tmp_path_factory.mktemp('classifiers'), {}

    def get(config, arch, prefix='backbone.'):
        key = (config, repr(arch), bool(prefix))
        if key not in made:
            made[key] = save_classifier(config, arch, folder / f'{len(made)}.pth', prefix)
        return made[key]

    return get


def saved_state(path) -> dict:
    return torch.load(path, map_location='cpu', weights_only=False)['state_dict']


def mln_backbone(config: Path, classifiers, source: str = None, arch: dict = None):
    """The dense config's backbone (``_scope_`` dropped: it builds without mmseg) at tiny size, its ``init_cfg``
    (same prefix) pointing at the saved classifier of ``source`` (default: the classification config its checkpoint
    names) with ``arch`` (default: the same tiny arch); with that file and ``source``."""
    from mmvitreg.registry import MODELS
    from mmvitreg.utils import load_config

    backbone = unscoped(load_config(str(config)).to_dict())['model']['backbone']
    init = backbone['init_cfg']
    source = source or classification_config(init['checkpoint'])
    tiny = TINY[backbone['type']]
    ckpt = classifiers(source, arch or tiny, init['prefix'])
    cfg = dict(backbone, arch=tiny, out_indices=(0, 1, 2, 3), init_cfg=dict(init, checkpoint=str(ckpt)))
    return MODELS.build(cfg), ckpt, source


def assert_one_line(error, *fragments):
    message = str(error.value)
    assert '\n' not in message and all(f in message for f in fragments), message


@pytest.mark.parametrize('config', MLN, ids=lambda p: p.stem)
def test_mln_backbone_starts_from_the_classifier_checkpoint_its_comment_names(config, classifiers):
    """init_weights() of each ``_mln_`` backbone (final_norm=False) loads the saved tiny classifier of the
    classification config its comment names: every backbone tensor is the file's (the position embedding resized
    to the dense grid by mmpretrain's hook), and the load reports the final norm, and only it, as unexpected."""
    from mmpretrain.models.utils import resize_pos_embed

    from mmvitreg.engine.checkpoint import is_derived, load_weights

    backbone, ckpt, source = mln_backbone(config, classifiers)
    assert source in config.read_text()  # the comment names the classification config of its checkpoint
    assert backbone.left_out == ('ln1', 'ln2')
    backbone.init_weights()
    saved = saved_state(ckpt)
    for key, tensor in backbone.state_dict().items():
        if key == 'pos_embed':
            grid = int((saved['backbone.pos_embed'].shape[1] - 1) ** 0.5)
            expected = resize_pos_embed(
                saved['backbone.pos_embed'],
                (grid, grid),
                backbone.patch_resolution,
                backbone.interpolate_mode,
                num_extra_tokens=1,
            )
            torch.testing.assert_close(tensor, expected)
        elif not is_derived(key):
            assert torch.equal(tensor, saved[f'backbone.{key}']), key
    report = load_weights(backbone, str(ckpt), 'backbone', 'backbone.')
    assert report.unexpected == ['ln1.weight', 'ln1.bias'] and not report.missing and not report.mismatched


def test_the_backbone_policy_still_refuses_another_architecture_a_dropped_parameter_and_missing_weights(classifiers):
    """From real saved classifiers, each a one-line CheckpointError naming the file: a Swin's into the DeepViT
    UperNet's backbone (nothing fits), a talking-heads DeiT's into the DiversePatch DeiT UperNet's (plain attention:
    the talking-heads projections would be dropped; the final norm, left out, is not listed) and a 2-block DeepViT's
    into the 4-block one (half the blocks would stay random)."""
    from mmvitreg.engine.checkpoint import CheckpointError

    deepvit, deit = (next(p for p in MLN if name in p.name) for name in ('deepvit', 'deit-s_mln_patch'))
    cases = (
        # another architecture: nothing fits
        (
            deepvit,
            'mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py',
            TINY_SWIN,
            ['does not fit the model DeepViT: it would fill 0 of the'],
        ),
        # talking heads in a plain-attention backbone: their projections would be dropped (the final norm is not
        # listed: the backbone leaves it out)
        (
            deit,
            'configs/diversepatch/deit-base12-talking-heads_4xb256-400e_diversepatch_in1k.py',
            dict(TINY['mmvitreg.VisionTransformer'], attn_types='talking_heads'),
            [
                'has 8 parameters the model VisionTransformer has no place for (layers.0.attn.proj_pre.weight, ',
                "attn_types='talking_heads'",
            ],
        ),
        # 2 blocks for 4: half the blocks would stay random
        (
            deepvit,
            'configs/deepvit/deepvit-s_8xb32_in1k.py',
            dict(TINY_DEEPVIT, num_layers=2, attn_types=[False, True]),
            ['does not fit the model DeepViT: it would fill ', ' (at least 90% needed'],
        ),
    )
    for config, source, arch, fragments in cases:
        backbone, ckpt, _ = mln_backbone(config, classifiers, source, arch)
        with pytest.raises(CheckpointError) as e:
            backbone.init_weights()
        assert_one_line(e, f'checkpoint {ckpt} ', *fragments)
        assert 'talking' not in source or 'ln1' not in str(e.value)  # the left-out final norm is not refused


def test_a_swin_backbone_leaves_out_the_norms_of_the_stages_it_does_not_output(classifiers):
    """A Swin's stage norms exist for its ``out_indices`` only: one outputting stages 0-2 starts from a saved Swin
    classifier (its norm3) with norm3 reported unexpected (left out) and its own norm0-2 missing (new)."""
    from mmvitreg.engine.checkpoint import load_weights
    from mmvitreg.registry import MODELS

    ckpt = classifiers('mmpretrain::swin_transformer/swin-tiny_16xb64_in1k.py', TINY_SWIN)
    swin = MODELS.build(
        dict(
            type='mmvitreg.SwinTransformer',
            arch=TINY_SWIN,
            out_indices=(0, 1, 2),
            init_cfg=dict(type='Pretrained', checkpoint=str(ckpt), prefix='backbone.'),
        )
    )
    assert swin.left_out == ('norm3',)
    swin.init_weights()
    report = load_weights(swin, str(ckpt), 'backbone', 'backbone.')
    assert report.unexpected == ['norm3.weight', 'norm3.bias']
    assert sorted(report.missing) == [f'norm{i}.{p}' for i in range(3) for p in ('bias', 'weight')]


@functools.lru_cache()
def demo_cascade_heads() -> dict:
    """The neck and heads of the demo cascade (read once: its bases are looked up in mmdet's metafiles)."""
    demo = Config.fromfile(str(DEMO_CASCADE)).model
    return dict(neck=demo.neck, rpn_head=demo.rpn_head, roi_head=demo.roi_head)


def tiny_dense(config: Path, folder: Path) -> Config:
    """The dense ``config`` at tiny size, its ``init_cfg`` kept: a UperNet by :func:`seg_helpers.shrunk_config` (the
    backbone of :data:`TINY` with its own window, the heads at its widths, the digits crops); a Cascade Mask R-CNN
    with the tiny Swin, the demo cascade's neck and heads and fewer RoIs; any DRLoc at the last output's width."""
    from mmvitreg.utils import load_config

    if 'upernet' in config.name:  # one load: the arch of a ViT-family backbone set once its type is read
        cfg = Config.fromfile(str(shrunk_config(config, folder / f'{config.stem}.json', keep=KEEP)))
        arch = cfg.model.backbone.arch = TINY[cfg.model.backbone.type]
    else:
        cfg = load_config(str(config))
        arch = cfg.model.backbone.arch = TINY[cfg.model.backbone.type]
        cfg.model.update(copy.deepcopy(demo_cascade_heads()))
        # fewer proposals and sampled RoIs per cascade stage (2000 and 512: seconds per CPU step)
        cfg.model.train_cfg.rpn_proposal.update(nms_pre=200, max_per_img=100)
        for stage in cfg.model.train_cfg.rcnn:
            stage.sampler.num = 64
    for loss in cfg.model.get('aux_losses', []):
        if 'in_channels' in loss:
            loss.in_channels = width(arch)
    return cfg


def build_dense(cfg: Config):
    from mmengine.model import revert_sync_batchnorm
    from mmengine.registry import MODELS

    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        return revert_sync_batchnorm(MODELS.build(cfg.model))


@pytest.mark.parametrize('config', DENSE, ids=lambda p: f'{p.parent.name}/{p.stem}')
def test_every_dense_config_starts_from_a_saved_classifier_and_takes_a_training_step(config, classifiers, tmp_path):
    """Each segmentation and detection config at tiny size, its ``init_cfg`` (same prefix) pointing at the saved
    tiny classifier of the classification config its checkpoint names: init_weights() fills at least 90% of the
    backbone with the file's tensors, and a training step returns finite losses. The digits demos name no
    checkpoint (they start from scratch, by design): they are built, initialised and stepped the same way."""
    from mmvitreg.engine.checkpoint import is_derived

    cfg = tiny_dense(config, tmp_path)
    backbone, init = cfg.model.backbone, cfg.model.backbone.init_cfg
    assert not cfg.get('load_from')
    if init is None:
        assert 'digits' in config.stem
    else:
        prefix = init.get('prefix') or ''
        ckpt = classifiers(classification_config(init.checkpoint), backbone.arch, prefix)
        backbone.init_cfg = dict(init, checkpoint=str(ckpt))
    model = build_dense(cfg)
    model.init_weights()
    if init is not None:
        saved = saved_state(ckpt)
        keys = [k for k in model.backbone.state_dict() if not is_derived(k)]
        loaded = [k for k in keys if torch.equal(model.backbone.state_dict()[k], saved.get(prefix + k, torch.empty(0)))]
        assert len(loaded) >= 0.9 * len(keys), sorted(set(keys) - set(loaded))
    model.train()
    if 'decode_head' in cfg.model:
        data = model.data_preprocessor(
            seg_batch(tuple(cfg.model.data_preprocessor.size), cfg.model.decode_head.num_classes), True
        )
    else:
        data = det_batch(model)
    losses = model(**data, mode='loss')
    values = [v for k, v in losses.items() if 'loss' in k]
    values = [t for v in values for t in (v if isinstance(v, (list, tuple)) else [v])]
    assert values and all(torch.isfinite(v).all() for v in values)


def test_a_classifier_checkpoint_loads_into_a_segmentor_without_its_head_and_final_norm(classifiers, tmp_path):
    """``load_from`` shape (the whole file into the whole model, the *backbone* policy): the DeepViT UperNet takes
    the saved classifier's backbone, and the classifier's head (outside the backbone) and final norm (left out) are
    reported unexpected, not refused; a talking-heads classifier into the DiversePatch DeiT UperNet still is."""
    from mmvitreg.engine.checkpoint import CheckpointError, load_weights

    deepvit, deit = (next(p for p in MLN if name in p.name) for name in ('deepvit', 'deit-s_mln_patch'))
    cfg = tiny_dense(deepvit, tmp_path)
    cfg.model.backbone.init_cfg = None
    model = build_dense(cfg)
    ckpt = classifiers('configs/deepvit/deepvit-s_8xb32_in1k.py', TINY_DEEPVIT)
    report = load_weights(model, str(ckpt), 'backbone')
    assert sorted(report.unexpected) == [
        'backbone.ln1.bias',
        'backbone.ln1.weight',
        'head.layers.head.bias',
        'head.layers.head.weight',
    ]
    assert not [k for k in report.missing + list(report.mismatched) if k.startswith('backbone.')]

    cfg = tiny_dense(deit, tmp_path)
    cfg.model.backbone.init_cfg = None
    talking = classifiers(
        'configs/diversepatch/deit-base12-talking-heads_4xb256-400e_diversepatch_in1k.py',
        dict(TINY['mmvitreg.VisionTransformer'], attn_types='talking_heads'),
    )
    with pytest.raises(CheckpointError) as e:
        load_weights(build_dense(cfg), str(talking), 'backbone')
    assert_one_line(e, 'has 8 parameters the model TokenSegmentor has no place for (backbone.layers.0.attn.proj_pre')
