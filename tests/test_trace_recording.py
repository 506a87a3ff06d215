"""The one way to fill the trace: backbones declare a TraceSpec and record only through TokenTrace's
recording API; the build-time check catches what used to fail at the first step."""

import ast
import re
from pathlib import Path

import pytest
import torch
from mmpretrain.structures import DataSample

from mmvitreg.models.backbones import CvT, SwinTransformer, VisionTransformer
from mmvitreg.models.classifiers import TokenClassifier
from mmvitreg.models.trace import (
    TokenTrace,
    TraceRequest,
    TraceUserError,
    check_request,
    check_trace_user,
    resolve_indices,
)

BACKBONES = Path(__file__).resolve().parents[1] / 'mmvitreg' / 'models' / 'backbones'
RECORDING_API = {'start', 'block', 'downsample', 'stage', 'end'}


def tiny_cvt(**kw):
    return dict(
        type='mmvitreg.CvT',
        arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
        embed_kernels=(3, 3),
        embed_strides=(2, 2),
        embed_paddings=(1, 1),
        **kw,
    )


def tiny_vit(**kw):
    return dict(
        type='mmvitreg.VisionTransformer',
        img_size=32,
        patch_size=8,
        arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32),
        **kw,
    )


def classifier(backbone, **kw):
    kw.setdefault('head', dict(type='mmpretrain.LinearClsHead', num_classes=3, in_channels=16))
    return TokenClassifier(backbone=backbone, data_preprocessor=dict(num_classes=3), **kw)


def test_backbones_touch_the_trace_only_through_its_recording_api():
    """Every use of a ``trace`` in the backbones' code is a call of start/block/downsample/stage/end (or
    a None check): the recording code exists once, in TokenTrace."""
    uses = {}
    for path in BACKBONES.glob('*.py'):
        tree = ast.parse(path.read_text())
        parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == 'trace':
                called = isinstance(parents.get(node), ast.Call) and parents[node].func is node
                uses.setdefault(path.name, set()).add(node.attr if called else f'{node.attr} (not a call)')
    assert set(uses) == {'vision_transformer.py', 'swin_transformer.py', 'cvt.py'}
    for name, attrs in uses.items():
        assert attrs <= RECORDING_API, f'{name} uses trace.{sorted(attrs - RECORDING_API)}'


def test_cvt_tap_of_an_early_block_fails_at_build_time():
    """Before: DRLoc(layers=(0,)) on CvT built, then the first forward raised 'CvT traces the blocks of its
    last stage'. Now the classifier refuses it when built, naming user, backbone and the tappable blocks."""
    drloc = dict(type='mmvitreg.DRLoc', in_channels=8, layers=(0,))
    with pytest.raises(
        TraceUserError,
        match=r'DRLoc taps the tokens of blocks \[0\], but CvT traces only blocks '
        r'1\.\.2 \(of 0\.\.2\): tap one of those',
    ):
        classifier(tiny_cvt(), aux_losses=[drloc])
    classifier(tiny_cvt(), aux_losses=[dict(drloc, in_channels=16, layers=(-1,))])  # the last stage: fine


def test_a_head_needing_an_output_format_the_backbone_lacks_fails_at_build_time():
    """Before: TokenLabelHead on CvT built, then the first loss said to set out_type='raw', which CvT does not
    offer. Now: refused when built; on a ViT built with another out_type the message names the setting."""
    head = dict(type='mmvitreg.TokenLabelHead', num_classes=3, in_channels=16)
    with pytest.raises(
        TraceUserError,
        match=r"TokenLabelHead reads the backbone's out_type='raw' output, which "
        r"CvT does not produce \(it offers \['cls_token', 'featmap', "
        r"'avg_featmap'\]\)",
    ):
        classifier(tiny_cvt(), head=head)
    with pytest.raises(
        TraceUserError,
        match=r"VisionTransformer is built with out_type='cls_token': set the "
        r"backbone's out_type='raw'",
    ):
        classifier(tiny_vit(), head=head)
    classifier(tiny_vit(out_type='raw'), head=head)


