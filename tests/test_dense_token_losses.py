"""The token losses in segmentation and detection training (issue 24): mmvitreg.TokenSegmentor (mmseg's
EncoderDecoder) and mmvitreg.TokenCascadeRCNN (mmdet's CascadeRCNN) take ``aux_losses`` through the one
TraceUsers wiring. The backbone runs once per training step, the library's own losses and the users' named
losses come back together and train the backbone, on Swin (pad_small_map, non-square crops, grids that are
not whole windows) and on a ViT with out_type='featmap' behind mmseg's MultiLevelNeck; the users a model kind
cannot serve are refused when it is built. The end-to-end part trains, resumes exactly and tests both kinds
through tools/train.py, tools/test.py (--tta for segmentation) and tools/dist_train.sh with 2 CPU processes
on tiny digits sets."""

import json
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from conftest import CONFIGS, REPO, free_port, run_tool, tool_env
from guard_helpers import tool
from mmengine.config import Config
from mmengine.model import BaseModule
from mmengine.registry import MODELS, DefaultScope
from mmengine.structures import PixelData

from mmvitreg.models.losses import DRLoc
from mmvitreg.models.trace import TraceRequest, TraceUserError
from mmvitreg.models.trace_users import BackboneOutputs, TraceUsers
from mmvitreg.registry import MODELS as MMVITREG_MODELS
from mmvitreg.utils import ConfigError, check_trace_users

SEG = CONFIGS / 'demo' / 'upernet_swin-nano_1xb8-300_drloc_digits-ade20k-128x128.py'
DET = CONFIGS / 'demo' / 'cascade-mask-rcnn_swin-nano_fpn_1xb4-4e_drloc_digits-coco.py'
CROP = (88, 136)  # Swin: 22x34 tokens (not whole 4x4 windows), 3x5 in the last stage (padded); ViT/16: 6x9
TINY_VIT = dict(
    type='mmvitreg.VisionTransformer',
    arch=dict(embed_dims=32, num_layers=4, num_heads=2, feedforward_channels=64),
    img_size=128,
    patch_size=16,
    out_type='featmap',
    out_indices=(0, 1, 2, 3),
    final_norm=False,
    init_cfg=None,
)
DRLOC = dict(type='mmvitreg.DRLoc', in_channels=256, layers=(-1,), reduction='mean')


def seg_model(aux_losses=None, vit=False, **model):
    """The digits UperNet (Swin-nano, or a 4-block ViT behind mmseg's MultiLevelNeck) as a TokenSegmentor."""
    cfg = Config.fromfile(str(SEG))
    if aux_losses is not None:
        cfg.model.aux_losses = aux_losses
    if vit:
        cfg.model.backbone = TINY_VIT
        cfg.model.neck = dict(type='MultiLevelNeck', in_channels=[32] * 4, out_channels=32, scales=[4, 2, 1, 0.5])
        cfg.model.decode_head.in_channels = [32] * 4
        cfg.model.auxiliary_head.in_channels = 32
    cfg.model.update(model)
    with DefaultScope.overwrite_default_scope('mmseg'):
        return MODELS.build(cfg.model)


def det_model(aux_losses=None, **model):
    cfg = Config.fromfile(str(DET))
    if aux_losses is not None:
        cfg.model.aux_losses = aux_losses
    cfg.model.update(model)
    with DefaultScope.overwrite_default_scope('mmdet'):
        return MODELS.build(cfg.model)


def seg_batch(size=CROP, batch=2):
    from mmseg.structures import SegDataSample

    torch.manual_seed(0)
    samples = []
    for _ in range(batch):
        sample = SegDataSample(metainfo=dict(img_shape=size, ori_shape=size, pad_shape=size))
        sample.gt_sem_seg = PixelData(data=torch.randint(0, 11, (1, *size)))
        samples.append(sample)
    return torch.randn(batch, 3, *size), samples


