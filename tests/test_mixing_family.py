"""The mixing family: one base draws partner and lam, the token grid has one rule, the plans are not
mmpretrain batch augments, a batch mix is recognised by type, and each mix declares what it mixes (pixels or
tokens): a pixel plan asks nothing of the backbone and trains on every one, CvT and a ResNet included.

``MIX_DRAWS`` is a snapshot, not a re-derivation: ``tests/data/snapshot_mix_draws.py`` printed it on the
code before the mixes were refactored onto :class:`~mmvitreg.models.mixing.BatchMix` (then named ``TokenMix``,
commit c15437c), for seeds 0..2 (the script, run on that commit's ``mmvitreg`` and on the refactored one, prints
the same text). Every plan must still draw exactly these partners and masks, and leave numpy's and torch's generators
where it left them (the next draw of each is recorded too), so a seeded run trains the same.
"""

import importlib.util

import mmpretrain.models  # noqa: F401  (registers mmpretrain's batch augments)
import pytest
import torch
from conftest import REPO
from mmengine.optim import OptimWrapper
from mmengine.registry import DefaultScope
from mmpretrain.models.utils.batch_augments import CutMix
from mmpretrain.registry import BATCH_AUGMENTS as MMPRETRAIN_BATCH_AUGMENTS
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS
from mmpretrain.structures import DataSample

from mmvitreg.models import mixing
from mmvitreg.models.backbones import VisionTransformer
from mmvitreg.models.data_preprocessors import TokenClsDataPreprocessor
from mmvitreg.models.mixing import batch_mix as mix
from mmvitreg.models.trace import TraceRequest, TraceUserError, check_trace_user
from mmvitreg.registry import MODELS

_SPEC = importlib.util.spec_from_file_location('snapshot_mix_draws', REPO / 'tests/data/snapshot_mix_draws.py')
snapshot = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(snapshot)