def test_points_facts_and_services_are_checked_apart():
    """Points ('final', 'embed', 'stages'), facts ('cls_token', 'isotropic') and services ('mix', 'attn',
    'stream') each name what is missing."""
    from mmengine.registry import MODELS

    cvt, vit = MODELS.build(tiny_cvt()), MODELS.build(tiny_vit())
    swin = SwinTransformer(
        arch=dict(embed_dims=8, depths=(1, 1), num_heads=(1, 1)), img_size=32, window_size=2, out_indices=(1,)
    )
    cases = [
        (cvt, TraceRequest(points={'final'}), "the point ['final']"),
        (swin, TraceRequest(facts={'isotropic'}), "the fact ['isotropic']"),
        (cvt, TraceRequest(services={'mix'}), "the service ['mix']"),
        (vit, TraceRequest(points={'stages'}), "the point ['stages']"),
    ]
    for backbone, request, words in cases:
        with pytest.raises(TraceUserError, match=re.escape(words)):
            check_trace_user(backbone, request, 'User')
    check_trace_user(
        vit,
        TraceRequest(points={'embed', 'final'}, facts={'isotropic', 'cls_token'}, services={'mix'}, attn_layers=(-1,)),
        'User',
    )


def test_a_hand_made_trace_is_checked_by_the_same_check():
    """A trace built by hand (analysis tools) meets the build-time check's message at its first forward."""
    model = CvT(
        arch=dict(embed_dims=(8, 16), depths=(1, 2), num_heads=(1, 2)),
        embed_kernels=(3, 3),
        embed_strides=(2, 2),
        embed_paddings=(1, 1),
    )
    with pytest.raises(TraceUserError, match=r'this trace taps the tokens of blocks \[0\], but CvT traces only'):
        model(torch.randn(1, 3, 16, 16), trace=TokenTrace(token_layers=(0,)))
    with pytest.raises(TraceUserError, match=r"the point \['embed'\]"):
        model(torch.randn(1, 3, 16, 16), trace=TokenTrace(points={'embed'}))


def test_grid_means_the_embedding_grid_in_every_backbone():
    """``trace.grid`` is the patch grid of the embedding (where a plan mixes) in ViT, Swin and CvT alike; the
    grid of the last block is ``last_grid`` (CvT: its last stage)."""
    from mmengine.registry import MODELS

    x = torch.randn(1, 3, 32, 32)
    cvt, vit = MODELS.build(tiny_cvt()), MODELS.build(tiny_vit())
    swin = SwinTransformer(
        arch=dict(embed_dims=8, depths=(1, 1), num_heads=(1, 1)), img_size=32, window_size=2, out_indices=(1,)
    )
    expected = {cvt: ((16, 16), (8, 8)), vit: ((4, 4), (4, 4)), swin: ((8, 8), (4, 4))}
    for backbone, (grid, last) in expected.items():
        trace = TokenTrace()
        backbone.eval()(x, trace=trace)
        assert (trace.grid, trace.last_grid) == (grid, last), type(backbone).__name__


def test_points_are_recorded_only_when_asked():
    """'embed', 'final' and 'stages' are filled for a user who asks, not for every trace."""
    vit = VisionTransformer(**{k: v for k, v in tiny_vit().items() if k != 'type'})
    x = torch.randn(2, 3, 32, 32)
    plain = TokenTrace(token_layers=(-1,))
    vit(x, trace=plain)
    assert plain.embed is None and plain.final is None and set(plain.tokens) == {1}
    asked = TokenTrace(points={'embed', 'final'})
    vit(x, trace=asked)
    assert asked.embed.shape == (2, 16, 16) and asked.final.shape == (2, 17, 16) and not asked.tokens


def tiny_swin(**kw):
    return dict(
        type='mmvitreg.SwinTransformer',
        arch=dict(embed_dims=8, depths=(1, 1), num_heads=(1, 1)),
        img_size=32,
        window_size=2,
        out_indices=(1,),
        **kw,
    )


