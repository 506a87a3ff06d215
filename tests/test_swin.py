"""mmvitreg.SwinTransformer: mmpretrain's Swin, key- and output-compatible, with the token trace."""

import importlib.util
from pathlib import Path

import mmseg
import numpy as np
import pytest
import torch
from mmcv.cnn.bricks.drop import DropPath
from mmpretrain.models import SwinTransformer as MMPretrainSwin
from mmpretrain.models.utils import ShiftWindowMSA
from torch.utils._python_dispatch import TorchDispatchMode

from mmvitreg.models.backbones import SwinTransformer, convert_swin
from mmvitreg.models.layers import WindowLayout
from mmvitreg.models.layers.drop_path import drop_path
from mmvitreg.models.trace import MixPlan, TokenTrace

NANO = dict(embed_dims=16, depths=[2, 2, 2], num_heads=[1, 2, 4])


def copy_weights(dst, src):
    missing, unexpected = dst.load_state_dict(src.state_dict(), strict=True)
    assert not missing and not unexpected


def nano(cls=SwinTransformer, **kw):
    torch.manual_seed(0)
    model = cls(**dict(dict(arch=NANO, img_size=64, window_size=4, drop_path_rate=0.0, out_indices=(0, 1, 2)), **kw))
    model.init_weights()
    model.eval()  # mmpretrain's Swin.train returns None
    return model


@pytest.mark.parametrize('arch', ['tiny', 'small', 'base', 'large'])
def test_mmpretrain_checkpoints_load_with_every_key_and_give_the_same_features(arch):
    """Swin-T/S/B/L: an mmpretrain state dict loads strictly; features agree (fp64, and fp32 within 1e-5)."""
    torch.manual_seed(0)
    theirs = MMPretrainSwin(arch=arch, drop_path_rate=0.0)
    theirs.eval()  # mmpretrain's Swin.train returns None
    ours = SwinTransformer(arch=arch, drop_path_rate=0.0).eval()
    result = ours.load_state_dict(theirs.state_dict(), strict=False)
    assert result.missing_keys == [] and result.unexpected_keys == []
    assert list(ours.state_dict()) == list(theirs.state_dict())
    if arch not in ('tiny', 'base'):
        return  # S and L share T's and B's blocks: keys only here (time); all four measured in configs/swin/README.md
    x = torch.randn(1, 3, 224, 224)
    with torch.no_grad():
        assert (ours(x)[0] - theirs(x)[0]).abs().max() <= 1e-5
        assert (ours.double()(x.double())[0] - theirs.double()(x.double())[0]).abs().max() <= 1e-6
        if arch == 'tiny':  # the fp32 difference is the fused kernel's rounding: the explicit path is exact
            explicit = TokenTrace(attn_layers=tuple(range(ours.trace_spec.num_blocks)))
            assert torch.equal(ours.float()(x, trace=explicit)[0], theirs.float()(x)[0])


def test_a_saved_mmpretrain_swin_classifier_loads_and_gives_the_same_logits(tmp_path):
    """A whole Swin-T classifier checkpoint (backbone + neck + head) loads with no missing/unexpected key."""
    from mmengine.registry import DefaultScope
    from mmengine.runner import load_checkpoint
    from mmpretrain.registry import MODELS

    def classifier(backbone_type):
        with DefaultScope.overwrite_default_scope('mmpretrain'):
            return MODELS.build(
                dict(
                    type='ImageClassifier',
                    backbone=dict(type=backbone_type, arch='tiny'),
                    neck=dict(type='GlobalAveragePooling'),
                    head=dict(type='LinearClsHead', num_classes=1000, in_channels=768),
                )
            ).eval()

    torch.manual_seed(1)
    theirs = classifier('SwinTransformer')
    theirs.init_weights()
    torch.save({'state_dict': theirs.state_dict()}, tmp_path / 'swin-t.pth')
    ours = classifier('mmvitreg.SwinTransformer')
    ckpt = load_checkpoint(ours, str(tmp_path / 'swin-t.pth'), strict=True)
    assert set(ckpt['state_dict']) == set(ours.state_dict())
    x = torch.randn(2, 3, 224, 224)
    with torch.no_grad():
        assert (ours(x) - theirs(x)).abs().max() <= 1e-5