MIX_DRAWS = {
    'MixToken': [
        ((2, 1, 0), ('1100/1111/1111', '1100/1111/1111', '1100/1111/1111'), None, 0.957155, 0.496257),
        ((2, 1, 0), ('0111/1111/1111', '0111/1111/1111', '0111/1111/1111'), None, 0.396581, 0.757632),
        ((2, 1, 0), ('1111/1111/1111', '1111/1111/1111', '1111/1111/1111'), None, 0.435322, 0.614695),
    ],
    'MixToken-permute': [
        ((2, 0, 1), ('1100/1111/1111', '1100/1111/1111', '1100/1111/1111'), None, 0.957155, 0.088477),
        ((1, 2, 0), ('0111/1111/1111', '0111/1111/1111', '0111/1111/1111'), None, 0.396581, 0.403069),
        ((0, 2, 1), ('1111/1111/1111', '1111/1111/1111', '1111/1111/1111'), None, 0.435322, 0.637114),
    ],
    'MixToken-minmax': [
        ((2, 1, 0), ('1111/1011/1111', '1111/1011/1111', '1111/1011/1111'), None, 0.778157, 0.496257),
        ((2, 1, 0), ('1011/1111/1111', '1011/1111/1111', '1011/1111/1111'), None, 0.18626, 0.757632),
        ((2, 1, 0), ('1111/1111/1111', '1111/1111/1111', '1111/1111/1111'), None, 0.420368, 0.614695),
    ],
    'PatchCutMix': [
        ((2, 1, 0), ('1100/1111/1111', '1100/1111/1111', '1100/1111/1111'), (640.0, 640.0, 640.0), 0.957155, 0.496257),
        ((2, 1, 0), ('0111/1111/1111', '0111/1111/1111', '0111/1111/1111'), (704.0, 704.0, 704.0), 0.396581, 0.757632),
        ((2, 1, 0), ('1111/1111/1111', '1111/1111/1111', '1111/1111/1111'), (768.0, 768.0, 768.0), 0.435322, 0.614695),
    ],
    'PatchCutMix-pixels': [
        (
            (2, 1, 0),
            (
                (1.0, 1.0, 1.0, 1.0, 0.765625, 0.375, 0.375, 0.765625, 0.625, 0.0, 0.0, 0.625),
                (1.0, 1.0, 1.0, 1.0, 0.765625, 0.375, 0.375, 0.765625, 0.625, 0.0, 0.0, 0.625),
                (1.0, 1.0, 1.0, 1.0, 0.765625, 0.375, 0.375, 0.765625, 0.625, 0.0, 0.0, 0.625),
            ),
            (482.0, 482.0, 482.0),
            0.83262,
            0.496257,
        ),
        (
            (2, 1, 0),
            (
                (0.5, 0.5625, 1.0, 1.0, 0.0, 0.125, 1.0, 1.0, 0.0, 0.125, 1.0, 1.0),
                (0.5, 0.5625, 1.0, 1.0, 0.0, 0.125, 1.0, 1.0, 0.0, 0.125, 1.0, 1.0),
                (0.5, 0.5625, 1.0, 1.0, 0.0, 0.125, 1.0, 1.0, 0.0, 0.125, 1.0, 1.0),
            ),
            (468.0, 468.0, 468.0),
            0.092339,
            0.757632,
        ),
        (
            (2, 1, 0),
            (
                (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.625, 1.0, 1.0),
                (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.625, 1.0, 1.0),
                (1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.625, 1.0, 1.0),
            ),
            (744.0, 744.0, 744.0),
            0.435322,
            0.614695,
        ),
    ],
    'PatchCutMix-permute': [
        ((2, 0, 1), ('1100/1100/1111', '1100/1100/1111', '1100/1100/1111'), (512.0, 512.0, 512.0), 0.645894, 0.088477),
        ((1, 2, 0), ('1100/1100/1111', '1100/1100/1111', '1100/1100/1111'), (512.0, 512.0, 512.0), 0.999041, 0.403069),
        ((0, 2, 1), ('1111/1111/1111', '1111/1111/1111', '1111/1111/1111'), (768.0, 768.0, 768.0), 0.435322, 0.637114),
    ],
    'PixelMixup': [
        ((2, 1, 0), (0.531506, 0.531506, 0.531506), (408.1967, 408.1967, 408.1967), 0.423655, 0.496257),
        ((2, 1, 0), (0.335547, 0.335547, 0.335547), (257.6998, 257.6998, 257.6998), 0.000114, 0.757632),
        ((2, 1, 0), (0.971473, 0.971473, 0.971473), (746.0913, 746.0913, 746.0913), 0.549662, 0.614695),
    ],
    'MixupCutMixSwitch': [
        ((2, 1, 0), (0.577999, 0.577999, 0.577999), (443.9034, 443.9034, 443.9034), 0.645894, 0.496257),
        ((2, 1, 0), ('1111/1111/1111', '1111/1111/1111', '1111/1111/1111'), (768.0, 768.0, 768.0), 0.236089, 0.757632),
        ((2, 1, 0), ('1111/1100/1100', '1111/1100/1100', '1111/1100/1100'), (512.0, 512.0, 512.0), 0.420368, 0.614695),
    ],
    'RandomPatchMix': [
        ((2, 1, 0), ('1001/0110/0001', '0010/0000/0001', '1111/1101/0111'), (320.0, 128.0, 640.0), 0.102045, 0.496257),
        ((2, 1, 0), ('0000/0000/0000', '1110/1011/1011', '1111/1110/1111'), (0.0, 576.0, 704.0), 0.315516, 0.757632),
        ((2, 1, 0), ('1111/1111/1110', '1111/1111/1010', '1111/1111/1110'), (704.0, 640.0, 704.0), 0.220306, 0.614695),
    ],
    'BlockMix': [
        ((2, 1, 0), ('0110/0100/1100', '0010/0000/0000', '0111/0001/1111'), (320.0, 64.0, 512.0), 0.622846, 0.496257),
        ((2, 1, 0), ('0000/0000/0000', '1100/1110/1110', '1111/1111/1111'), (0.0, 512.0, 768.0), 0.750144, 0.757632),
        ((2, 1, 0), ('1110/1111/1111', '0011/0011/0111', '0001/0100/0011'), (704.0, 448.0, 256.0), 0.201743, 0.614695),
    ],
    'BlockMix-permute': [
        ((2, 0, 1), ('1001/1001/0001', '0011/1111/1101', '0001/0001/0001'), (320.0, 576.0, 192.0), 0.634274, 0.088477),
        ((1, 2, 0), ('0000/0000/0000', '0011/0001/0011', '1011/1011/1111'), (0.0, 320.0, 640.0), 0.411788, 0.403069),
        ((0, 2, 1), ('1110/1111/1111', '1111/0100/1100', '1111/1111/1110'), (704.0, 448.0, 704.0), 0.220306, 0.637114),
    ],
}