def det_batch(model):
    from mmdet.testing import demo_mm_inputs

    data = demo_mm_inputs(2, [(3, 88, 136), (3, 120, 72)], with_mask=True, num_classes=10)
    return model.data_preprocessor(data, True)


def spy_backbone(model):
    """Record the trace of every backbone call."""
    calls, forward = [], model.backbone.forward
    model.backbone.forward = lambda x, trace=None: calls.append(trace) or forward(x, trace=trace)
    return calls


def spy_grids(model):
    """Record the grid of every map a DRLoc samples its pairs on."""
    grids = []
    for aux in model.aux_losses:
        if isinstance(aux, DRLoc):
            sample = aux.sample_pairs
            aux.sample_pairs = lambda batch, grid, device, sample=sample: (
                grids.append(tuple(grid)) or sample(batch, grid, device)
            )
    return grids


def total(losses):
    return sum(v for k, v in losses.items() if 'loss' in k)


SEG_CASES = {
    # the last stage as one map, the four stages after patch merging (the official multi-scale form), the cosine
    'swin': (
        dict(),
        [
            DRLOC,
            dict(
                type='mmvitreg.DRLoc',
                in_channels=(64, 128, 256, 256),
                stages=(0, 1, 2, 3),
                reduction='mean',
                loss_name='loss_drloc_ms',
            ),
            dict(type='mmvitreg.PatchCosineLoss'),
        ],
        {'loss_drloc', 'loss_drloc_ms', 'loss_patch_cos'},
        [(3, 5), (11, 17), (6, 9), (3, 5), (3, 5)],
    ),
    # the official contrastive form (7x7 neighbourhood on the 6x9 grid), the final-norm cosine, the attention maps
    'vit': (
        dict(vit=True),
        [
            dict(DRLOC, in_channels=32),
            dict(type='mmvitreg.PatchCosineLoss', tokens='final_norm'),
            dict(type='mmvitreg.PatchContrastiveLoss', form='official'),
            dict(type='mmvitreg.AttentionCosineLoss', num_pairs=3),
        ],
        {'loss_drloc', 'loss_patch_cos', 'loss_patch_contrastive', 'loss_attn_cos'},
        [(6, 9)],
    ),
    'vit-paper-contrastive': (
        dict(vit=True),
        [dict(type='mmvitreg.PatchContrastiveLoss')],
        {'loss_patch_contrastive'},
        [],
    ),
}


@pytest.mark.parametrize('case', sorted(SEG_CASES))
def test_segmentor_adds_the_users_losses_on_one_backbone_run(case):
    options, aux_losses, names, grids = SEG_CASES[case]
    model = seg_model(aux_losses, **options)
    assert type(model).__name__ == 'TokenSegmentor' and model.with_neck == options.get('vit', False)
    calls, drawn = spy_backbone(model), spy_grids(model)
    inputs, samples = seg_batch()
    losses = model(inputs, samples, mode='loss')
    assert len(calls) == 1 and calls[0] is not None  # one backbone run, with the trace
    assert set(losses) == {'decode.loss_ce', 'decode.acc_seg', 'aux.loss_ce', 'aux.acc_seg'} | names
    assert drawn == grids  # DRLoc samples on each non-square grid as it is
    assert all(torch.isfinite(losses[n]) for n in names)
    total(losses).backward()
    assert model.backbone.patch_embed.projection.weight.grad.abs().sum() > 0
    for aux in model.aux_losses:
        assert all(p.grad is not None for p in aux.parameters())  # the DRLoc MLPs train

    calls.clear()
    model.eval()
    with torch.no_grad():
        pred = model.predict(inputs, samples)
        model(inputs, samples, mode='tensor')
    assert calls == [None, None]  # inference: no trace
    assert pred[0].pred_sem_seg.data.shape[-2:] == CROP