@pytest.mark.parametrize('size', [(64, 64), (72, 100)])
def test_downstream_swins_of_mmseg_and_mmdet_load_and_agree(size):
    """mmseg's and mmdet's SwinTransformer share the key layout: their weights load strictly and the
    four normed stage outputs match with pad_small_map=True (maps padded to the window, shifted always)."""
    from mmdet.models.backbones import SwinTransformer as DetSwin
    from mmseg.models.backbones import SwinTransformer as SegSwin

    ours = SwinTransformer(
        arch=dict(embed_dims=16, depths=[2, 2, 2, 2], num_heads=[1, 2, 2, 4]),
        window_size=4,
        drop_path_rate=0.0,
        out_indices=(0, 1, 2, 3),
        pad_small_map=True,
    ).eval()
    x = torch.randn(2, 3, *size)
    for cls in (SegSwin, DetSwin):
        torch.manual_seed(0)
        theirs = cls(
            embed_dims=16,
            depths=[2, 2, 2, 2],
            num_heads=[1, 2, 2, 4],
            window_size=4,
            drop_path_rate=0.0,
            out_indices=(0, 1, 2, 3),
        )
        theirs.eval()
        for p in theirs.parameters():
            torch.nn.init.normal_(p, std=0.2)
        result = ours.load_state_dict({f'{k}': v for k, v in theirs.state_dict().items()}, strict=False)
        assert result.missing_keys == [] and result.unexpected_keys == []
        with torch.no_grad():
            for a, b in zip(ours(x), theirs(x), strict=True):
                assert a.shape == b.shape
                assert (a - b).abs().max() <= 1e-5


def official_swin_state_dict(model, classes=10):
    """Random tensors under the names and shapes of an official Swin release (microsoft/Swin-Transformer
    ``SwinTransformer.state_dict()``) of ``model``'s nano arch: ``layers.{s}.blocks.{b}``, its buffers
    ``relative_position_index`` / ``attn_mask``, ``layers.{s}.downsample``, a final ``norm`` and ``head``."""
    g = torch.Generator().manual_seed(0)
    official = {}
    dims = [16, 32, 64]
    official['patch_embed.proj.weight'] = torch.randn(16, 3, 4, 4, generator=g)
    official['patch_embed.proj.bias'] = torch.randn(16, generator=g)
    official['patch_embed.norm.weight'] = torch.randn(16, generator=g)
    official['patch_embed.norm.bias'] = torch.randn(16, generator=g)
    for s, (d, heads) in enumerate(zip(dims, NANO['num_heads'])):
        for b in range(2):
            p = f'layers.{s}.blocks.{b}.'
            shapes = {
                'norm1.weight': (d,),
                'norm1.bias': (d,),
                'attn.relative_position_bias_table': (49, heads),
                'attn.qkv.weight': (3 * d, d),
                'attn.qkv.bias': (3 * d,),
                'attn.proj.weight': (d, d),
                'attn.proj.bias': (d,),
                'norm2.weight': (d,),
                'norm2.bias': (d,),
                'mlp.fc1.weight': (4 * d, d),
                'mlp.fc1.bias': (4 * d,),
                'mlp.fc2.weight': (d, 4 * d),
                'mlp.fc2.bias': (d,),
            }
            official.update({p + k: torch.randn(*v, generator=g) for k, v in shapes.items()})
            official[p + 'attn.relative_position_index'] = model.stages[s].blocks[b].attn.w_msa.relative_position_index
            if b == 1:
                official[p + 'attn_mask'] = torch.zeros(4, 16, 16)
        if s < 2:
            official[f'layers.{s}.downsample.norm.weight'] = torch.randn(4 * d, generator=g)
            official[f'layers.{s}.downsample.norm.bias'] = torch.randn(4 * d, generator=g)
            official[f'layers.{s}.downsample.reduction.weight'] = torch.randn(2 * d, 4 * d, generator=g)
    official.update(
        {
            'norm.weight': torch.randn(64, generator=g),
            'norm.bias': torch.randn(64, generator=g),
            'head.weight': torch.randn(classes, 64, generator=g),
            'head.bias': torch.randn(classes, generator=g),
        }
    )
    return official


