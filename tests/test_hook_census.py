"""A guest leaves the house as it found it: a forward hook on any module of mmpretrain's Swin-T or DeiT-S that holds
parameters fires in mmvitreg's subclass as in mmpretrain's class, in the same order, after loading mmpretrain's
weights, with and without a token trace; DeepViT's and LV-ViT's blocks (re-attention, conv stem) fire every one."""

import re

import pytest
import torch
from mmpretrain.models import SwinTransformer as MMPretrainSwin
from mmpretrain.models import VisionTransformer as MMPretrainViT

from mmvitreg.models.backbones import DeepViT, LVViT, SwinTransformer, VisionTransformer
from mmvitreg.models.trace import TokenTrace


def census(model, x, **kwargs):
    """The names of the modules holding parameters whose forward hooks fired, in firing order."""
    fired = []
    handles = [
        module.register_forward_hook(lambda *_, name=name: fired.append(name))
        for name, module in model.named_modules()
        if next(module.parameters(), None) is not None
    ]
    with torch.no_grad():
        model(x, **kwargs)
    for handle in handles:
        handle.remove()
    return fired


@pytest.mark.parametrize(
    'theirs_cls, ours_cls, kwargs, hosts',
    [
        (
            MMPretrainSwin,
            SwinTransformer,
            dict(arch='tiny', drop_path_rate=0.0),
            r'stages\.\d+(\.blocks\.\d+(\.attn|\.ffn)?)?',
        ),  # 4 stages, 12 blocks, their 12 attentions and 12 FFNs
        (MMPretrainViT, VisionTransformer, dict(arch='deit-small'), r'layers\.\d+\.ffn'),  # 12 FFNs
    ],
)
def test_every_hook_fires_as_in_mmpretrain(theirs_cls, ours_cls, kwargs, hosts):
    torch.manual_seed(0)
    theirs = theirs_cls(**kwargs)
    ours = ours_cls(**kwargs)
    ours.load_state_dict(theirs.state_dict(), strict=True)
    theirs.eval()  # mmpretrain's Swin.train returns None
    ours.eval()
    x = torch.randn(1, 3, 224, 224)
    expected = census(theirs, x)
    assert len([n for n in expected if re.fullmatch(hosts, n)]) == (40 if ours_cls is SwinTransformer else 12)
    assert census(ours, x) == expected
    traced = TokenTrace(token_layers=(0, -1), attn_layers=(1,), points={'final'})
    assert census(ours, x, trace=traced) == expected
    assert len(traced.tokens) == 2 and len(traced.attn) == 1


@pytest.mark.parametrize('cls, arch', [(DeepViT, 's'), (LVViT, 's')])
def test_deepvit_and_lvvit_blocks_fire_every_module_with_parameters(cls, arch):
    model = cls(arch=arch, img_size=64).eval()
    holders = [
        name
        for name, module in model.named_modules()
        if next(module.parameters(), None) is not None and not isinstance(module, torch.nn.ModuleList)
    ]  # a container is never called, in mmpretrain neither
    fired = census(model, torch.randn(1, 3, 64, 64))
    assert sorted(set(fired)) == sorted(holders) and len(fired) == len(holders)
    assert [n for n in fired if n.count('.') == 1 and n.startswith('layers.')] == [
        f'layers.{i}' for i in range(len(model.layers))
    ]  # the blocks in order