def test_detector_adds_the_users_losses_after_mmdets_on_one_backbone_run():
    model = det_model([DRLOC | dict(in_channels=128), dict(type='mmvitreg.PatchCosineLoss')])
    assert type(model).__name__ == 'TokenCascadeRCNN'
    calls = spy_backbone(model)
    data = det_batch(model)
    losses = model(**data, mode='loss')
    assert len(calls) == 1 and calls[0] is not None
    assert {'loss_rpn_cls', 'loss_rpn_bbox', 's0.loss_cls', 's2.loss_mask'} <= set(losses)  # mmdet's names
    assert {'loss_drloc', 'loss_patch_cos'} <= set(losses)
    model.parse_losses(losses)[0].backward()
    assert model.backbone.patch_embed.projection.weight.grad.abs().sum() > 0
    assert model.aux_losses[0].heads[0].trunk[0].weight.grad is not None

    calls.clear()
    model.eval()
    with torch.no_grad():
        model(**data, mode='predict')
    assert calls == [None]


def test_a_user_loss_named_as_mmdets_is_an_error():
    model = det_model([DRLOC | dict(in_channels=128, loss_name='loss_rpn_cls')])
    with pytest.raises(KeyError, match="DRLoc returns the loss 'loss_rpn_cls', which another part of this model"):
        model(**det_batch(model), mode='loss')


def test_the_librarys_loss_gets_the_backbone_outputs_explicitly():
    """The library's own loss runs unchanged on the outputs of the one traced backbone run, handed to it in place
    of the images (BackboneOutputs): its extract_feat takes them through the neck; no state is kept between the
    calls, so a second extraction cannot run the backbone again."""
    model = seg_model()
    calls, seen = spy_backbone(model), []
    extract = model.extract_feat
    model.extract_feat = lambda x: seen.append(type(x)) or extract(x)
    losses = model(*seg_batch(), mode='loss')
    assert seen == [BackboneOutputs] and len(calls) == 1 and calls[0] is not None
    assert 'loss_drloc' in losses and 'decode.loss_ce' in losses


def test_one_composition_skeleton_for_every_model_kind():
    """Classifier, segmentor and detectors train through the same TraceUsers.loss, mixed in before the library's
    class; only the model kind's own terms (model_losses) differ."""
    from mmdet.models.detectors import TwoStageDetector
    from mmpretrain.models import ImageClassifier
    from mmseg.models.segmentors import EncoderDecoder

    from mmvitreg.models.classifiers import TokenClassifier
    from mmvitreg.models.detectors import DETECTORS
    from mmvitreg.models.segmentors import TokenSegmentor

    kinds = [(TokenClassifier, ImageClassifier), (TokenSegmentor, EncoderDecoder)]
    kinds += [(MMVITREG_MODELS.get(name), TwoStageDetector) for name in DETECTORS]
    for model, library in kinds:
        assert model.loss is TraceUsers.loss and model.extract_feat is not library.extract_feat, model.__name__
        assert model.__mro__.index(TraceUsers) < model.__mro__.index(library), model.__name__


@MMVITREG_MODELS.register_module(name='ToyTokenScale', force=True)
class TokenScale(BaseModule):
    """A target transform that needs no image-level target: it reads the last block and logs a scalar."""

    trace_request = TraceRequest(token_layers=(-1,))

    def transform(self, trace, data_samples):
        return {'token_scale': trace.patch_tokens(-1).detach().abs().mean()}


def test_a_target_transform_acts_in_every_model_kind():
    """The composition rule is one skeleton: a target transform a segmentor can serve is applied there too
    (before the library's loss), and its scalar is returned beside the losses."""
    model = seg_model(target_transform=dict(type='mmvitreg.ToyTokenScale'))
    losses = model(*seg_batch(), mode='loss')
    assert {'token_scale', 'loss_drloc', 'decode.loss_ce'} <= set(losses) and losses['token_scale'] > 0