@pytest.mark.parametrize('name,cls_name,kwargs', snapshot.CASES, ids=[c[0] for c in snapshot.CASES])
def test_every_plan_draws_what_it_drew_before_the_refactor(name, cls_name, kwargs):
    assert [snapshot.draws(cls_name, kwargs, seed) for seed in snapshot.SEEDS] == MIX_DRAWS[name]


def test_the_plans_are_models_not_mmpretrain_batch_augments():
    names = {c[1] for c in snapshot.CASES}
    plans = {n for n, cls in MODELS.module_dict.items() if isinstance(cls, type) and issubclass(cls, mixing.BatchMix)}
    assert plans == names  # every registered plan is pinned by the snapshot above
    for registry in [MMPRETRAIN_BATCH_AUGMENTS, *MMPRETRAIN_BATCH_AUGMENTS.children.values()]:
        assert not names & set(registry.module_dict), registry.scope
    for name in names:
        assert not hasattr(MODELS.get(f'mmvitreg.{name}'), 'mix')  # nothing that pretends to be a batch augment


def test_a_batch_mix_is_recognised_by_type():
    """The data preprocessor takes a BatchMix, built or as a config; anything else is refused by type, also an
    object that has a ``plan`` method."""
    assert (
        type(TokenClsDataPreprocessor(num_classes=3, mix=dict(type='mmvitreg.PatchCutMix')).mix) is mixing.PatchCutMix
    )
    mix = mixing.MixToken(patch_size=8)
    assert TokenClsDataPreprocessor(num_classes=3, mix=mix).mix is mix

    class LooksLikeAPlan:
        def plan(self, inputs):
            return None

    for not_a_mix, name in (
        (LooksLikeAPlan(), 'LooksLikeAPlan'),
        (CutMix(alpha=1.0), 'CutMix'),
        (dict(type='mmvitreg.PatchCosineLoss'), 'PatchCosineLoss'),
    ):
        with pytest.raises(TypeError) as error:
            TokenClsDataPreprocessor(num_classes=3, mix=not_a_mix)
        assert str(error.value) == (
            f'mix must be a batch mix of mmvitreg (a BatchMix: MixToken, PatchCutMix, '
            f'PixelMixup, ...), got {name}; image-level augments such as mmpretrain\'s '
            'Mixup/CutMix go in train_cfg.augments'
        )


@pytest.mark.parametrize('name,cls_name,kwargs', snapshot.CASES, ids=[c[0] for c in snapshot.CASES])
def test_one_token_grid_rule_as_the_backbones(name, cls_name, kwargs):
    """An input that is not a multiple of the patch size: every plan covers the grid the backbone pads it to
    (``ceil(H / p)``), and a pixel mask is the token mask in whole patches, cropped to the image."""
    vit = VisionTransformer(
        arch=dict(embed_dims=8, num_layers=1, num_heads=1, feedforward_channels=8), patch_size=8, img_size=32
    )
    x = torch.zeros(2, 3, 30, 41)
    plan = getattr(mixing, cls_name)(patch_size=8, **kwargs).plan(x)
    assert tuple(plan.mask.shape[1:]) == tuple(vit.patch_embed(x)[1]) == (4, 6)
    if plan.pixel_mask is not None and name != 'PatchCutMix-pixels':
        assert torch.equal(plan.pixel_mask, plan.mask.repeat_interleave(8, 1).repeat_interleave(8, 2)[:, :30, :41])


