"""Every option of the host constructors whose modules mmvitreg runs behaves as in the host.

mmvitreg's Swin runs its own forward on the stages, blocks, attention and FFNs that mmpretrain's constructors build,
and its ViT builds its own blocks in place of mmpretrain's ``TransformerEncoderLayer``. This walk enumerates each
host constructor's parameters (``inspect.signature``: a new host option fails :func:`test_the_walk_covers_every_
host_option` until it is walked here), builds mmpretrain's backbone and mmvitreg's with the option set, the same
weights, and checks: equal outputs in eval; in training, two seeds give different outputs in mmvitreg exactly when
they do in mmpretrain, and one seed the same outputs (or, where the two draw their random numbers differently,
the same mean and spread over seeds); ``torch.autograd.grad`` through a checkpointed block fails in both or in
neither (reentrant ``with_cp``); a configuration one refuses the other refuses; ``init_cfg`` initialises alike.
"""

import inspect

import pytest
import torch
from mmcv.cnn.bricks.drop import Dropout, DropPath
from mmcv.cnn.bricks.transformer import FFN
from mmpretrain.models import SwinTransformer as HostSwin
from mmpretrain.models import VisionTransformer as HostViT
from mmpretrain.models.backbones.swin_transformer import SwinBlock, SwinBlockSequence
from mmpretrain.models.backbones.vision_transformer import TransformerEncoderLayer
from mmpretrain.models.utils import MultiheadAttention, ShiftWindowMSA, WindowMSA, WindowMSAV2
from torch import nn

from mmvitreg.models.backbones import SwinTransformer, VisionTransformer

SWIN = dict(
    arch=dict(embed_dims=16, depths=(2, 2), num_heads=(2, 2)),
    img_size=40,
    window_size=4,
    out_indices=(0, 1),
    drop_path_rate=0.0,
)  # grids 10x10 (padded to 12) and 5x5 (padded to 8)
VIT = dict(arch=dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32), img_size=32, patch_size=8)
INIT = dict(type='TruncNormal', layer='Linear', std=0.5, bias=0.25)

STRUCTURAL = 'structural: the enclosing constructor sets it from the arch, another value breaks host and ours alike'
PASSED_ON = 'set by the enclosing host constructor from its own option, walked there'
NOT_PASSED = 'no host constructor whose module mmvitreg runs passes it: no config reaches it'

# where a Swin option goes in the backbone config
STAGE = lambda o: dict(stage_cfgs=o)  # noqa: E731
BLOCK = lambda o: dict(stage_cfgs=dict(block_cfgs=o))  # noqa: E731
ATTN = lambda o: BLOCK(dict(attn_cfgs=o))  # noqa: E731
FFN_ = lambda o: BLOCK(dict(ffn_cfgs=o))  # noqa: E731
# a ViT option: top-level where mmpretrain's VisionTransformer takes it, else in layer_cfgs
TOP = lambda o: o  # noqa: E731
LAYER = lambda o: dict(layer_cfgs=o)  # noqa: E731


def dropouts(**kwargs):
    """A dropout layer's option, walked as the FFN's and the shifted-window attention's ``dropout_layer``."""
    return [(where(dict(dropout_layer=dict(kwargs))), None) for where in (FFN_, ATTN)]