def test_a_refusal_points_to_the_table_instead_of_building_every_user(monkeypatch):
    """The refusal of a user that needs an image-level target names the fix and the tool that lists the users a
    segmentor serves; it builds no other user to word itself."""
    from mmvitreg.models.losses import DRLoc

    built, init = [], DRLoc.__init__
    monkeypatch.setattr(DRLoc, '__init__', lambda self, *args, **kwargs: built.append(1) or init(self, *args, **kwargs))
    with pytest.raises(TraceUserError) as err:
        seg_model([dict(type='mmvitreg.TLAlign')])
    assert str(err.value).endswith(
        'use it in an image classifier (mmvitreg.TokenClassifier), or a token loss that '
        'needs no label here (python tools/analysis_tools/trace_support.py --model-kind '
        'seg lists them)'
    )
    assert not built


IMAGE_TARGET = 'trains with an image-level target (one label per image), which {} does not have'
REFUSED = {
    'tlalign': (dict(aux_losses=[dict(type='mmvitreg.TLAlign')]), TraceUserError, 'TLAlign ' + IMAGE_TARGET),
    'tlalign-transform': (
        dict(target_transform=dict(type='mmvitreg.TLAlign')),
        TraceUserError,
        'TLAlign ' + IMAGE_TARGET,
    ),
    'mixtoken': (dict(train_cfg=dict(mix=dict(type='mmvitreg.MixToken'))), TraceUserError, 'MixToken ' + IMAGE_TARGET),
    'token-label-head': (
        dict(aux_losses=[dict(type='mmvitreg.TokenLabelHead', num_classes=11, in_channels=256)]),
        TraceUserError,
        'TokenLabelHead ' + IMAGE_TARGET,
    ),
    'patch-mixing': (
        dict(aux_losses=[dict(type='mmvitreg.PatchMixingLoss', num_classes=11, in_channels=256)]),
        TraceUserError,
        'PatchMixingLoss ' + IMAGE_TARGET,
    ),
    'contrastive-on-swin': (
        dict(aux_losses=[dict(type='mmvitreg.PatchContrastiveLoss')]),
        TraceUserError,
        "PatchContrastiveLoss needs the fact ['isotropic']",
    ),
    'tap-past-the-last-block': (
        dict(aux_losses=[dict(DRLOC, layers=(8,))]),
        TraceUserError,
        'DRLoc taps the tokens of a block that SwinTransformer does not have',
    ),
}


@pytest.mark.parametrize('kind', ['seg', 'det'])
@pytest.mark.parametrize('case', sorted(REFUSED))
def test_users_a_model_kind_cannot_serve_fail_at_build_time(case, kind):
    change, error, message = REFUSED[case]
    if kind == 'det':
        change = {k: v for k, v in change.items() if k != 'train_cfg'} or dict(
            train_cfg=dict(Config.fromfile(str(DET)).model.train_cfg, mix=dict(type='mmvitreg.MixToken'))
        )
        message = message.format('TokenCascadeRCNN')
    with pytest.raises(error, match=re.escape(message.format('TokenSegmentor'))):
        (seg_model if kind == 'seg' else det_model)(**change)


def test_attention_maps_past_the_last_vit_block_are_refused():
    with pytest.raises(
        TraceUserError,
        match='AttentionCosineLoss taps the attention maps of a block that VisionTransformer does not have',
    ):
        seg_model([dict(type='mmvitreg.AttentionCosineLoss', num_pairs=4)], vit=True)


def test_train_py_refuses_before_the_runner_starts():
    cfg = Config.fromfile(str(SEG))
    cfg.model.aux_losses = [dict(type='mmvitreg.TLAlign')]
    with pytest.raises(ConfigError, match=re.escape('model: TLAlign ' + IMAGE_TARGET.format('TokenSegmentor'))):
        check_trace_users(cfg)


