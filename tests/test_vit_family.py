"""The mmvitreg ViT family: presets, mmpretrain compatibility, residual scalings, stems, the token trace."""

import pytest
import torch
from mmpretrain.models.backbones import VisionTransformer as MMPretrainViT
from mmpretrain.models.utils import resize_pos_embed

from mmvitreg.models.backbones import DeepViT, LVViT, VisionTransformer
from mmvitreg.models.layers import TransformerBlock
from mmvitreg.models.layers import attention as attention_module
from mmvitreg.models.trace import MixPlan, TokenTrace
from mmvitreg.registry import MODELS

TINY = dict(embed_dims=48, num_layers=4, num_heads=3, feedforward_channels=96)


def tiny(cls=VisionTransformer, img_size=32, **arch_options):
    torch.manual_seed(0)
    model = cls(arch=dict(TINY, **arch_options), img_size=img_size, patch_size=8 if img_size == 32 else 16)
    model.init_weights()
    return model.eval()


def count_params(model, heads):
    """Backbone parameters plus ``heads`` 1000-class linear heads on C channels (BN stats are buffers)."""
    c = model.embed_dims
    return sum(p.numel() for p in model.parameters()) + heads * (c * 1000 + 1000)


@pytest.mark.parametrize(
    'cls,arch,heads,millions',
    [
        (DeepViT, '16b', 1, 24.43),
        (DeepViT, '24b', 1, 36.26),
        (DeepViT, '32b', 1, 48.10),
        (DeepViT, 'vit-16b', 1, 24.42),
        (DeepViT, 'vit-24b', 1, 36.26),
        (DeepViT, 'vit-32b', 1, 48.09),
        (DeepViT, 's', 1, 27.31),
        (DeepViT, 'l', 1, 58.88),
        (DeepViT, 'l-408', 1, 55.64),
        (LVViT, 't', 2, 8.53),
        (LVViT, 's', 2, 26.15),
        (LVViT, 'm', 2, 55.83),
        (LVViT, 'l', 2, 150.02),
    ],
)
def test_preset_parameter_counts(cls, arch, heads, millions):
    """Official parameter counts at 224 (DeepViT README / official code, LV-ViT README: cls head + aux head)."""
    with torch.device('meta'):
        model = cls(arch=arch)
    assert round(count_params(model, heads) / 1e6, 2) == millions


def test_preset_architecture_details():
    """DeepViT-S: re-attention in the last 5 of 16 blocks, conv stem, transform_scale, a=0.5; LV-ViT: no qkv bias."""
    with torch.device('meta'):
        s, lv = DeepViT(arch='s'), LVViT(arch='l')
    kinds = [type(layer.attn).__name__ for layer in s.layers]
    assert kinds == ['MultiheadSelfAttention'] * 11 + ['ReAttention'] * 5
    assert s.layers[-1].attn.reatten_scale == pytest.approx(33**-0.5)
    assert s.layers[0].scale_adjustment == 0.5 and s.layers[0].ln1.eps == 1e-6
    assert [n for n, _ in s.patch_embed.named_children()] == ['conv1', 'bn1', 'conv2', 'bn2', 'relu', 'projection']
    assert lv.layers[0].attn.qkv.bias is None and lv.layers[0].ln1.eps == 1e-5
    assert lv.layers[0].branch_divisor == 3.0 and lv.patch_embed.conv3.out_channels == 128


def test_presets_build_from_the_registry():
    """`type='mmvitreg.DeepViT'` / `'mmvitreg.LVViT'` resolve from mmpretrain's registry."""
    from mmengine.registry import DefaultScope
    from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

    with torch.device('meta'):
        assert isinstance(MMPRETRAIN_MODELS.build(dict(type='mmvitreg.DeepViT', arch='16b')), DeepViT)
        assert isinstance(MMPRETRAIN_MODELS.build(dict(type='mmvitreg.LVViT', arch='t')), LVViT)
        # a bare name in mmvitreg's own registry, whatever default scope an earlier test set
        with DefaultScope.overwrite_default_scope('mmvitreg'):
            assert isinstance(MODELS.build(dict(type='LVViT', arch='t')), LVViT)
    assert DeepViT(arch='s').trace_spec.num_blocks == 16
    assert LVViT(arch='t').trace_spec.facts == {'cls_token', 'isotropic'}