def test_every_width_mismatch_fails_at_build_time():
    """Before: DRLoc(stages=(0, 1, 2, 3), in_channels=(16,)*4) on Swin built and failed at its first step with a
    ValueError. Now TraceSpec states the widths of every block, stage output and backbone output, and the model
    is refused when built, naming the widths and the fix (tiny Swin: blocks 8, 16; stages 16, 16; output 16)."""
    cases = [
        (
            tiny_swin(),
            dict(type='mmvitreg.DRLoc', stages=(0, 1), in_channels=(8, 8)),
            'DRLoc expects [8, 8] channels in the outputs of stages [0, 1] but SwinTransformer has [16, 16]: set its '
            'in_channels to [16, 16]',
        ),
        (
            tiny_swin(),
            dict(type='mmvitreg.DRLoc', layers=(0,), in_channels=16),
            'DRLoc expects [16] channels in the tokens of blocks [0] but SwinTransformer has [8]: set its in_channels '
            'to [8]',
        ),
        (
            tiny_swin(),
            dict(type='mmvitreg.DRLoc', in_channels=8),
            'DRLoc expects [8] channels in its outputs [-1] but SwinTransformer has [16]: set its in_channels to [16]',
        ),
        (
            tiny_cvt(),
            dict(type='mmvitreg.DRLoc', in_channels=8),
            'DRLoc expects [8] channels in its outputs [-1] but CvT has [16]: set its in_channels to [16]',
        ),
        (
            tiny_vit(),
            dict(type='mmvitreg.PatchMixingLoss', num_classes=3, in_channels=8),
            'PatchMixingLoss expects [8] channels in the tokens of blocks [-1] but VisionTransformer has [16]',
        ),
    ]
    for backbone, user, words in cases:
        with pytest.raises(TraceUserError, match=re.escape(words)):
            classifier(backbone, aux_losses=[user])
    users = [
        dict(type='mmvitreg.DRLoc', stages=(0, 1), in_channels=(16, 16)),
        dict(type='mmvitreg.DRLoc', in_channels=16, loss_name='loss_out'),
    ]
    fixed = classifier(tiny_swin(), neck=dict(type='mmpretrain.GlobalAveragePooling'), aux_losses=users)
    losses = fixed.loss(torch.randn(2, 3, 32, 32), [DataSample().set_gt_label(i) for i in range(2)])
    assert {'loss_drloc', 'loss_out'} <= set(losses)
    with pytest.raises(
        TraceUserError,
        match='DRLoc taps the outputs of a stage that SwinTransformer does not have: '
        'stage index 2 is out of range for a backbone with 2 stages',
    ):
        classifier(tiny_swin(), aux_losses=[dict(type='mmvitreg.DRLoc', stages=(2,), in_channels=16)])


def test_one_resolver_for_block_stage_and_output_indices():
    """Negative indices count from the last block, stage or output, resolved in one place for the check, the
    recording and the reading (``index``, ``stage_map``); out of range is an IndexError naming the kind."""
    assert resolve_indices((-1, 0, 2), 4) == (3, 0, 2)
    with pytest.raises(IndexError, match='stage index -3 is out of range for a backbone with 2 stages'):
        resolve_indices((-3,), 2, 'stage')
    from mmengine.registry import MODELS

    swin = MODELS.build(tiny_swin()).eval()
    trace = TokenTrace(token_layers=(-1,), points={'stages'})
    swin(torch.randn(1, 3, 32, 32), trace=trace)
    assert (trace.num_layers, trace.num_stages, trace.index(-1)) == (2, 2, 1) and set(trace.tokens) == {1}
    torch.testing.assert_close(trace.stage_map(-1), trace.stage_map(1))
    assert trace.stage_map(0).shape == (1, 16, 4, 4)
    with pytest.raises(IndexError, match='stage index 2 is out of range'):
        trace.stage_map(2)
    with pytest.raises(IndexError, match='block index -3 is out of range'):
        trace.patch_tokens(-3)


def test_a_traced_forward_runs_the_build_time_check():
    """A trace made by hand is checked by ``start`` with the one check the build runs (``check_request``): the
    same error, the same words, raised where the misfit is found; a fitting request passes."""
    from mmengine.registry import MODELS

    backbone = MODELS.build(tiny_swin())
    check_request(
        backbone.trace_spec, TraceRequest(token_layers=(-1,), stages=(0, 1), stage_channels=(16, 16)), 'User', 'Swin'
    )
    bad = TraceRequest(token_layers=(9,))
    with pytest.raises(TraceUserError) as built:
        check_request(backbone.trace_spec, bad, 'this trace', 'SwinTransformer')
    with pytest.raises(TraceUserError) as ran:
        backbone(torch.randn(1, 3, 32, 32), trace=TokenTrace.for_request(bad))
    assert str(ran.value) == str(built.value)
    assert str(built.value).startswith('this trace taps the tokens of a block that SwinTransformer does not have')