def test_drloc_draws_distinct_pairs_on_a_detectors_large_grid():
    """On a grid of more than 1024 tokens the distinct pairs come from O(m) draws, not (HW)^2 numbers."""
    loss = DRLoc(in_channels=8)
    torch.manual_seed(0)
    p1, p2 = loss.sample_pairs(3, (100, 167), 'cpu')  # stage 0 after merging at 800x1333: 2.8e8 pairs per image
    assert p1.shape == p2.shape == (3, 64, 2)
    assert (p1[..., 0] < 100).all() and (p1[..., 1] < 167).all() and (p2[..., 0] < 100).all()
    pairs = (p1[..., 0] * 167 + p1[..., 1]) * 16700 + p2[..., 0] * 167 + p2[..., 1]
    assert all(len(set(row.tolist())) == 64 for row in pairs)
    first = torch.cat([loss._distinct(200, 2000**2, 'cpu')[:, 0] for _ in range(5)]).double() / 2000**2
    assert abs(first.mean() - 0.5) < 0.05  # uniform over the pairs, also in draw order


def test_the_names_stay_registered_when_mmseg_models_do_not_import():
    """On mmcv-lite mmseg's and mmdet's models do not import: the rest of mmvitreg does, and building a
    TokenSegmentor says why it cannot be."""
    code = textwrap.dedent('''
        import sys
        sys.modules['mmseg.models'] = None  # as when mmcv's compiled ops are missing
        from mmvitreg.registry import MODELS
        MODELS.import_from_location()
        assert MODELS.get('DRLoc') is not None
        try:
            MODELS.build(dict(type='TokenSegmentor'))
        except ImportError as e:
            print(e)
    ''')
    proc = subprocess.run([sys.executable, '-c', code], env=tool_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "mmvitreg.TokenSegmentor is built on mmseg's models, which do not import here" in proc.stdout


# ---------------------------------------------------------------- end to end: the tools on the digits sets
SEG_RUN = f'''
_base_ = '{SEG}'
model = dict(aux_losses=[{DRLOC!r}, dict(type='mmvitreg.PatchCosineLoss')])
loader = dict(num_workers=0, persistent_workers=False)
train_dataloader = dict(batch_size=2, sampler=dict(_delete_=True, type='DefaultSampler', shuffle=True), **loader)
val_dataloader = dict(**loader)
test_dataloader = val_dataloader
# epoch-based: mmengine's iter-based loop re-reads the batches it skips on resume (RNGStateHook)
train_cfg = dict(_delete_=True, type='EpochBasedTrainLoop', max_epochs=2, val_interval=1)
default_hooks = dict(checkpoint=dict(by_epoch=True, interval=1, max_keep_ckpts=-1), logger=dict(interval=1))
log_processor = dict(by_epoch=True)
randomness = dict(seed=0, deterministic=True)
'''
DET_RUN = f'''
_base_ = '{DET}'
model = dict(aux_losses=[{dict(DRLOC, in_channels=128)!r}, dict(type='mmvitreg.PatchCosineLoss')])
loader = dict(num_workers=0, persistent_workers=False)
train_dataloader = dict(batch_size=1, dataset=dict(indices=2), **loader)  # a CPU iteration takes seconds
val_dataloader = dict(**loader)
test_dataloader = val_dataloader
train_cfg = dict(max_epochs=2, val_interval=1)
default_hooks = dict(checkpoint=dict(interval=1, max_keep_ckpts=-1), logger=dict(interval=1))
randomness = dict(seed=0, deterministic=True)
'''
USERS = {'loss_drloc', 'loss_patch_cos'}


@pytest.fixture(scope='module')
def ws(tmp_path_factory):
    """Tiny non-square digits sets (4 training, 2 validation images) and the two run configs."""
    from digits import build_ade20k, build_coco

    ws = tmp_path_factory.mktemp('dense_ws')
    build_ade20k(str(ws / 'data' / 'digits_ade20k'), num_train=4, num_val=2, size=(96, 160))
    build_coco(str(ws / 'data' / 'digits_coco'), num_train=4, num_val=2, size=(96, 160))
    (ws / 'seg.py').write_text(SEG_RUN)
    (ws / 'det.py').write_text(DET_RUN)
    return ws


def logged_steps(work_dir):
    """Every logged training step of every run in ``work_dir``: its loss terms, by iteration."""
    steps = [
        json.loads(line)
        for f in sorted(work_dir.glob('*/vis_data/scalars.json'))
        for line in f.read_text().splitlines()
    ]
    return [{k: v for k, v in s.items() if 'loss' in k or k == 'iter'} for s in steps if 'loss' in s]


def assert_same_state(a, b):
    assert a.keys() == b.keys()
    for key in a:
        if isinstance(a[key], dict):
            assert_same_state(a[key], b[key])
        elif isinstance(a[key], torch.Tensor):
            assert torch.equal(a[key], b[key]), key
        elif isinstance(a[key], (list, tuple)):
            assert len(a[key]) == len(b[key]), key
            assert_same_state(dict(enumerate(a[key])), dict(enumerate(b[key])))
        else:
            assert a[key] == b[key], key


@pytest.mark.parametrize('kind', ['seg', 'det'])
def test_trains_resumes_exactly_and_tests_through_the_tools(ws, kind, monkeypatch, capsys):
    """2 epochs straight == 1 epoch + --resume to 2 (weights, optimizer, every logged loss), then tools/test.py."""
    monkeypatch.chdir(ws)
    config, straight, resumed = ws / f'{kind}.py', ws / f'{kind}_straight', ws / f'{kind}_resumed'
    train = tool('train')

    def run(work, *flags, epochs=2):  # a visualizer of its own per run: mmseg and mmdet name theirs 'visualizer',
        # and mmengine keeps one instance per name in a process
        train(
            [
                str(config),
                '--work-dir',
                str(work),
                '--no-validate',
                *flags,
                '--cfg-options',
                f'train_cfg.max_epochs={epochs}',
                f'visualizer.name={work.name}_{epochs}{"".join(flags)}',
            ]
        )

    run(straight)
    run(resumed, epochs=1)
    run(resumed, '--resume')

    a, b = (torch.load(w / 'epoch_2.pth', map_location='cpu', weights_only=False) for w in (straight, resumed))
    for part in ('state_dict', 'optimizer'):
        assert_same_state(a[part], b[part])
    assert any(k.startswith('aux_losses.0.heads.0.') for k in a['state_dict'])  # DRLoc's MLP is saved and resumed
    steps = logged_steps(straight)
    assert [s['iter'] for s in steps] == [1, 2, 3, 4]
    assert USERS <= set(steps[0])
    assert logged_steps(resumed) == steps

    capsys.readouterr()
    tool('test')(
        [
            str(config),
            str(straight / 'epoch_2.pth'),
            '--work-dir',
            str(ws / f'{kind}_test'),
            '--cfg-options',
            f'visualizer.name={kind}_test',
        ]
        + (['--tta'] if kind == 'seg' else [])
    )
    out = capsys.readouterr().out
    metrics = json.loads([ln for ln in out.splitlines() if ln.startswith('metrics: ')][-1][len('metrics: ') :])
    assert ({'mIoU', 'aAcc'} if kind == 'seg' else {'coco/bbox_mAP', 'coco/segm_mAP'}) <= set(metrics)


@pytest.mark.parametrize('kind', ['seg', 'det'])
def test_trains_in_dist_train_with_two_cpu_processes(ws, kind):
    work = ws / f'{kind}_dist'
    # one step: seg 4 images / (2 processes x 2; UperNet's 1x1 pooling branch needs 2 per BatchNorm), det 2 / (2 x 1)
    proc = run_tool(
        [
            'dist_train.sh',
            ws / f'{kind}.py',
            2,
            '--work-dir',
            work,
            '--no-validate',
            '--cfg-options',
            'train_cfg.max_epochs=1',
        ],
        cwd=ws,
        env={'PYTHONPATH': str(REPO), 'PORT': str(free_port())},
    )
    assert 'Distributed training: True' in proc.stdout + proc.stderr
    steps = logged_steps(work)
    assert len(steps) == 1 and USERS <= set(steps[0])
    state = torch.load(work / 'epoch_1.pth', map_location='cpu', weights_only=False)['state_dict']
    assert 'aux_losses.0.heads.0.trunk.0.weight' in state