# constructor -> {option: [(host config, ours config or None for the same), ...] | why it is not walked}
WALK = {
    SwinBlockSequence: dict(
        embed_dims=STRUCTURAL,
        depth=[(STAGE(dict(depth=1)), None), (STAGE(dict(depth=3)), None)],
        num_heads=[(STAGE(dict(num_heads=4)), None)],
        window_size=[
            (STAGE(dict(window_size=2)), None),
            (STAGE(dict(window_size=5)), None),
            (STAGE(dict(window_size=6)), None),
        ],  # larger than the 5x5 grid: both refuse
        downsample=[(STAGE(dict(downsample=True)), None), (STAGE(dict(downsample=False)), None)],
        downsample_cfg=[
            (STAGE(dict(downsample_cfg=dict(norm_cfg=None))), None),
            (STAGE(dict(downsample_cfg=dict(out_channels=24))), None),
        ],
        drop_paths=[(STAGE(dict(drop_paths=0.5)), None), (STAGE(dict(drop_paths=[0.0, 0.5])), None)],
        block_cfgs=[(STAGE(dict(block_cfgs=[dict(), dict(ffn_ratio=2.0)])), None)],  # per block; a dict: SwinBlock
        with_cp=[(STAGE(dict(with_cp=True)), None)],
        pad_small_map=[
            (STAGE(dict(pad_small_map=True)), None),
            (STAGE(dict(pad_small_map=True, window_size=5)), None),
        ],  # 5x5 grid: shifted
        init_cfg=[(STAGE(dict(init_cfg=INIT)), None)],
    ),
    SwinBlock: dict(
        embed_dims=STRUCTURAL,
        num_heads=[(BLOCK(dict(num_heads=1)), None), (BLOCK(dict(num_heads=4)), None)],
        window_size=[(BLOCK(dict(window_size=2)), None), (BLOCK(dict(window_size=5)), None)],
        shift=[(BLOCK(dict(shift=True)), None), (BLOCK(dict(shift=False)), None)],
        ffn_ratio=[(BLOCK(dict(ffn_ratio=2.0)), None)],
        drop_path=[(BLOCK(dict(drop_path=0.5)), None)],
        pad_small_map=[(BLOCK(dict(pad_small_map=True, window_size=5)), None)],
        attn_cfgs=[(BLOCK(dict(attn_cfgs=dict())), None)],  # its keys: ShiftWindowMSA's, walked there
        ffn_cfgs=[(BLOCK(dict(ffn_cfgs=dict())), None)],  # its keys: FFN's, walked there
        norm_cfg=[(BLOCK(dict(norm_cfg=dict(type='LN', eps=0.5))), None)],
        with_cp=[(BLOCK(dict(with_cp=True)), None)],
        init_cfg=[(BLOCK(dict(init_cfg=INIT)), None)],
    ),
    ShiftWindowMSA: dict(
        embed_dims=STRUCTURAL,
        num_heads=[(ATTN(dict(num_heads=4)), None)],
        window_size=[(ATTN(dict(window_size=2)), None)],
        shift_size=[(ATTN(dict(shift_size=1)), None), (ATTN(dict(shift_size=3)), None)],
        dropout_layer=[
            (ATTN(dict(dropout_layer=dict(type='DropPath', drop_prob=0.5))), None),
            (ATTN(dict(dropout_layer=dict(type='Dropout', drop_prob=0.5))), None),
        ],
        pad_small_map=[(ATTN(dict(pad_small_map=True)), None)],
        window_msa=[(ATTN(dict(window_msa=WindowMSA)), None), (ATTN(dict(window_msa=WindowMSAV2)), None)],
        init_cfg=[(ATTN(dict(init_cfg=INIT)), None)],
        kwargs=[(ATTN(dict(qkv_bias=False, proj_drop=0.5)), None)],  # the window attention's, walked as WindowMSA's
    ),
    WindowMSA: dict(
        embed_dims=PASSED_ON,
        window_size=PASSED_ON,
        num_heads=PASSED_ON,
        qkv_bias=[(ATTN(dict(qkv_bias=False)), None)],
        qk_scale=[(ATTN(dict(qk_scale=0.25)), None)],
        attn_drop=[(ATTN(dict(attn_drop=0.5)), None)],
        proj_drop=[(ATTN(dict(proj_drop=0.5)), None)],
        init_cfg=[(ATTN(dict(init_cfg=INIT)), None)],
    ),
    FFN: dict(
        embed_dims=STRUCTURAL,
        feedforward_channels=[(FFN_(dict(feedforward_channels=24)), None)],
        num_fcs=[(FFN_(dict(num_fcs=3)), None)],
        act_cfg=[(FFN_(dict(act_cfg=dict(type='ReLU', inplace=True))), None)],
        ffn_drop=[(FFN_(dict(ffn_drop=0.5)), None)],
        dropout_layer=[
            (FFN_(dict(dropout_layer=dict(type='Dropout', drop_prob=0.9))), None),
            (FFN_(dict(dropout_layer=dict(type='DropPath', drop_prob=0.5))), None),
            (FFN_(dict(dropout_layer=None)), None),
        ],
        add_identity=[(FFN_(dict(add_identity=False)), None)],
        init_cfg=[(FFN_(dict(init_cfg=INIT)), None)],
        layer_scale_init_value=[(FFN_(dict(layer_scale_init_value=0.5)), None)],
    ),
    Dropout: dict(drop_prob=dropouts(type='Dropout', drop_prob=0.25), inplace=dropouts(type='Dropout', inplace=True)),
    DropPath: dict(drop_prob=dropouts(type='DropPath', drop_prob=0.25)),
    nn.Dropout: dict(
        p='walked as attn_drop, proj_drop, ffn_drop and drop_rate',
        inplace='every host constructor builds it with inplace=False',
    ),
    TransformerEncoderLayer: dict(
        embed_dims=STRUCTURAL,
        num_heads=STRUCTURAL,
        feedforward_channels=STRUCTURAL,
        layer_scale_init_value=[
            (TOP(dict(layer_scale_init_value=0.1)), None),
            (LAYER(dict(layer_scale_init_value=0.1)), None),
        ],
        drop_rate=[(TOP(dict(drop_rate=0.5)), None), (LAYER(dict(drop_rate=0.5)), None)],
        # mmvitreg's ViT also takes it top-level (mmpretrain's does not): our blocks against mmpretrain's
        attn_drop_rate=[
            (LAYER(dict(attn_drop_rate=0.5)), TOP(dict(attn_drop_rate=0.5))),
            (LAYER(dict(attn_drop_rate=0.5)), None),
        ],
        drop_path_rate=[(TOP(dict(drop_path_rate=0.5)), None), (LAYER(dict(drop_path_rate=0.5)), None)],
        num_fcs=[(LAYER(dict(num_fcs=3)), None)],
        qkv_bias=[(TOP(dict(qkv_bias=False)), None)],
        ffn_type=[(LAYER(dict(ffn_type='swiglu_fused')), None)],
        act_cfg=[(LAYER(dict(act_cfg=dict(type='ReLU'))), None)],
        norm_cfg=[(TOP(dict(norm_cfg=dict(type='LN', eps=0.5))), None)],
        init_cfg=[(LAYER(dict(init_cfg=INIT)), None)],
    ),
    MultiheadAttention: dict(
        embed_dims=PASSED_ON,
        num_heads=PASSED_ON,
        attn_drop=PASSED_ON,
        proj_drop=PASSED_ON,
        dropout_layer=PASSED_ON,
        qkv_bias=PASSED_ON,
        layer_scale_init_value=PASSED_ON,
        input_dims=NOT_PASSED,
        qk_scale=NOT_PASSED,
        proj_bias=NOT_PASSED,
        v_shortcut=NOT_PASSED,
        use_layer_scale=NOT_PASSED,
        init_cfg=NOT_PASSED,
    ),
}
CASES = [
    (ctor, name, i, host, ours)
    for ctor, options in WALK.items()
    for name, values in options.items()
    if not isinstance(values, str)
    for i, (host, ours) in enumerate(values)
]