def test_official_release_converts_like_mmseg_swin2mmseg():
    """convert_swin on an official-layout state dict agrees with mmseg's own converter (an independent
    implementation of the same renaming and merge-order fix), and the result loads strictly."""
    spec = importlib.util.spec_from_file_location(
        'swin2mmseg', Path(mmseg.__file__).parent / '.mim/tools/model_converters/swin2mmseg.py'
    )
    swin2mmseg = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(swin2mmseg)
    official = official_swin_state_dict(nano())
    ours = convert_swin(official)
    theirs = {
        k: v for k, v in swin2mmseg.convert_swin(official).items() if 'attn_mask' not in k and not k.startswith('norm.')
    }  # mmseg keeps both, unused
    assert {k for k in ours if not k.startswith('backbone.')} == {'head.fc.weight', 'head.fc.bias'}
    backbone = {k[len('backbone.') :]: v for k, v in ours.items() if k.startswith('backbone.')}
    assert set(backbone) - set(theirs) == {'norm2.weight', 'norm2.bias'} and set(theirs) <= set(backbone)
    for key, value in theirs.items():
        torch.testing.assert_close(backbone[key], value, rtol=0, atol=0)
    torch.testing.assert_close(backbone['norm2.weight'], official['norm.weight'], rtol=0, atol=0)
    classifier_backbone = nano(out_indices=(2,))  # a release has the last stage's norm only
    result = classifier_backbone.load_state_dict(backbone, strict=False)
    assert result.missing_keys == [] and result.unexpected_keys == []
    with pytest.raises(ValueError, match='no mmvitreg counterpart'):
        convert_swin({**official, 'foo.bar': torch.zeros(1)})


def test_old_version_checkpoints_are_upgraded():
    """Version-1 mmpretrain Swin checkpoints: ``norm.`` is the last stage norm and attn_mask is dropped."""
    model = nano()
    state = model.state_dict()
    old = {('norm.' + k[len('norm2.') :] if k.startswith('norm2.') else k): v for k, v in state.items()}
    old['stages.0.blocks.1.attn.attn_mask'] = torch.zeros(1)
    result = model.load_state_dict(old, strict=False)
    assert result.missing_keys == [] and result.unexpected_keys == []


def test_window_layout_partitions_like_mmpretrain_and_reverses():
    """Padding, cyclic shift and window partition as mmpretrain's ShiftWindowMSA; reverse is its inverse."""
    x = torch.randn(2, 7 * 10, 3)
    for shift in (0, 2):
        layout = WindowLayout((7, 10), 4, shift)
        windows = layout.partition(x)
        ref = torch.nn.functional.pad(x.view(2, 7, 10, 3), (0, 0, 0, 2, 0, 1))
        ref = torch.roll(ref, (-shift, -shift), (1, 2)) if shift else ref
        ref = ShiftWindowMSA.window_partition(ref, 4).view(-1, 16, 3)
        torch.testing.assert_close(windows.flatten(0, 1), ref, rtol=0, atol=0)  # (B, nW, n, C): per image
        torch.testing.assert_close(layout.reverse(windows), x, rtol=0, atol=0)
        assert len(layout.grid_index()) == 6 and layout.padded == (8, 12)
        expected = ShiftWindowMSA.get_attn_mask((8, 12), 4, shift)
        got = layout.attn_mask()
        assert (got is None and expected is None) or torch.equal(got, expected)
        index = layout.grid_index()
        assert index.shape == (6, 16) and set(index[index >= 0].tolist()) == set(range(70))
        assert (index < 0).sum() == 96 - 70