def test_unknown_arch_and_bad_options_fail_clearly():
    """mmpretrain's wording first (what its tests match, as an AssertionError too), then the fix."""
    with pytest.raises(ValueError, match="^Arch xl is not in default archs .*'l-408'.*: choose one of them"):
        DeepViT(arch='xl')
    with pytest.raises(AssertionError, match="^Custom arch needs .*: add the missing keys \\['feedforward_chan"):
        VisionTransformer(arch=dict(embed_dims=48, num_layers=2, num_heads=3))
    with pytest.raises(ValueError, match="remove the unknown keys \\['stems'\\]$"):
        VisionTransformer(arch=dict(TINY, stems=None))
    with pytest.raises(ValueError, match='lists 2 blocks but the arch has 4'):
        VisionTransformer(arch=dict(TINY, attn_types=['msa', 'reattn']))
    with pytest.raises(ValueError, match="choose from \\['msa', 'reattn', 'talking_heads'\\]"):
        VisionTransformer(arch=dict(TINY, attn_types='linear'))
    with pytest.raises(ValueError, match='out_type'):
        VisionTransformer(arch=TINY, out_type='tokens')
    with pytest.raises(ValueError, match=r'^Invalid out_indices 4: the 4 blocks have the indices 0 \.\. 3'):
        VisionTransformer(arch=TINY, out_indices=[4])
    with pytest.raises(AssertionError, match="^\"out_indices\" must be a sequence or int, get <class 'dict'>"):
        VisionTransformer(arch=TINY, out_indices={1: 1})
    assert VisionTransformer(arch=TINY, out_indices=(-1, 0)).out_indices == [3, 0]  # a tuple too (not in mmpretrain)