def parameters(ctor):
    """The constructor's parameters (``**kwargs`` as ``kwargs``), less ``self``."""
    return {name for name in inspect.signature(ctor.__init__).parameters if name != 'self'}


def test_the_walk_covers_every_host_option():
    for ctor, options in WALK.items():
        assert set(options) == parameters(ctor), f'{ctor.__name__}: walk its new options in WALK'
    print(
        f'{len(CASES)} option values walked, {sum(len(o) for o in WALK.values())} options of {len(WALK)} constructors'
    )


def outcome(make):
    try:
        return make()
    except Exception as error:  # noqa: B902 (a refusal: the other side must refuse too)
        return error


def run(model, x, seed, training):
    model.train(training)
    torch.manual_seed(seed)
    return outcome(lambda: model(x)[-1])


def spread(model, x, seeds=range(100, 108)):
    """How far training moves the output from eval's (mean absolute change) and how much it varies over seeds
    (mean standard deviation), each averaged over the output's elements."""
    plain = run(model, x, 0, False).detach()
    outs = torch.stack([run(model, x, s, True).detach() for s in seeds])
    return torch.stack([(outs - plain).abs().mean(), outs.std(0).mean()])


@pytest.mark.parametrize(
    'ctor, name, index, host_cfg, ours_cfg', CASES, ids=[f'{c.__name__}.{n}-{i}' for c, n, i, _, _ in CASES]
)
def test_host_option_behaves_as_in_the_host(ctor, name, index, host_cfg, ours_cfg):
    vit = ctor in (TransformerEncoderLayer, MultiheadAttention)
    host_cls, ours_cls, base = (HostViT, VisionTransformer, VIT) if vit else (HostSwin, SwinTransformer, SWIN)
    torch.manual_seed(0)
    host = outcome(lambda: host_cls(**base, **host_cfg))
    torch.manual_seed(0)
    ours = outcome(lambda: ours_cls(**base, **(host_cfg if ours_cfg is None else ours_cfg)))
    x = torch.randn(2, 3, base['img_size'], base['img_size'])
    if isinstance(host, Exception) or isinstance(ours, Exception):
        assert isinstance(host, Exception) and isinstance(ours, Exception), (host, ours)
        return
    if name == 'init_cfg' and not vit:  # Swin's modules initialise alike (mmvitreg's ViT inits as timm, by design)
        torch.manual_seed(1)
        host.init_weights()
        torch.manual_seed(1)
        ours.init_weights()
        for key, value in host.state_dict().items():
            torch.testing.assert_close(ours.state_dict()[key], value, rtol=0, atol=0, msg=key)
    ours.load_state_dict(host.state_dict(), strict=True)

    expected = run(host, x, 0, False)
    if isinstance(expected, Exception):  # a forward the host refuses (a window larger than the map)
        assert isinstance(run(ours, x, 0, False), Exception)
        return
    torch.testing.assert_close(run(ours, x, 0, False), expected, rtol=1e-4, atol=1e-4)

    # training: stochastic exactly where the host is
    host_1, host_2, ours_1, ours_2 = (run(m, x, s, True) for m in (host, ours) for s in (1, 2))
    host_random, ours_random = not torch.equal(host_1, host_2), not torch.equal(ours_1, ours_2)
    assert ours_random == host_random, f'random in training: host {host_random}, ours {ours_random}'
    if not torch.allclose(ours_1, host_1, rtol=1e-4, atol=1e-4):  # other random numbers: the same distribution
        assert host_random
        ratio = spread(ours, x) / spread(host, x)
        assert ((0.8 < ratio) & (ratio < 1.25)).all(), f'change from eval, spread over seeds: ours / host {ratio}'

    if 'with_cp' in str(host_cfg):  # torch.autograd.grad refuses a reentrant checkpoint, in both or neither

        def grad(model):
            out = run(model, x, 1, True)
            return outcome(lambda: torch.autograd.grad(out.sum(), list(model.parameters()), allow_unused=True))

        assert isinstance(grad(host), RuntimeError) and isinstance(grad(ours), RuntimeError)