def test_trace_taps_grids_windows_and_attention():
    model = nano()
    x = torch.randn(2, 3, 64, 64)
    trace = TokenTrace(token_layers=(1, -1), attn_layers=(1, 3, 4, 5))
    with torch.no_grad():
        outs = model(x, trace=trace)
        plain = model(x)
    for a, b in zip(outs, plain):
        torch.testing.assert_close(a, b)
    assert trace.grid == (16, 16) and trace.num_extra_tokens == 0
    assert trace.grids == {0: (16, 16), 1: (16, 16), 2: (8, 8), 3: (8, 8), 4: (4, 4), 5: (4, 4)}
    assert trace.windows[1] == WindowLayout((16, 16), 4, 2) and trace.windows[4].shift == 0
    assert trace.windows[5].shift == 0  # one window covers the 4x4 map: no shift (mmpretrain rule)
    assert set(trace.windows) == {1, 3, 4, 5}  # the layouts of the tapped maps
    assert set(trace.tokens) == {1, 5} and trace.tokens[5].shape == (2, 16, 64)
    assert trace.token_map(1).shape == (2, 16, 16, 16)
    # the last stage's output norm applied to the tapped tokens gives the last output
    torch.testing.assert_close(model.norm2(trace.tokens[5]).transpose(1, 2).reshape(2, 64, 4, 4), outs[2])
    assert set(trace.attn) == {1, 3, 4, 5} and trace.attn[3].shape == (2 * 4, 2, 16, 16)
    torch.testing.assert_close(trace.attn[3].sum(-1), torch.ones(8, 2, 16))