@pytest.mark.parametrize(
    'backbone,patch',
    [
        (
            dict(
                type='mmvitreg.VisionTransformer',
                arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=16),
                img_size=32,
                patch_size=8,
            ),
            8,
        ),
        (
            dict(
                type='mmvitreg.SwinTransformer',
                arch=dict(embed_dims=16, depths=[2, 2], num_heads=[2, 2]),
                img_size=32,
                window_size=3,
                out_indices=(1,),
            ),
            4,
        ),
    ],
    ids=['vit', 'swin'],
)
@pytest.mark.parametrize('mix', ['MixToken', 'PatchCutMix'])
def test_an_input_the_backbone_pads_trains_with_every_plan(backbone, patch, mix):
    """30x41 images (not a multiple of the patch): the backbone embeds them on its padded grid, which is the
    plan's grid, so the token mix (in the backbone) and the pixel mix (in the preprocessor) both train."""
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone,
        head=dict(
            type='mmpretrain.LinearClsHead',
            num_classes=3,
            in_channels=backbone['arch']['embed_dims'] * (2 if 'Swin' in backbone['type'] else 1),
        ),
        train_cfg=dict(mix=dict(type=f'mmvitreg.{mix}', patch_size=patch)),
        data_preprocessor=dict(num_classes=3),
    )
    if 'Swin' in backbone['type']:
        cfg['neck'] = dict(type='mmpretrain.GlobalAveragePooling')
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MMPRETRAIN_MODELS.build(cfg)
    torch.manual_seed(0)
    data = model.data_preprocessor(
        dict(
            inputs=torch.randint(0, 255, (2, 3, 30, 41), dtype=torch.uint8),
            data_samples=[DataSample().set_gt_label(i) for i in range(2)],
        ),
        training=True,
    )
    grid = (-(-30 // patch), -(-41 // patch))
    assert tuple(data['mix_plan'].mask.shape) == (2, *grid)
    loss = model(**data, mode='loss')['loss']
    assert torch.isfinite(loss)


@pytest.mark.parametrize(
    'cls_name,redraws',
    [('MixToken', False), ('PatchCutMix', True), ('PixelMixup', True), ('RandomPatchMix', True), ('BlockMix', True)],
)
def test_lam_of_1_is_drawn_again_except_by_lvvit_mixtoken(monkeypatch, cls_name, redraws):
    """TL-Align's ``while lam == 1.`` (its CutMix, and this package's other plans); LV-ViT's MixToken draws once."""
    mixing.batch_mix.np.random.seed(0)  # the box / token draws (BlockMix may stop short of its count)
    draws = iter([1.0, 0.5] * 3)
    monkeypatch.setattr(mixing.batch_mix.np.random, 'beta', lambda a, b: next(draws))
    plan = getattr(mixing, cls_name)(patch_size=8).plan(torch.zeros(1, 3, 32, 32))
    assert torch.all(plan.lam < 1) if redraws else torch.all(plan.lam == 1)
    assert next(draws) == (1.0 if redraws else 0.5)


# ---- what a plan mixes is declared, and its request follows from it (issue 32.3)

PIXEL_PLANS = ['PatchCutMix', 'PixelMixup', 'MixupCutMixSwitch', 'RandomPatchMix', 'BlockMix']


def test_every_plan_declares_what_it_mixes_and_asks_only_that():
    """Each registered plan states its space; a pixel plan asks nothing of the backbone, a token plan the service
    ``'mix'``; PatchCutMix is no longer a MixToken (it shares only the CutMix box with it)."""
    spaces = {name: MODELS.get(f'mmvitreg.{name}').space for name in {c[1] for c in snapshot.CASES}}
    assert spaces == {'MixToken': 'tokens', **{name: 'pixels' for name in PIXEL_PLANS}}
    for name, space in spaces.items():
        request = MODELS.build(dict(type=f'mmvitreg.{name}')).trace_request
        assert request == (TraceRequest(services={'mix'}, patch_size=16) if space == 'tokens' else TraceRequest()), name
        assert not request.needs_trace if space == 'pixels' else request.all_services == {'mix'}
    assert not issubclass(mixing.PatchCutMix, mixing.MixToken)
    with pytest.raises(TypeError, match="Odd.space must be one of \\['pixels', 'tokens'\\], got 'voxels'"):
        type('Odd', (mixing.BatchMix,), dict(space='voxels'))


def test_a_plan_whose_masks_contradict_its_space_is_refused():
    """The declaration is checked against what the plan draws: a pixel mask exactly for a pixel plan."""

    class Mislabelled(mixing.PixelMixup):
        space = 'tokens'

    with pytest.raises(TypeError, match="Mislabelled declares space='tokens' but its masks have a pixel mask"):
        Mislabelled(patch_size=8).plan(torch.zeros(2, 3, 16, 16))


def tiny_cvt():
    return dict(
        type='mmvitreg.CvT',
        arch=dict(embed_dims=(8, 16), depths=(1, 1), num_heads=(1, 2)),
        embed_kernels=(3, 3),
        embed_strides=(4, 2),
        embed_paddings=(1, 1),
        drop_path_rate=0.0,
    )


def test_the_backbones_check_pixel_and_token_plans_by_what_they_mix():
    """Build-time check on CvT, which has no ``'mix'`` service: every pixel plan passes, MixToken is refused
    naming the service; on a ResNet (no trace at all) the pixel plans pass too."""
    cvt = MMPRETRAIN_MODELS.build(tiny_cvt())
    resnet = MMPRETRAIN_MODELS.build(dict(type='mmpretrain.ResNet', depth=18))
    for name in PIXEL_PLANS:
        for backbone in (cvt, resnet):
            check_trace_user(backbone, MODELS.build(dict(type=f'mmvitreg.{name}')).trace_request, name)
    with pytest.raises(TraceUserError, match=r"MixToken needs the service \['mix'\].*CvT"):
        check_trace_user(cvt, mixing.MixToken().trace_request, 'MixToken')


@pytest.mark.parametrize('model', ['cvt', 'cvt+drloc', 'resnet'])
@pytest.mark.parametrize('plan', PIXEL_PLANS)
def test_every_pixel_plan_trains_on_every_backbone(plan, model):
    """One training step of every pixel plan on a tiny CvT (alone: no trace; with DRLoc reading its last stage's
    tokens: the plan rides in the trace and CvT leaves its tokens alone) and on an mmpretrain ResNet (no trace):
    the images are mixed in the preprocessor, the losses are finite and the weights move."""
    if model == 'resnet':
        backbone = dict(
            type='mmpretrain.ResNet', depth=18, num_stages=1, strides=(1,), dilations=(1,), out_indices=(0,)
        )
        neck, channels = dict(type='mmpretrain.GlobalAveragePooling'), 64
    else:
        backbone, neck, channels = tiny_cvt(), None, 16
    aux = [dict(type='mmvitreg.DRLoc', in_channels=16, layers=(-1,))] if model == 'cvt+drloc' else []
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone,
        neck=neck,
        aux_losses=aux,
        head=dict(
            type='mmpretrain.LinearClsHead',
            num_classes=3,
            in_channels=channels,
            loss=dict(type='mmpretrain.CrossEntropyLoss', use_soft=True),
        ),
        train_cfg=dict(mix=dict(type=f'mmvitreg.{plan}', patch_size=8)),
        data_preprocessor=dict(num_classes=3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model_ = MMPRETRAIN_MODELS.build(cfg)
    torch.manual_seed(0)
    mix.np.random.seed(0)
    data = dict(
        inputs=torch.randint(0, 255, (4, 3, 32, 32), dtype=torch.uint8),
        data_samples=[DataSample().set_gt_label(i % 3) for i in range(4)],
    )
    before = [p.detach().clone() for p in model_.backbone.parameters()]
    log = model_.train_step(data, OptimWrapper(torch.optim.SGD(model_.parameters(), lr=0.1)))
    assert set(log) == {'loss', 'loss_cls'} | ({'loss_drloc'} if aux else set())
    assert all(torch.isfinite(v) for v in log.values())
    assert any(not torch.equal(a, b) for a, b in zip(before, model_.backbone.parameters()))


# ---- a plan on the backbone's grid is checked when the model is built (issue 35.4)


def grid_model(plan: str, patch: int, backbone: str = 'vit', tl_align: bool = False, train_cfg=None):
    """A tiny TokenClassifier (ViT patch 8 or Swin patch 4 at 32x32) with the mix ``plan`` at ``patch`` pixels
    (or ``train_cfg`` as given)."""
    if backbone == 'vit':
        backbone_cfg = dict(
            type='mmvitreg.VisionTransformer',
            arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=16),
            img_size=32,
            patch_size=8,
        )
    else:
        backbone_cfg = dict(
            type='mmvitreg.SwinTransformer',
            arch=dict(embed_dims=8, depths=(1, 1), num_heads=(1, 1)),
            img_size=32,
            window_size=2,
            out_indices=(1,),
        )
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=backbone_cfg,
        neck=dict(type='mmpretrain.GlobalAveragePooling') if backbone == 'swin' else None,
        head=dict(type='mmpretrain.LinearClsHead', num_classes=3, in_channels=16),
        target_transform=dict(type='mmvitreg.TLAlign') if tl_align else None,
        train_cfg=train_cfg or dict(mix=dict(type=f'mmvitreg.{plan}', patch_size=patch)),
        data_preprocessor=dict(num_classes=3),
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        return MMPRETRAIN_MODELS.build(cfg)


def test_a_plan_of_another_patch_size_is_refused_when_the_model_is_built():
    """TL-Align with a plan of patch size 5 on a ViT with patch 8 was refused only at the first training step. A
    plan that the backbone mixes (MixToken) or that a stream starts from (TL-Align's initial labels) lies on the
    backbone's token grid, so its patch size is now checked against the backbone's token stride when the model is
    built, naming the fix; a pixel plan that nothing reads on that grid (DiversePatch's coarser boxes on Swin)
    stays free."""
    with pytest.raises(TraceUserError) as error:
        grid_model('PatchCutMix', 5, tl_align=True)
    assert str(error.value) == (
        "PatchCutMix, the plan TLAlign starts from, draws its plan on 5-pixel patches but "
        "VisionTransformer embeds 8-pixel patches: set the plan's patch_size=8 (the "
        "backbone's token stride)"
    )
    with pytest.raises(
        TraceUserError,
        match="^MixToken draws its plan on 5-pixel patches but VisionTransformer "
        "embeds 8-pixel patches: set the plan's patch_size=8",
    ):
        grid_model('MixToken', 5)
    with pytest.raises(
        TraceUserError,
        match="^PixelMixup, the plan TLAlign starts from, draws its plan on 8-pixel "
        "patches but SwinTransformer embeds 4-pixel patches",
    ):
        grid_model('PixelMixup', 8, 'swin', tl_align=True)
    for args in (
        ('PatchCutMix', 8, 'vit', True),
        ('MixToken', 8, 'vit'),
        ('PatchCutMix', 4, 'swin', True),
        ('PatchCutMix', 16, 'vit'),
        ('PatchCutMix', 16, 'swin'),
    ):
        assert grid_model(*args).backbone.trace_spec.patch_stride == (8 if args[2] == 'vit' else 4)