@pytest.mark.parametrize(
    'arch,img_size,hw',
    [('deit-tiny-like', 32, (32, 32)), ('deit-tiny-like', 32, (44, 36)), ('deit-base', 64, (64, 64))],
)
def test_plain_configuration_matches_mmpretrain(arch, img_size, hw):
    """Plain config == mmpretrain VisionTransformer: its state dict loads with no missing/unexpected key and
    every out_type gives the same outputs (also on inputs that need padding)."""
    arch = dict(TINY) if arch == 'deit-tiny-like' else arch
    patch = 8 if img_size == 32 else 16
    x = torch.randn(2, 3, *hw)
    torch.manual_seed(0)
    # built with out_type='avg_featmap' so that both have ``ln2``; the other out_types are switched on below
    ref = MMPretrainViT(arch=arch, img_size=img_size, patch_size=patch, out_type='avg_featmap', out_indices=[0, -1])
    with torch.no_grad():
        ref.pos_embed.normal_(std=0.02)
        ref.cls_token.normal_(std=0.02)
    ref.eval()
    ours = VisionTransformer(
        arch=arch, img_size=img_size, patch_size=patch, out_type='avg_featmap', out_indices=[0, -1]
    ).eval()
    result = ours.load_state_dict(ref.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    assert set(ours.state_dict()) == set(ref.state_dict())
    for out_type in sorted(MMPretrainViT.OUT_TYPES):
        ref.out_type = ours.out_type = out_type
        with torch.no_grad():
            for a, b in zip(ours(x), ref(x)):
                assert a.shape == b.shape
                assert (a - b).abs().max() < 1e-5, (out_type, (a - b).abs().max())


def test_pre_norm_is_mmpretrains_and_patch_cfg_needs_the_linear_embedding():
    """pre_norm (CLIP's norm before the blocks, no patch-embedding bias), built by mmpretrain's constructor: its
    keys load strictly and give its outputs; a stem has no linear embedding for patch_cfg to configure."""
    torch.manual_seed(0)
    ref = MMPretrainViT(arch=TINY, img_size=32, patch_size=8, pre_norm=True)
    ref.eval()  # returns None
    with torch.no_grad():
        for p in (ref.cls_token, ref.pos_embed, ref.pre_norm.weight):
            p.normal_(std=0.5)
    ours = VisionTransformer(arch=TINY, img_size=32, patch_size=8, pre_norm=True).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    assert 'pre_norm.weight' in ours.state_dict() and 'patch_embed.projection.bias' not in ours.state_dict()
    x = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        torch.testing.assert_close(ours(x)[0], ref(x)[0])
    with pytest.raises(ValueError, match="drop patch_cfg or the arch's stem"):
        VisionTransformer(arch=dict(TINY, stem=dict(channels=8, num_convs=2)), patch_cfg=dict(padding=0))


def test_featmap_outputs_for_dense_necks():
    """out_type='featmap' with several out_indices gives (B, C, Hg, Wg) maps (mmseg MultiLevelNeck / FPN input)."""
    model = VisionTransformer(
        arch=TINY, img_size=32, patch_size=8, out_type='featmap', out_indices=[1, 3], with_cls_token=False
    ).eval()
    outs = model(torch.randn(2, 3, 48, 32))
    assert [o.shape for o in outs] == [(2, 48, 6, 4)] * 2 and model.patch_stride == 8


def test_deepvit_scale_adjustment_block_form():
    """DeepViT official block: x + f(LN1(a x)) / a, then x + FFN(LN2(a x)) / a."""
    torch.manual_seed(0)
    block = TransformerBlock(48, 3, 96, attn_type='reattn', scale_adjustment=0.5).eval()
    x = torch.randn(2, 5, 48)
    a = 0.5
    ref = x + block.attn(block.ln1(x * a)) / a
    ref = ref + block.ffn(block.ln2(ref * a)) / a
    torch.testing.assert_close(block(x), ref)


def test_lvvit_skip_lam_block_form():
    """LV-ViT Eq. 5 with α = 1/skip_lam: x + SA(LN(x)) / λ, then x + FF(LN(x)) / λ."""
    torch.manual_seed(0)
    block = TransformerBlock(48, 3, 96, qkv_bias=False, skip_lam=2.0).eval()
    x = torch.randn(2, 5, 48)
    ref = x + block.attn(block.ln1(x)) / 2
    ref = ref + block.ffn(block.ln2(ref)) / 2
    torch.testing.assert_close(block(x), ref)


def test_conv_stems_give_the_token_grid():
    """DeepViT stem (2 convs) and LV-ViT stem (3 convs) both have total stride 16: 224 -> 14×14 tokens."""
    for cls, n in ((DeepViT, 2), (LVViT, 3)):
        model = cls(arch=dict(TINY, stem=dict(channels=8, num_convs=n))).eval()
        tokens, grid = model.patch_embed(torch.randn(1, 3, 218, 224))  # padded bottom to 224
        assert tokens.shape == (1, 196, 48) and grid == (14, 14)
        assert model.patch_resolution == (14, 14) and model.patch_stride == 16


def test_pos_embed_of_a_224_checkpoint_loads_into_a_384_model():
    """mmpretrain's load pre-hook: a 224 checkpoint's pos_embed is bicubic-resized to the 384 grid."""
    src = DeepViT(arch=dict(TINY, stem=dict(channels=8, num_convs=2)), img_size=224)
    src.init_weights()
    dst = DeepViT(arch=dict(TINY, stem=dict(channels=8, num_convs=2)), img_size=384)
    dst.load_state_dict(src.state_dict(), strict=True)
    assert dst.pos_embed.shape == (1, 1 + 24 * 24, 48)
    torch.testing.assert_close(dst.pos_embed, resize_pos_embed(src.pos_embed, (14, 14), (24, 24)))
    assert dst.eval()(torch.randn(1, 3, 384, 384))[0].shape == (1, 48)


def test_training_step_reaches_every_parameter():
    """A training forward/backward (drop path, BatchNorm in the stem and re-attention) reaches every parameter."""
    torch.manual_seed(0)
    model = DeepViT(
        arch=dict(
            TINY,
            stem=dict(channels=8, num_convs=2),
            attn_types=[False, True, True, True],
            attn_cfgs=dict(reattn=dict(transform_scale=True)),
            scale_adjustment=0.5,
        ),
        img_size=64,
        drop_path_rate=0.1,
    ).train()
    model(torch.randn(2, 3, 64, 64))[0].sum().backward()
    assert all(p.grad is not None for p in model.parameters())


def test_frozen_stages_stay_frozen_after_train():
    """frozen_stages=2 (mmpretrain semantics): embeddings and blocks 0-1 frozen, and in eval mode after train()."""
    model = VisionTransformer(arch=TINY, img_size=32, patch_size=8, frozen_stages=2).train()
    assert not model.pos_embed.requires_grad and not model.cls_token.requires_grad
    assert not any(p.requires_grad for p in model.layers[1].parameters())
    assert all(p.requires_grad for p in model.layers[2].parameters())
    assert not model.layers[0].training and model.layers[2].training


def test_the_blocks_are_built_once_and_frozen_once(monkeypatch):
    """Issue 38.4: mmpretrain's constructor builds none of its own blocks (no TransformerEncoderLayer is made and
    thrown away) and ``_freeze_stages`` runs once; the options it would have set from the blocks are ours (depth,
    arch settings, out_indices), and the state-dict keys are mmpretrain's, in its order."""
    import mmpretrain.models.backbones.vision_transformer as host

    built, frozen = [], []
    layer_init, freeze = host.TransformerEncoderLayer.__init__, VisionTransformer._freeze_stages
    monkeypatch.setattr(
        host.TransformerEncoderLayer, '__init__', lambda self, *a, **k: built.append(1) or layer_init(self, *a, **k)
    )
    monkeypatch.setattr(VisionTransformer, '_freeze_stages', lambda self: frozen.append(1) or freeze(self))
    model = VisionTransformer(arch=TINY, img_size=32, patch_size=8, out_indices=(-1, 1), frozen_stages=2)
    assert built == [] and frozen == [1]
    assert len(model.layers) == model.num_layers == model.arch_settings['num_layers'] == 4
    assert model.out_indices == [3, 1] and all(isinstance(block, TransformerBlock) for block in model.layers)
    host_model = MMPretrainViT(arch=TINY, img_size=32, patch_size=8)
    assert len(built) == 4  # the spy sees mmpretrain's own blocks
    assert list(model.state_dict()) == list(host_model.state_dict())


# ----------------------------------------------------------------------------------------------- trace
def test_token_taps_equal_running_the_blocks_by_hand():
    """trace.tokens[i] is the output of block i (before the final norm); negative indices count from the end."""
    model = tiny(attn_types=['msa', 'reattn', 'talking_heads', 'msa'])
    x = torch.randn(2, 3, 32, 32)
    trace = TokenTrace(token_layers=(1, -1))
    out = model(x, trace)[0]
    assert trace.grid == (4, 4) and trace.num_extra_tokens == 1 and set(trace.tokens) == {1, 3}

    tokens, _ = model.patch_embed(x)  # mmpretrain's (mmcv's) patch embedding: tokens and grid
    tokens = torch.cat([model.cls_token.expand(2, -1, -1), tokens], 1) + model.pos_embed
    by_hand = []
    for layer in model.layers:
        tokens = layer(tokens)
        by_hand.append(tokens)
    torch.testing.assert_close(trace.tokens[1], by_hand[1])
    torch.testing.assert_close(trace.tokens[3], by_hand[3])
    assert trace.patch_tokens(1).shape == (2, 16, 48)
    torch.testing.assert_close(out, model.ln1(by_hand[3])[:, 0])
    torch.testing.assert_close(out, model(x)[0])  # the trace changes nothing


def test_attention_taps_only_for_requested_blocks():
    """trace.attn[i]: (B, heads, N, N), rows sum to 1 for standard attention; other blocks stay fused."""
    model = tiny(attn_types=['msa', 'reattn', 'msa', 'msa'])
    trace = TokenTrace(attn_layers=(0, 1))
    model(torch.randn(2, 3, 32, 32), trace)
    assert set(trace.attn) == {0, 1} and not trace.tokens
    assert trace.attn[0].shape == trace.attn[1].shape == (2, 3, 17, 17)
    torch.testing.assert_close(trace.attn[0].sum(-1), torch.ones(2, 3, 17))


def test_without_trace_every_block_stays_fused(monkeypatch):
    """No trace -> the explicit attention is never computed; with a trace, only in the asked blocks."""
    model = tiny()
    running, calls = [], []
    for layer in model.layers:
        layer.attn.register_forward_pre_hook(lambda attn, args: running.append(attn))
    original = attention_module.head_logits

    def spy(*args):
        calls.append(running[-1])
        return original(*args)

    monkeypatch.setattr(attention_module, 'head_logits', spy)
    model(torch.randn(1, 3, 32, 32))
    assert calls == []
    model(torch.randn(1, 3, 32, 32), TokenTrace(attn_layers=(2,), token_layers=(0, 1, 2, 3)))
    assert calls == [model.layers[2].attn]


def test_mix_is_applied_to_the_patch_embedding_before_pos_embed(monkeypatch):
    """The mix plan sees exactly the (B, Hg * Wg, C) patch-embedding output (no cls token, no pos embed)."""
    model = tiny()
    x = torch.randn(3, 3, 32, 32)
    plan = MixPlan(index=torch.tensor([2, 0, 1]), mask=(torch.rand(3, 4, 4) > 0.5).float())
    seen = []
    original = MixPlan.mix_tokens

    def spy(self, t):
        seen.append(t.clone())
        return original(self, t)

    monkeypatch.setattr(MixPlan, 'mix_tokens', spy)
    mixed = model(x, TokenTrace(mix=plan))[0]
    assert len(seen) == 1
    emb, grid = model.patch_embed(x)
    assert grid == (4, 4)
    torch.testing.assert_close(seen[0], emb)
    # the mixed tokens are what the blocks see: own tokens where mask=1, the partner's elsewhere
    m = plan.mask.flatten(1).unsqueeze(-1)
    expected = emb * m + emb[plan.index] * (1 - m)
    monkeypatch.setattr(model.patch_embed, 'forward', lambda _: (expected, grid))
    torch.testing.assert_close(mixed, model(x)[0])


def test_mix_with_identical_partners_or_full_masks_changes_nothing():
    """Mixing a sample with an identical image, or with a mask of ones, leaves the output unchanged."""
    model = tiny()
    img = torch.randn(1, 3, 32, 32)
    x = img.repeat(2, 1, 1, 1)
    plan = MixPlan(index=torch.tensor([1, 0]), mask=torch.rand(2, 4, 4))
    torch.testing.assert_close(model(x, TokenTrace(mix=plan))[0], model(x)[0])
    y = torch.randn(2, 3, 32, 32)
    ones = MixPlan(index=torch.tensor([1, 0]), mask=torch.ones(2, 4, 4))
    torch.testing.assert_close(model(y, TokenTrace(mix=ones))[0], model(y)[0])
    zeros = MixPlan(index=torch.tensor([1, 0]), mask=torch.zeros(2, 4, 4))
    torch.testing.assert_close(model(y, TokenTrace(mix=zeros))[0], model(y.flip(0))[0])


def test_mix_grid_mismatch_raises():
    model = tiny()
    plan = MixPlan(index=torch.tensor([1, 0]), mask=torch.ones(2, 14, 14))
    with pytest.raises(ValueError, match=r'\(14, 14\) token grid .* \(4, 4\)'):
        model(torch.randn(2, 3, 32, 32), TokenTrace(mix=plan))


def test_trace_on_the_conv_stem_preset():
    """The trace contract holds for a DeepViT with a conv stem and re-attention (grid from the stem)."""
    model = tiny(
        DeepViT,
        img_size=64,
        stem=dict(channels=8, num_convs=2),
        attn_types=[False, False, True, True],
        scale_adjustment=0.5,
    )
    trace = TokenTrace(token_layers=(-1,), attn_layers=(-1,))
    model(torch.randn(2, 3, 64, 64), trace)
    assert trace.grid == (4, 4) and trace.tokens[3].shape == (2, 17, 48) and trace.attn[3].shape == (2, 3, 17, 17)