class Dispatched(TorchDispatchMode):
    """The names of the aten operators run under it."""

    def __init__(self):
        super().__init__()
        self.names = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.append(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def test_every_block_runs_our_code_in_fewer_operators_than_mmpretrains():
    """With or without a trace every block runs mmvitreg's block code (every window attention, through the
    modules mmpretrain built, their hooks firing), the outputs are mmpretrain's (same weights), and the forward
    dispatches fewer operators than mmpretrain's: the shift mask is built once per input size (no mask operator
    in a second forward, which mmpretrain builds in every shifted block)."""
    theirs, ours = nano(MMPretrainSwin), nano()
    copy_weights(ours, theirs)
    ran, shift_window_ran = [], []
    for i, block in enumerate(block for stage in ours.stages for block in stage.blocks):
        block.attn.w_msa.register_forward_hook(lambda module, args, out, i=i: ran.append(i))
        block.attn.register_forward_hook(lambda module, args, out, i=i: shift_window_ran.append(i))
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ours(x)
        with Dispatched() as our_ops:
            plain = ours(x)
        assert ran == shift_window_ran == list(range(6)) * 2
        with Dispatched() as their_ops:
            expected = theirs(x)
        traced = ours(x, TokenTrace(token_layers=(0,), attn_layers=(1, 4)))
    for a, b, c in zip(plain, traced, expected):
        torch.testing.assert_close(a, b)
        torch.testing.assert_close(a, c, rtol=0, atol=1e-5)
    assert not {'masked_fill', 'ne', 'eq'} & set(our_ops.names) and 'masked_fill' in their_ops.names
    assert len(our_ops.names) < len(their_ops.names)


def test_stochastic_depth_is_mmcvs_in_fewer_operators():
    """Stochastic depth as timm draws it (``drop_path``): per sample, the branch is kept with probability
    ``1 - drop_prob`` (read from mmcv's ``DropPath`` at every call, as a schedule changes it) and scaled by
    ``1 / (1 - drop_prob)``, in fewer operators than mmcv's ``DropPath``; untouched in eval or at rate 0. Swin's
    blocks draw it so (no mmcv ``rand`` + ``floor_`` in a training forward)."""
    module = DropPath(0.5)
    module.drop_prob = 0.25
    x = torch.ones(20000, 2, 3)
    with Dispatched() as ours:
        out = drop_path(x, module)
    with Dispatched() as mmcv:
        module(x)
    assert len(ours.names) < len(mmcv.names) and 'bernoulli_' in ours.names
    kept = out[:, 0, 0] > 0
    assert torch.equal(out, torch.where(kept.view(-1, 1, 1), 1 / 0.75, 0.0).expand_as(x))
    assert abs(kept.float().mean() - 0.75) < 0.01
    module.eval()
    assert drop_path(x, module) is x
    module.train().drop_prob = 0.0
    assert drop_path(x, module) is x
    model = nano(drop_path_rate=0.3).train()
    with Dispatched() as swin:
        model(torch.randn(2, 3, 64, 64))
    assert 'bernoulli_' in swin.names and 'floor_' not in swin.names


def test_trace_attention_is_mmpretrain_softmax_map():
    """The recorded map equals mmpretrain's softmax in the same block (hooked), shifted window included."""
    theirs = nano(MMPretrainSwin)
    ours = nano()
    copy_weights(ours, theirs)
    seen = {}
    theirs.stages[1].blocks[1].attn.w_msa.softmax.register_forward_hook(lambda m, i, o: seen.update(map=o))
    x = torch.randn(2, 3, 64, 64)
    trace = TokenTrace(attn_layers=(3,))
    with torch.no_grad():
        theirs(x)
        ours(x, trace=trace)
    torch.testing.assert_close(trace.attn[3], seen['map'])


def test_mix_is_applied_after_the_patch_embedding_before_the_position_embedding():
    model = nano(use_abs_pos_embed=True)
    captured = {}
    model.patch_embed.register_forward_hook(lambda m, i, o: captured.update(embed=o[0]))
    model.drop_after_pos.register_forward_pre_hook(lambda m, a: captured.update(pos_in=a[0]))
    mask = torch.ones(2, 16, 16)
    mask[:, 4:10, 3:12] = 0
    plan = MixPlan(index=torch.tensor([1, 0]), mask=mask)
    with torch.no_grad():
        model(torch.randn(2, 3, 64, 64), trace=TokenTrace(mix=plan))
    m = mask.flatten(1).unsqueeze(-1)
    expected = captured['embed'] * m + captured['embed'][[1, 0]] * (1 - m) + model.absolute_pos_embed
    torch.testing.assert_close(captured['pos_in'], expected)
    with pytest.raises(ValueError, match='token grid'):
        model(torch.randn(2, 3, 32, 32), trace=TokenTrace(mix=plan))


def test_fused_and_explicit_paths_train_alike():
    """Recording every block's map (explicit path) changes neither the loss nor the gradients."""
    model = SwinTransformer(arch=NANO, window_size=4, drop_path_rate=0.0, out_indices=(2,), pad_small_map=True)
    model.init_weights()
    x = torch.randn(2, 3, 48, 40)
    grads = []
    for trace in (None, TokenTrace(attn_layers=tuple(range(6)))):
        model.zero_grad()
        model(x, trace=trace)[0].pow(2).mean().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_small_maps_need_pad_small_map():
    model = SwinTransformer(arch=NANO, window_size=8, drop_path_rate=0.0, out_indices=(2,))
    # mmpretrain's own check without a trace, ours (same wording, a ValueError too) with one
    for trace in (None, TokenTrace(token_layers=(0,))):
        with pytest.raises(
            AssertionError,
            match=r'^The input shape \(4, 4\) is smaller than the window size '
            r'\(8\).*pad_small_map=True',
        ):
            model(torch.randn(1, 3, 16, 16), trace)
    np.testing.assert_equal(model.trace_spec.num_blocks, 6)


def test_window_attention_with_indivisible_heads_builds_and_refuses_to_run():
    """As mmpretrain's WindowMSA (whose test_arch builds a 256-channel, 6-head arch), the layer builds; running it
    fails with a message naming both numbers and the fix, not a reshape error."""
    from mmvitreg.models.layers import WindowAttention

    layer = WindowAttention(10, (2, 2), 3)
    with pytest.raises(ValueError, match=r'embed_dims \(10\) must be divisible by num_heads \(3\)'):
        layer(torch.randn(2, 4, 10))
