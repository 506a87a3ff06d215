"""tools/model_converters/diversepatch_to_mmvitreg.py: an official DiversePatch state dict (deit/models.py key
names and shapes: talking-heads proj_pre / proj_post, patch_head) converts into the mmvitreg model of the
configs, which gives the official model's logits and its t_acc ensemble (a transcription of its forward)."""

import importlib.util

import torch
import torch.nn.functional as F
from conftest import REPO
from mmengine.registry import DefaultScope
from mmpretrain.registry import MODELS

D, HEADS, DEPTH, K, P, IMG = 16, 2, 2, 5, 8, 32


def official_state_dict():
    """Random tensors under the official names and shapes (deit/models.py VisionTransformer, use_talk=True)."""
    g = torch.Generator().manual_seed(0)
    r = lambda *s: torch.randn(*s, generator=g) * 0.2  # noqa: E731
    sd = {
        'cls_token': r(1, 1, D),
        'pos_embed': r(1, (IMG // P) ** 2 + 1, D),
        'patch_embed.proj.weight': r(D, 3, P, P),
        'patch_embed.proj.bias': r(D),
        'norm.weight': 1 + r(D),
        'norm.bias': r(D),
        'head.weight': r(K, D),
        'head.bias': r(K),
        'patch_head.weight': r(K, D),
        'patch_head.bias': r(K),
    }
    for i in range(DEPTH):
        b = f'blocks.{i}.'
        sd.update(
            {
                b + 'norm1.weight': 1 + r(D),
                b + 'norm1.bias': r(D),
                b + 'attn.qkv.weight': r(3 * D, D),
                b + 'attn.qkv.bias': r(3 * D),
                b + 'attn.proj.weight': r(D, D),
                b + 'attn.proj.bias': r(D),
                b + 'attn.proj_pre.weight': r(HEADS, HEADS),
                b + 'attn.proj_post.weight': r(HEADS, HEADS),
                b + 'norm2.weight': 1 + r(D),
                b + 'norm2.bias': r(D),
                b + 'mlp.fc1.weight': r(4 * D, D),
                b + 'mlp.fc1.bias': r(4 * D),
                b + 'mlp.fc2.weight': r(D, 4 * D),
                b + 'mlp.fc2.bias': r(D),
            }
        )
    return sd


def official_eval_forward(sd, x):
    """The official model in eval mode: (head logits, softmax(patch_head(mean patch)) + softmax(head))."""
    ln = lambda t, n: F.layer_norm(t, (D,), sd[n + '.weight'], sd[n + '.bias'], eps=1e-6)  # noqa: E731
    lin = lambda t, n: F.linear(t, sd[n + '.weight'], sd.get(n + '.bias'))  # noqa: E731
    t = F.conv2d(x, sd['patch_embed.proj.weight'], sd['patch_embed.proj.bias'], stride=P).flatten(2).transpose(1, 2)
    t = torch.cat([sd['cls_token'].expand(len(x), -1, -1), t], 1) + sd['pos_embed']
    B, N, _ = t.shape
    for i in range(DEPTH):
        b = f'blocks.{i}.'
        q, k, v = lin(ln(t, b + 'norm1'), b + 'attn.qkv').reshape(B, N, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
        attn = (q @ k.transpose(-2, -1)) * (D // HEADS) ** -0.5
        attn = lin(attn.permute(0, 2, 3, 1), b + 'attn.proj_pre').permute(0, 3, 1, 2).softmax(-1)
        attn = lin(attn.permute(0, 2, 3, 1), b + 'attn.proj_post').permute(0, 3, 1, 2)
        t = t + lin((attn @ v).transpose(1, 2).reshape(B, N, D), b + 'attn.proj')
        t = t + lin(F.gelu(lin(ln(t, b + 'norm2'), b + 'mlp.fc1')), b + 'mlp.fc2')
    t = ln(t, 'norm')
    logits = lin(t[:, 0], 'head')
    return logits, lin(t[:, 1:].mean(1), 'patch_head').softmax(-1) + logits.softmax(-1)


def converter_tool():
    spec = importlib.util.spec_from_file_location(
        'conv', REPO / 'tools' / 'model_converters' / 'diversepatch_to_mmvitreg.py'
    )
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    return tool


def test_ema_converts_the_official_model_ema(tmp_path):
    """The official DeiT main.py saves the EMA as ``model_ema`` beside ``model``: ``--ema`` converts it."""
    src, dst = tmp_path / 'official.pth', tmp_path / 'mmvitreg.pth'
    ema = official_state_dict()
    torch.save({'model': {k: torch.zeros_like(v) for k, v in ema.items()}, 'model_ema': ema, 'epoch': 399}, src)
    converter_tool().main([str(src), str(dst), '--ema'])
    state = torch.load(dst, map_location='cpu')['state_dict']
    assert torch.equal(state['aux_losses.2.patch_head.weight'], ema['patch_head.weight'])
    assert torch.equal(state['backbone.layers.1.attn.proj_pre.weight'], ema['blocks.1.attn.proj_pre.weight'])


def test_converted_official_checkpoint_gives_the_official_logits_and_t_acc(tmp_path):
    src, dst = tmp_path / 'official.pth', tmp_path / 'mmvitreg.pth'
    torch.save({'model': official_state_dict(), 'epoch': 399}, src)
    converter_tool().main([str(src), str(dst)])
    cfg = dict(
        type='mmvitreg.TokenClassifier',
        backbone=dict(
            type='mmvitreg.VisionTransformer',
            img_size=IMG,
            patch_size=P,
            arch=dict(
                embed_dims=D, num_layers=DEPTH, num_heads=HEADS, feedforward_channels=4 * D, attn_types='talking_heads'
            ),
        ),
        head=dict(type='VisionTransformerClsHead', num_classes=K, in_channels=D),
        aux_losses=[
            dict(type='mmvitreg.PatchCosineLoss'),
            dict(type='mmvitreg.PatchContrastiveLoss'),
            dict(type='mmvitreg.PatchMixingLoss', num_classes=K, in_channels=D, tokens='final_norm', ensemble=True),
        ],
    )
    with DefaultScope.overwrite_default_scope('mmpretrain'):
        model = MODELS.build(cfg).eval()
    state = torch.load(dst, map_location='cpu')['state_dict']
    assert 'aux_losses.2.patch_head.weight' in state and 'backbone.layers.1.attn.proj_pre.weight' in state
    model.load_state_dict(state, strict=True)
    x = torch.randn(3, 3, IMG, IMG, generator=torch.Generator().manual_seed(1))
    logits, t_acc = official_eval_forward(official_state_dict(), x)
    with torch.no_grad():
        torch.testing.assert_close(model(x), logits, rtol=1e-4, atol=1e-5)
        scores = torch.stack([s.pred_score for s in model.predict(x)])
    torch.testing.assert_close(scores, t_acc / 2, rtol=1e-4, atol=1e-5)  # the mean of the two, same ranking
    readme = ' '.join((REPO / 'configs' / 'diversepatch' / 'README.md').read_text().split())
    assert "ensemble (`t_acc`) is `PatchMixingLoss(ensemble=True, tokens='final_norm')`" in readme  # as checked here
